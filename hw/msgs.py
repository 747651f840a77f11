"""Conversions between handrail's NumPy values and the standard ROS 2 messages it uses."""

from __future__ import annotations

import math

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped

__all__ = ["pose_msg", "pose_of", "seconds", "stamp"]


def stamp(t_s: float) -> Time:
    """A ``builtin_interfaces/Time`` for ``t_s`` seconds."""
    sec = math.floor(t_s)
    nanosec = min(round((t_s - sec) * 1e9), 999_999_999)
    return Time(sec=int(sec), nanosec=nanosec)


def seconds(t: Time) -> float:
    """A ``builtin_interfaces/Time`` in seconds."""
    return t.sec + t.nanosec * 1e-9


def pose_msg(pos: np.ndarray, quat_wxyz: np.ndarray, frame: str, t: Time) -> PoseStamped:
    """A PoseStamped from a position (m) and a (w, x, y, z) quaternion."""
    msg = PoseStamped()
    msg.header.frame_id, msg.header.stamp = frame, t
    p, o = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(v) for v in pos)
    o.w, o.x, o.y, o.z = (float(v) for v in quat_wxyz)
    return msg


def pose_of(msg: PoseStamped) -> tuple[np.ndarray, np.ndarray]:
    """(position (m), quaternion (w, x, y, z)) of a PoseStamped."""
    p, o = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z]), np.array([o.w, o.x, o.y, o.z])
