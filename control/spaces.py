"""End-effector delta action space: normalised policy actions <-> base-frame pose increments.

A policy (or a scripted expert, or a human teleop device mapped through :func:`encode_action`)
emits actions in ``[-1, 1]``. :func:`decode_action` turns one into an :class:`EeCommand`: a
translation (m) and a rotation vector (rad), both expressed in the robot BASE frame, plus an
absolute gripper command. The caller applies it to the current end-effector pose ``(p, q)`` as::

    p_target = p + cmd.delta_pos_m
    q_target = quat_mul(rotvec_to_quat(cmd.delta_rotvec_rad), q)

Rotations are rotation vectors, never Euler angles, so large or combined rotations compose
correctly. With ``frame="ee"`` the action's deltas are expressed in the end-effector frame given by
``ee_quat`` (the current orientation) and are rotated into the base frame here; that base-frame
increment applied on the left equals the ee-frame increment applied on the right
(``rotvec_to_quat(R v) * q == q * rotvec_to_quat(v)``).

Observations are state vectors or camera images; :func:`is_image` is the one test of which is
which (the episode store, the learners' specs, replay and the exporters all ask it).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from handrail.control.transforms import quat_conj, quat_normalize, quat_rotate

__all__ = [
    "IMAGE_CHANNELS",
    "ActionConfig",
    "EeCommand",
    "decode_action",
    "encode_action",
    "is_image",
]

_FRAMES = ("base", "ee")
_ROTATIONS = ("none", "yaw", "full")

IMAGE_CHANNELS = (1, 3, 4)
"""Channel counts of an image observation: grey, RGB, RGBA."""


def is_image(shape: Sequence[int], dtype: DTypeLike) -> bool:
    """Whether one observation of this shape and dtype is a camera image.

    An image is uint8 ``(H, W, C)`` with C in :data:`IMAGE_CHANNELS`. Pass the shape of one
    observation, without leading time or batch dimensions.

    Args:
        shape: Shape of one observation.
        dtype: Its dtype (a NumPy dtype or a name such as ``"uint8"``).
    """
    return np.dtype(dtype) == np.uint8 and len(shape) == 3 and int(shape[2]) in IMAGE_CHANNELS


@dataclass(frozen=True)
class ActionConfig:
    """Layout and scale of the normalised end-effector delta action."""

    frame: Literal["base", "ee"] = "base"
    """Frame the translation/rotation deltas are expressed in: robot base, or current end effector."""
    rotation: Literal["none", "yaw", "full"] = "none"
    """none: xyz only; yaw: + rotation about z (base z, or tool z in frame ee); full: + rotation vector."""
    gripper: bool = True
    """Whether the last action dim is an absolute gripper command, -1 open .. +1 closed."""
    max_step_m: float = 0.03
    """Translation per control step (m) along an axis at |action| = 1."""
    max_rot_step_rad: float = 0.2
    """Rotation per control step (rad) at |action| = 1 (norm of the rotation vector for full)."""

    def __post_init__(self) -> None:
        if self.frame not in _FRAMES:
            raise ValueError(f"ActionConfig.frame must be one of {_FRAMES}; got {self.frame!r}")
        if self.rotation not in _ROTATIONS:
            raise ValueError(
                f"ActionConfig.rotation must be one of {_ROTATIONS}; got {self.rotation!r}"
            )
        if not isinstance(self.gripper, bool):
            raise TypeError(f"ActionConfig.gripper must be a bool; got {self.gripper!r}")
        for name in ("max_step_m", "max_rot_step_rad"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"ActionConfig.{name} must be a number; got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"ActionConfig.{name} must be a positive finite number; got {value!r}"
                )
            object.__setattr__(self, name, float(value))

    @property
    def rot_dim(self) -> int:
        """Number of rotation components: 0 (none), 1 (yaw) or 3 (full)."""
        return {"none": 0, "yaw": 1, "full": 3}[self.rotation]

    @property
    def dim(self) -> int:
        """Length of the action vector."""
        return 3 + self.rot_dim + int(self.gripper)

    @property
    def names(self) -> tuple[str, ...]:
        """Name of each action dimension, e.g. ``("dx", "dy", "dz", "dyaw", "gripper")``."""
        rot = {"none": (), "yaw": ("dyaw",), "full": ("drx", "dry", "drz")}[self.rotation]
        return ("dx", "dy", "dz", *rot) + (("gripper",) if self.gripper else ())


@dataclass(frozen=True, eq=False)
class EeCommand:
    """One control step's end-effector increment, in the robot BASE frame."""

    delta_pos_m: NDArray[np.float64]
    """Translation (m), shape (3,), base frame."""
    delta_rotvec_rad: NDArray[np.float64]
    """Rotation vector axis * angle (rad), shape (3,), base frame; apply on the left of the quat."""
    gripper: float = 0.0
    """Absolute gripper command in [-1, 1] (-1 open, +1 closed); 0.0 when the action has none."""

    def __post_init__(self) -> None:
        for name in ("delta_pos_m", "delta_rotvec_rad"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != (3,):
                raise ValueError(f"EeCommand.{name} must have shape (3,); got {value.shape}")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "gripper", float(self.gripper))


