"""Quaternion and rotation helpers in pure NumPy.

Conventions (the same as MuJoCo):

* Quaternions are ``(w, x, y, z)`` float64 arrays, scalar first, Hamilton product.
* ``q`` maps vectors from the body frame into the base frame: ``v_base = quat_rotate(q, v_body)``.
* ``quat_mul(a, b)`` is "apply ``b`` first, then ``a``" when both act on base-frame vectors, so a
  base-frame increment ``d`` is applied as ``quat_mul(d, q)`` and a body-frame increment as
  ``quat_mul(q, d)``.
* Rotation vectors are ``axis * angle`` in radians (never Euler angles).

Every function accepts a single quaternion/vector or a batch with the component on the last axis
(``(..., 4)`` or ``(..., 3)``) and broadcasts leading axes. Angles are in radians.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "mat_to_quat",
    "quat_angle",
    "quat_conj",
    "quat_from_yaw",
    "quat_mul",
    "quat_mul_floats",
    "quat_normalize",
    "quat_rotate",
    "quat_to_mat",
    "quat_to_rotvec",
    "rotvec_to_quat",
    "rotvec_to_quat_floats",
    "wrap_angle",
    "yaw_between",
    "yaw_from_quat",
]

# Below this rotation angle (rad) the sin(x)/x style factors switch to their Taylor series.
_SMALL_ANGLE = 1e-6


def _as_vec(x: ArrayLike, size: int, name: str) -> NDArray[np.float64]:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[-1] != size:
        raise ValueError(f"{name} must have shape (..., {size}); got shape {arr.shape}")
    return arr


QuatFloats = tuple[float, float, float, float]
"""One (w, x, y, z) quaternion as plain floats."""


def quat_mul_floats(a: tuple[float, ...], b: tuple[float, ...]) -> QuatFloats:
    """:func:`quat_mul` for single quaternions as plain floats: no NumPy on hot control paths."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return (
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    )


def rotvec_to_quat_floats(vx: float, vy: float, vz: float) -> QuatFloats:
    """:func:`rotvec_to_quat` for one rotation vector as plain floats (same small-angle series)."""
    theta = math.sqrt(vx * vx + vy * vy + vz * vz)
    k = 0.5 - theta * theta / 48.0 if theta < _SMALL_ANGLE else math.sin(0.5 * theta) / theta
    return (math.cos(0.5 * theta), vx * k, vy * k, vz * k)


def quat_mul(a: ArrayLike, b: ArrayLike) -> NDArray[np.float64]:
    """Hamilton product ``a * b`` of ``(w, x, y, z)`` quaternions (rotation ``b`` then ``a``)."""
    a = _as_vec(a, 4, "a")
    b = _as_vec(b, 4, "b")
    if a.ndim == 1 and b.ndim == 1:  # single quaternions: scalar math is ~10x faster
        return np.array(quat_mul_floats(tuple(a.tolist()), tuple(b.tolist())))
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def quat_conj(q: ArrayLike) -> NDArray[np.float64]:
    """Conjugate ``(w, -x, -y, -z)``; the inverse rotation for a unit quaternion."""
    q = _as_vec(q, 4, "q")
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def quat_normalize(q: ArrayLike) -> NDArray[np.float64]:
    """Scale ``q`` to unit norm.

    Raises:
        ValueError: if any quaternion has zero (or non-finite) norm; there is no rotation to
            recover, so pass a valid orientation such as ``(1, 0, 0, 0)``.
    """
    q = _as_vec(q, 4, "q")
    norm = np.sqrt(np.sum(q * q, axis=-1, keepdims=True))
    if not np.isfinite(norm).all() or (norm < 1e-12).any():
        raise ValueError(f"q must be a finite quaternion with non-zero norm; got {q.tolist()}")
    return q / norm


def quat_to_mat(q: ArrayLike) -> NDArray[np.float64]:
    """Rotation matrix ``(..., 3, 3)`` of a quaternion (normalised first)."""
    w, x, y, z = np.moveaxis(quat_normalize(q), -1, 0)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)


def mat_to_quat(m: ArrayLike) -> NDArray[np.float64]:
    """Unit quaternion (with ``w >= 0``) of a rotation matrix ``(..., 3, 3)``.

    Uses the numerically stable branch (largest of ``w, x, y, z``) per matrix, so it is accurate
    for every rotation including 180 degree turns.
    """
    m = np.asarray(m, dtype=np.float64)
    if m.ndim < 2 or m.shape[-2:] != (3, 3):
        raise ValueError(f"m must have shape (..., 3, 3); got shape {m.shape}")
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    # Four candidate solutions, each exact when its leading component is the largest.
    cands = np.stack(
        [
            np.stack([1 + m00 + m11 + m22, m[..., 2, 1] - m[..., 1, 2],
                      m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]], axis=-1),
            np.stack([m[..., 2, 1] - m[..., 1, 2], 1 + m00 - m11 - m22,
                      m[..., 0, 1] + m[..., 1, 0], m[..., 0, 2] + m[..., 2, 0]], axis=-1),
            np.stack([m[..., 0, 2] - m[..., 2, 0], m[..., 0, 1] + m[..., 1, 0],
                      1 - m00 + m11 - m22, m[..., 1, 2] + m[..., 2, 1]], axis=-1),
            np.stack([m[..., 1, 0] - m[..., 0, 1], m[..., 0, 2] + m[..., 2, 0],
                      m[..., 1, 2] + m[..., 2, 1], 1 - m00 - m11 + m22], axis=-1),
        ],
        axis=-2,
    )  # fmt: skip
    lead = np.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22,
                     1 - m00 - m11 + m22], axis=-1)  # fmt: skip
    best = np.argmax(lead, axis=-1)[..., None, None]
    q = np.take_along_axis(cands, best, axis=-2)[..., 0, :]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return np.where(q[..., :1] < 0, -q, q)


