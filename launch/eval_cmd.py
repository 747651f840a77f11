"""``handrail eval``: evaluate a run folder or a checkpoint (success rate with a 95% CI)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from handrail.launch.envs import make_env


@dataclass(frozen=True)
class EvalConfig:
    """Options of ``handrail eval``."""

    path: tyro.conf.Positional[Path]
    """A run folder (evaluates checkpoints/<checkpoint>) or a checkpoint folder: of ``handrail
    train`` (any learner) or of ``handrail bc``."""
    episodes: int = 20
    """Episodes to run."""
    video: bool = False
    """Record the first episode as an mp4 (into the run's videos/ or next to the checkpoint)."""
    seed: int = 100_000
    """Seed of the first episode (episode i uses seed + i)."""
    checkpoint: Literal["best", "latest"] = "best"
    """Which checkpoint of a run folder to evaluate."""
    task: str | None = None
    """Task to evaluate on; default: the task in the run's config.json."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"EvalConfig.episodes must be >= 1, got {self.episodes}")


def locate_checkpoint(path: Path, which: str = "best") -> tuple[Path, dict[str, Any] | None]:
    """Finds the checkpoint folder and the run config (if any) for a run or checkpoint path."""
    from handrail.learners.checkpoint import checkpoint_folder

    path = Path(path)
    run_root = path if (path / "checkpoints").is_dir() else _run_root(path)
    ckpt = checkpoint_folder(path, which)
    if not any((ckpt / name).is_file() for name in ("state.msgpack", "model.zip", "bc.msgpack")):
        raise ValueError(
            f"{path}: no checkpoint at {ckpt} (no state.msgpack, model.zip or bc.msgpack); pass a "
            "run folder or a checkpoint folder"
        )
    run_config = None if run_root is None else run_root / "config.json"
    config = json.loads(run_config.read_text()) if run_config and run_config.is_file() else None
    if config is not None and "task" not in config:
        config = None
    return ckpt, config


def _run_root(ckpt: Path) -> Path | None:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/...``), if any."""
    for parent in ckpt.parents:
        if parent.name == "checkpoints" and (parent.parent / "config.json").is_file():
            return parent.parent
    return None


def video_dir(ckpt: Path) -> Path:
    """Where ``handrail eval --video`` writes: the run's ``videos/``, else the checkpoint."""
    root = _run_root(ckpt)
    return ckpt if root is None else root / "videos"


def ckpt_label(ckpt: Path) -> str:
    """A short name for a checkpoint inside its run (``best``, ``latest``), else its folder."""
    root = _run_root(ckpt)
    rel = ckpt.relative_to(root / "checkpoints") if root is not None else Path(ckpt.name)
    return rel.parts[0]


@dataclass(frozen=True)
class RunPolicy:
    """A run's (or checkpoint's) deterministic policy and what its env needs."""

    checkpoint: Path
    """The checkpoint folder the policy was loaded from."""
    policy: Callable[[Any], Any]
    """``obs -> env action``."""
    task: str
    """The task to evaluate on."""
    env_kwargs: dict[str, Any]
    """The env keyword arguments the run trained with (empty for another task)."""
    success_key: str
    """Info key of the success flag."""
    residual_on: str | None = None
    """The base policy of a residual run (its observations carry the base's action)."""


def load_run_policy(path: Path, which: str = "best", task: str | None = None) -> RunPolicy:
    """The deterministic policy of a run folder's ``which`` checkpoint, or of a checkpoint
    (``handrail train``'s, with any learner, or ``handrail bc``'s)."""
    from handrail.launch.train_config import parse_env_kwargs

    ckpt, run_config = locate_checkpoint(path, which)
    run_config = run_config or {}
    task = task or run_config.get("task")
    if task is None:
        raise ValueError(f"{path}: no run config.json to read the task from; pass --task")
    same_task = task == run_config.get("task")
    env_kwargs = parse_env_kwargs(tuple(run_config.get("env_kwargs", ()))) if same_task else {}
    if (ckpt / "model.zip").is_file():
        from handrail.learners.sb3_backend import load_sb3_policy

        policy = load_sb3_policy(ckpt)
    elif (ckpt / "bc.msgpack").is_file():  # a `handrail bc` run (chunked ones keep their chunk)
        from handrail.learners.bc import load_bc_policy

        policy = load_bc_policy(ckpt)
    else:
        from handrail.learners.checkpoint import load_policy

        policy = load_policy(ckpt, deterministic=True)
    return RunPolicy(ckpt, policy, task, env_kwargs, run_config.get("success_key", "success"),
                     run_config.get("residual_on"))  # fmt: skip


def run_env(run: RunPolicy, render_mode: str | None = None) -> Any:
    """The env a run's policy acts in: its task, with the base's action observed if residual."""
    env = make_env(run.task, render_mode=render_mode, **run.env_kwargs)
    if run.residual_on is None:
        return env
    from handrail.launch.bases import make_base
    from handrail.learners.residual import ResidualObservation

    return ResidualObservation(env, make_base(run.residual_on, run.task, env))


def evaluate(config: Annotated[EvalConfig, tyro.conf.arg(name="")]) -> int:
    """Evaluate a run or checkpoint: success rate with a 95% CI, return and episode length."""
    from handrail.learners.evaluation import env_fps
    from handrail.learners.evaluation import evaluate as run_evaluation

    run = load_run_policy(config.path, config.checkpoint, config.task)
    env = run_env(run, render_mode="rgb_array" if config.video else None)
    if run.residual_on is not None:  # the base alone first, on the same seeds
        from handrail.learners.residual import base_only
        from handrail.learners.specs import ActionSpec

        alone = run_evaluation(env, base_only(ActionSpec.from_space(env.action_space)),
                               config.episodes, config.seed, success_key=run.success_key)  # fmt: skip
        print(f"base {run.residual_on} alone: {alone.summary()}")
    result = run_evaluation(env, run.policy, config.episodes, config.seed, video=config.video,
                            success_key=run.success_key)  # fmt: skip
    env.close()
    label = f"base + residual ({run.checkpoint})" if run.residual_on else str(run.checkpoint)
    print(f"{label}: {result.summary()}")
    if config.video and result.frames:
        from handrail.learners.runlog import write_video

        name = f"eval_{ckpt_label(run.checkpoint)}_seed{config.seed}"
        video = write_video(video_dir(run.checkpoint), result.frames, name, env_fps(env))
        print(f"video: {video}")
    return 0
