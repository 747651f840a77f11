"""Residual RL around a frozen base policy: the env side (the learner side is in ``sac.py``).

A residual learner learns a bounded correction on top of a base policy that almost works
(Silver et al. 2018, Residual Policy Learning; Johannink et al. 2019; ResFiT, Ankile et al.
2025). The base is queried where the env is stepped, and its action travels with every
observation:

- :class:`ResidualObservation` wraps an env: every observation (after each reset and each
  step, final ones included) gets the base's action, normalised to [-1, 1], under the key
  ``base_action``. The learner (``SACConfig.residual_scale > 0``) reads it from there, so the
  replay stores it once per row and the next observation's base action, which the critic
  target needs, is found by index like the rest of the next observation. The env still takes
  the executed action in its own units, so recorders, interventions and evaluation see the
  action that ran. Optionally the residual is switched on progressively (Policy Decorator,
  Yuan et al. 2024): until ``enable_steps`` steps have passed, each step executes the base
  action alone with probability ``1 - steps / enable_steps`` (reported as a scripted step).
- :func:`relabel` adds the same key to recorded episodes (demonstrations, corrections): the
  frozen base run over each episode's observations in order, reset with the episode's seed.
- :class:`BaseWarmup` is the warm-up policy: the base action plus small Gaussian noise.

The base never changes: it is not part of the learner state and gets no gradient.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from handrail.control.base_policy import BASE_ACTION_KEY, BasePolicy
from handrail.control.step import ACTED_BY_KEY, BOX_KEY, EXECUTED_ACTION_KEY, ActedBy
from handrail.learners.specs import ActionSpec

__all__ = [
    "BASE_ACTION_KEY",
    "BaseWarmup",
    "ResidualObservation",
    "base_only",
    "query_base",
    "relabel",
]


class ResidualObservation(gym.Wrapper):
    """Adds the base policy's normalised action to every observation (see the module doc).

    Args:
        env: an env with a Dict (or Box) observation space and a 1-D Box action space.
        base: the frozen base policy (env units in, env units out).
        enable_steps: progressive enabling: env steps over which the share of steps that run
            base + residual rises linearly from 0 to 1 (0: the residual acts from the start).
        seed: seeds the progressive draw.

    Attributes:
        steps: env steps taken through the wrapper (for the progressive schedule).
    """

    def __init__(
        self, env: gym.Env, base: BasePolicy, *, enable_steps: int = 0, seed: int = 0
    ) -> None:
        super().__init__(env)
        if enable_steps < 0:
            raise ValueError(f"ResidualObservation: enable_steps must be >= 0, got {enable_steps}")
        space = env.observation_space
        spaces = dict(space.spaces) if isinstance(space, gym.spaces.Dict) else {BOX_KEY: space}
        if BASE_ACTION_KEY in spaces:
            raise ValueError(
                f"ResidualObservation: the env already observes {BASE_ACTION_KEY!r}; wrap a "
                "residual's env once (a residual on a residual takes the inner run as its base)"
            )
        self.action_spec = ActionSpec.from_space(env.action_space)
        dim = self.action_spec.dim
        spaces[BASE_ACTION_KEY] = gym.spaces.Box(-1.0, 1.0, (dim,), np.float32)
        self.observation_space = gym.spaces.Dict(spaces)
        self.base, self.enable_steps = base, enable_steps
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self._base_action: np.ndarray | None = None  # normalised, of the latest observation

    def _with_base(self, obs: Any) -> dict[str, np.ndarray]:
        out = dict(obs) if isinstance(obs, Mapping) else {BOX_KEY: np.asarray(obs)}
        self._base_action = query_base(self.base, out, self.action_spec)
        out[BASE_ACTION_KEY] = self._base_action
        return out

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.base.reset(seed=seed)
        return self._with_base(obs), info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], Any, bool, bool, dict[str, Any]]:
        self.steps += 1
        share = 1.0 if self.enable_steps == 0 else min(1.0, self.steps / self.enable_steps)
        base_only_step = share < 1.0 and self.rng.random() >= share
        if base_only_step and self._base_action is not None:
            action = self.action_spec.to_env(self._base_action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        if base_only_step:
            info = {**info, EXECUTED_ACTION_KEY: action, ACTED_BY_KEY: int(ActedBy.SCRIPTED)}
        return self._with_base(obs), reward, terminated, truncated, info


def query_base(
    base: BasePolicy, obs: Mapping[str, np.ndarray], action_spec: ActionSpec
) -> np.ndarray:
    """The base's action on ``obs``, normalised to [-1, 1], checked before anything uses it.

    A user's base (``module:attr``, a model trained elsewhere) that returns the wrong shape or a
    NaN must stop training with its name and the fix, not broadcast deep inside or poison the
    replay (and, on a robot, the commands) with non-finite numbers.

    Raises:
        ValueError: the action's shape is not ``(action_dim,)``, or it is not finite. What the
            base raises, or converting what it returned to numbers, propagates with a note
            naming the base.
    """
    name = getattr(base, "name", type(base).__name__)
    try:  # the conversion too: CallableBase converts inside the call, other bases here
        action = np.asarray(base(obs), np.float32)
    except Exception as exc:
        exc.add_note(f"(raised by the base policy {name} on an observation with keys {list(obs)})")
        raise
    if action.shape != (action_spec.dim,):
        raise ValueError(
            f"base policy {name} returned an action of shape {action.shape}; the env's actions "
            f"have shape ({action_spec.dim},) (a chunked model needs ChunkedBase)"
        )
    if not np.all(np.isfinite(action)):
        raise ValueError(
            f"base policy {name} returned a non-finite action {action.tolist()}; a base must "
            "return finite numbers in env units on every observation"
        )
    return action_spec.from_env(action)


def base_only(action_spec: ActionSpec) -> Any:
    """The base policy alone, read from a wrapped observation (evaluation's baseline)."""

    def policy(obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return action_spec.to_env(np.asarray(obs[BASE_ACTION_KEY], np.float32))

    return policy


class BaseWarmup:
    """Warm-up actions: the observation's base action plus N(0, noise^2), in env units."""

    def __init__(self, action_spec: ActionSpec, noise: float, rng: np.random.Generator) -> None:
        self.action_spec, self.noise, self.rng = action_spec, noise, rng

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        base = np.asarray(obs[BASE_ACTION_KEY], np.float32)
        noisy = base + self.noise * self.rng.standard_normal(base.shape)
        return self.action_spec.to_env(np.clip(noisy, -1.0, 1.0))


def relabel(data: Any, base: BasePolicy, action_spec: ActionSpec) -> Any:
    """Episodes (``EpisodeData``) with the base's normalised action added to every observation.

    Each episode is replayed through the base in order (reset with the episode's seed, so a
    stateful or chunked base sees what it would have seen acting), final observation included.
    """
    if BASE_ACTION_KEY in data.obs:
        raise ValueError(
            f"the episodes already have an observation field {BASE_ACTION_KEY!r}; relabel once"
        )
    base_rows = np.zeros((data.num_steps, action_spec.dim), np.float32)
    base_final = np.zeros((data.num_episodes, action_spec.dim), np.float32)
    for e, (start, length) in enumerate(
        zip(data.episode_starts, data.episode_lengths, strict=True)
    ):
        base.reset(seed=getattr(data.records[e], "seed", None))
        for t in range(int(start), int(start + length)):
            obs = {k: v[t] for k, v in data.obs.items()}
            base_rows[t] = query_base(base, obs, action_spec)
        final = {k: v[e] for k, v in data.final_obs.items()}
        base_final[e] = query_base(base, final, action_spec)
    return dataclasses.replace(
        data,
        obs={**data.obs, BASE_ACTION_KEY: base_rows},
        final_obs={**data.final_obs, BASE_ACTION_KEY: base_final},
    )
