"""The env step's action decoding in plain-float math (a hot path: no small NumPy arrays)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from handrail.control.spaces import ActionConfig, decode_action
from handrail.control.transforms import quat_mul_floats


def decode_scalar(
    action: Any, cfg: ActionConfig, ee_quat: tuple[float, ...]
) -> tuple[tuple[float, float, float], tuple[float, float, float] | None, float]:
    """:func:`decode_action` in scalar math: translation, rotation vector (None: no rotation
    in the layout) and gripper, base frame. Same clipping, scaling and NaN pass-through."""
    arr = np.asarray(action)
    if arr.shape != (cfg.dim,) or arr.dtype.kind not in "fiu":
        decode_action(action, cfg, ee_quat)  # raises its clear error
    # Non-finite entries become NaN (min/max keep a leading NaN) so the filter holds the pose.
    a = [min(max(v, -1.0), 1.0) if math.isfinite(v) else math.nan for v in arr.tolist()]
    step, rot_step = cfg.max_step_m, cfg.max_rot_step_rad
    pos = (a[0] * step, a[1] * step, a[2] * step)
    rotvec = None
    if cfg.rotation == "yaw":
        rotvec = (0.0, 0.0, a[3] * rot_step)
    elif cfg.rotation == "full":
        rx, ry, rz = a[3] * rot_step, a[4] * rot_step, a[5] * rot_step
        norm = math.sqrt(rx * rx + ry * ry + rz * rz)
        k = rot_step / norm if norm > rot_step else 1.0
        rotvec = (rx * k, ry * k, rz * k)
    if cfg.frame == "ee":
        pos = _rotate(ee_quat, pos)
        rotvec = None if rotvec is None else _rotate(ee_quat, rotvec)
    return pos, rotvec, (a[-1] if cfg.gripper else 0.0)


def _rotate(q: tuple[float, ...], v: tuple[float, float, float]) -> tuple[float, float, float]:
    """``quat_to_mat(q) @ v``: ``v`` rotated by ``q`` (normalised here), as ``q v q*``."""
    n2 = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]
    _, x, y, z = quat_mul_floats(quat_mul_floats(q, (0.0, *v)), (q[0], -q[1], -q[2], -q[3]))
    return (x / n2, y / n2, z / n2)
