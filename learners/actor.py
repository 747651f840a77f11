"""The actor: the one env loop of handrail (training, evaluation, recording, rollouts).

An :class:`Actor` runs episodes on any Gymnasium env with a policy ``obs -> action`` (env
units) and hands every executed step, as a :class:`~handrail.control.step.Step`, to its sinks
(a learner, a Zarr recorder...). Episode ``i`` is reset with ``seed + i``, so runs are
reproducible and a resumed actor sees the states an uninterrupted one would have.

A learned policy is a :class:`LearnedPolicy`: ``make_policy(params)`` over a
:class:`~handrail.control.step.ParameterSource`, refreshed whenever the source publishes a
new version. Its n-th call draws its noise with :func:`policy_key` (base key, n), which the
fused local trainer reproduces inside its jitted step.

The executed action is what the env actually ran: the action given to ``env.step``, unless the
env (or a wrapper such as an intervention layer) reports another one in
``info["executed_action"]`` (and who chose it in ``info["acted_by"]``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from handrail.control.step import (
    ACTED_BY_KEY,
    EXECUTED_ACTION_KEY,
    OUTCOME_KEY,
    ActedBy,
    EpisodeTally,
    ParameterSource,
    Step,
    TransitionSink,
    obs_dict,
    step_success,
)
from handrail.learners.images import check_cameras
from handrail.learners.specs import ActionSpec, ObsSpec

Policy = Callable[[Mapping[str, np.ndarray]], np.ndarray]
"""A policy as the actor sees it: an env observation -> an action in env units. A policy with
a ``reset(seed=...)`` method (a scripted expert) has it called at every episode start."""
MakePolicy = Callable[[Any], Callable[[Any, jax.Array], Any]]
"""``make_policy(params) -> policy(obs_flat, key) -> action in [-1, 1]``."""


@dataclass(frozen=True)
class EpisodeStats:
    """Summary of one finished episode."""

    return_: float
    """Undiscounted sum of rewards."""
    length: int
    """Env steps in the episode."""
    success: bool | None
    """True if the success flag was true at any step; None if the env reports none."""
    human_steps: int = 0
    """Steps in which a person (or a simulated one) acted instead of the policy."""
    outcome: str | None = None
    """How the episode ended, as the env said on its last step (``info["outcome"]``,
    :data:`~handrail.control.step.OUTCOME_KEY`); None if it did not."""


@jax.jit
def policy_key(base: jax.Array, n: jax.Array | int) -> jax.Array:
    """The key of a learned policy's ``n``-th action (``fold_in``: independent per ``n``)."""
    return jax.random.fold_in(base, n)


class UniformPolicy:
    """Uniformly random actions inside a Box action space, from a seeded generator."""

    def __init__(self, space: Any, seed: int | np.random.Generator) -> None:
        self.space = space
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def __call__(self, obs: Any) -> np.ndarray:
        return self.rng.uniform(self.space.low, self.space.high).astype(self.space.dtype)


class LearnedPolicy:
    """``make_policy(params)`` over a parameter source; a :data:`Policy` in env units.

    Args:
        make_policy: builds ``policy(obs_flat, key) -> action in [-1, 1]`` from params.
        source: where params come from (checked for a new version at every call).
        obs_spec: flattens env observations.
        action_spec: maps [-1, 1] actions to env units.
        seed: base of the per-call keys.
    """

    def __init__(
        self,
        make_policy: MakePolicy,
        source: ParameterSource,
        obs_spec: ObsSpec,
        action_spec: ActionSpec,
        *,
        seed: int,
    ) -> None:
        self.make_policy, self.source = make_policy, source
        self.obs_spec, self.action_spec = obs_spec, action_spec
        self.base_key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)  # not the learner's key
        self.calls = 0
        self.version = -1
        self._policy: Callable[[Any, jax.Array], Any] | None = None

    def __call__(self, obs: Mapping[str, np.ndarray] | np.ndarray) -> np.ndarray:
        version, params = self.source.latest()
        if version != self.version or self._policy is None:
            self._policy, self.version = self.make_policy(params), version
        if self.obs_spec.images:  # a policy on cameras: name them if the env renders none
            check_cameras(obs, self.obs_spec.images, "this policy")
        key = policy_key(self.base_key, self.calls)
        self.calls += 1
        action = np.asarray(self._policy(self.obs_spec.flatten(obs), key))
        return self.action_spec.to_env(action)


