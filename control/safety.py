"""Safety filter: clamps a commanded end-effector pose target before it reaches the arm.

All positions are metres and all quaternions ``(w, x, y, z)``, both in the robot BASE frame.
Tilt is the angle (rad) between the tool z axis and the nominal orientation's tool z axis; twist
(the "yaw" limit) is the rotation (rad) about the tool z axis away from the nominal, taken from
the swing-twist decomposition ``conj(nominal) * q = swing * twist``.

Order of operations in :meth:`SafetyFilter.filter`, and why:

1. **Current pose.** It must be finite (a non-finite measured pose is a state fault the caller
   must handle by stopping the arm; there is nothing safe to hold). It is projected into the
   limits; when it is inside them (the normal case) it is unchanged. Step limits below are taken
   relative to this projected pose, so a robot started outside the limits is pulled back by the
   smallest possible jump.
2. **Non-finite target** (NaN/inf, or a zero quaternion): hold the projected current pose and set
   ``nonfinite``.
3. **Workspace box** (hard limit): clip the target position into the box shrunk by the braking
   margin (the *target box*: the arm, which lags its target, needs room to stop inside the
   box; the current pose is projected into the same target box). The target box is convex
   and the current position is in it, so Euclidean projection is non-expansive towards it:
   ``|clip(p) - c| <= |p - c|``. Clipping can therefore never make the step longer.
4. **Translation step**: shorten ``target - current`` to ``max_step_m``. Both ends of the
   segment lie in the convex box, so the shortened target stays inside it: the step limit
   cannot undo the box.
5. **Orientation limits** (hard limit): clamp the target's tilt and twist. Unlike the box, this
   set is not geodesically convex and the clamp is not non-expansive (a far-off target can be
   clamped to an orientation further from the current one than the target itself), so:
6. **Rotation step**: move from the current orientation along the geodesic towards the clamped
   target by at most ``min(max_rot_step_rad, angle(current, raw target))``; the second term
   guarantees the filter never amplifies the commanded rotation. A geodesic between two allowed
   orientations can bulge slightly out of the set; then the point reached is clamped back in,
   and if that moved it beyond the rotation bound, the step is bisected shorter (the current
   orientation is allowed, so this always ends inside). The arm slides along a limit instead of
   freezing on it.

Hard limits come first so that the step limiter interpolates between two allowed poses; step
limits come last so nothing after them can lengthen a step. Every stage leaves an already valid
target untouched (comparisons carry a 1e-9 relative tolerance), so the filter is idempotent:
filtering its own output again with the same current pose changes nothing.

The filter is pure scalar Python on floats (no NumPy temporaries in the hot path): a call takes
tens of microseconds, and only the two returned arrays are allocated.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import asdict, dataclass, fields

import numpy as np
from numpy.typing import ArrayLike, NDArray

from handrail.control.transforms import quat_mul_floats, rotvec_to_quat_floats

__all__ = [
    "SAFETY_FLAGS",
    "SIM_ARM_LIMITS",
    "SIM_TASK_LIMITS",
    "SafetyFilter",
    "SafetyLimits",
    "SafetyReport",
]

_AXES = ("x", "y", "z")
_REL_TOL = 1e-9  # relative slack on every limit comparison (keeps the filter idempotent)
_ABS_TOL = 1e-12
_BISECT_STEPS = 16  # geodesic back-off resolution: 2**-16 of one step

Quat = tuple[float, float, float, float]


def _float_tuple(value: object, size: int, name: str) -> tuple[float, ...]:
    if isinstance(value, str | bytes):
        raise TypeError(f"SafetyLimits.{name} must be {size} numbers; got {value!r}")
    try:
        out = tuple(float(v) for v in value)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise TypeError(f"SafetyLimits.{name} must be {size} numbers; got {value!r}") from None
    if len(out) != size or not all(math.isfinite(v) for v in out):
        raise ValueError(f"SafetyLimits.{name} must be {size} finite numbers; got {value!r}")
    return out


@dataclass(frozen=True)
class SafetyLimits:
    """Hard limits on end-effector pose targets, all in the robot base frame."""

    workspace_low_m: tuple[float, float, float]
    """Lower corner (m) of the box the end-effector position must stay in."""
    workspace_high_m: tuple[float, float, float]
    """Upper corner (m) of the workspace box; each axis strictly above workspace_low_m."""
    max_step_m: float
    """Largest translation (m) of the target away from the current position per control tick."""
    max_rot_step_rad: float
    """Largest rotation (rad) of the target away from the current orientation per control tick."""
    nominal_quat: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 0.0)
    """Reference orientation (w, x, y, z), unit norm; the default points the gripper down."""
    max_tilt_rad: float = math.pi / 4
    """Largest angle (rad, in (0, pi]) of the tool z axis away from the nominal's tool z axis."""
    max_yaw_rad: float = math.pi
    """Largest twist (rad, > 0) about the tool z axis away from the nominal; >= pi is unlimited."""
    braking_margin_m: float = 0.0
    """Targets are clipped into the box shrunk by this on every side (m, >= 0): the room the arm
    needs to stop inside the box when it reaches a face at full speed."""
    gripper_max_m: float = math.inf
    """Largest gripper opening command (m, > 0); commands are clipped into [0, gripper_max_m]."""

    def __post_init__(self) -> None:
        low = _float_tuple(self.workspace_low_m, 3, "workspace_low_m")
        high = _float_tuple(self.workspace_high_m, 3, "workspace_high_m")
        for i, axis in enumerate(_AXES):
            if not low[i] < high[i]:
                raise ValueError(
                    f"SafetyLimits workspace axis {axis}: workspace_low_m[{i}] = {low[i]} must be "
                    f"below workspace_high_m[{i}] = {high[i]}; swap or widen them"
                )
        quat = _float_tuple(self.nominal_quat, 4, "nominal_quat")
        norm = math.sqrt(sum(v * v for v in quat))
        if abs(norm - 1.0) > 1e-6:
            raise ValueError(
                f"SafetyLimits.nominal_quat must be a unit quaternion (w, x, y, z); got norm "
                f"{norm:.6g}: normalise it"
            )
        for name in (*_POSITIVE, "braking_margin_m", "gripper_max_m"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"SafetyLimits.{name} must be a number; got {value!r}")
            object.__setattr__(self, name, float(value))
        for name in _POSITIVE:
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"SafetyLimits.{name} must be a positive finite number; got {value!r}"
                )
        if not self.gripper_max_m > 0:
            raise ValueError(f"SafetyLimits.gripper_max_m must be > 0 m; got {self.gripper_max_m}")
        room = min(h - lo for lo, h in zip(low, high, strict=True)) / 2
        if not 0 <= self.braking_margin_m < room:
            raise ValueError(
                f"SafetyLimits.braking_margin_m must be >= 0 and below half the box's smallest "
                f"side ({room:.4g} m); got {self.braking_margin_m}"
            )
        if self.max_tilt_rad > math.pi:
            raise ValueError(
                f"SafetyLimits.max_tilt_rad must be in (0, pi]; got {self.max_tilt_rad}"
            )
        object.__setattr__(self, "workspace_low_m", low)
        object.__setattr__(self, "workspace_high_m", high)
        object.__setattr__(self, "nominal_quat", tuple(v / norm for v in quat))

    @property
    def target_low_m(self) -> tuple[float, float, float]:
        """Lower corner (m) of the target box: the workspace box shrunk by the braking margin."""
        m = self.braking_margin_m
        x, y, z = self.workspace_low_m
        return (x + m, y + m, z + m)

    @property
    def target_high_m(self) -> tuple[float, float, float]:
        """Upper corner (m) of the target box."""
        m = self.braking_margin_m
        x, y, z = self.workspace_high_m
        return (x - m, y - m, z - m)


