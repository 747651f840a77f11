"""ROS 2 launch files and parameters of the robot-side stack, and ``handrail launch``, their runner
where ``ros2 launch`` is not installed."""
