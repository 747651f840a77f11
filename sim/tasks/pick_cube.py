"""pick_cube: grasp a cube placed at random on the table and lift it.

Observation keys: ``proprio`` and ``object`` (cube position (m) and quaternion w, x, y, z; base
frame). Success: the cube's centre is at least ``lift_height_m`` above its resting height; it
terminates the episode by default. The action includes a yaw increment so the gripper can align
with the cube's faces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from gymnasium import spaces

from handrail.control.spaces import ActionConfig
from handrail.control.transforms import yaw_from_quat
from handrail.sim.base import PROPRIO_SLICES, ArmEnv, SimConfig, TaskSpec, expert_action, offset_dm


@dataclass(frozen=True)
class PickCubeConfig(SimConfig):
    """pick_cube: settings on top of :class:`SimConfig`."""

    episode_steps: int = 100
    """Time limit in env steps (10 s at 10 Hz)."""
    action: ActionConfig = field(default_factory=lambda: ActionConfig(rotation="yaw"))
    """xyz + yaw increments and the gripper command."""
    cube_half_size_m: float = 0.02
    """Half the cube's edge (m)."""
    cube_mass_kg: float = 0.05
    """Cube mass (kg)."""
    cube_low_m: tuple[float, float] = (0.4, -0.15)
    """Lower xy corner of the region the cube is placed in (m)."""
    cube_high_m: tuple[float, float] = (0.6, 0.15)
    """Upper xy corner of the placement region (m)."""
    cube_yaw_range_rad: float = np.pi / 4
    """The cube's yaw is drawn uniformly from +- this (rad)."""
    lift_height_m: float = 0.10
    """Success when the cube is this far above its resting height (m)."""
    reach_scale_1_m: float = 10.0
    """Dense reward: reach term 1 - tanh(reach_scale_1_m * gripper-to-cube distance (m))."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(lo > hi for lo, hi in zip(self.cube_low_m, self.cube_high_m, strict=True)):
            raise ValueError(
                f"cube_low_m {self.cube_low_m} must be <= cube_high_m {self.cube_high_m}"
            )
        if not 0 < self.cube_half_size_m < 0.038:
            raise ValueError("cube_half_size_m must be in (0, 0.038) so the gripper (8 cm) fits it")
        if self.lift_height_m <= 0 or self.cube_mass_kg <= 0:
            raise ValueError("lift_height_m and cube_mass_kg must be > 0")


class PickCubeEnv(ArmEnv):
    """Lift a randomly placed cube by ``lift_height_m``."""

    config_cls = PickCubeConfig
    config: PickCubeConfig

    def scene_fragments(self) -> dict[str, str]:
        """A free-floating cube."""
        h, mass = self.config.cube_half_size_m, self.config.cube_mass_kg
        return {
            "worldbody": f'<body name="cube" pos="0.5 0 {h}"><freejoint name="cube"/>'
            f'<geom name="cube" type="box" size="{h} {h} {h}" mass="{mass}" rgba="0.85 0.2 0.2 1"'
            ' friction="1.5 0.02 0.002" condim="4"/></body>'
        }

    def task_spaces(self) -> dict[str, spaces.Box]:
        """Cube pose and the cube's position relative to the tool centre point (dm)."""
        return {
            "object": spaces.Box(-np.inf, np.inf, (7,), np.float32),
            "cube_from_tcp_dm": spaces.Box(-np.inf, np.inf, (3,), np.float32),
        }

    def reset_task(self, rng: np.random.Generator) -> None:
        """Place the cube flat at a random xy and yaw."""
        cfg = self.config
        adr = self.model.joint("cube").qposadr[0]
        xy = rng.uniform(cfg.cube_low_m, cfg.cube_high_m)
        yaw = rng.uniform(-cfg.cube_yaw_range_rad, cfg.cube_yaw_range_rad)
        self.data.qpos[adr : adr + 3] = (xy[0], xy[1], cfg.cube_half_size_m)
        self.data.qpos[adr + 3 : adr + 7] = (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))

    def _cube(self) -> np.ndarray:
        adr = self.model.joint("cube").qposadr[0]
        return self.data.qpos[adr : adr + 7]

    def task_obs(self) -> dict[str, np.ndarray]:
        """Cube position and quaternion, and its offset from the tool centre point."""
        cube = self._cube().copy()
        return {"object": cube, "cube_from_tcp_dm": offset_dm(cube[:3], self._site_pos)}

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The cube."""
        cube = self._cube().copy()
        return {"cube": (cube[:3], cube[3:])}

    def lift_m(self) -> float:
        """Height of the cube above its resting height (m)."""
        return float(self._cube()[2] - self.config.cube_half_size_m)

    def is_success(self) -> bool:
        """The cube is lifted high enough."""
        return self.lift_m() >= self.config.lift_height_m

    LIFTED_M: ClassVar[float] = 0.01
    """:meth:`failure`: a cube this far above its resting height is off the table."""
    AT_CUBE_M: ClassVar[float] = 0.03
    """:meth:`failure`: a tool centre point this close to the cube's centre is at it."""
    ABOVE_M: ClassVar[float] = 0.05
    """:meth:`failure`: a tool centre point this far above the cube has risen without it."""

    def failure(self) -> str:
        """Where the cube stopped: lifted but not ``lift_height_m``, or on the table with the
        gripper above it, at it, or beside it."""
        if self.lift_m() >= self.LIFTED_M:
            return "cube lifted, not high enough"
        offset = self._site_pos - self._cube()[:3]
        if offset[2] > self.ABOVE_M:
            return "gripper above the cube, not holding it"
        if float(np.linalg.norm(offset)) <= self.AT_CUBE_M:
            return "cube on the table, gripper at it"
        return "cube on the table, gripper beside it"

    def dense_reward(self) -> float:
        """1 on success, else 0.5 * reach term + 0.5 * lifted fraction."""
        if self.is_success():
            return 1.0
        dist = float(np.linalg.norm(self.ee_pos - self._cube()[:3]))
        reach = 1.0 - np.tanh(self.config.reach_scale_1_m * dist)
        lifted = np.clip(self.lift_m() / self.config.lift_height_m, 0.0, 1.0)
        return float(0.5 * reach + 0.5 * lifted)


