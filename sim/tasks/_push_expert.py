"""Scripted pushing expert: get behind the puck, lower, push along the puck-goal line.

The planner works on positions only (the pusher, i.e. the closed gripper's tool point, the puck
centre and the goal, all from the observation) and returns a base-frame translation increment
in metres. Phases:

1. ``approach``: fly at ``safe_z_m`` to a point ``standoff_m`` behind the puck on the line from
   the goal through the puck (rise first when low and close to the puck, so it is not knocked).
2. ``lower``: descend to ``push_z_m`` there.
3. ``push``: track the contact point behind the puck, aimed slightly into it, so the pusher
   keeps re-centring behind a puck that drifts sideways (a round puck moves along the line
   from the contact point through its centre). When the pusher gets beside or ahead of the
   puck it goes back to ``approach`` (re-approach when off course).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PushExpertParams:
    """Tuning of the scripted pushing expert (all lengths in metres)."""

    puck_radius_m: float = 0.03
    """Radius of the pushed puck."""
    pusher_half_width_m: float = 0.012
    """Half-width of the closed fingers seen from the puck."""
    safe_z_m: float = 0.07
    """Tool height for moving over the table without touching the puck."""
    push_z_m: float = 0.018
    """Tool height while pushing (fingertips just above the table)."""
    standoff_m: float = 0.015
    """Gap between pusher and puck at the start of a push."""
    bite_m: float = 0.03
    """How far into the puck the pushing target is placed (sets the pushing speed)."""
    max_lateral_frac: float = 0.6
    """Re-approach when the pusher is off the line by more than this fraction of the radius."""
    arrive_tol_m: float = 0.006
    """x/y distance to the start point that ends the approach."""


class PushPlanner:
    """State machine over positions; see the module docstring.

    Args:
        params: tuning; the puck radius must match the task's.
    """

    def __init__(self, params: PushExpertParams | None = None) -> None:
        self.params = params or PushExpertParams()
        self.reset()

    def reset(self) -> None:
        """Start the next episode from the approach phase."""
        self.phase = "approach"

    def __call__(self, tool_m: np.ndarray, puck_m: np.ndarray, goal_m: np.ndarray) -> np.ndarray:
        """Translation increment (m, base frame) for the current tool, puck and goal positions."""
        p = self.params
        to_goal = goal_m[:2] - puck_m[:2]
        dist = float(np.linalg.norm(to_goal))
        u = to_goal / max(dist, 1e-9)
        normal = np.array([-u[1], u[0]])
        rel = tool_m[:2] - puck_m[:2]
        contact = p.puck_radius_m + p.pusher_half_width_m
        if self.phase == "push" and (
            rel @ u > -0.5 * contact or abs(rel @ normal) > p.max_lateral_frac * p.puck_radius_m
        ):
            self.phase = "approach"
        start = puck_m[:2] - u * (contact + p.standoff_m)
        if self.phase == "approach":
            delta = self._approach(tool_m, start, float(np.linalg.norm(rel)), contact)
            if delta is not None:
                return delta
            self.phase = "lower"
        if self.phase == "lower":
            if tool_m[2] - p.push_z_m > 0.005:
                return np.r_[start - tool_m[:2], p.push_z_m - tool_m[2]]
            self.phase = "push"
        target = puck_m[:2] - u * (contact - min(p.bite_m, dist))
        return np.r_[target - tool_m[:2], p.push_z_m - tool_m[2]]

    def _approach(
        self, tool_m: np.ndarray, start: np.ndarray, puck_dist_m: float, contact: float
    ) -> np.ndarray | None:
        """Increment towards the start point, or None once there."""
        p = self.params
        xy_err = start - tool_m[:2]
        err = float(np.linalg.norm(xy_err))
        near_puck = puck_dist_m < contact + 0.03
        if err > 0.015 and near_puck and tool_m[2] < p.safe_z_m - 0.015:
            return np.array([0.0, 0.0, p.safe_z_m - tool_m[2]])  # rise before moving sideways
        if err > p.arrive_tol_m:
            z = p.safe_z_m if near_puck or err > 0.03 else p.push_z_m
            return np.r_[xy_err, z - tool_m[2]]
        return None