_POSITIVE = ("max_step_m", "max_rot_step_rad", "max_tilt_rad", "max_yaw_rad")

SIM_ARM_LIMITS = SafetyLimits(
    workspace_low_m=(0.24, -0.21, 0.005),
    workspace_high_m=(0.66, 0.21, 0.51),
    max_step_m=0.05,
    max_rot_step_rad=0.3,
    max_tilt_rad=0.6,
    max_yaw_rad=math.pi,
    braking_margin_m=0.01,
    gripper_max_m=0.08,
)
"""The simulated arm's limits, defined once: the sim tasks, ``RosArmEnv`` and ``safety_node``
default to them. Every corner of the box is reachable with the gripper pointing down, and the
target box (x 0.25..0.65, y -0.2..0.2, z 0.015..0.5 m) holds every task's objects and goals and
the home pose with its reset offset. At full speed (0.5 m/s) the arm overshoots a face of the
target box by up to about 12 mm, so with the 10 mm margin it ends at most a few mm outside the
box (tests/hw/test_safety_robot.py drives it at random targets far outside)."""

SIM_TASK_LIMITS = SafetyLimits(
    workspace_low_m=(0.25, -0.35, 0.015),
    workspace_high_m=(0.75, 0.35, 0.6),
    max_step_m=0.05,
    max_rot_step_rad=0.3,
    max_tilt_rad=0.6,
    max_yaw_rad=math.pi,
)
"""The box the sim tasks train in (``handrail.sim``'s default): every learning result in the
docs was measured in it, so it stays as it was. It is larger than the arm reaches with the
gripper down near its far corners, which in simulation only means the arm lags a clipped
target; anything that commands an arm (``sim_robot``, ``RosArmEnv``, ``safety_node``) uses
:data:`SIM_ARM_LIMITS`, whose every corner is reachable and which keeps a braking margin."""