def _wrap_quarter(angle_rad: float) -> float:
    """Wrap to [-pi/4, pi/4): a cube looks the same every quarter turn."""
    return float((angle_rad + np.pi / 4) % (np.pi / 2) - np.pi / 4)


class PickCubeExpert:
    """Hover, align yaw, descend, close, lift; re-tries if the cube slips. Reads only obs."""

    HOVER_M = 0.08
    GAIN = 0.7

    def __init__(self, config: PickCubeConfig | None = None) -> None:
        self.config = config or PickCubeConfig()
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        """Start again from the approach phase."""
        self._phase = "approach"
        self._closing_steps = 0

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Next action of the pick sequence."""
        proprio = obs["proprio"].astype(np.float64)
        ee, quat = proprio[PROPRIO_SLICES["ee_pos_m"]], proprio[PROPRIO_SLICES["ee_quat_wxyz"]]
        cube = obs["object"].astype(np.float64)
        pos, h = cube[:3], self.config.cube_half_size_m
        dyaw = _wrap_quarter(float(yaw_from_quat(cube[3:])) - float(yaw_from_quat(quat)))
        err = pos - ee
        gripper = -1.0
        if self._phase == "approach":
            goal = pos + np.array([0.0, 0.0, self.HOVER_M])
            if np.linalg.norm((goal - ee)[:2]) < 0.008 and abs(dyaw) < 0.05:
                self._phase = "descend"
        if self._phase == "descend":
            goal = pos.copy()
            if abs(err[2]) < 0.006 and np.linalg.norm(err[:2]) < 0.01:
                self._phase, self._closing_steps = "grasp", 0
        if self._phase in ("grasp", "lift"):
            gripper = 1.0
            goal = ee.copy()
            self._closing_steps += 1
            if self._closing_steps > 3:
                self._phase = "lift"
                goal = np.array([pos[0], pos[1], h + self.config.lift_height_m + 0.08])
            if self._phase == "lift" and np.linalg.norm(err) > 2 * h:
                self._phase = "approach"  # the cube slipped: start over
                gripper = -1.0
        delta = self.GAIN * (goal - ee)
        return expert_action(self.config, quat, delta, (0.0, 0.0, self.GAIN * dyaw), gripper)


TASK = TaskSpec("pick_cube", PickCubeConfig, PickCubeEnv, PickCubeExpert)
