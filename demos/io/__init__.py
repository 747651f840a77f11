"""Converters between the episode store and other formats (LeRobotDataset v3, robomimic HDF5,
diffusion_policy zarr, ROS 2 messages in MCAP)."""
