"""Real-time-safe NumPy: specs, transforms, the safety filter, arbitration, reset logic.

Imports NumPy only; never JAX, MuJoCo or rclpy (checked by import-linter contracts).
"""
