"""The ROS 2 node executables handrail ships, by the name launch files give in ``exec=``.

Each value is a module with ``PARAMETERS`` and ``main(args=None)`` (see
:mod:`handrail.hw.ros_common`); ``python -m <module> --ros-args ...`` runs it. Importing this
file imports no rclpy, so the launch runner can list nodes on any machine.
"""

from __future__ import annotations

NODES: dict[str, str] = {
    "sim_robot": "handrail.hw.sim_robot",
    "safety_node": "handrail.hw.safety_node",
    "reset_node": "handrail.hw.reset_node",
    "intervention_node": "handrail.hw.intervention_node",
    "actor_node": "handrail.hw.actor_node",
}
"""Executable name -> module."""

PACKAGE = "handrail"
"""The ROS 2 package name (``pkg=`` in launch files, the ament index entry)."""

RCLPY_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})
"""Parameters every rclpy node declares by itself; launch files may set these on any node."""