def _frame_quat(cfg: ActionConfig, ee_quat: ArrayLike | None) -> NDArray[np.float64] | None:
    """Unit quaternion from the action frame to the base frame, or None for the base frame."""
    if cfg.frame == "base":
        return None
    if ee_quat is None:
        raise ValueError('ee_quat (w, x, y, z) is required when ActionConfig.frame == "ee"')
    q = np.asarray(ee_quat, dtype=np.float64)
    if q.shape != (4,):
        raise ValueError(f"ee_quat must have shape (4,) as (w, x, y, z); got {q.shape}")
    return quat_normalize(q)


def decode_action(action: ArrayLike, cfg: ActionConfig, ee_quat: ArrayLike | None) -> EeCommand:
    """Turn a normalised action into a base-frame :class:`EeCommand`.

    Args:
        action: shape ``(cfg.dim,)``, laid out as ``cfg.names``; clipped to ``[-1, 1]``.
            Non-finite entries (NaN and +-inf) become NaN, so the safety filter holds the pose:
            an infinite policy output is a fault, not a request for a full-scale step.
        cfg: the action layout and scales.
        ee_quat: current end-effector orientation ``(w, x, y, z)`` in the base frame; used only
            when ``cfg.frame == "ee"`` (may be None otherwise).

    Returns:
        The increment in the base frame. For ``rotation="full"`` the rotation vector's norm is
        clipped to ``cfg.max_rot_step_rad`` (its direction is kept).
    """
    a = np.asarray(action, dtype=np.float64)
    if a.shape != (cfg.dim,):
        raise ValueError(
            f"action must have shape ({cfg.dim},) for names {cfg.names}; got shape {a.shape}"
        )
    a = np.clip(np.where(np.isfinite(a), a, np.nan), -1.0, 1.0)
    delta_pos = a[:3] * cfg.max_step_m
    rotvec = np.zeros(3)
    if cfg.rotation == "yaw":
        rotvec[2] = a[3] * cfg.max_rot_step_rad
    elif cfg.rotation == "full":
        rotvec = a[3:6] * cfg.max_rot_step_rad
        norm = math.hypot(*rotvec.tolist())
        if norm > cfg.max_rot_step_rad:
            rotvec = rotvec * (cfg.max_rot_step_rad / norm)
    q = _frame_quat(cfg, ee_quat)
    if q is not None:
        delta_pos = quat_rotate(q, delta_pos)
        rotvec = quat_rotate(q, rotvec)
    gripper = float(a[-1]) if cfg.gripper else 0.0
    return EeCommand(delta_pos_m=delta_pos, delta_rotvec_rad=rotvec, gripper=gripper)


def encode_action(
    cmd: EeCommand, cfg: ActionConfig, ee_quat: ArrayLike | None
) -> NDArray[np.float32]:
    """Map a base-frame :class:`EeCommand` to the normalised action that decodes to it.

    Exact inverse of :func:`decode_action` where representable. Otherwise: each translation
    component is clipped to ``[-1, 1]``; with ``rotation="yaw"`` only the z component (base z, or
    tool z for ``frame="ee"``) of the rotation is kept; with ``rotation="full"`` a rotation
    larger than ``cfg.max_rot_step_rad`` is scaled down along its axis; with ``rotation="none"``
    the rotation is dropped. Used by scripted experts and to map human teleop into the policy's
    action frame.

    Args:
        cmd: the desired increment in the base frame.
        cfg: the action layout and scales.
        ee_quat: current end-effector orientation ``(w, x, y, z)``; used only for ``frame="ee"``.

    Returns:
        float32 action of shape ``(cfg.dim,)`` in ``[-1, 1]``.
    """
    if not isinstance(cmd, EeCommand):
        raise TypeError(f"cmd must be an EeCommand; got {type(cmd).__name__}")
    delta_pos = cmd.delta_pos_m
    rotvec = cmd.delta_rotvec_rad
    q = _frame_quat(cfg, ee_quat)
    if q is not None:
        q_inv = quat_conj(q)
        delta_pos = quat_rotate(q_inv, delta_pos)
        rotvec = quat_rotate(q_inv, rotvec)
    out = np.empty(cfg.dim, dtype=np.float64)
    out[:3] = delta_pos / cfg.max_step_m
    if cfg.rotation == "yaw":
        out[3] = rotvec[2] / cfg.max_rot_step_rad
    elif cfg.rotation == "full":
        scaled = rotvec / cfg.max_rot_step_rad
        norm = math.hypot(*scaled.tolist())
        out[3:6] = scaled / norm if norm > 1.0 else scaled
    if cfg.gripper:
        out[-1] = cmd.gripper
    return np.clip(out, -1.0, 1.0).astype(np.float32)
