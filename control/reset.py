"""Reset sequencing for a real or simulated arm (pure, clock-injected; ``hw/reset_node`` runs it).

A reset goes through phases, each with its own deadline, and either ends ``done`` or ``failed``
with a message saying which phase did not finish and what was measured:

1. ``world`` (only with a world to reset, e.g. ``sim_robot``): wait for the world reset call.
   It comes first because it moves the arm too (``sim_robot`` puts it near its home).
2. ``home``: command the home pose plus a uniform random offset (up to ``home_offset_m`` per
   axis) until the measured tool position is within ``tolerance_m`` of it. The commands go through
   the safety filter like any other, so the arm moves home at the step limit. A latched e-stop
   fails the reset at once (nothing can move the arm until a person clears it).
3. ``operator`` (only when ``wait_for_operator``): wait until a person confirms the scene.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["ResetConfig", "ResetSequence", "ResetStatus"]

Phase = Literal["home", "world", "operator", "done", "failed"]

_ESTOP = (
    "the e-stop is latched, so the arm cannot be homed: clear it (safety_node's ~/estop service "
    "with data: false) and reset again"
)


@dataclass(frozen=True)
class ResetConfig:
    """Where home is and how long each phase may take."""

    home_pos_m: tuple[float, float, float] = (0.31, 0.0, 0.48)
    """Tool position at home (m, base frame; default: the simulated arm's home)."""
    home_quat_wxyz: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 0.0)
    """Tool orientation at home (gripper pointing down)."""
    home_offset_m: float = 0.0
    """Uniform random offset added to each axis of the home position (m)."""
    tolerance_m: float = 0.01
    """Home is reached when the tool is this close (m)."""
    home_timeout_s: float = 20.0
    """Deadline of the home phase (s)."""
    world: bool = False
    """Whether a world reset follows (sim_robot)."""
    wait_for_operator: bool = False
    """Whether a person must confirm before the episode starts."""
    operator_timeout_s: float = 120.0
    """Deadline of the operator phase (s)."""
    world_timeout_s: float = 10.0
    """Deadline of the world phase (s)."""

    def __post_init__(self) -> None:
        if len(self.home_pos_m) != 3 or len(self.home_quat_wxyz) != 4:
            raise ValueError("home_pos_m needs 3 numbers (m) and home_quat_wxyz 4 (w, x, y, z)")
        if not np.isclose(np.linalg.norm(self.home_quat_wxyz), 1.0, atol=1e-3):
            raise ValueError(f"home_quat_wxyz must be a unit quaternion; got {self.home_quat_wxyz}")
        if self.home_offset_m < 0 or self.tolerance_m <= 0:
            raise ValueError("home_offset_m must be >= 0 and tolerance_m > 0 (m)")
        if min(self.home_timeout_s, self.operator_timeout_s, self.world_timeout_s) <= 0:
            raise ValueError("the reset timeouts must be > 0 s")


@dataclass(frozen=True)
class ResetStatus:
    """Where the sequence is, and the pose to command while homing."""

    phase: Phase
    target_pos_m: NDArray[np.float64] | None = None
    target_quat_wxyz: NDArray[np.float64] | None = None
    message: str = ""


class ResetSequence:
    """One reset at a time (see the module doc). ``start``, then ``update`` until finished."""

    def __init__(self, config: ResetConfig) -> None:
        self.config = config
        self.phase: Phase = "done"
        self._goal = np.asarray(config.home_pos_m, np.float64)
        self._deadline = 0.0
        self.message = ""

    @property
    def finished(self) -> bool:
        """Whether the last reset ended (done or failed)."""
        return self.phase in ("done", "failed")

    @property
    def goal_m(self) -> NDArray[np.float64]:
        """This reset's home position (home + offset)."""
        return self._goal.copy()

    def start(self, now_s: float, rng: np.random.Generator, estopped: bool = False) -> ResetStatus:
        """Begin a reset: draw this episode's home offset; fail at once while ``estopped``."""
        c = self.config
        offset = (
            rng.uniform(-c.home_offset_m, c.home_offset_m, 3) if c.home_offset_m else np.zeros(3)
        )
        self._goal = np.asarray(c.home_pos_m, np.float64) + offset
        if estopped:
            self._fail(_ESTOP)
        elif c.world:
            self._enter("world", now_s + c.world_timeout_s)
        else:
            self._enter("home", now_s + c.home_timeout_s)
        return self._status()

    def update(
        self, now_s: float, measured_pos_m: ArrayLike | None, estopped: bool = False
    ) -> ResetStatus:
        """Advance with the measured tool position (None: none received yet) and whether the
        e-stop is latched."""
        c = self.config
        if self.phase == "home" and estopped:
            self._fail(_ESTOP)
        elif self.phase == "home":
            dist = (
                np.inf
                if measured_pos_m is None
                else float(np.linalg.norm(np.asarray(measured_pos_m) - self._goal))
            )
            if dist <= c.tolerance_m:
                self._after_home(now_s)
            elif now_s > self._deadline:
                seen = "no pose received" if measured_pos_m is None else f"still {dist:.3f} m away"
                self._fail(
                    f"the arm did not reach home within {c.home_timeout_s} s ({seen}; tolerance "
                    f"{c.tolerance_m} m): is the arm blocked, or refused by safety_node "
                    "(see safety_events)?"
                )
        elif self.phase == "world" and now_s > self._deadline:
            self._fail(f"the world reset did not finish within {c.world_timeout_s} s")
        elif self.phase == "operator" and now_s > self._deadline:
            self._fail(f"no operator confirmed the scene within {c.operator_timeout_s} s")
        return self._status()

    def world_done(self, now_s: float, ok: bool = True, message: str = "") -> ResetStatus:
        """The world reset finished (``ok``) or failed."""
        if self.phase == "world":
            if ok:
                self._enter("home", now_s + self.config.home_timeout_s)
            else:
                self._fail(f"the world reset failed: {message}")
        return self._status()

    def confirm(self) -> bool:
        """An operator confirmed the scene; True when the sequence was waiting for it."""
        if self.phase != "operator":
            return False
        self._enter("done", 0.0)
        return True

    def _after_home(self, now_s: float) -> None:
        if self.config.wait_for_operator:
            self._enter("operator", now_s + self.config.operator_timeout_s)
        else:
            self._enter("done", 0.0)

    def _enter(self, phase: Phase, deadline: float) -> None:
        self.phase, self._deadline, self.message = phase, deadline, ""

    def _fail(self, message: str) -> None:
        self.phase, self.message = "failed", message

    def _status(self) -> ResetStatus:
        if self.phase == "home":
            return ResetStatus(
                "home", self._goal.copy(), np.asarray(self.config.home_quat_wxyz, np.float64)
            )
        return ResetStatus(self.phase, message=self.message)
