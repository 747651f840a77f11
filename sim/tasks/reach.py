"""reach: move the gripper's tool centre point to a random target in the workspace.

Observation keys: ``proprio`` and ``goal`` (target position, m, base frame). Success: the tool
centre point is within ``success_tolerance_m`` of the goal; it terminates the episode by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from handrail.sim.base import PROPRIO_SLICES, ArmEnv, SimConfig, TaskSpec, expert_action, offset_dm


@dataclass(frozen=True)
class ReachConfig(SimConfig):
    """reach: settings on top of :class:`SimConfig`."""

    episode_steps: int = 50
    """Time limit in env steps (5 s at 10 Hz)."""
    goal_low_m: tuple[float, float, float] = (0.35, -0.2, 0.08)
    """Lower corner of the box goals are drawn from (m, base frame)."""
    goal_high_m: tuple[float, float, float] = (0.65, 0.2, 0.4)
    """Upper corner of the goal box (m)."""
    success_tolerance_m: float = 0.02
    """Success when the tool centre point is this close to the goal (m)."""
    distance_weight_1_m: float = 1.0
    """Dense reward: -distance_weight_1_m * distance (m) per step, 1.0 on success."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(lo > hi for lo, hi in zip(self.goal_low_m, self.goal_high_m, strict=True)):
            raise ValueError(
                f"goal_low_m {self.goal_low_m} must be <= goal_high_m {self.goal_high_m}"
            )
        if self.success_tolerance_m <= 0:
            raise ValueError(f"success_tolerance_m must be > 0, got {self.success_tolerance_m}")


class ReachEnv(ArmEnv):
    """Move the gripper to a random goal (shown as a green sphere)."""

    config_cls = ReachConfig
    config: ReachConfig

    def scene_fragments(self) -> dict[str, str]:
        """A mocap body marking the goal (no collisions): opaque and 5 cm across, so that a
        32x32 front camera shows it in a few pixels wherever it is."""
        return {
            "worldbody": '<body name="goal" mocap="true" pos="0.5 0 0.3"><geom type="sphere"'
            ' size="0.025" rgba="0.1 0.8 0.2 1" contype="0" conaffinity="0"/></body>'
        }

    def front_view(self) -> tuple[Any, Any]:
        """Back and up from the table's view, onto the goal box's centre: goals reach 0.4 m
        up, and from the table's view 15 of 40 were out of the frame."""
        return (1.1, 0.0, 0.5), (0.5, 0.0, 0.22)

    def task_spaces(self) -> dict[str, spaces.Box]:
        """The goal position (m) and the goal relative to the tool centre point (dm)."""
        box = spaces.Box(-np.inf, np.inf, (3,), np.float32)
        return {"goal": box, "goal_from_tcp_dm": box}

    def reset_task(self, rng: np.random.Generator) -> None:
        """Draw a goal uniformly in the goal box."""
        self.data.mocap_pos[0] = rng.uniform(self.config.goal_low_m, self.config.goal_high_m)

    def task_obs(self) -> dict[str, np.ndarray]:
        """The goal position and its offset from the tool centre point."""
        goal = self.data.mocap_pos[0].copy()
        return {"goal": goal, "goal_from_tcp_dm": offset_dm(goal, self._site_pos)}

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The goal point (identity orientation)."""
        return {"goal": (self.data.mocap_pos[0].copy(), np.array([1.0, 0.0, 0.0, 0.0]))}

    def distance_m(self) -> float:
        """Distance from the tool centre point to the goal (m)."""
        return float(np.linalg.norm(self.ee_pos - self.data.mocap_pos[0]))

    def is_success(self) -> bool:
        """Within tolerance of the goal."""
        return self.distance_m() < self.config.success_tolerance_m

    def failure(self) -> str:
        """Near the goal (within 3 tolerances) or far from it."""
        near = self.distance_m() < 3.0 * self.config.success_tolerance_m
        return "stopped near the goal" if near else "stopped far from the goal"

    def dense_reward(self) -> float:
        """1.0 on success, else minus the weighted distance."""
        if self.is_success():
            return 1.0
        return -self.config.distance_weight_1_m * self.distance_m()


class ReachExpert:
    """Moves straight to the goal, slowing down near it; reads only the observation."""

    def __init__(self, config: ReachConfig | None = None, gain: float = 0.7) -> None:
        self.config = config or ReachConfig()
        self.gain = gain

    def reset(self, seed: int | None = None) -> None:
        """Stateless; nothing to reset."""

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Action towards the goal, with the gripper open."""
        proprio = obs["proprio"].astype(np.float64)
        ee, quat = proprio[PROPRIO_SLICES["ee_pos_m"]], proprio[PROPRIO_SLICES["ee_quat_wxyz"]]
        delta = self.gain * (obs["goal"].astype(np.float64) - ee)
        return expert_action(self.config, quat, delta, gripper=-1.0)


TASK = TaskSpec("reach", ReachConfig, ReachEnv, ReachExpert)
