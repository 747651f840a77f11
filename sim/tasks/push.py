"""push: push a puck across the table into a goal region with the closed gripper.

The puck (a short cylinder) slides on the table with Coulomb friction (``puck_friction``, set on
the puck by geom priority so it holds against both table and fingers): it stops within a few
millimetres when no longer pushed, turns and drifts sideways when pushed off its centre line,
and a heavier or grippier puck needs more force. The arm cannot lift it (the fingers are not
meant to grasp a 6 cm puck; the goal is on the table anyway).

Observation keys: ``proprio``; ``object`` (puck centre position, m); ``goal`` (goal centre on the
table top, m). Success: the puck's centre is within ``success_radius_m`` of the goal in the
table plane; it terminates the episode by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from gymnasium import spaces

from handrail.sim.base import PROPRIO_SLICES, ArmEnv, SimConfig, TaskSpec, offset_dm
from handrail.sim.tasks._checks import check_region
from handrail.sim.tasks._push_expert import PushExpertParams, PushPlanner
from handrail.sim.tasks._tracking import TargetTracker


@dataclass(frozen=True)
class PushConfig(SimConfig):
    """push: settings on top of :class:`SimConfig`."""

    episode_steps: int = 100
    """Time limit in env steps (10 s at 10 Hz)."""
    puck_radius_m: float = 0.03
    """Puck radius (m)."""
    puck_half_height_m: float = 0.02
    """Half the puck's height (m)."""
    puck_mass_kg: float = 0.2
    """Puck mass (kg)."""
    puck_friction: float = 0.5
    """Sliding friction coefficient of the puck against the table and the fingers."""
    puck_low_m: tuple[float, float] = (0.4, -0.15)
    """Lower xy corner of the region the puck starts in (m)."""
    puck_high_m: tuple[float, float] = (0.6, 0.15)
    """Upper xy corner of the puck's start region (m)."""
    goal_low_m: tuple[float, float] = (0.4, -0.15)
    """Lower xy corner of the region the goal is drawn from (m)."""
    goal_high_m: tuple[float, float] = (0.6, 0.15)
    """Upper xy corner of the goal region (m)."""
    min_goal_distance_m: float = 0.08
    """The goal is drawn at least this far from the puck's start (m)."""
    success_radius_m: float = 0.03
    """Success when the puck's centre is this close to the goal in the table plane (m)."""
    pusher_weight_1_m: float = 0.5
    """Dense reward: minus this times the tool-to-puck distance (m)."""
    goal_weight_1_m: float = 1.0
    """Dense reward: minus this times the puck-to-goal distance (m)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.01 <= self.puck_radius_m <= 0.06:
            raise ValueError(f"puck_radius_m must be in [0.01, 0.06] m; got {self.puck_radius_m}")
        if not 0.01 <= self.puck_half_height_m <= 0.03:
            raise ValueError(
                "puck_half_height_m must be in [0.01, 0.03] m (below the palm at pushing "
                f"height); got {self.puck_half_height_m}"
            )
        if self.puck_mass_kg <= 0 or self.puck_friction <= 0:
            raise ValueError(
                f"puck_mass_kg and puck_friction must be > 0; got {self.puck_mass_kg}, "
                f"{self.puck_friction}"
            )
        if self.success_radius_m <= 0 or self.min_goal_distance_m < 0:
            raise ValueError("success_radius_m must be > 0 and min_goal_distance_m >= 0")
        check_region("puck", self.puck_low_m, self.puck_high_m, self.safety)
        check_region("goal", self.goal_low_m, self.goal_high_m, self.safety)
        span = np.hypot(*np.subtract(self.goal_high_m, self.goal_low_m))
        if self.min_goal_distance_m > span:
            raise ValueError(
                f"min_goal_distance_m ({self.min_goal_distance_m}) exceeds the goal region's "
                f"diagonal ({span:.3f} m); lower it or widen goal_low_m/goal_high_m"
            )


class PushEnv(ArmEnv):
    """Push a puck into a goal region (a flat green disc, no collisions)."""

    config_cls = PushConfig
    config: PushConfig

    def scene_fragments(self) -> dict[str, str]:
        """A free puck and a mocap goal marker."""
        cfg = self.config
        r, h = cfg.puck_radius_m, cfg.puck_half_height_m
        return {
            "worldbody": f'<body name="puck" pos="0.5 0 {h}"><freejoint name="puck"/>'
            f'<geom name="puck" type="cylinder" size="{r} {h}" mass="{cfg.puck_mass_kg}"'
            f' friction="{cfg.puck_friction} 0.005 0.0001" priority="1"'
            ' rgba="0.85 0.35 0.15 1"/></body>'
            '<body name="goal" mocap="true" pos="0.5 0 0"><geom type="cylinder"'
            f' size="{cfg.success_radius_m} 0.0005" pos="0 0 0.0005" rgba="0.1 0.8 0.2 0.5"'
            ' contype="0" conaffinity="0"/></body>'
        }

    def task_spaces(self) -> dict[str, spaces.Box]:
        """Puck and goal positions (m); the puck from the tool and the goal from the puck (dm)."""
        box = spaces.Box(-np.inf, np.inf, (3,), np.float32)
        return {"object": box, "goal": box, "puck_from_tcp_dm": box, "goal_from_puck_dm": box}

    def reset_task(self, rng: np.random.Generator) -> None:
        """Puck at random, upright; goal at random at least ``min_goal_distance_m`` away."""
        cfg = self.config
        adr = self.model.joint("puck").qposadr[0]
        puck = rng.uniform(cfg.puck_low_m, cfg.puck_high_m)
        self.data.qpos[adr : adr + 3] = (puck[0], puck[1], cfg.puck_half_height_m)
        self.data.qpos[adr + 3 : adr + 7] = (1.0, 0.0, 0.0, 0.0)
        goals = rng.uniform(cfg.goal_low_m, cfg.goal_high_m, size=(256, 2))
        far = np.linalg.norm(goals - puck, axis=1) >= cfg.min_goal_distance_m
        # Fallback when no draw is far enough: the far corner of the goal region.
        corners = np.array(
            [
                [x, y]
                for x in (cfg.goal_low_m[0], cfg.goal_high_m[0])
                for y in (cfg.goal_low_m[1], cfg.goal_high_m[1])
            ]
        )
        goal = (
            goals[np.argmax(far)]
            if far.any()
            else corners[np.argmax(np.linalg.norm(corners - puck, axis=1))]
        )
        self.data.mocap_pos[self.model.body("goal").mocapid[0]] = (goal[0], goal[1], 0.0)
        self._puck_start_xy = puck.copy()
        self._start_goal_distance_m = float(np.linalg.norm(goal - puck))

    def puck_pos(self) -> np.ndarray:
        """Puck centre (m)."""
        adr = self.model.joint("puck").qposadr[0]
        return self.data.qpos[adr : adr + 3].copy()

    def goal_pos(self) -> np.ndarray:
        """Goal centre on the table top (m)."""
        return self.data.mocap_pos[self.model.body("goal").mocapid[0]].copy()

    def task_obs(self) -> dict[str, np.ndarray]:
        """Puck and goal positions, and the offsets tool -> puck -> goal."""
        puck, goal = self.puck_pos(), self.goal_pos()
        return {"object": puck, "goal": goal, "puck_from_tcp_dm": offset_dm(puck, self._site_pos),
                "goal_from_puck_dm": offset_dm(goal, puck)}  # fmt: skip

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Puck and goal positions (identity orientation: only positions are observed)."""
        unit = np.array([1.0, 0.0, 0.0, 0.0])
        return {
            "puck": (self.puck_pos().copy(), unit),
            "goal": (self.goal_pos().copy(), unit.copy()),
        }

    def goal_distance_m(self) -> float:
        """Puck-to-goal distance in the table plane (m)."""
        return float(np.linalg.norm((self.puck_pos() - self.goal_pos())[:2]))

    def is_success(self) -> bool:
        """The puck's centre is inside the goal region."""
        return self.goal_distance_m() < self.config.success_radius_m

    MOVED_M: ClassVar[float] = 0.01
    """:meth:`failure`: a puck this far from where it started was pushed."""
    _puck_start_xy: np.ndarray = np.zeros(2)
    _start_goal_distance_m: float = 0.0

    def failure(self) -> str:
        """Where the puck stopped: where it started, nearer the goal than it started, or not."""
        puck = self.puck_pos()[:2]
        if float(np.linalg.norm(puck - self._puck_start_xy)) < self.MOVED_M:
            return "puck not moved"
        if self.goal_distance_m() < self._start_goal_distance_m:
            return "puck pushed, short of the goal"
        return "puck pushed, no nearer the goal"

    def dense_reward(self) -> float:
        """1 on success, else minus weighted tool-to-puck and puck-to-goal distances."""
        if self.is_success():
            return 1.0
        cfg = self.config
        reach = float(np.linalg.norm(self.ee_pos - self.puck_pos()))
        return -cfg.pusher_weight_1_m * reach - cfg.goal_weight_1_m * self.goal_distance_m()


class PushExpert:
    """Gets behind the puck, lowers, pushes along the puck-goal line, re-approaches if off.

    Reads only the observation (``proprio``, ``object``, ``goal``); see :mod:`._push_expert`.
    """

    def __init__(self, config: PushConfig | None = None) -> None:
        self.config = config or PushConfig()
        self.planner = PushPlanner(PushExpertParams(puck_radius_m=self.config.puck_radius_m))
        self.tracker = TargetTracker(self.config)

    def reset(self, seed: int | None = None) -> None:
        """Start a new episode (deterministic: the seed is not needed)."""
        self.planner.reset()
        self.tracker.reset()

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Next action, with the gripper closed so the fingers form a pusher."""
        proprio = obs["proprio"].astype(np.float64)
        ee = proprio[PROPRIO_SLICES["ee_pos_m"]]
        puck, goal = obs["object"].astype(np.float64), obs["goal"].astype(np.float64)
        delta = self.planner(ee, puck, goal)
        return self.tracker.action(proprio, ee + delta, None, gripper=1.0)


TASK = TaskSpec("push", PushConfig, PushEnv, PushExpert)
