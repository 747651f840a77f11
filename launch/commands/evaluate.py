"""``handrail eval``: evaluate a run folder or a checkpoint (success rate with a 95% CI)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from handrail.app.runs import run_env
from handrail.learners.checkpoint import CheckpointError, read_meta
from handrail.learners.policies import RunPolicy, load_run_policy, run_root

if TYPE_CHECKING:
    from handrail.learners.evaluation import EvalResult


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
    failures: int = 0
    """Record the first N failed episodes, each as its own mp4 beside ``--video``'s
    (``eval_<checkpoint>_failed_seed<S>``; a residual run's base alone too:
    ``base_alone_failed_seed<S>``), and list the seeds of every failed episode."""
    seed: int = 100_000
    """Seed of the first episode (episode i uses seed + i)."""
    checkpoint: Literal["best", "latest"] = "best"
    """Which checkpoint of a run folder to evaluate."""
    task: str | None = None
    """Task to evaluate on; default: the task in the run's config.json."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"EvalConfig.episodes must be >= 1, got {self.episodes}")
        if self.failures < 0:
            raise ValueError(f"EvalConfig.failures must be >= 0 (episodes to record), got "
                             f"{self.failures}")  # fmt: skip


def video_dir(ckpt: Path) -> Path:
    """Where ``handrail eval --video`` writes: the run's ``videos/``, else the checkpoint."""
    root = run_root(ckpt)
    return ckpt if root is None else root / "videos"


def ckpt_label(ckpt: Path) -> str:
    """A short name for a checkpoint inside its run (``best``, ``latest``), else its folder."""
    root = run_root(ckpt)
    rel = ckpt.relative_to(root / "checkpoints") if root is not None else Path(ckpt.name)
    return rel.parts[0]


def _load(config: EvalConfig) -> RunPolicy:
    """The policy to evaluate; a damaged or missing checkpoint says which other one to try."""
    other = "latest" if config.checkpoint == "best" else "best"
    run_folder = (Path(config.path) / "checkpoints").is_dir()
    try:
        return load_run_policy(config.path, config.checkpoint)
    except CheckpointError as exc:
        root = Path(config.path) if run_folder else run_root(Path(config.path))
        if root is not None and f"{root / 'config.json'} " in f"{exc} ":  # the run's own config
            exc.add_note("It holds the run's task and env settings: restore it, or evaluate a "
                         "copy of the checkpoint folder made outside the run with --task.")  # fmt: skip
        else:
            exc.add_note(f"Evaluate the run's other checkpoint (--checkpoint {other}), or another "
                         "run." if run_folder else "Evaluate another checkpoint.")  # fmt: skip
        raise
    except ValueError as exc:
        folder = Path(config.path) / "checkpoints"
        if run_folder and not (folder / config.checkpoint).exists() and (folder / other).exists():
            exc.add_note(f"The run has no {config.checkpoint} checkpoint (yet: best is saved at "
                         f"its first evaluation); --checkpoint {other} evaluates its {other}.")  # fmt: skip
        raise


def evaluate(config: Annotated[EvalConfig, tyro.conf.arg(name="")]) -> int:
    """Evaluate a run or checkpoint: success rate with a 95% CI, return and episode length."""
    from handrail.learners.evaluation import env_fps
    from handrail.learners.evaluation import evaluate as run_evaluation

    run = _load(config)
    rendered = config.video or config.failures > 0
    env = run_env(run, config.task, render_mode="rgb_array" if rendered else None)
    fps = env_fps(env)
    if run.residual_on is not None:  # the base alone first, on the same seeds
        from handrail.learners.agents.residual import base_only
        from handrail.learners.specs import ActionSpec

        alone = run_evaluation(env, base_only(ActionSpec.from_space(env.action_space)),
                               config.episodes, config.seed, failures=config.failures,
                               success_key=run.success_key)  # fmt: skip
        print(f"base {run.residual_on} alone: {alone.summary()}")
        _failures(config, alone, video_dir(run.checkpoint), "base_alone", fps)
    result = run_evaluation(env, run.policy, config.episodes, config.seed, video=config.video,
                            failures=config.failures, success_key=run.success_key)  # fmt: skip
    env.close()
    label = f"base + residual ({run.checkpoint})" if run.residual_on else str(run.checkpoint)
    print(f"{label}: {result.summary()}")
    _failures(config, result, video_dir(run.checkpoint), f"eval_{ckpt_label(run.checkpoint)}",
              fps)  # fmt: skip
    if run.residual_on is not None and _saved_at(run.checkpoint) == 0:
        print(f"({ckpt_label(run.checkpoint)} was saved before the first step: it is the base "
              "alone)")  # fmt: skip
    if config.video and result.frames:
        from handrail.learners.runlog import write_video

        name = f"eval_{ckpt_label(run.checkpoint)}_seed{config.seed}"
        video = write_video(video_dir(run.checkpoint), result.frames, name, fps)
        print(f"video: {video}")
    return 0


def _failures(
    config: EvalConfig, result: EvalResult, folder: Path, prefix: str, fps: float
) -> None:
    """How the failed episodes ended (where the env says: the sim tasks do); with
    ``--failures`` their seeds first, and their videos written and named."""
    ended = result.failures_line()
    if not config.failures:
        if ended:
            print(f"  {ended}")
        return
    if result.success_rate is None:
        print("  failed: unknown (the env reports no success flag)")
        return
    from handrail.learners.runlog import write_video

    seeds = [config.seed + i for i in result.failed_episodes()]
    shown = ", ".join(map(str, seeds)) if seeds else "none"
    print(f"  failed: {len(seeds)} of {result.episodes} (episode seeds: {shown})")
    if ended:
        print(f"  {ended}")
    for i, frames in result.failed_frames:
        name = f"{prefix}_failed_seed{config.seed + i}"
        print(f"  video: {write_video(folder, frames, name, fps)}")


def _saved_at(checkpoint: Path) -> int | None:
    """The env steps a handrail checkpoint was saved at (None for other kinds)."""
    try:
        steps = read_meta(checkpoint).get("extra", {}).get("env_steps")
    except CheckpointError:
        return None
    return steps if isinstance(steps, int) else None
