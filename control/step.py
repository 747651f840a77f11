"""The step record every part of handrail passes around, and the one definition of success.

A :class:`Step` is one executed env step as the actor saw it: the observation it acted on, the
action that was actually executed (after the intervention arbiter and before the env's own
clipping), the policy's proposal next to it, who acted, what came back, and named extras (the
residual learner's base action, for instance). It is plain NumPy and picklable, so the same
record goes to the in-process learner, a Zarr recorder, a Ray learner or a ROS topic.

Where a Step goes is a :class:`TransitionSink`; where a policy's parameters come from is a
:class:`ParameterSource` (Acme's two seams). Local, asynchronous, Ray and robot topologies
differ only in which implementations are plugged in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

import numpy as np

EXECUTED_ACTION_KEY = "executed_action"
"""``info`` key an env (or wrapper) sets when it executed another action than it was given
(a human override, a safety clip): the actor records that action (env units) as executed."""
ACTED_BY_KEY = "acted_by"
"""``info`` key with an :class:`ActedBy` code when the env knows who chose the action."""
OUTCOME_KEY = "outcome"
"""``info`` key an env may set on an episode's last step: how the episode ended, in a few
words (``"success"``, or the task's name for where it failed: ``"down beside the socket"``).
Evaluations count the failed episodes by it (:meth:`~handrail.learners.evaluation.EvalResult.
failure_outcomes`)."""
SUCCESS_OUTCOME = "success"
"""The :data:`OUTCOME_KEY` of an episode that ended in success."""


class ActedBy(IntEnum):
    """Who chose the executed action; the integer codes are those the episode store keeps."""

    POLICY = 0
    HUMAN = 1
    SCRIPTED = 2


@dataclass(frozen=True, eq=False)
class Step:
    """One executed transition ``(obs, action) -> (reward, next_obs)``.

    Actions are in env units (the action space's own bounds); learners map them to [-1, 1].
    """

    obs: Mapping[str, np.ndarray]
    """The observation the action was chosen on (dict of arrays, each in its own dtype)."""
    action: np.ndarray
    """The executed action: the human's while one intervened, else the policy's."""
    reward: float
    """Reward returned by the env for this step."""
    next_obs: Mapping[str, np.ndarray]
    """The observation after the step (the episode's final observation when it ended)."""
    terminated: bool
    """The episode ended in a terminal state (no bootstrapping)."""
    truncated: bool
    """The episode was cut (time limit, operator): the learner bootstraps through it."""
    success: bool | None = None
    """The task's success flag at this step (None: the env reports none)."""
    policy_action: np.ndarray | None = None
    """The policy's proposal (None: same as ``action``)."""
    acted_by: ActedBy = ActedBy.POLICY
    """Who chose ``action``."""
    timestamp: float = 0.0
    """Wall-clock time of the step (s since the epoch; 0 when not measured)."""
    actor_id: int = 0
    """Which actor produced it (several actors' episodes may interleave at one learner)."""
    episode_seed: int | None = None
    """Seed the episode was reset with (lets a recorder store it for replay)."""
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Named per-step arrays, e.g. ``{"base_action": ...}`` for residual RL."""

    @property
    def done(self) -> bool:
        """The episode ended with this step."""
        return self.terminated or self.truncated

    @property
    def proposed(self) -> np.ndarray:
        """The policy's proposal (``action`` when none was recorded separately)."""
        return self.action if self.policy_action is None else self.policy_action


BOX_KEY = "obs"
"""The key a plain (non-Dict) observation is stored under in a Step."""


def obs_dict(obs: Any) -> Mapping[str, np.ndarray]:
    """An observation as a dict of arrays (a Box env's array becomes ``{"obs": array}``)."""
    return obs if isinstance(obs, Mapping) else {BOX_KEY: np.asarray(obs)}


class TransitionSink(Protocol):
    """Where experience goes: a learner, an episode recorder, a remote learner..."""

    def add(self, step: Step) -> None:
        """Take one executed step. Must not block the control loop for long."""
        ...


class ParameterSource(Protocol):
    """Where an actor's policy parameters come from."""

    def latest(self) -> tuple[int, Any]:
        """The newest ``(version, params)``; version -1 means none published yet."""
        ...


def step_success(info: Mapping[str, Any], success_key: str = "success") -> bool | None:
    """The success flag of one step: ``info[success_key]``, else ``info["is_success"]``.

    Returns:
        The flag, or None when the env reports neither key.
    """
    for key in (success_key, "is_success"):
        if key in info:
            return bool(np.asarray(info[key]).any())
    return None


class EpisodeTally:
    """Return, length and success of the episode in progress.

    Success has one definition everywhere in handrail (training episodes, evaluation,
    ``record``, ``sim rollout``, the progress bar and the plots): the episode succeeded if the
    success flag was true at any step. None when the env never reported a flag.
    """

    def __init__(self) -> None:
        self.return_ = 0.0
        self.length = 0
        self.human_steps = 0
        self.success: bool | None = None

    def reset(self, info: Mapping[str, Any] | None = None, success_key: str = "success") -> None:
        """Start a new episode (``info`` from ``env.reset`` may already report success)."""
        self.return_, self.length, self.human_steps = 0.0, 0, 0
        self.success = None if info is None else step_success(info, success_key)

    def add(self, reward: float, success: bool | None, acted_by: ActedBy = ActedBy.POLICY) -> None:
        """Count one step."""
        self.return_ += float(reward)
        self.length += 1
        self.human_steps += acted_by == ActedBy.HUMAN
        if success is not None:
            self.success = bool(self.success) or success
