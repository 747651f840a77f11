"""What a ``handrail train`` run is: task presets, :class:`TrainConfig` and its resolution.

:func:`resolve` applies the task's preset, then the options given on the command line, into a
:class:`ResolvedConfig`, which is saved as the run's ``config.json`` and read back on resume.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from handrail.launch.envs import HANDRAIL_TASKS
from handrail.learners.sac import SACConfig


@dataclass(frozen=True)
class TaskPreset:
    """Defaults for one task; every field can be overridden from the command line."""

    steps: int
    warmup_steps: int
    eval_every: int
    eval_episodes: int
    sac: dict[str, Any]
    env: dict[str, Any] = dataclasses.field(default_factory=dict)


_CPU_SAC = {"hidden_dims": (64, 64), "num_critics": 2, "batch_size": 128, "utd": 1}
# Tuned on this 2-core CPU (see tests/learners/test_learning.py): small nets at a high UTD, a
# short horizon (gamma 0.95: the tasks take 10-30 steps) and a low initial temperature.
_ARM_SAC = {
    **_CPU_SAC,
    "hidden_dims": (128, 128),
    "utd": 8,
    "gamma": 0.95,
    "init_temperature": 0.05,
}
_SPARSE_SAC = {**_ARM_SAC, "n_step": 3, "backup_entropy": False}
PRESETS: dict[str, TaskPreset] = {
    "reach": TaskPreset(
        steps=15_000, warmup_steps=500, eval_every=1_000, eval_episodes=20,
        sac=_ARM_SAC, env={"reward": "dense"},
    ),
    # Dense reward with a wide reach basin and no termination on success: on this CPU it learned
    # faster from 20 expert demos than the sparse reward (55% vs 0-10% after 20k env steps).
    # A TD3+BC-scaled BC term on the demo rows: bc_weight 2 reached 80% at 10-12k env steps on
    # seeds 0-3 (bc_weight 1: seed 3 peaked at 75%); tests/learners/test_learning.py has numbers.
    "pick_cube": TaskPreset(
        steps=30_000, warmup_steps=500, eval_every=1_000, eval_episodes=20,
        sac={**_ARM_SAC, "bc_weight": 2.0},
        env={"reward": "dense", "terminate_on_success": False, "reach_scale_1_m": 3.0,
             "episode_steps": 50},
    ),
    "peg_insert": TaskPreset(
        steps=50_000, warmup_steps=1_000, eval_every=2_500, eval_episodes=20, sac=_SPARSE_SAC,
    ),
    "push": TaskPreset(
        steps=50_000, warmup_steps=1_000, eval_every=2_500, eval_episodes=20, sac=_SPARSE_SAC,
    ),
}  # fmt: skip
GENERIC_PRESET = TaskPreset(
    steps=50_000, warmup_steps=1_000, eval_every=5_000, eval_episodes=10, sac=dict(_CPU_SAC)
)


@dataclass(frozen=True)
class TrainConfig:
    """Options of ``handrail train``; unset (None) options come from the task's preset."""

    task: str = "pick_cube"
    """A handrail task (reach, pick_cube, peg_insert, push), a gymnasium id, or module:EnvId."""
    steps: int | None = None
    """Env steps to train for (total, including warm-up and steps before a resume)."""
    seed: int = 0
    """Seed of the env, the learner, warm-up and evaluations."""
    learner: Literal["jax", "sb3"] = "jax"
    """jax: handrail's SAC/RLPD; sb3: Stable-Baselines3's SAC, same run folder, for comparison."""
    demos: str | None = None
    """Demonstrations: a Zarr episode store path, or expert:N to generate N with the task expert."""
    resume: Path | None = None
    """Resume a run folder from its latest checkpoint (its config.json is reused)."""
    run_dir: Path | None = None
    """Run folder to write; default runs/<task>-<learner>-s<seed>-<time>."""
    sac_preset: Literal["cpu", "rlpd", "hil_serl"] | None = None
    """Start the learner config from a SACConfig preset instead of the task's own."""
    utd: int | None = None
    """Gradient updates per env step."""
    num_critics: int | None = None
    """Critic ensemble size."""
    hidden_dims: tuple[int, ...] | None = None
    """MLP hidden layer sizes of actor and critics."""
    batch_size: int | None = None
    """Minibatch size per gradient step."""
    n_step: int | None = None
    """n of the n-step return."""
    gamma: float | None = None
    """Discount factor."""
    backup_entropy: bool | None = None
    """Keep the entropy term in the critic target (False suits sparse rewards)."""
    demo_ratio: float | None = None
    """Fraction of each batch drawn from demonstrations."""
    init_temperature: float | None = None
    """Initial entropy temperature (alpha)."""
    bc_weight: float | None = None
    """Behaviour-cloning weight on demo rows in the actor loss (TD3+BC-scaled; 0 = off)."""
    pretrain_steps: int | None = None
    """Demo-only update steps (critic + BC actor) before online training; needs --demos."""
    warmup_steps: int | None = None
    """Random-action env steps before updates start."""
    episode_steps: int | None = None
    """Time limit of a handrail task's episodes, in env steps (default: the task's own)."""
    reward: Literal["sparse", "dense"] | None = None
    """Reward of a handrail task: sparse (1 on success) or dense (the task's shaped reward)."""
    terminate_on_success: bool | None = None
    """Whether a handrail task's episode ends at the first successful step."""
    buffer_capacity: int = 1_000_000
    """Online replay capacity in transitions."""
    eval_every: int | None = None
    """Env steps between evaluations (also saves checkpoints/latest and refreshes the plot)."""
    eval_episodes: int | None = None
    """Episodes per evaluation."""
    video: bool = False
    """Record the first episode of every evaluation as an mp4 in the run folder."""
    success_key: str = "success"
    """Info key with the success flag (info['is_success'] is the fallback)."""
    stop_at_success: float | None = None
    """Stop early once an evaluation's success rate reaches this value (0..1)."""
    progress: bool = True
    """Show the progress bar."""

    def __post_init__(self) -> None:
        for name in ("steps", "utd", "num_critics", "batch_size", "n_step", "eval_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {value}")
        if self.eval_episodes is not None and self.eval_episodes < 1:
            raise ValueError(f"TrainConfig.eval_episodes must be >= 1, got {self.eval_episodes}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"TrainConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.stop_at_success is not None and not 0 < self.stop_at_success <= 1:
            raise ValueError(
                f"TrainConfig.stop_at_success must be in (0, 1], got {self.stop_at_success}"
            )
        if self.demos is not None:
            parse_demos(self.demos)


def parse_demos(spec: str) -> tuple[str, int | str]:
    """``expert:N`` -> ("expert", N); anything else -> ("store", path)."""
    if spec.startswith("expert:"):
        count = spec.split(":", 1)[1]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"--demos {spec!r}: expected expert:N with N >= 1, e.g. expert:20")
        return "expert", int(count)
    return "store", spec