@dataclass(frozen=True)
class SafetyReport:
    """What :meth:`SafetyFilter.filter` changed this tick (True = that limit altered the target)."""

    workspace_clipped: bool = False
    """The position was clipped into the workspace box."""
    step_clipped: bool = False
    """The translation from the current position was shortened to max_step_m."""
    rotation_step_clipped: bool = False
    """The rotation from the current orientation was shortened to max_rot_step_rad."""
    tilt_clipped: bool = False
    """The tilt limit changed the orientation."""
    yaw_clipped: bool = False
    """The twist (yaw about the tool axis) limit changed the orientation."""
    nonfinite: bool = False
    """The target was non-finite or degenerate, so the current pose was held."""

    @property
    def any(self) -> bool:
        """True when any limit acted."""
        return (
            self.workspace_clipped
            or self.step_clipped
            or self.rotation_step_clipped
            or self.tilt_clipped
            or self.yaw_clipped
            or self.nonfinite
        )

    def as_dict(self) -> dict[str, bool]:
        """Flags by field name, e.g. for metrics or a ROS diagnostic message."""
        return asdict(self)


SAFETY_FLAGS: tuple[str, ...] = tuple(f.name for f in fields(SafetyReport))
"""Names of the SafetyReport flags, in order."""


@functools.cache
def _report(*flags: bool) -> SafetyReport:
    """Shared immutable reports (64 possible), so a filter call does not build one."""
    return SafetyReport(*flags)


def _relative_rotvec(q: Quat, c: Quat) -> tuple[float, float, float, float]:
    """Base-frame rotation vector r with q = exp(r) * c (shortest), and its angle."""
    rw, rx, ry, rz = quat_mul_floats(q, (c[0], -c[1], -c[2], -c[3]))
    if rw < 0.0:
        rw, rx, ry, rz = -rw, -rx, -ry, -rz
    s = math.sqrt(rx * rx + ry * ry + rz * rz)
    angle = 2.0 * math.atan2(s, rw)
    k = 2.0 / rw if s < 1e-6 * rw else angle / s
    return rx * k, ry * k, rz * k, angle


def _unit_quat(q: Quat) -> Quat | None:
    """Normalised q, or None when q is non-finite or (near) zero."""
    n = math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
    if not math.isfinite(n) or n < 1e-9:
        return None
    return (q[0] / n, q[1] / n, q[2] / n, q[3] / n)


def _read(value: ArrayLike, size: int, name: str) -> tuple[float, ...]:
    seq = value.tolist() if isinstance(value, np.ndarray) else value
    try:
        out = tuple(map(float, seq))  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of {size} numbers; got {value!r}") from None
    if len(out) != size:
        raise ValueError(f"{name} must have {size} elements; got {len(out)}")
    return out


