"""The gate every motion command to an arm passes: e-stop latch, start-up check, watchdog, filter.

:class:`SafetyGate` is the decision logic of ``hw/safety_node`` (pure, clock-injected: the node
only feeds it messages and the time, and publishes what it returns):

- **E-stop**: :meth:`SafetyGate.estop` latches a stop; while latched every command is dropped
  and the arm is sent, once, its pose at the moment of the stop (hold). Only an explicit clear
  releases it; after a clear the next command is step-limited from the measured pose, so the arm
  never jumps to a target that was commanded before the stop.
- **Start-up and state check**: no motion while the newest measured pose is missing, older than
  ``state_timeout_s``, non-finite, or outside the workspace box (a robot started outside it must
  be moved back by hand, not by a policy).
- **Filter**: otherwise the target goes through :class:`~handrail.control.safety.SafetyFilter`
  (box, step, tilt and twist limits) against the measured pose.
- **Watchdog**: when commands stop for ``watchdog_s`` while the arm was being commanded, the
  gate returns one hold at the measured pose (the arm stops where it is instead of finishing the
  last, possibly stale, step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from handrail.control.safety import SafetyFilter, SafetyLimits

__all__ = ["GateDecision", "SafetyGate"]

_BOX_SLACK_M = 0.005  # a measured pose this close outside the box still counts as inside


@dataclass(frozen=True)
class GateDecision:
    """What to send the arm: a target pose or nothing, and why (empty when forwarded as is)."""

    pos_m: NDArray[np.float64] | None
    quat_wxyz: NDArray[np.float64] | None
    reason: str = ""
    """"" (forwarded unchanged), "clipped: ...", "estop", "hold: ...", "refused: ..."."""

    @property
    def send(self) -> bool:
        """Whether a target goes to the arm."""
        return self.pos_m is not None


_DROP = GateDecision(None, None, "estop")


class SafetyGate:
    """E-stop latch, start-up check, safety filter and watchdog for one arm (see module doc).

    Args:
        limits: the workspace and step limits.
        watchdog_s: hold the arm when no command came for this long (s) while it was commanded.
        state_timeout_s: a measured pose older than this (s) stops motion.
    """

    def __init__(self, limits: SafetyLimits, watchdog_s: float = 0.5, state_timeout_s: float = 0.5):
        if not (watchdog_s > 0 and state_timeout_s > 0):
            raise ValueError(
                f"watchdog_s ({watchdog_s}) and state_timeout_s ({state_timeout_s}) must be > 0 s"
            )
        self.limits = limits
        self.filter = SafetyFilter(limits)
        self.watchdog_s = float(watchdog_s)
        self.state_timeout_s = float(state_timeout_s)
        self.estopped = False
        self._pos: tuple[float, float, float] | None = None
        self._quat: tuple[float, float, float, float] | None = None
        self._state_t = -math.inf
        self._last_command_t: float | None = None

    # ----- inputs -----------------------------------------------------------------------------
    def on_state(self, pos_m: ArrayLike, quat_wxyz: ArrayLike, now_s: float) -> None:
        """The newest measured end-effector pose (base frame) at time ``now_s``."""
        p = tuple(float(v) for v in np.asarray(pos_m, np.float64).reshape(3))
        q = tuple(float(v) for v in np.asarray(quat_wxyz, np.float64).reshape(4))
        self._pos, self._quat = (p[0], p[1], p[2]), (q[0], q[1], q[2], q[3])
        self._state_t = float(now_s)

    def state_problem(self, now_s: float) -> str:
        """Why the arm may not move now ("" when it may)."""
        if self._pos is None or self._quat is None:
            return "no end-effector pose received yet"
        age = now_s - self._state_t
        if age > self.state_timeout_s:
            return f"end-effector pose is {age:.2f} s old (limit {self.state_timeout_s} s)"
        if not all(math.isfinite(v) for v in (*self._pos, *self._quat)):
            return "end-effector pose is not finite"
        low, high = self.limits.workspace_low_m, self.limits.workspace_high_m
        outside = [
            f"{axis}={p:.3f} not in [{lo}, {hi}]"
            for axis, p, lo, hi in zip("xyz", self._pos, low, high, strict=True)
            if not lo - _BOX_SLACK_M <= p <= hi + _BOX_SLACK_M
        ]
        if outside:
            return (
                "end effector is outside the workspace box (" + ", ".join(outside) + "): move "
                "the arm into the box by hand before commanding it"
            )
        return ""

    def command(self, pos_m: ArrayLike, quat_wxyz: ArrayLike, now_s: float) -> GateDecision:
        """A wanted target: what to send the arm instead (possibly nothing)."""
        if self.estopped:
            return _DROP
        problem = self.state_problem(now_s)
        if problem:
            self._last_command_t = None
            return GateDecision(None, None, f"refused: {problem}")
        assert self._pos is not None and self._quat is not None
        pos, quat, report = self.filter.filter(self._pos, self._quat, pos_m, quat_wxyz)
        self._last_command_t = float(now_s)
        flags = [name for name, on in report.as_dict().items() if on]
        return GateDecision(pos, quat, f"clipped: {', '.join(flags)}" if flags else "")

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
        """Watchdog: a hold at the measured pose when commands stopped for ``watchdog_s``."""
        last = self._last_command_t
        if last is None or now_s - last <= self.watchdog_s or self._pos is None:
            return GateDecision(None, None)
        self._last_command_t = None  # hold once; the next command re-arms the watchdog
        assert self._quat is not None
        return GateDecision(
            np.array(self._pos),
            np.array(self._quat),
            f"hold: watchdog ({now_s - last:.2f} s without a command)",
        )
