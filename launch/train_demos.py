"""Demonstrations for ``handrail train --demos``: a Zarr store, or the task's expert.

``--demos PATH`` loads a store's successful episodes; ``--demos expert:N`` generates N successful
episodes with the task's scripted expert. Both come as one :class:`handrail.demos.EpisodeData`,
so the learners need one converter.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from handrail.demos import EpisodeData, EpisodeRecord
from handrail.demos.format import INTERVENTION_SOURCES
from handrail.launch.envs import HANDRAIL_TASKS, make_env
from handrail.launch.train_config import ResolvedConfig, parse_demos

_SCRIPTED = next(k for k, v in INTERVENTION_SOURCES.items() if v == "scripted")


def expert_episodes(task: str, count: int, seed: int, **overrides: Any) -> EpisodeData:
    """Runs the task's scripted expert until ``count`` successful episodes are collected.

    Episode ``i`` is reset with seed ``seed + i`` (failures are skipped; at most ``3 * count``
    attempts). Raises ValueError for a non-handrail task and RuntimeError if too few succeed.
    """
    if task not in HANDRAIL_TASKS:
        raise ValueError(f"--demos expert:N needs a handrail task {HANDRAIL_TASKS}, got {task!r}")
    return _as_episode_data(task, _successful_episodes(task, count, seed, overrides))


def _successful_episodes(task: str, count: int, seed: int, overrides: dict[str, Any]) -> list:
    """``count`` successful expert episodes (seeds ``seed + i``, at most ``3 * count`` tries)."""
    import handrail.sim

    env = make_env(task, **overrides)
    expert = handrail.sim.make_expert(task, env)
    episodes = []
    for i in range(3 * count):
        if len(episodes) == count:
            break
        steps = _expert_episode(env, expert, seed + i)
        if steps is not None:
            episodes.append(steps)
    env.close()
    if len(episodes) < count:
        raise RuntimeError(f"the {task} expert succeeded in only {len(episodes)} of {3 * count} "
                           f"episodes; wanted {count}")  # fmt: skip
    return episodes


def _as_episode_data(task: str, episodes: list) -> EpisodeData:
    """Concatenates ``_expert_episode`` tuples (obs, actions, rewards, ...) into EpisodeData."""
    keys = list(episodes[0][0][0])
    lengths = np.array([len(ep[1]) for ep in episodes], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    action = np.concatenate([ep[1] for ep in episodes]).astype(np.float32)
    # The same in-RAM layout a store loads into, so store and expert demos share one converter.
    return EpisodeData(
        obs={k: np.stack([o[k] for ep in episodes for o in ep[0][:-1]]) for k in keys},
        final_obs={k: np.stack([ep[0][-1][k] for ep in episodes]) for k in keys},
        action=action,
        policy_action=action.copy(),
        intervention=np.full(len(action), _SCRIPTED, dtype=np.int8),
        reward=np.concatenate([ep[2] for ep in episodes]).astype(np.float32),
        terminated=np.concatenate([ep[3] for ep in episodes]),
        truncated=np.concatenate([ep[4] for ep in episodes]),
        timestamp=np.zeros(len(action)),
        episode_starts=starts,
        episode_lengths=lengths,
        records=[
            EpisodeRecord(id=i, task=task, success=True, num_steps=int(n), num_intervened=int(n),
                          start_time=0.0, seed=seed_i, start=int(start))
            for i, (n, start, seed_i) in enumerate(
                zip(lengths, starts, [ep[5] for ep in episodes], strict=True))
        ],
    )  # fmt: skip


def _expert_episode(env: gym.Env, expert: Any, seed: int) -> tuple | None:
    obs, _ = env.reset(seed=seed)
    expert.reset(seed=seed)
    observations, actions, rewards, terms, truncs, success = [obs], [], [], [], [], False
    done = False
    while not done:
        action = np.asarray(expert(obs), np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        success = success or bool(info.get("success", False))
        observations.append(obs)
        actions.append(action)
        rewards.append(reward)
        terms.append(terminated)
        truncs.append(truncated)
        done = terminated or truncated
    if not success:
        return None
    return (observations, np.stack(actions), np.array(rewards), np.array(terms),
            np.array(truncs), seed)  # fmt: skip


def load_demos(cfg: ResolvedConfig, env: gym.Env) -> Any:
    """Loads ``cfg.demos``: successful episodes of a Zarr store, or ``expert:N`` episodes."""
    kind, value = parse_demos(cfg.demos or "")
    if kind == "expert":
        return expert_episodes(cfg.task, int(value), cfg.seed + 1_000_000, **cfg.env_overrides)
    import handrail.demos

    data = handrail.demos.open_store(value).load(successful_only=True)
    if len(data.episode_lengths) == 0:
        raise ValueError(f"--demos {value!r}: the store holds no successful episodes")
    return data
