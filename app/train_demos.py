"""Demonstrations for ``handrail train``: a Zarr store (``--demos``) or the task's expert
(``--expert-demos N``).

Both come as one :class:`handrail.demos.EpisodeData`, checked against the learner's specs before
training starts, so the learners need one converter and a mismatched store is reported before
the run folder exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from handrail.app.config import TrainConfig
from handrail.app.envs import HANDRAIL_TASKS, make_env
from handrail.demos import EpisodeData
from handrail.learners.evaluation import DEMO_SEED_OFFSET, run_seed


def expert_episodes(task: str, count: int, seed: int, **overrides: Any) -> EpisodeData:
    """Runs the task's scripted expert until ``count`` successful episodes are collected.

    Episode ``i`` is reset with seed ``seed + i`` (failures are skipped; at most ``3 * count``
    attempts). Raises ValueError for a non-handrail task and RuntimeError if too few succeed.
    """
    import handrail.sim
    from handrail.control.step import ActedBy
    from handrail.demos.episodes import EpisodeCollector, data_from_episodes
    from handrail.learners.actor import Actor

    if task not in HANDRAIL_TASKS:
        raise ValueError(f"--expert-demos needs a handrail task {HANDRAIL_TASKS}, got {task!r}")
    env = make_env(task, **overrides)
    collector = EpisodeCollector(task, successful_only=True)
    expert = handrail.sim.make_expert(task, env)
    actor = Actor(env, expert, seed=seed, sinks=[collector], acted_by=ActedBy.SCRIPTED)
    tries = 0
    while len(collector.episodes) < count and tries < 3 * count:
        actor.run_episodes(1)
        tries += 1
    env.close()
    if len(collector.episodes) < count:
        raise RuntimeError(
            f"the {task} expert succeeded in only {len(collector.episodes)} of {tries} "
            f"episodes; wanted {count}"
        )
    return data_from_episodes(collector.episodes)


def load_demos(
    cfg: TrainConfig, env: Any, obs_spec: Any, action_spec: Any,
    transform: Callable[[EpisodeData], EpisodeData] | None = None,
) -> EpisodeData | None:  # fmt: skip
    """The run's demonstrations (None without any), checked against the learner's specs.

    ``transform`` turns the recorded episodes into what the learner reads before the check
    (``--encoder`` encodes their cameras).

    Raises:
        FileNotFoundError: ``--demos`` names nothing.
        ValueError: the store is locked, damaged, holds no successful episode, or its fields do
            not match the task (the message names the field and the fix).
    """
    from handrail.demos.errors import StoreError
    from handrail.demos.finite import require_finite
    from handrail.learners.demo_data import check_fields

    if cfg.expert_demos:
        data = expert_episodes(
            cfg.task, cfg.expert_demos, run_seed(cfg.seed, DEMO_SEED_OFFSET), **cfg.env
        )
        if transform is not None:
            data = transform(data)
    elif cfg.demos is not None:
        import handrail.demos

        if not cfg.demos.exists():
            raise FileNotFoundError(
                f"--demos {cfg.demos}: no such file or folder; give an episode store (as "
                "`handrail record --out` writes, or `handrail demos import` converts)"
            )
        try:
            reader = handrail.demos.open_store(cfg.demos)
            successful = reader.select(successful_only=True)
            require_finite(reader, successful)  # nan or inf: named now, not by a loss later
            data = reader.load(episodes=successful)
            if data.num_episodes == 0:
                raise ValueError("the store holds no successful episodes")
            if transform is not None:
                data = transform(data)
            check_fields(data, obs_spec, action_spec)
        except (StoreError, ValueError) as exc:
            raise ValueError(f"--demos {cfg.demos}: {exc}") from exc
    else:
        return None
    return data
