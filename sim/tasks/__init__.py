"""Task envs, one file each."""
