"""Demonstrations from the episode store -> flat transitions and replay rows.

``handrail.demos`` loads episodes as :class:`EpisodeData` (per-step arrays concatenated over
episodes, plus one ``final_obs`` per episode). Here they are checked against the learner's
:class:`ObsSpec`/:class:`ActionSpec` and turned into flat float32 transitions with
``next_obs = obs[t + 1]`` inside an episode and ``final_obs`` after its last step. Actions are
mapped from env units into the learner's [-1, 1] range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from handrail.demos import FieldMismatchError
from handrail.learners.replay import Rows
from handrail.learners.specs import ActionSpec, ObsSpec


@dataclass(frozen=True)
class Transitions:
    """Flat transitions, concatenated over episodes (N rows)."""

    obs: np.ndarray
    """(N, obs_dim) float32, flattened with the ObsSpec."""
    action: np.ndarray
    """(N, action_dim) float32 in [-1, 1]."""
    reward: np.ndarray
    """(N,) float32."""
    next_obs: np.ndarray
    """(N, obs_dim) float32."""
    terminated: np.ndarray
    """(N,) bool."""
    truncated: np.ndarray
    """(N,) bool; also True at the last step of an episode that neither terminated nor was
    truncated in the store (the recording stopped), so nothing bootstraps across episodes."""
    episode_lengths: np.ndarray
    """(E,) int: rows per episode, in order."""

    def __len__(self) -> int:
        return int(self.reward.shape[0])


def check_fields(data: Any, obs_spec: ObsSpec, action_spec: ActionSpec) -> None:
    """Checks that a store's observation fields and action width match the learner's specs.

    Raises:
        FieldMismatchError: Naming the missing or mis-shaped field and what the task expects.
    """
    expected = dict(zip(obs_spec.keys, obs_spec.shapes, strict=True))
    missing = [k for k in expected if k not in data.obs]
    if missing:
        raise FieldMismatchError(
            f"demo store lacks observation field(s) {missing} that the task needs; the store has "
            f"{sorted(data.obs)}, the task expects {expected}. Record demos on the same task "
            "(same cameras/observation config) or pick the matching --task."
        )
    for key, shape in expected.items():
        got = tuple(np.shape(data.obs[key])[1:])
        if not obs_spec.takes(key, got):  # a camera of another size is resized to the spec's
            raise FieldMismatchError(
                f"demo store field {key!r} has per-step shape {got}, the task expects "
                f"{tuple(shape)}; the demos were recorded with a different task config."
            )
    act_dim = int(np.shape(data.action)[-1]) if np.ndim(data.action) == 2 else -1
    if act_dim != action_spec.dim:
        raise FieldMismatchError(
            f"demo store actions have width {act_dim}, the task's action space has "
            f"{action_spec.dim} dims; the demos use a different action config."
        )


def to_transitions(data: Any, obs_spec: ObsSpec, action_spec: ActionSpec) -> Transitions:
    """Converts loaded episodes (``EpisodeData``) into flat transitions.

    Args:
        data: ``handrail.demos.EpisodeData`` (e.g. ``open_store(p).load(successful_only=True)``).
        obs_spec: The learner's observation spec (fields are checked against it).
        action_spec: The learner's action spec; store actions are in env units.

    Returns:
        :class:`Transitions` with one row per recorded step.
    """
    check_fields(data, obs_spec, action_spec)
    starts = np.asarray(data.episode_starts, dtype=np.int64)
    lengths = np.asarray(data.episode_lengths, dtype=np.int64)
    if len(starts) == 0:
        raise ValueError("the demo selection holds no episodes (is any episode successful?)")
    obs_all = obs_spec.flatten({k: np.asarray(data.obs[k]) for k in obs_spec.keys})
    final_all = obs_spec.flatten({k: np.asarray(data.final_obs[k]) for k in obs_spec.keys})
    rows = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths, strict=True)])
    next_obs = np.empty_like(obs_all)
    for e, (s, n) in enumerate(zip(starts, lengths, strict=True)):
        next_obs[s : s + n - 1] = obs_all[s + 1 : s + n]
        next_obs[s + n - 1] = final_all[e]
    terminated = np.asarray(data.terminated, dtype=bool)[rows]
    truncated = np.asarray(data.truncated, dtype=bool)[rows].copy()
    ends = np.cumsum(lengths) - 1
    truncated[ends] |= ~terminated[ends]
    action = np.asarray(action_spec.from_env(np.asarray(data.action, np.float32)), np.float32)
    return Transitions(
        obs=obs_all[rows],
        action=np.clip(action[rows], -1.0, 1.0),
        reward=np.asarray(data.reward, np.float32)[rows],
        next_obs=next_obs[rows],
        terminated=terminated,
        truncated=truncated,
        episode_lengths=lengths,
    )


def to_rows(data: Any, obs_spec: ObsSpec, action_spec: ActionSpec) -> Rows:
    """Loaded episodes as replay rows: each step's row, then the episode's final observation.

    Args:
        data: ``handrail.demos.EpisodeData``.
        obs_spec: The learner's observation spec.
        action_spec: The learner's action spec (store actions are in env units).

    Returns:
        :class:`~handrail.learners.replay.Rows` for one insert into the ``demos`` segment.
    """
    check_fields(data, obs_spec, action_spec)
    tr = to_transitions(data, obs_spec.state_spec(), action_spec)  # frames below, as they are
    lengths = tr.episode_lengths
    steps, episodes = len(tr), len(lengths)
    ends = np.cumsum(lengths)  # one past each episode's last step, in step numbering
    episode_of_step = np.repeat(np.arange(episodes), lengths)
    step_pos = np.arange(steps) + episode_of_step  # every earlier episode added a final row
    final_pos = ends + np.arange(episodes)
    total = steps + episodes
    obs = np.zeros((total, obs_spec.state_spec().dim), np.float32)
    action = np.zeros((total, action_spec.dim), np.float32)
    reward = np.zeros(total, np.float32)
    terminated, final, first = (np.zeros(total, bool) for _ in range(3))
    obs[step_pos], action[step_pos], reward[step_pos] = tr.obs, tr.action, tr.reward
    terminated[step_pos] = tr.terminated
    obs[final_pos] = tr.next_obs[ends - 1]
    final[final_pos] = True
    first[step_pos[np.concatenate([[0], ends[:-1]])]] = True
    fields: dict[str, np.ndarray] = {"obs": obs}
    recorded = np.concatenate([np.arange(s, s + n) for s, n in
                               zip(data.episode_starts, data.episode_lengths, strict=True)])  # fmt: skip
    for key, _, shape in obs_spec.image_slices():  # each episode's steps, then its final frame
        frames = np.zeros((total, *shape), np.uint8)
        frames[step_pos] = obs_spec.frames(key, np.asarray(data.obs[key])[recorded])
        frames[final_pos] = obs_spec.frames(key, np.asarray(data.final_obs[key]))
        fields[key] = frames
    return Rows(data={**fields, "action": action}, reward=reward, terminated=terminated,
                final=final, first=first, actor=np.zeros(total, np.int32),
                valid=np.ones(total, bool))  # fmt: skip
