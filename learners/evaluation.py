"""Policy evaluation: success rate with a Wilson confidence interval, return, length, video.

Works with any Gymnasium env and any policy ``obs -> action`` in env units (e.g. the function
returned by :func:`handrail.learners.checkpoint.load_policy`). The env object is only used through
the Gymnasium API, so this module does not depend on ``handrail.sim``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Policy = Callable[[Any], np.ndarray]

DEFAULT_VIDEO_FPS = 30.0
"""Video frame rate for an env that states neither ``control_dt_s`` nor ``render_fps``."""


def env_fps(env: Any) -> float:
    """Frames per second that play ``env``'s rendered steps (one frame per step) at real speed.

    That is ``1 / control_dt_s`` for handrail's envs (10 Hz by default), else Gymnasium's
    ``metadata["render_fps"]``, else :data:`DEFAULT_VIDEO_FPS`.
    """
    dt_s = getattr(getattr(env, "unwrapped", env), "control_dt_s", None)
    if dt_s is not None and dt_s > 0:
        return 1.0 / float(dt_s)
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    if fps is not None and fps > 0:
        return float(fps)
    return DEFAULT_VIDEO_FPS


def outcomes_text(tally: Iterable[tuple[str, int]] | Mapping[str, int]) -> str:
    """``outcome n, outcome n, ...`` of a count of how episodes ended (pairs or a mapping, as
    :meth:`EvalResult.failure_outcomes` and a record's ``failed_outcomes`` hold it)."""
    pairs = tally.items() if isinstance(tally, Mapping) else tally
    return ", ".join(f"{outcome} {count}" for outcome, count in pairs)


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default).

    Args:
        successes: Number of successful trials.
        trials: Number of trials (> 0).
        z: Standard-normal quantile; 1.96 gives a 95% two-sided interval.

    Returns:
        (low, high), both within [0, 1].
    """
    if trials <= 0:
        raise ValueError(f"wilson_interval: trials must be > 0, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"wilson_interval: successes must be in [0, {trials}], got {successes}")
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class EvalResult:
    """Summary of an evaluation."""

    success_rate: float | None
    """Fraction of successful episodes; None if the env reports no success flag."""
    ci_low: float | None
    """Lower end of the Wilson 95% interval of the success rate."""
    ci_high: float | None
    """Upper end of the Wilson 95% interval of the success rate."""
    mean_return: float
    """Mean undiscounted episode return."""
    mean_length: float
    """Mean episode length in env steps."""
    episodes: int
    """Number of episodes evaluated."""
    returns: tuple[float, ...] = ()
    """Per-episode returns."""
    successes: tuple[bool, ...] = ()
    """Per-episode success flags (empty if the env reports none)."""
    frames: list[np.ndarray] = field(default_factory=list, repr=False, compare=False)
    """Rendered frames of the recorded episodes (empty unless ``video`` was requested)."""
    failed_frames: list[tuple[int, list[np.ndarray]]] = field(
        default_factory=list, repr=False, compare=False
    )
    """(episode index, its rendered frames) of the first failed episodes, up to ``failures``."""
    outcomes: tuple[str | None, ...] = ()
    """Per-episode: how it ended, as the env said on its last step (``info["outcome"]``: a sim
    task's :meth:`~handrail.sim.base.ArmEnv.failure`); None where it did not say."""

    def failed_episodes(self) -> list[int]:
        """Indices of the episodes that did not succeed (none if the env reports no flag)."""
        return [i for i, success in enumerate(self.successes) if not success]

    def failure_outcomes(self) -> list[tuple[str, int]]:
        """How the failed episodes ended, most frequent first: (outcome, episodes); empty if
        none failed or the env names no outcomes (an episode it named none for is
        ``"not said"``)."""
        ended = [self.outcomes[i] for i in self.failed_episodes()] if self.outcomes else []
        if not any(outcome is not None for outcome in ended):
            return []
        counts = Counter(outcome or "not said" for outcome in ended)
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def failures_line(self) -> str:
        """``how the N failed episodes ended: outcome k, ...``; empty without outcomes."""
        tally = self.failure_outcomes()
        if not tally:
            return ""
        failed = sum(count for _, count in tally)
        noun = "episode" if failed == 1 else "episodes"
        return f"how the {failed} failed {noun} ended: {outcomes_text(tally)}"

    def as_dict(self) -> dict[str, float | int | None]:
        """Scalar summary for logging (no per-episode lists, no frames)."""
        return {
            "success_rate": self.success_rate,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "mean_return": self.mean_return,
            "mean_length": self.mean_length,
            "episodes": self.episodes,
        }

    def as_record(self) -> dict[str, Any]:
        """:meth:`as_dict`, and how the failed episodes ended where the env says
        (``failed_outcomes``: {outcome: episodes}, most frequent first): what a run's
        ``metrics.jsonl`` and a bench's ``final.json`` keep of an evaluation."""
        record: dict[str, Any] = dict(self.as_dict())
        if tally := self.failure_outcomes():
            record["failed_outcomes"] = dict(tally)
        return record

    def summary(self) -> str:
        """One human-readable line."""
        text = f"{self.episodes} episodes: "
        if self.success_rate is not None:
            text += (
                f"success {self.success_rate:.1%} (95% CI {self.ci_low:.1%}-{self.ci_high:.1%}), "
            )
        return text + f"return {self.mean_return:.2f}, length {self.mean_length:.1f}"


RUN_SEED_SPREAD = 100_000_000
"""How far apart the episode seeds of runs with consecutive seeds lie: a run of seed s resets
its envs with seeds from ``s * RUN_SEED_SPREAD`` on (modulo 2**32), so runs of seeds 0, 1 and 2
never share an initial state, a demonstration or an evaluation episode. (Until 2026-11-29 a run
of seed s started at s: seed 1's episodes were seed 0's shifted by one, 19 of its 20 demos
seed 0's; seed 0's episodes are the same as then.)"""
EVAL_SEED_OFFSET = 10_000
"""Within a run's seeds: the evaluation episodes, the same ones at every evaluation
(``handrail train``, ``--learner sb3``; ``bench residual`` runs the base on them)."""
DEMO_SEED_OFFSET = 1_000_000
"""Within a run's seeds: the scripted demonstrations (``--expert-demos``)."""


def actor_seed_offset(actor: int) -> int:
    """Within a run's seeds: the episodes of env actor ``actor`` (``--actors N``), 1,000,000
    seeds each, after the demonstrations'."""
    return DEMO_SEED_OFFSET * (actor + 2)


def run_seed(seed: int, offset: int = 0) -> int:
    """The first episode seed of a run of ``seed`` for one of its streams (``offset``: 0 for its
    training episodes, :data:`EVAL_SEED_OFFSET`, :data:`DEMO_SEED_OFFSET`,
    :func:`actor_seed_offset`); episode ``i`` of the stream is reset with this plus ``i``.

    Raises:
        ValueError: ``seed`` or ``offset`` is negative.
    """
    if seed < 0 or offset < 0:
        raise ValueError(f"seeds are non-negative integers; got seed {seed}, offset {offset}")
    return (seed * RUN_SEED_SPREAD + offset) % 2**32


def evaluate(
    env: Any,
    policy: Policy,
    episodes: int,
    seed: int,
    *,
    video: bool | int = False,
    failures: int = 0,
    success_key: str = "success",
    max_steps: int | None = None,
) -> EvalResult:
    """Runs ``episodes`` episodes with an :class:`~handrail.learners.actor.Actor` and summarises them.

    An episode counts as successful if the success flag was true at any step (the one
    definition, :class:`~handrail.control.step.EpisodeTally`). Episode ``i`` is reset with
    ``seed + i``, so the same seed evaluates on the same initial states.

    Args:
        env: A Gymnasium env (``render_mode="rgb_array"`` if a video or failures are requested).
        policy: ``obs -> action`` in env units.
        episodes: Number of episodes (> 0).
        seed: Seed of the first episode.
        video: True to record the first episode, or the number of episodes to record.
        failures: Record the first this many failed episodes, each on its own
            (:attr:`EvalResult.failed_frames`); every episode is rendered until they are found.
        success_key: Info key with the success flag (falls back to ``"is_success"``).
        max_steps: Safety cap on steps per episode for envs without a time limit.

    Returns:
        The :class:`EvalResult`.
    """
    from handrail.learners.actor import Actor

    if episodes <= 0:
        raise ValueError(f"evaluate: episodes must be > 0, got {episodes}")
    if failures < 0:
        raise ValueError(f"evaluate: failures must be >= 0, got {failures}")
    num_video = _video_episodes(env, video)
    _video_episodes(env, failures, "failures")
    actor = Actor(env, policy, seed=seed, success_key=success_key, max_episode_steps=max_steps)
    frames: list[np.ndarray] = []
    failed: list[tuple[int, list[np.ndarray]]] = []
    runs = []
    for i in range(episodes):
        looking = len(failed) < failures
        actor.frames = [] if i < num_video or looking else None
        stats = actor.run_episodes(1)[0]
        runs.append((stats.return_, stats.length, stats.success, stats.outcome))
        if i < num_video:
            frames.extend(actor.frames or [])
        if looking and stats.success is False:
            failed.append((i, actor.frames or []))
    return _summarise(runs, frames, failed)


def _video_episodes(env: Any, video: bool | int, option: str = "video") -> int:
    """How many episodes to record; the env must render rgb arrays if any."""
    num_video = int(video) if not isinstance(video, bool) else (1 if video else 0)
    if num_video and getattr(env, "render_mode", None) != "rgb_array":
        raise ValueError(
            f"evaluate({option}=...): the env must be created with render_mode='rgb_array'; "
            f"got render_mode={getattr(env, 'render_mode', None)!r}"
        )
    return num_video


def _summarise(
    runs: list[tuple[float, int, bool | None, str | None]],
    frames: list[np.ndarray],
    failed: list[tuple[int, list[np.ndarray]]],
) -> EvalResult:
    """The :class:`EvalResult` of (return, length, success, outcome) per episode, in episode
    order."""
    episodes = len(runs)
    returns = [run[0] for run in runs]
    successes = [run[2] for run in runs if run[2] is not None]
    rate = lo = hi = None
    if len(successes) == episodes:
        rate = sum(successes) / episodes
        lo, hi = wilson_interval(sum(successes), episodes)
    return EvalResult(
        success_rate=rate,
        ci_low=lo,
        ci_high=hi,
        mean_return=float(np.mean(returns)),
        mean_length=float(np.mean([run[1] for run in runs])),
        episodes=episodes,
        returns=tuple(returns),
        successes=tuple(successes) if rate is not None else (),
        frames=frames,
        failed_frames=failed,
        outcomes=tuple(run[3] for run in runs),
    )