@dataclass(frozen=True)
class ResolvedConfig:
    """Everything a run needs, with presets applied; saved as the run's config.json."""

    task: str
    learner: str
    steps: int
    seed: int
    warmup_steps: int
    buffer_capacity: int
    eval_every: int
    eval_episodes: int
    video: bool
    success_key: str
    stop_at_success: float | None
    demos: str | None
    env_overrides: dict[str, Any]
    sac: SACConfig

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict (``sac`` via SACConfig.to_json)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["sac"] = self.sac.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResolvedConfig:
        """Inverse of :meth:`to_json`."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in names},
                      "sac": SACConfig.from_json(data["sac"])})  # fmt: skip


def resolve(config: TrainConfig) -> ResolvedConfig:
    """Applies the task's preset, then the options given on the command line."""
    preset = PRESETS.get(config.task, GENERIC_PRESET)
    sac_fields = ("utd", "num_critics", "hidden_dims", "batch_size", "n_step", "gamma",
                  "backup_entropy", "demo_ratio", "init_temperature", "bc_weight",
                  "pretrain_steps")  # fmt: skip
    given = {k: getattr(config, k) for k in sac_fields if getattr(config, k) is not None}
    if "num_critics" in given:  # a single critic means a subset of one
        given["critic_subset"] = min(given["num_critics"], SACConfig.critic_subset)
    if config.sac_preset is not None:
        sac = getattr(SACConfig, config.sac_preset)(**given)
    else:
        sac = SACConfig(**{**preset.sac, **given})

    env = dict(preset.env)
    for name in ("episode_steps", "reward", "terminate_on_success"):
        if getattr(config, name) is not None:
            if config.task not in HANDRAIL_TASKS:
                raise ValueError(f"--{name.replace('_', '-')} applies to handrail tasks only, "
                                 f"not to {config.task!r}")  # fmt: skip
            env[name] = getattr(config, name)

    def pick(name: str) -> Any:
        value = getattr(config, name)
        return getattr(preset, name) if value is None else value

    return ResolvedConfig(
        task=config.task, learner=config.learner, steps=pick("steps"), seed=config.seed,
        warmup_steps=pick("warmup_steps"), buffer_capacity=config.buffer_capacity,
        eval_every=pick("eval_every"), eval_episodes=pick("eval_episodes"), video=config.video,
        success_key=config.success_key, stop_at_success=config.stop_at_success,
        demos=config.demos, env_overrides=env, sac=sac,
    )  # fmt: skip


def default_run_dir(cfg: ResolvedConfig) -> Path:
    """``runs/<task>-<learner>-s<seed>-<YYYYmmdd-HHMMSS>`` (``:``/``/`` in ids become ``_``)."""
    name = cfg.task.replace(":", "_").replace("/", "_")
    return Path("runs") / f"{name}-{cfg.learner}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