class Actor:
    """Runs episodes with a policy and hands each executed step to its sinks.

    Args:
        env: any Gymnasium env (Box action space).
        policy: ``obs -> action`` in env units (after warm-up).
        seed: episode ``i`` is reset with ``seed + i``; warm-up actions use ``seed`` too.
        sinks: where each :class:`Step` goes.
        warmup_steps: the first env steps act uniformly at random in the action space.
        actor_id: stamped on every step (learners separate interleaved actors by it).
        success_key: info key of the success flag (``is_success`` is the fallback).
        acted_by: who the policy's actions are attributed to (a scripted expert: SCRIPTED).
        max_episode_steps: cut episodes (as truncated) for envs without a time limit.
    """

    def __init__(
        self,
        env: Any,
        policy: Policy,
        *,
        seed: int,
        sinks: Sequence[TransitionSink] = (),
        warmup_steps: int = 0,
        actor_id: int = 0,
        success_key: str = "success",
        acted_by: ActedBy = ActedBy.POLICY,
        max_episode_steps: int | None = None,
    ) -> None:
        self.env, self.policy, self.seed = env, policy, seed
        self.sinks = list(sinks)
        self.warmup_steps, self.actor_id = warmup_steps, actor_id
        self.success_key, self.acted_by = success_key, acted_by
        self.max_episode_steps = max_episode_steps
        self.rng = np.random.default_rng(seed)
        self.warmup_policy: Policy = UniformPolicy(env.action_space, self.rng)
        self.env_steps = self.episodes = 0
        self.tally = EpisodeTally()
        self.frames: list[np.ndarray] | None = None
        """Set to a list to collect ``env.render()`` frames (after each reset and step)."""
        self._obs: Any = None  # None between episodes: the next step resets the env
        self.episode_seed = seed

    @property
    def obs(self) -> Any:
        """The observation the next action is chosen on (resets the env between episodes)."""
        if self._obs is None:
            self.episode_seed = self.seed + self.episodes
            self._obs, info = self.env.reset(seed=self.episode_seed)
            self.tally.reset(info, self.success_key)
            reset = getattr(self.policy, "reset", None)
            if reset is not None:  # stateful policies (scripted experts, chunked bases)
                reset(seed=self.episode_seed)
            self._render()
        return self._obs

    def _render(self) -> None:
        if self.frames is not None:
            self.frames.append(np.asarray(self.env.render()))

    def choose(self) -> np.ndarray:
        """The action for the current observation: random during warm-up, else the policy's."""
        if self.env_steps < self.warmup_steps:
            return self.warmup_policy(self.obs)
        return np.asarray(self.policy(self.obs))

    def step(self, action: np.ndarray | None = None) -> EpisodeStats | None:
        """One env step with ``action`` (default: :meth:`choose`); stats if an episode ended."""
        obs = self.obs
        proposal = self.choose() if action is None else np.asarray(action)
        next_obs, reward, terminated, truncated, info = self.env.step(proposal)
        executed = np.asarray(info.get(EXECUTED_ACTION_KEY, proposal))
        acted_by = ActedBy(int(info.get(ACTED_BY_KEY, self.acted_by)))
        success = step_success(info, self.success_key)
        cut = self.max_episode_steps is not None and self.tally.length + 1 >= self.max_episode_steps
        step = Step(
            obs=obs_dict(obs), action=executed, reward=float(reward), next_obs=obs_dict(next_obs),
            terminated=bool(terminated), truncated=bool(truncated) or cut, success=success,
            policy_action=proposal, acted_by=acted_by, timestamp=time.time(),
            actor_id=self.actor_id, episode_seed=self.episode_seed,
        )  # fmt: skip
        for sink in self.sinks:
            sink.add(step)
        self.tally.add(step.reward, success, acted_by)
        self.env_steps += 1
        self._render()
        if not step.done:
            self._obs = next_obs
            return None
        self._obs = None
        self.episodes += 1
        tally = self.tally
        outcome = info.get(OUTCOME_KEY)
        return EpisodeStats(tally.return_, tally.length, tally.success, tally.human_steps,
                            None if outcome is None else str(outcome))  # fmt: skip

    @property
    def at_episode_start(self) -> bool:
        """No step of the current episode has been taken (a safe point to save or stop)."""
        return self._obs is None or self.tally.length == 0

    def counters(self) -> dict[str, Any]:
        """JSON-able counters a resume needs: env steps, episodes, the warm-up generator."""
        return {
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "rng": self.rng.bit_generator.state,
        }

    def restore(self, counters: Mapping[str, Any]) -> None:
        """Adopt saved :meth:`counters`; the current episode, if any, is dropped, so the next
        step resets the env with the saved run's next episode seed."""
        self.env_steps, self.episodes = counters["env_steps"], counters["episodes"]
        self.rng.bit_generator.state = counters["rng"]
        self._obs = None

    def run_episodes(self, count: int, progress: str | None = None) -> list[EpisodeStats]:
        """Run until ``count`` more episodes have ended (``progress``: a progress bar's label)."""
        if progress is not None:
            from tqdm.auto import tqdm

            out: list[EpisodeStats] = []
            with tqdm(total=count, desc=progress, unit="ep") as bar:  # closed on errors too
                for _ in range(count):
                    out += self.run_episodes(1)
                    bar.update(1)
                    bar.set_postfix_str(f"success {sum(bool(s.success) for s in out)}/{len(out)}")
            return out
        out = []
        while len(out) < count:
            stats = self.step()
            if stats is not None:
                out.append(stats)
        return out
