"""The gate every command to an arm passes: e-stop latch, state check, recovery, watchdog, filter.

:class:`SafetyGate` is the decision logic of ``hw/safety_node`` (pure, clock-injected: the node
only feeds it messages, its ticks and the time, and publishes what it returns). Every decision
carries a reason; the node publishes each non-empty one as one line on ``safety_events``.

- **E-stop**: :meth:`SafetyGate.estop` latches a stop; while latched every command is dropped
  and the arm is sent, once, its pose at the moment of the stop (hold). Only an explicit clear
  releases it; after a clear the next command is step-limited from the measured pose, so the arm
  never jumps to a target that was commanded before the stop.
- **State check**: no motion while the newest measured pose is missing, older than
  ``state_timeout_s``, or non-finite. :meth:`SafetyGate.tick` reports a pose going stale at its
  deadline, whether or not commands arrive, and stops the arm being commanded.
- **Workspace box**: an arm that starts outside the box, or is more than ``recover_within_m``
  outside it, is not moved (a person moves it in: the box may be wrong, or something else moved
  the arm). An arm that has been inside and then left it by less (an overshoot, a push) is
  recovered: every target is shortened to ``max_step_m`` from the measured position towards the
  target box, so it only ever moves back towards the box (the reset's homing included).
- **Command**: a target in another frame than ``frame_id`` is refused; a non-finite target or a
  zero quaternion holds the arm where it is; a quaternion that is not of unit length is
  normalised, and said so. Then the target goes through
  :class:`~handrail.control.safety.SafetyFilter` (box, step, tilt and twist limits).
- **Braking**: the arm lags its target, so it reaches a face of the box with the speed the
  target's lead gave it and overshoots (27 mm at 0.42 m/s near full reach, in the sim). Towards
  each face the target leads the arm by at most ``braking_lead_ratio`` of the arm's distance to
  that face of the target box: the arm slows as it nears a face, so the braking margin holds.
- **Gripper**: a non-finite opening is refused, one outside ``[0, gripper_max_m]`` clipped.
- **Watchdog**: when commands stop for ``watchdog_s`` while the arm was being commanded, the
  gate returns one hold at the measured pose (the arm stops where it is instead of finishing the
  last, possibly stale, step).
- **Stalls**: ticks come every few ms; a longer gap between two ticks means the owner itself did
  not run (a stalled process), so messages queued meanwhile are not yet read. The tick after
  such a gap neither ages the pose nor counts the commands' silence; the next one does. A stall
  of the node never looks like a silent actor or a hung arm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from handrail.control.safety import SafetyFilter, SafetyLimits

__all__ = ["GateDecision", "GripperDecision", "SafetyGate"]

_BOX_SLACK_M = 0.005  # a measured pose this close outside the box still counts as inside
_UNIT_TOL = 1e-6  # a quaternion norm further than this from 1 is reported when normalised


@dataclass(frozen=True)
class GateDecision:
    """What to send the arm: a target pose or nothing, and why (empty when forwarded as is)."""

    pos_m: NDArray[np.float64] | None
    """Target position (m, base frame), or None: nothing is sent."""
    quat_wxyz: NDArray[np.float64] | None
    """Target orientation (w, x, y, z), or None."""
    reason: str = ""
    """"" (forwarded unchanged), "clipped: ...", "recovering: ...", "estop", "hold: ...",
    "refused: ..."."""

    @property
    def send(self) -> bool:
        """Whether a target goes to the arm."""
        return self.pos_m is not None


@dataclass(frozen=True)
class GripperDecision:
    """The gripper opening to send (None: nothing) and why (empty when forwarded as is)."""

    opening_m: float | None
    """Opening (m) to send, or None."""
    reason: str = ""
    """"" (forwarded unchanged), "clipped: ...", "estop", "refused: ..."."""


_DROP = GateDecision(None, None, "estop")
_NOTHING = GateDecision(None, None)


def _fmt(values: tuple[float, ...]) -> str:
    return "(" + ", ".join(f"{v:.3f}" for v in values) + ")"


class SafetyGate:
    """E-stop latch, state check, recovery, command checks, filter and watchdog (module doc).

    Args:
        limits: the workspace, step and gripper limits.
        watchdog_s: hold the arm when no command came for this long (s) while it was commanded.
        state_timeout_s: a measured pose older than this (s) stops motion.
        frame_id: the frame every target must be expressed in (``header.frame_id``).
        stall_s: a gap this long (s) between two ticks means the owner did not run (None: the
            owner does not tick regularly, so no gap is a stall).
        recover_within_m: an arm that left the box by at most this much (m) is moved back.
        braking_lead_ratio: towards a face, the target leads the arm by at most this fraction
            of its distance to the face (1: no braking; in (0, 1]).
    """

    def __init__(
        self,
        limits: SafetyLimits,
        watchdog_s: float = 0.5,
        state_timeout_s: float = 0.5,
        frame_id: str = "base",
        stall_s: float | None = None,
        recover_within_m: float = 0.1,
        braking_lead_ratio: float = 0.5,
    ) -> None:
        if not (watchdog_s > 0 and state_timeout_s > 0 and (stall_s is None or stall_s > 0)):
            raise ValueError(
                f"watchdog_s ({watchdog_s}), state_timeout_s ({state_timeout_s}) and stall_s "
                f"({stall_s}) must be > 0 s"
            )
        if not 0 < braking_lead_ratio <= 1:
            raise ValueError(f"braking_lead_ratio must be in (0, 1]; got {braking_lead_ratio}")
        if not frame_id:
            raise ValueError("frame_id must name the arm's base frame (e.g. 'base'); got ''")
        self.limits = limits
        self.filter = SafetyFilter(limits)
        self.watchdog_s = float(watchdog_s)
        self.state_timeout_s = float(state_timeout_s)
        self.frame_id = frame_id
        self.stall_s = math.inf if stall_s is None else float(stall_s)
        self.recover_within_m = float(recover_within_m)
        self.braking_lead_ratio = float(braking_lead_ratio)
        self.estopped = False
        self._pos: tuple[float, float, float] | None = None
        self._quat: tuple[float, float, float, float] | None = None
        self._state_t = -math.inf
        self._been_inside = False  # the arm was seen inside the box: it may be recovered
        self._stale_reported = False
        self._last_command_t: float | None = None
        self._last_tick_t: float | None = None
        self._resumed_t = -math.inf  # the end of the owner's last stall

    # ----- inputs -----------------------------------------------------------------------------
    def on_state(self, pos_m: ArrayLike, quat_wxyz: ArrayLike, now_s: float) -> None:
        """The newest measured end-effector pose (base frame) at time ``now_s``."""
        p = tuple(float(v) for v in np.asarray(pos_m, np.float64).reshape(3))
        q = tuple(float(v) for v in np.asarray(quat_wxyz, np.float64).reshape(4))
        self._pos, self._quat = (p[0], p[1], p[2]), (q[0], q[1], q[2], q[3])
        self._state_t = float(now_s)
        self._stale_reported = False
        if all(math.isfinite(v) for v in p) and not self._outside():
            self._been_inside = True

    def _outside(self) -> str:
        """How the measured position lies outside the box ("" when inside, within the slack)."""
        assert self._pos is not None
        low, high = self.limits.workspace_low_m, self.limits.workspace_high_m
        return ", ".join(
            f"{axis}={p:.3f} not in [{lo}, {hi}]"
            for axis, p, lo, hi in zip("xyz", self._pos, low, high, strict=True)
            if not lo - _BOX_SLACK_M <= p <= hi + _BOX_SLACK_M
        )

    def _distance_outside_m(self) -> float:
        """Distance (m) from the measured position to the box (0 inside)."""
        assert self._pos is not None
        low, high = self.limits.workspace_low_m, self.limits.workspace_high_m
        return math.sqrt(
            sum(
                max(lo - p, 0.0, p - hi) ** 2
                for p, lo, hi in zip(self._pos, low, high, strict=True)
            )
        )

    def state_problem(self, now_s: float) -> str:
        """Why the arm may not move now ("" when it may, possibly only back towards the box)."""
        if self._pos is None or self._quat is None:
            return "no end-effector pose received yet"
        age = now_s - self._state_t
        if age > self.state_timeout_s:
            return f"end-effector pose is {age:.2f} s old (limit {self.state_timeout_s} s)"
        if not all(math.isfinite(v) for v in (*self._pos, *self._quat)):
            return "end-effector pose is not finite"
        outside = self._outside()
        if outside and not self._been_inside:
            return (
                f"end effector is outside the workspace box ({outside}) since start-up: move "
                "the arm into the box by hand before commanding it"
            )
        far = self._distance_outside_m()
        if outside and far > self.recover_within_m:
            return (
                f"end effector is outside the workspace box ({outside}) by {far:.3f} m, more "
                f"than the {self.recover_within_m} m it is moved back from: move the arm into "
                "the box by hand before commanding it"
            )
        return ""

    def ready(self, now_s: float) -> bool:
        """Whether commands are forwarded now (no e-stop, a fresh pose inside the box)."""
        return not (self.estopped or self.state_problem(now_s) or self._outside())

    def command(
        self, pos_m: ArrayLike, quat_wxyz: ArrayLike, now_s: float, frame_id: str = "base"
    ) -> GateDecision:
        """A wanted target in ``frame_id``: what to send the arm instead (possibly nothing)."""
        if self.estopped:
            return _DROP
        problem = self.state_problem(now_s)
        if problem:
            self._last_command_t = None
            return GateDecision(None, None, f"refused: {problem}")
        if frame_id != self.frame_id:
            return GateDecision(
                None,
                None,
                f"refused: target frame {frame_id!r} is not {self.frame_id!r}: send targets "
                f"in {self.frame_id!r} (header.frame_id)",
            )
        assert self._pos is not None and self._quat is not None
        pos_in = np.asarray(pos_m, np.float64).reshape(3)
        quat_in = np.asarray(quat_wxyz, np.float64).reshape(4)
        pos, quat, report = self.filter.filter(self._pos, self._quat, pos_in, quat_in)
        self._last_command_t = float(now_s)
        if report.nonfinite:
            return GateDecision(pos, quat, f"hold: {_bad_target(pos_in, quat_in)}")
        notes = [name for name, on in report.as_dict().items() if on]
        braked = self._brake(pos)
        if not np.array_equal(braked, pos):
            pos = braked
            notes.append("braking")
        norm = float(np.linalg.norm(quat_in))
        if abs(norm - 1.0) > _UNIT_TOL:
            notes.append(f"quaternion normalised (its norm was {norm:.6g})")
        outside = self._outside()
        if outside:
            pos = self._toward_box(pos)
            notes.append(
                f"recovering: end effector is outside the workspace box ({outside}): it is "
                f"only moved back towards the box, {self.limits.max_step_m} m at a time"
            )
        return GateDecision(pos, quat, f"clipped: {', '.join(notes)}" if notes else "")

    def _brake(self, target: NDArray[np.float64]) -> NDArray[np.float64]:
        """``target`` clipped into the box around the arm whose faces lie ``braking_lead_ratio``
        of the way to the target box's faces (it holds the arm, so the step only shortens)."""
        low = np.array(self.limits.target_low_m)
        high = np.array(self.limits.target_high_m)
        here = np.clip(np.array(self._pos), low, high)
        r = self.braking_lead_ratio
        return np.clip(target, here - r * (here - low), here + r * (high - here))

    def _toward_box(self, target: NDArray[np.float64]) -> NDArray[np.float64]:
        """``target`` (inside the target box) brought to ``max_step_m`` from the measured
        position: on that segment every point is nearer the box than the arm (convexity)."""
        here = np.array(self._pos)
        step = target - here
        dist = float(np.linalg.norm(step))
        if dist <= self.limits.max_step_m:
            return target
        return here + step * (self.limits.max_step_m / dist)

    def gripper(self, opening_m: float) -> GripperDecision:
        """A wanted gripper opening (m): what to send instead (possibly nothing)."""
        if self.estopped:
            return GripperDecision(None, "estop")
        value = float(opening_m)
        if not math.isfinite(value):
            return GripperDecision(None, f"refused: gripper opening {value} is not finite")
        top = self.limits.gripper_max_m
        clipped = min(max(value, 0.0), top)
        if clipped != value:
            return GripperDecision(
                clipped, f"clipped: gripper opening {value:.4g} m to [0, {top:.4g}] m"
            )
        return GripperDecision(value)

    def gripper_allowed(self) -> bool:
        """Whether gripper commands may pass (not while e-stopped)."""
        return not self.estopped

    def estop(self, stop: bool) -> GateDecision:
        """Latch (``stop``) or clear the e-stop; on latching, the hold to send once."""
        was = self.estopped
        self.estopped = bool(stop)
        self._last_command_t = None
        if stop and not was and self._pos is not None and self._quat is not None:
            return GateDecision(np.array(self._pos), np.array(self._quat), "hold: estop")
        return GateDecision(None, None, "estop" if stop else "")

    def tick(self, now_s: float) -> GateDecision:
        """Deadlines: the pose going stale, and the watchdog's hold (see the module doc)."""
        last_tick, self._last_tick_t = self._last_tick_t, float(now_s)
        if last_tick is not None and now_s - last_tick > self.stall_s:
            self._resumed_t = float(now_s)  # read what queued during the stall first
            return _NOTHING
        if self._pos is None or self._quat is None:
            return _NOTHING
        age = now_s - self._state_t
        if age > self.state_timeout_s and not self._stale_reported:
            self._stale_reported = True
            self._last_command_t = None  # nothing safe to hold at: stop commanding
            return GateDecision(
                None,
                None,
                f"refused: end-effector pose is {age:.2f} s old (limit {self.state_timeout_s} s)",
            )
        last = self._last_command_t
        if last is None or now_s - max(last, self._resumed_t) <= self.watchdog_s:
            return _NOTHING
        self._last_command_t = None  # hold once; the next command re-arms the watchdog
        return GateDecision(
            np.array(self._pos),
            np.array(self._quat),
            f"hold: watchdog ({now_s - last:.2f} s without a command)",
        )


def _bad_target(pos: NDArray[np.float64], quat: NDArray[np.float64]) -> str:
    """Why a target was held: non-finite numbers, or a zero quaternion."""
    if not np.all(np.isfinite(pos)):
        return f"target position {_fmt(tuple(pos.tolist()))} is not finite"
    if not np.all(np.isfinite(quat)):
        return f"target quaternion {_fmt(tuple(quat.tolist()))} is not finite"
    return (
        f"target quaternion {_fmt(tuple(quat.tolist()))} is zero: send a unit quaternion "
        "(w, x, y, z)"
    )