class SafetyFilter:
    """Clamps pose targets to :class:`SafetyLimits`; see the module docstring for the order.

    Stateless between calls (the current pose is passed in), so one instance can serve several
    loops; it only caches the limits as floats.
    """

    def __init__(self, limits: SafetyLimits) -> None:
        if not isinstance(limits, SafetyLimits):
            raise TypeError(f"limits must be a SafetyLimits; got {type(limits).__name__}")
        self.limits = limits
        self._low = limits.target_low_m
        self._high = limits.target_high_m
        self._step_m = limits.max_step_m
        self._rot_step_rad = limits.max_rot_step_rad
        nw, nx, ny, nz = limits.nominal_quat
        self._nominal: Quat = (nw, nx, ny, nz)
        self._nominal_conj: Quat = (nw, -nx, -ny, -nz)
        self._max_tilt = limits.max_tilt_rad
        self._max_twist = min(limits.max_yaw_rad, math.pi)
        self._tilt_tol = limits.max_tilt_rad * (1.0 + _REL_TOL) + _ABS_TOL
        self._twist_tol = self._max_twist * (1.0 + _REL_TOL) + _ABS_TOL

    def orientation_error(self, quat: ArrayLike) -> tuple[float, float]:
        """Tilt (rad, in [0, pi]) and twist (rad, in [-pi, pi]) of ``quat`` from the nominal."""
        q = _unit_quat(_read(quat, 4, "quat"))  # type: ignore[arg-type]
        if q is None:
            raise ValueError(
                f"quat must be a finite non-zero quaternion (w, x, y, z); got {quat!r}"
            )
        tilt, twist, _ = self._swing_twist(q)
        return tilt, twist

    def filter(
        self,
        current_pos_m: ArrayLike,
        current_quat: ArrayLike,
        target_pos_m: ArrayLike,
        target_quat: ArrayLike,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], SafetyReport]:
        """Clamp a target pose against the limits and the current pose.

        Args:
            current_pos_m: measured end-effector position (3,), m, base frame; must be finite.
            current_quat: measured orientation (w, x, y, z), base frame; finite and non-zero.
            target_pos_m: commanded position (3,), m, base frame.
            target_quat: commanded orientation (w, x, y, z), base frame (normalised here).

        Returns:
            Safe position (3,) and unit quaternion (4,) (sign chosen in the current's
            hemisphere), both float64, and a report of which limits acted.

        Raises:
            ValueError: wrong shapes, or a non-finite/zero current pose (stop the arm instead).
        """
        cur_p = _read(current_pos_m, 3, "current_pos_m")
        cur_q = _unit_quat(_read(current_quat, 4, "current_quat"))  # type: ignore[arg-type]
        if cur_q is None or not all(map(math.isfinite, cur_p)):
            raise ValueError(
                "current_pos_m/current_quat must be finite with a non-zero quaternion; a bad "
                f"measured pose is a state fault: stop the arm (got {current_pos_m!r}, {current_quat!r})"
            )
        cur_p, cur_box = self._clip_box(cur_p)
        cur_q, cur_tilt, cur_yaw = self._clamp_orientation(cur_q)
        tgt_p = _read(target_pos_m, 3, "target_pos_m")
        tgt_q = _unit_quat(_read(target_quat, 4, "target_quat"))  # type: ignore[arg-type]
        if tgt_q is None or not all(map(math.isfinite, tgt_p)):
            report = _report(cur_box, False, False, cur_tilt, cur_yaw, True)
            return np.array(cur_p), np.array(cur_q), report
        pos, box, step = self._limit_translation(cur_p, tgt_p)
        quat, rot_step, tilt, yaw = self._limit_rotation(cur_q, tgt_q)
        return np.array(pos), np.array(quat), _report(box, step, rot_step, tilt, yaw, False)

    def _clip_box(self, p: tuple[float, ...]) -> tuple[tuple[float, float, float], bool]:
        lo, hi = self._low, self._high
        out = (
            min(max(p[0], lo[0]), hi[0]),
            min(max(p[1], lo[1]), hi[1]),
            min(max(p[2], lo[2]), hi[2]),
        )
        return out, out != p

    def _limit_translation(
        self, cur: tuple[float, float, float], target: tuple[float, ...]
    ) -> tuple[tuple[float, float, float], bool, bool]:
        """Box clip, then shorten the step from ``cur`` (already inside the box)."""
        pos, box = self._clip_box(target)
        dx, dy, dz = pos[0] - cur[0], pos[1] - cur[1], pos[2] - cur[2]
        dist = math.sqrt(dx * dx + dy * dy + dz * dz)
        if dist <= self._step_m * (1.0 + _REL_TOL) + _ABS_TOL:
            return pos, box, False
        k = self._step_m / dist
        # Both ends are in the convex box; the clip only absorbs rounding at a face.
        pos, _ = self._clip_box((cur[0] + dx * k, cur[1] + dy * k, cur[2] + dz * k))
        return pos, box, True

    def _swing_twist(self, q: Quat) -> tuple[float, float, Quat]:
        """Tilt, twist and the canonical (w >= 0) rotation of ``q`` relative to the nominal."""
        rw, rx, ry, rz = quat_mul_floats(self._nominal_conj, q)
        if rw < 0.0 or (rw == 0.0 and rz < 0.0):
            rw, rx, ry, rz = -rw, -rx, -ry, -rz
        # Well conditioned for small angles, unlike acos of the z-axis dot product.
        tilt = 2.0 * math.atan2(math.sqrt(rx * rx + ry * ry), math.sqrt(rw * rw + rz * rz))
        twist = 2.0 * math.atan2(rz, rw)
        return tilt, twist, (rw, rx, ry, rz)

    def _clamp_orientation(self, q: Quat) -> tuple[Quat, bool, bool]:
        """Clamp tilt and twist separately (swing-twist); an allowed ``q`` is returned as is."""
        tilt, twist, (_, rx, ry, _) = self._swing_twist(q)
        tilt_bad = tilt > self._tilt_tol
        twist_bad = abs(twist) > self._twist_tol
        if not (tilt_bad or twist_bad):
            return q, False, False
        # rel = swing * twist with swing = (cos(t/2), sin(t/2) * (ux, uy, 0)); undo the twist.
        ch, sh = math.cos(0.5 * twist), math.sin(0.5 * twist)
        sx, sy = ch * rx - sh * ry, sh * rx + ch * ry
        norm = math.hypot(sx, sy)
        ux, uy = (sx / norm, sy / norm) if norm > 1e-12 else (1.0, 0.0)
        new_tilt = min(tilt, self._max_tilt)
        new_twist = min(max(twist, -self._max_twist), self._max_twist)
        s = math.sin(0.5 * new_tilt)
        swing = (math.cos(0.5 * new_tilt), ux * s, uy * s, 0.0)
        twist_q = (math.cos(0.5 * new_twist), 0.0, 0.0, math.sin(0.5 * new_twist))
        return quat_mul_floats(self._nominal, quat_mul_floats(swing, twist_q)), tilt_bad, twist_bad

    def _limit_rotation(self, cur: Quat, target: Quat) -> tuple[Quat, bool, bool, bool]:
        """Orientation limits, then the rotation step along the geodesic from ``cur``."""
        raw_angle = _relative_rotvec(target, cur)[3]
        clamped, tilt, yaw = self._clamp_orientation(target)
        rx, ry, rz, angle = _relative_rotvec(clamped, cur)
        limit = min(self._rot_step_rad, raw_angle)  # raw_angle: never amplify the command
        step = False
        out = clamped
        if angle > limit * (1.0 + _REL_TOL) + _ABS_TOL:
            step = self._rot_step_rad <= raw_angle
            out, tilt_out, yaw_out = self._geodesic(cur, (rx, ry, rz), limit / angle, limit)
            tilt, yaw = tilt or tilt_out, yaw or yaw_out
        if cur[0] * out[0] + cur[1] * out[1] + cur[2] * out[2] + cur[3] * out[3] < 0.0:
            out = (-out[0], -out[1], -out[2], -out[3])
        return out, step, tilt, yaw

    def _geodesic(
        self, cur: Quat, rotvec: tuple[float, float, float], s: float, limit: float
    ) -> tuple[Quat, bool, bool]:
        """Orientation ``exp(s * rotvec) * cur`` brought inside the orientation limits.

        A geodesic between two allowed orientations can bulge out of the limits. Then the point
        is clamped back in, and if that moved it more than ``limit`` (rad) away from ``cur``,
        ``s`` is bisected down until the clamped point is within ``limit`` (``cur`` itself is
        allowed, so this always succeeds). Clamping rather than stopping at the first exit lets
        the arm slide along a limit instead of freezing on it.

        Returns the orientation and which limits (tilt, twist) acted.
        """
        rx, ry, rz = rotvec
        q = quat_mul_floats(rotvec_to_quat_floats(rx * s, ry * s, rz * s), cur)
        clamped, tilt_bad, twist_bad = self._clamp_orientation(q)
        if not (tilt_bad or twist_bad):
            return q, False, False
        bound = limit * (1.0 + _REL_TOL) + _ABS_TOL
        if _relative_rotvec(clamped, cur)[3] <= bound:
            return clamped, tilt_bad, twist_bad
        lo, hi, best = 0.0, s, cur
        for _ in range(_BISECT_STEPS):
            mid = 0.5 * (lo + hi)
            cand = quat_mul_floats(rotvec_to_quat_floats(rx * mid, ry * mid, rz * mid), cur)
            cand = self._clamp_orientation(cand)[0]
            if _relative_rotvec(cand, cur)[3] <= bound:
                lo, best = mid, cand
            else:
                hi = mid
        return best, tilt_bad, twist_bad
