"""LiftCan: a user's own arm task, written outside ``handrail.sim.tasks`` and trained by name.

A light upright can (a cylinder) stands at a random spot on the table; the arm must grasp it and
lift its centre ``lift_height_m`` (8 cm) above where it stood. Importing this module registers
the env with gymnasium as ``LiftCan-v0``, so both of these build it::

    gymnasium.make("handrail.examples.lift_can:LiftCan-v0")
    handrail train --task handrail.examples.lift_can:LiftCan-v0 --success-key can_lifted

The env is a plain :class:`gymnasium.Env` (:class:`LiftCanEnv`) with its own names, as a user's
env would have; handrail's simulated arm runs inside it (a private :class:`ArmEnv` subclass):

- observation, a Dict of float32 absolute quantities: ``joint_pos_rad`` (7 arm joint angles),
  ``hand_pos_m`` (tool centre point, m, base frame), ``can_pos_m`` (the can's centre, m) and
  ``gripper_ticks`` (the finger opening as a gripper encoder reports it: metres x 10000, so
  0 closed .. 800 open);
- action, a Box in [-1, 1] of 4: x, y, z increments of the hand (1 = 3 cm per step) and the
  gripper (-1 open, +1 closed);
- reward 1.0 on the step the can is lifted, which ends the episode (terminated), else 0.0; the
  episode is cut (truncated) after 80 steps at 10 Hz;
- ``info["can_lifted"]`` (bool) is the success flag, under that key only.

:class:`LiftCanDemonstrator` is a scripted policy that reads only those observation keys;
:func:`record_demos` (or ``python -m handrail.examples.lift_can --out STORE``) records its
successful episodes into a new handrail episode store for ``handrail train --demos STORE``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

from handrail.control.step import ActedBy, Step
from handrail.demos import EpisodeRecorder, FieldSpec
from handrail.sim import arm
from handrail.sim.base import ArmEnv, SimConfig

ENV_ID = "LiftCan-v0"
"""The gymnasium id this module registers."""
TASK_ID = f"handrail.examples.lift_can:{ENV_ID}"
"""What ``handrail train --task`` takes (module:Id); also the task name of recorded stores."""
SUCCESS_KEY = "can_lifted"
"""The ``info`` key of the success flag (``handrail train --success-key can_lifted``)."""
EPISODE_STEPS = 80
"""Time limit in env steps (8 s at 10 Hz)."""
TICKS_PER_M = 10_000.0
"""Gripper encoder ticks per metre of finger opening (0 closed .. 800 open)."""

OBS_FIELDS: dict[str, tuple[int, str]] = {
    "can_pos_m": (3, "m"),
    "gripper_ticks": (1, "ticks (finger opening in m x 10000)"),
    "hand_pos_m": (3, "m"),
    "joint_pos_rad": (len(arm.ARM_JOINTS), "rad"),
}
"""Observation keys: (length, units) of each float32 vector, sorted as gymnasium's Dict space
keeps them."""


@dataclass(frozen=True)
class LiftCanConfig(SimConfig):
    """LiftCan: settings on top of handrail's :class:`SimConfig` (arm, safety box, 10 Hz)."""

    episode_steps: int = EPISODE_STEPS
    """Time limit in env steps (8 s at 10 Hz)."""
    can_radius_m: float = 0.02
    """Radius of the can (m); the open gripper spans 8 cm."""
    can_half_height_m: float = 0.035
    """Half the can's height (m): it stands 7 cm tall, its centre this high when resting."""
    can_mass_kg: float = 0.05
    """Mass of the can (kg)."""
    can_low_m: tuple[float, float] = (0.4, -0.15)
    """Lower xy corner of the region the can is placed in (m, base frame)."""
    can_high_m: tuple[float, float] = (0.6, 0.15)
    """Upper xy corner of the placement region (m)."""
    lift_height_m: float = 0.08
    """Success when the can's centre is this far above its resting height (m)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(lo > hi for lo, hi in zip(self.can_low_m, self.can_high_m, strict=True)):
            raise ValueError(f"can_low_m {self.can_low_m} must be <= can_high_m {self.can_high_m}")
        if not 0 < self.can_radius_m < arm.FINGER_MAX_M - 0.002:
            raise ValueError(
                f"can_radius_m must be in (0, {arm.FINGER_MAX_M - 0.002}) so the open gripper "
                f"fits around the can, got {self.can_radius_m}"
            )
        if min(self.can_half_height_m, self.can_mass_kg, self.lift_height_m) <= 0:
            raise ValueError("can_half_height_m, can_mass_kg and lift_height_m must be > 0")
        if self.cameras:
            raise ValueError(f"LiftCan observes state only; cameras must be (), got {self.cameras}")
        if self.action.rotation != "none" or not self.action.gripper:
            raise ValueError(
                "LiftCan's action is x, y, z and the gripper: ActionConfig(rotation='none', "
                f"gripper=True), got rotation={self.action.rotation!r}, "
                f"gripper={self.action.gripper}"
            )


def _obs_space() -> spaces.Dict:
    """The observation space: one unbounded float32 Box per key of :data:`OBS_FIELDS`."""
    return spaces.Dict(
        {k: spaces.Box(-np.inf, np.inf, (n,), np.float32) for k, (n, _) in OBS_FIELDS.items()}
    )


class _LiftCanArm(ArmEnv):
    """handrail's simulated arm with a can on the table (the scene, reset and success)."""

    config_cls: ClassVar[type[SimConfig]] = LiftCanConfig
    config: LiftCanConfig

    def __init__(self, config: LiftCanConfig | None = None, render_mode: str | None = None):
        super().__init__(config, render_mode=render_mode)
        self._arm_qpos = [int(self.model.joint(j).qposadr[0]) for j in arm.ARM_JOINTS]
        self._can_qpos = int(self.model.joint("can").qposadr[0])

    def scene_fragments(self) -> dict[str, str]:
        """A free-standing cylinder (the can)."""
        cfg = self.config
        r, h, mass = cfg.can_radius_m, cfg.can_half_height_m, cfg.can_mass_kg
        return {
            "worldbody": f'<body name="can" pos="0.5 0 {h}"><freejoint name="can"/>'
            f'<geom name="can" type="cylinder" size="{r} {h}" mass="{mass}"'
            ' rgba="0.2 0.45 0.85 1" friction="1.5 0.02 0.002" condim="4"/></body>'
        }

    def task_spaces(self) -> dict[str, spaces.Box]:
        """The user-facing keys (the arm's own ``proprio`` is dropped by :class:`LiftCanEnv`)."""
        return {k: box for k, box in _obs_space().spaces.items() if isinstance(box, spaces.Box)}

    def reset_task(self, rng: np.random.Generator) -> None:
        """Stand the can upright at a random xy of the placement region."""
        cfg, adr = self.config, self._can_qpos
        x, y = rng.uniform(cfg.can_low_m, cfg.can_high_m)
        self.data.qpos[adr : adr + 7] = (x, y, cfg.can_half_height_m, 1.0, 0.0, 0.0, 0.0)

    def task_obs(self) -> dict[str, np.ndarray]:
        """Joint angles, hand and can positions, the opening in encoder ticks."""
        qpos, adr = self.data.qpos, self._can_qpos
        return {
            "joint_pos_rad": qpos[self._arm_qpos],
            "hand_pos_m": self._site_pos.copy(),
            "can_pos_m": qpos[adr : adr + 3].copy(),
            "gripper_ticks": np.array([self.gripper_opening_m * TICKS_PER_M]),
        }

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The can."""
        can = self.data.qpos[self._can_qpos : self._can_qpos + 7].copy()
        return {"can": (can[:3], can[3:])}

    def is_success(self) -> bool:
        """The can's centre is ``lift_height_m`` above its resting height."""
        height_m = float(self.data.qpos[self._can_qpos + 2]) - self.config.can_half_height_m
        return height_m >= self.config.lift_height_m


