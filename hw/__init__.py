"""handrail.hw: the ROS 2 nodes and the Gymnasium env over ROS 2 (hw/INTERFACES.md)."""

from handrail.hw.nodes import exit_if_run_without_ros

exit_if_run_without_ros()
