"""handrail: sample-efficient robot-arm RL with a human in the loop.

Subpackages (each a top-level folder of the repository):

- ``handrail.control``: pure-NumPy specs, transforms, safety filter, arbitration.
- ``handrail.sim``: MuJoCo tasks as Gymnasium envs, the arm model, controller, experts.
- ``handrail.learners``: JAX learners (SAC/RLPD, residual, BC), replay, checkpoints, loops.
- ``handrail.demos``: the crash-safe Zarr episode store, recorder, replay, import/export.
- ``handrail.hw``: ROS 2 (rclpy) nodes and the Gymnasium env that talks to an arm.
- ``handrail.launch``: the ``handrail`` command line and ROS 2 launch files.
"""

__version__ = "0.1.0"
