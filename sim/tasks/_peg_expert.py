"""Scripted peg-in-hole expert: align above the hole, descend slowly, search on a jam.

The planner works on positions only (the peg tip and the hole's entry point, both from the
observation) and returns a base-frame translation increment in metres. The gripper stays closed.
Strategy, as a careful human operator would do it with a compliant arm:

1. ``align``: bring the tip to ``hover_m`` above the hole centre (fast far away, fine near).
   Below the hover point it decides from where the tip is, not from how it got there: a tip
   on the hole axis, or already inside the hole, descends from there, and a tip within 1 cm of
   the axis and more than 3 mm below the hover point lines up at its height. So the expert
   taking over from another controller (a policy, as the simulated person does) carries on a
   descent instead of lifting the peg back to the hover point first (and a policy imitating it
   does not learn to lift). Its own approach from above ends within 3 mm of the hover point,
   so its demonstrations never take these shortcuts.
2. ``insert``: descend ``insert_step_m`` per step while servoing x/y onto the hole axis.
3. If the tip stalls above the rim (no downward progress for ``stall_steps`` steps), lift back to
   the hover point and retry at the next point of an Archimedean spiral around the hole axis
   (radius grows by ``spiral_pitch_m`` per turn), the classic blind-search fallback. A retry
   always goes back up to the hover point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PegExpertParams:
    """Tuning of the scripted peg-insertion expert (all lengths in metres)."""

    hover_m: float = 0.015
    """Height of the tip above the hole entry before descending."""
    align_tol_m: float = 0.0005
    """x/y tip error below which the descent starts."""
    inside_tol_m: float = 0.001
    """x/y tip error within which a tip below the entry is inside the hole (half the
    clearance): it carries on down rather than rising to align."""
    fast_step_m: float = 0.03
    """Largest translation per step while moving to the hover point."""
    fine_xy_step_m: float = 0.003
    """Largest x/y correction per step during the descent."""
    insert_step_m: float = 0.006
    """Commanded descent per step (the arm's impedance limits the contact force)."""
    stall_progress_m: float = 0.001
    """Descent per step below which a step counts as stalled."""
    stall_steps: int = 3
    """Consecutive stalled steps above the rim that trigger a retry."""
    spiral_pitch_m: float = 0.0005
    """Growth of the search spiral's radius per turn."""
    spiral_points_per_turn: int = 6
    """Retry points per spiral turn."""


class PegInsertPlanner:
    """State machine over positions; see the module docstring.

    Args:
        params: tuning; defaults suit a 1 mm radial clearance.
    """

    def __init__(self, params: PegExpertParams | None = None) -> None:
        self.params = params or PegExpertParams()
        self.reset()

    def reset(self) -> None:
        """Forget the phase, the stall counter and the spiral progress."""
        self.phase = "align"
        self._retries = 0
        self._backing_off = False  # lifting to the hover point after a jam
        self._stalled = 0
        self._last_tip_z: float | None = None

    def _search_offset(self) -> np.ndarray:
        p = self.params
        if self._retries == 0:
            return np.zeros(2)
        angle = 2.0 * np.pi * self._retries / p.spiral_points_per_turn
        radius = p.spiral_pitch_m * self._retries / p.spiral_points_per_turn
        return radius * np.array([np.cos(angle), np.sin(angle)])

    def hover_step(self, tip_m: np.ndarray, hole_m: np.ndarray) -> np.ndarray:
        """Increment towards the hover point without starting the descent (e.g. while turning)."""
        return self._align(tip_m, hole_m)[0]

    def _align(self, tip_m: np.ndarray, hole_m: np.ndarray) -> tuple[np.ndarray, bool]:
        """Increment towards the hover point, and whether the tip is there."""
        p = self.params
        xy_err = hole_m[:2] + self._search_offset() - tip_m[:2]
        z_err = hole_m[2] + p.hover_m - tip_m[2]
        # on the axis (inside the hole: within half the clearance) at the hover point or, unless
        # backing off after a jam, anywhere below it
        tol = p.align_tol_m if tip_m[2] >= hole_m[2] else p.inside_tol_m
        low_enough = abs(z_err) < 0.003 or (z_err > 0 and not self._backing_off)
        ready = bool(np.max(np.abs(xy_err)) < tol and low_enough)
        above_rim = tip_m[2] >= hole_m[2] + 0.002
        near = np.linalg.norm(xy_err) <= 0.01
        step = p.fine_xy_step_m if near else p.fast_step_m
        if near and z_err > 0.003 and above_rim and not self._backing_off:
            z_err = 0.0  # a few mm off above the entry: line up at this height, then go down
        delta = np.r_[np.clip(xy_err, -step, step), np.clip(z_err, -p.fast_step_m, p.fast_step_m)]
        if not above_rim and np.linalg.norm(xy_err) > 0.002:
            delta[:2] = 0.0  # never sweep sideways below the rim: rise first
        return delta, ready

    def __call__(self, tip_m: np.ndarray, hole_m: np.ndarray) -> np.ndarray:
        """Translation increment (m, base frame) for the current tip and hole-entry positions."""
        p = self.params
        if self.phase == "align":
            delta, ready = self._align(tip_m, hole_m)
            if not ready:
                return delta
            self.phase, self._stalled, self._last_tip_z = "insert", 0, None
            self._backing_off = False
        self._update_stall(tip_m, hole_m)
        if self._stalled >= p.stall_steps:
            self.phase, self._backing_off = "align", True
            self._retries += 1
            return np.array([0.0, 0.0, p.hover_m])
        xy_err = hole_m[:2] + self._search_offset() - tip_m[:2]
        xy = np.clip(xy_err, -p.fine_xy_step_m, p.fine_xy_step_m)
        return np.r_[xy, -p.insert_step_m]

    def _update_stall(self, tip_m: np.ndarray, hole_m: np.ndarray) -> None:
        z = float(tip_m[2])
        above_rim = z > hole_m[2] - 0.002
        if self._last_tip_z is not None and above_rim:
            progressed = self._last_tip_z - z > self.params.stall_progress_m
            self._stalled = 0 if progressed else self._stalled + 1
        else:
            self._stalled = 0
        self._last_tip_z = z