class LiftCanEnv(gymnasium.Env[dict[str, Any], np.ndarray]):
    """Lift a can 8 cm off the table (see the module doc for spaces, reward and info).

    Args:
        config: the task's settings (default: :class:`LiftCanConfig`).
        render_mode: None or "rgb_array" (a view of the arm and the table).
    """

    metadata: dict[str, Any] = {  # noqa: RUF012 (Gymnasium's own type: an instance variable)
        "render_modes": ["rgb_array"],
        "render_fps": 10,
    }

    def __init__(self, config: LiftCanConfig | None = None, render_mode: str | None = None):
        self._arm = _LiftCanArm(config, render_mode=render_mode)
        self.config: LiftCanConfig = self._arm.config
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": round(1.0 / self.config.control_dt_s)}
        self.observation_space = _obs_space()
        self.action_space = self._arm.action_space

    @staticmethod
    def _own(obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {key: obs[key] for key in OBS_FIELDS}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Arm near home with the gripper open, the can at a random spot; ``seed`` makes it
        reproducible (the arm draws from this env's ``np_random``)."""
        super().reset(seed=seed)
        self._arm.np_random = self.np_random  # one random stream, seeded here
        obs, info = self._arm.reset()
        return self._own(obs), {SUCCESS_KEY: bool(info["success"])}

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Move the hand by the action's increment and set the gripper for 0.1 s."""
        obs, reward, terminated, truncated, info = self._arm.step(action)
        return self._own(obs), reward, terminated, truncated, {SUCCESS_KEY: bool(info["success"])}

    def render(self) -> np.ndarray | None:
        """An RGB frame of the arm and the table when ``render_mode == "rgb_array"``."""
        return self._arm.render()

    def close(self) -> None:
        """Free the renderers."""
        self._arm.close()


class LiftCanDemonstrator:
    """Hover above the can, descend, close, lift; starts over if the grasp misses or slips.

    Reads only :class:`LiftCanEnv`'s observation keys; returns float32 actions in [-1, 1].

    Args:
        config: the env's settings (its action scale and lift height).
    """

    HOVER_M = 0.08
    """Height of the approach point above the can's centre (m)."""
    GAIN = 0.8
    """Fraction of the remaining distance commanded per step."""
    MISSED_TICKS = 200.0
    """A closed gripper under this opening holds nothing (the can is 400 ticks wide)."""
    SLIP_M = 0.04
    """The can is lost when its centre is this far from the hand while lifting (m)."""

    def __init__(self, config: LiftCanConfig | None = None) -> None:
        self.config = config or LiftCanConfig()
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        """Start a new episode from the approach."""
        self._phase = "approach"
        self._closing_steps = 0
        self._last_ticks = np.inf
        self._rest_z: float | None = None

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The next action of the pick-and-lift sequence."""
        hand = np.asarray(obs["hand_pos_m"], np.float64)
        can = np.asarray(obs["can_pos_m"], np.float64)
        ticks = float(np.asarray(obs["gripper_ticks"])[0])
        if self._rest_z is None:
            self._rest_z = float(can[2])  # the can stands still at the first observation
        err = can - hand
        goal, gripper = hand, -1.0
        if self._phase == "approach":
            goal = can + np.array([0.0, 0.0, self.HOVER_M])
            if np.hypot(*(goal - hand)[:2]) < 0.01 and abs((goal - hand)[2]) < 0.03:
                self._phase = "descend"
        if self._phase == "descend":
            goal = can
            if np.hypot(*err[:2]) < 0.01 and abs(err[2]) < 0.006:
                self._phase, self._closing_steps = "close", 0
        if self._phase == "close":
            gripper = 1.0
            self._closing_steps += 1
            settled = self._closing_steps >= 3 and self._last_ticks - ticks < 5.0
            if settled or self._closing_steps >= 8:
                self._phase = "lift" if ticks > self.MISSED_TICKS else "approach"
        if self._phase == "lift":
            gripper = 1.0
            goal = np.array([hand[0], hand[1], self._rest_z + self.config.lift_height_m + 0.05])
            if np.linalg.norm(err) > self.SLIP_M or ticks < self.MISSED_TICKS:
                self._phase, gripper = "approach", -1.0  # dropped: open and start over
        self._last_ticks = ticks
        move = np.clip(self.GAIN * (goal - hand) / self.config.action.max_step_m, -1.0, 1.0)
        return np.array([*move, gripper], np.float32)


def _play(env: LiftCanEnv, demonstrator: LiftCanDemonstrator, seed: int) -> list[Step]:
    """One seeded episode of the demonstrator, as the steps a store records."""
    obs, _ = env.reset(seed=seed)
    demonstrator.reset(seed)
    steps: list[Step] = []
    done = False
    while not done:
        action = demonstrator(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        steps.append(
            Step(obs=obs, action=action, reward=float(reward), next_obs=next_obs,
                 terminated=terminated, truncated=truncated, success=bool(info[SUCCESS_KEY]),
                 acted_by=ActedBy.SCRIPTED, timestamp=time.time(), episode_seed=seed)
        )  # fmt: skip
        obs, done = next_obs, terminated or truncated
    return steps


def record_demos(path: str | Path, episodes: int = 20, seed: int = 0) -> int:
    """Record ``episodes`` successful demonstrator episodes into a new episode store.

    Episode ``i`` is reset with ``seed + i``; failed ones are left out (at most ``3 *
    episodes`` tries). Each stored step holds the env's observation dict, the action, reward,
    terminated, truncated and who acted (scripted); each episode its seed, final observation and
    success (``info["can_lifted"]`` at any step), which is how ``handrail train --demos`` picks
    the episodes it learns from.

    Args:
        path: the store's folder; it must not exist yet.
        episodes: how many successful episodes to write (>= 1).
        seed: seed of the first episode.

    Returns:
        The number of episodes written (``episodes`` unless the demonstrator failed too often).

    Raises:
        FileExistsError: ``path`` exists.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    out = Path(path)
    if out.exists():
        raise FileExistsError(f"{out} already exists; record_demos writes a new store only")
    env = LiftCanEnv()
    demonstrator = LiftCanDemonstrator(env.config)
    fields = [FieldSpec(k, "float32", (n,), units) for k, (n, units) in OBS_FIELDS.items()]
    written = 0
    try:
        with EpisodeRecorder.create(
            out, obs_fields=fields, action_dim=env.config.action.dim,
            control_dt_s=env.config.control_dt_s, task=TASK_ID, kind="demo",
        ) as recorder:  # fmt: skip
            for episode_seed in range(seed, seed + 3 * episodes):
                steps = _play(env, demonstrator, episode_seed)
                if any(step.success for step in steps):
                    for step in steps:
                        recorder.add(step)
                    written += 1
                    if written == episodes:
                        break
    finally:
        env.close()
    return written


def _register() -> None:
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(
            id=ENV_ID,
            entry_point="handrail.examples.lift_can:LiftCanEnv",
            max_episode_steps=EPISODE_STEPS,
        )


_register()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m handrail.examples.lift_can --out STORE [--episodes 20] [--seed 0]``."""
    parser = argparse.ArgumentParser(
        prog="python -m handrail.examples.lift_can",
        description="Record the LiftCan demonstrator's successful episodes into a new handrail "
        f"episode store, for `handrail train --task {TASK_ID} --demos STORE "
        f"--success-key {SUCCESS_KEY}`.",
    )
    parser.add_argument("--out", type=Path, required=True, help="the new store's folder")
    parser.add_argument("--episodes", type=int, default=20, help="successful episodes to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    args = parser.parse_args(argv)
    try:
        written = record_demos(args.out, episodes=args.episodes, seed=args.seed)
    except (FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    short = "" if written == args.episodes else f" (of {args.episodes} wanted)"
    print(f"wrote {written} successful LiftCan episodes{short} to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
