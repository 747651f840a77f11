"""The ROS 2 node executables handrail ships, by the name launch files give in ``exec=``.

Each value is a module with ``PARAMETERS`` and ``main(args=None)`` (see
:mod:`handrail.hw.ros_common`); ``python -m <module> --ros-args ...`` runs it. Importing this
file imports no rclpy, so the launch runner can list nodes on any machine, and say in one line
what to install when ROS 2's Python packages are missing (:func:`ros_missing`).
"""

from __future__ import annotations

import importlib
import signal
import sys

__all__ = [
    "NODES",
    "PACKAGE",
    "RCLPY_PARAMETERS",
    "STACKS_SIGNAL",
    "exit_if_run_without_ros",
    "ros_missing",
]

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

STACKS_SIGNAL = signal.SIGUSR1
"""Asks a running handrail node to print every thread's Python stack to stderr and go on
(faulthandler's, from the signal handler: it needs no lock, so it answers even when a native
call holds the GIL). ``handrail launch`` sends it to a node still running when its stop timeout
after SIGINT ends, before the SIGTERM, so the log says where the node hung."""

RCLPY_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})
"""Parameters every rclpy node declares by itself; launch files may set these on any node."""

ROS_MODULES = (
    "rclpy",
    "builtin_interfaces.msg",
    "rcl_interfaces.msg",
    "std_msgs.msg",
    "sensor_msgs.msg",
    "geometry_msgs.msg",
    "std_srvs.srv",
    "rosgraph_msgs.msg",
)
"""The ROS 2 Python packages the nodes import (the ``ros`` extra)."""


def ros_missing() -> str:
    """Why the nodes cannot run here ("" when every ROS 2 package they need imports)."""
    for name in ROS_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as err:
            return (
                f"ROS 2's Python packages are missing ({err}): install them with "
                "pip install 'handrail[ros]', or source ROS 2 (source /opt/ros/jazzy/setup.bash)"
            )
    return ""


def exit_if_run_without_ros() -> None:
    """When ``python -m handrail.hw.<node>`` is starting a node and ROS 2 is missing, exit with
    one line saying what to install instead of a ModuleNotFoundError traceback.

    Called while ``handrail.hw`` is imported. ``python -m`` imports a module's package before the
    module itself, with ``sys.argv[0] == "-m"`` meanwhile; ``sys.orig_argv`` names the module.
    Any other import of ``handrail.hw`` does nothing here.
    """
    argv = getattr(sys, "orig_argv", [])
    if sys.argv[:1] != ["-m"] or "-m" not in argv[:-1]:
        return
    module = argv[argv.index("-m") + 1]
    exe = next((name for name, path in NODES.items() if path == module), None)
    if exe is not None:
        problem = ros_missing()
        if problem:
            sys.exit(f"error: {exe}: {problem}")