def rotvec_to_quat(v: ArrayLike) -> NDArray[np.float64]:
    """Unit quaternion of a rotation vector ``axis * angle`` (rad)."""
    v = _as_vec(v, 3, "v")
    if v.ndim == 1:
        return np.array(rotvec_to_quat_floats(*v.tolist()))
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    half = 0.5 * angle
    safe = np.where(angle < _SMALL_ANGLE, 1.0, angle)
    # sin(angle/2)/angle, with its Taylor series near zero.
    scale = np.where(angle < _SMALL_ANGLE, 0.5 - angle * angle / 48.0, np.sin(half) / safe)
    return np.concatenate([np.cos(half), v * scale], axis=-1)


def quat_to_rotvec(q: ArrayLike) -> NDArray[np.float64]:
    """Rotation vector of ``q`` for the shortest rotation: angle in ``[0, pi]``.

    ``q`` and ``-q`` give the same result. Accepts non-unit quaternions (the norm cancels).
    """
    q = _as_vec(q, 4, "q")
    if q.ndim == 1:
        w, x, y, z = q.tolist() if q[0] >= 0 else (-q).tolist()
        s = math.sqrt(x * x + y * y + z * z)
        if s == 0.0 and w == 0.0:
            raise ValueError("q must be a non-zero quaternion (w, x, y, z); got all zeros")
        k = (
            2.0 / w * (1.0 - (s / w) ** 2 / 3.0)
            if s < _SMALL_ANGLE * w
            else 2.0 * math.atan2(s, w) / s
        )
        return np.array([x * k, y * k, z * k])
    q = np.where(q[..., :1] < 0, -q, q)
    w = q[..., :1]
    xyz = q[..., 1:]
    s = np.linalg.norm(xyz, axis=-1, keepdims=True)
    if ((s == 0.0) & (w == 0.0)).any():
        raise ValueError("q must hold non-zero quaternions (w, x, y, z); got an all-zero one")
    angle = 2.0 * np.arctan2(s, w)
    small = s < _SMALL_ANGLE * np.maximum(w, 1e-300)
    # angle / s, with its series 2/w * (1 - (s/w)^2 / 3) when s is tiny relative to w.
    safe_s = np.where(small, 1.0, s)
    safe_w = np.where(small, w, 1.0)
    factor = np.where(small, 2.0 / safe_w * (1.0 - (s / safe_w) ** 2 / 3.0), angle / safe_s)
    return xyz * factor


def quat_rotate(q: ArrayLike, v: ArrayLike) -> NDArray[np.float64]:
    """Rotate vector(s) ``v`` by unit quaternion(s) ``q``: ``R(q) @ v``."""
    q = _as_vec(q, 4, "q")
    v = _as_vec(v, 3, "v")
    if q.ndim == 1 and v.ndim == 1:
        w, ux, uy, uz = q.tolist()
        vx, vy, vz = v.tolist()
        tx, ty, tz = 2.0 * (uy * vz - uz * vy), 2.0 * (uz * vx - ux * vz), 2.0 * (ux * vy - uy * vx)
        return np.array(
            [
                vx + w * tx + uy * tz - uz * ty,
                vy + w * ty + uz * tx - ux * tz,
                vz + w * tz + ux * ty - uy * tx,
            ]
        )
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def quat_from_yaw(yaw_rad: ArrayLike) -> NDArray[np.float64]:
    """Quaternion of a rotation by ``yaw_rad`` about the base z axis."""
    half = 0.5 * np.asarray(yaw_rad, dtype=np.float64)
    zeros = np.zeros_like(half)
    return np.stack([np.cos(half), zeros, zeros, np.sin(half)], axis=-1)


def yaw_from_quat(q: ArrayLike) -> NDArray[np.float64] | float:
    """Heading (rad, in ``(-pi, pi]``) of the body x axis projected onto the base xy plane.

    This is the z angle of a z-y-x Euler decomposition, ``atan2(R[1, 0], R[0, 0])``; it inverts
    :func:`quat_from_yaw` and also works for a gripper pointing down (roll = pi).
    """
    w, x, y, z = np.moveaxis(_as_vec(q, 4, "q"), -1, 0)
    yaw = np.arctan2(2.0 * (w * z + x * y), w * w + x * x - y * y - z * z)
    return float(yaw) if np.ndim(yaw) == 0 else yaw


def wrap_angle(angle_rad: float, period_rad: float = 2 * np.pi) -> float:
    """Wrap an angle into ``[-period/2, period/2)``."""
    return float((angle_rad + period_rad / 2) % period_rad - period_rad / 2)


def yaw_between(to_quat: ArrayLike, from_quat: ArrayLike, period_rad: float = 2 * np.pi) -> float:
    """The turn about base z (rad) from ``from_quat``'s heading to ``to_quat``'s, wrapped into
    ``[-period/2, period/2)``: pass ``pi / 2`` for a square part that looks the same every
    quarter turn."""
    turn = float(yaw_from_quat(to_quat)) - float(yaw_from_quat(from_quat))
    return wrap_angle(turn, period_rad)


def quat_angle(a: ArrayLike, b: ArrayLike) -> NDArray[np.float64] | float:
    """Angle (rad, in ``[0, pi]``) of the rotation between orientations ``a`` and ``b``."""
    r = quat_mul(quat_conj(a), b)
    s = np.linalg.norm(r[..., 1:], axis=-1)
    angle = 2.0 * np.arctan2(s, np.abs(r[..., 0]))
    return float(angle) if np.ndim(angle) == 0 else angle
