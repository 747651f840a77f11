"""The fast local actor-learner loop: one env, one learner, one process.

The seam between acting and learning is the :class:`TransitionSink` (Acme style): the loop
hands every executed transition to its sinks (a Zarr recorder, an intervention buffer...).

Speed comes from removing per-step overhead. The replay lives on the device as one packed
float32 array (``obs | action | reward | discount | next_obs`` per row, see ``replay.py``), and
after warm-up each env step makes exactly one jitted call that (1) writes the step's completed
n-step rows into the replay (buffer donated, updated in place), (2) samples ``utd`` minibatches
on device (demo rows from a device copy of the demo buffer, as ``MixedSampler``), (3) runs the
UTD block of updates and (4) computes the next action with the new params. Per step only the
new rows go to the device and only the action and the non-finite flag come back.

Resume: :meth:`Trainer.save` is allowed only at an episode boundary (right after a step that
ended an episode, or before the first step). Episode ``i`` is reset with ``seed + i``, so a
loaded trainer resets the env to exactly the state the uninterrupted run would have seen and
continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from handrail.learners.checkpoint import load_checkpoint, save_checkpoint
from handrail.learners.replay import NStepBuilder, ReplayBuffer, pack_width, unpack
from handrail.learners.sac import SAC, SACState
from handrail.learners.specs import ActionSpec, ObsSpec

TRAINER_FILE = "trainer.npz"
"""Replay rows and the pending action, next to the ``learner/`` checkpoint folder."""


class TransitionSink(Protocol):
    """Where experience goes (a recorder, a remote learner, an intervention buffer...)."""

    def add(
        self,
        obs: dict,
        action: np.ndarray,
        reward: float,
        next_obs: dict,
        terminated: bool,
        truncated: bool,
        info: dict,
    ) -> None:
        """One executed transition: raw env observations and the action in env units."""
        ...


@dataclass(frozen=True)
class EpisodeStats:
    """Summary of one finished episode."""

    return_: float
    """Undiscounted sum of rewards."""
    length: int
    """Env steps in the episode."""
    success: bool | None
    """``info[success_key]`` (else ``info["is_success"]``) at the last step; None if absent."""


def _check_specs(env: gym.Env, sac: SAC) -> None:
    obs_spec = ObsSpec.from_space(env.observation_space)
    action_spec = ActionSpec.from_space(env.action_space)
    if obs_spec != sac.obs_spec:
        raise ValueError(f"Trainer: env observations {obs_spec} differ from sac.obs_spec")
    if action_spec != sac.action_spec:
        raise ValueError(f"Trainer: env actions {action_spec} differ from sac.action_spec")


class Trainer:
    """Random warm-up, then one env step + one UTD block of updates per :meth:`step`.

    Attributes:
        state: the learner state (SACState).
        env_steps: env steps taken.
        updates: gradient (critic) steps run: ``utd`` per update block.
        episodes: episodes finished.
    """

    def __init__(
        self,
        env: gym.Env,
        sac: SAC,
        *,
        seed: int,
        warmup_steps: int = 1000,
        buffer_capacity: int = 1_000_000,
        demos: ReplayBuffer | None = None,
        sinks: Sequence[TransitionSink] = (),
        success_key: str = "success",
    ) -> None:
        _check_specs(env, sac)
        if warmup_steps < 0 or buffer_capacity < 1:
            raise ValueError(
                f"Trainer: need warmup_steps >= 0 and buffer_capacity >= 1, got {warmup_steps} "
                f"and {buffer_capacity}"
            )
        cfg = sac.config
        self.env, self.sac, self.seed = env, sac, seed
        self.warmup_steps, self.capacity = warmup_steps, buffer_capacity
        self.sinks, self.success_key = tuple(sinks), success_key
        self._dim, self._adim = sac.obs_spec.dim, sac.action_spec.dim
        self._width = pack_width(self._dim, self._adim)
        self._demo_rows, self._n_demo = self._device_demos(demos)
        self.state: SACState = sac.init(jax.random.PRNGKey(seed))
        self._metrics: dict[str, Any] = {}
        if cfg.pretrain_steps > 0 and self._n_demo > 0:
            self.state, self._metrics = _pretrain_jit(sac, self.state, self._demo_rows)
        self.env_steps = self.updates = self.episodes = 0
        self._rng = np.random.default_rng(seed)
        self._builder = NStepBuilder(self._dim, self._adim, cfg.n_step, cfg.gamma)
        # One spare row at index `capacity` absorbs the padding of fixed-size inserts.
        self._rows = jnp.zeros((buffer_capacity + 1, self._width), jnp.float32)
        self._pos = self._size = 0
        self._nonfinite_streak = 0
        self._fused = functools.partial(_fused_jit, sac, self._n_demo)
        self._act_only = functools.partial(_act_only_jit, sac)
        self._begin_episode()
        self._action = self._next_action_without_update()

    # -- setup helpers ------------------------------------------------------------------------
    def _device_demos(self, demos: ReplayBuffer | None) -> tuple[jax.Array, int]:
        cfg = self.sac.config
        if demos is None or len(demos) == 0:
            return jnp.zeros((1, self._width), jnp.float32), 0
        if (demos.obs_dim, demos.action_dim) != (self._dim, self._adim):
            raise ValueError(
                f"Trainer: demos have obs_dim={demos.obs_dim}, action_dim={demos.action_dim} but "
                f"the task has {self._dim} and {self._adim}; rebuild the demo buffer for it"
            )
        if (demos.n_step, demos.gamma) != (cfg.n_step, cfg.gamma):
            raise ValueError(
                f"Trainer: demos were built with n_step={demos.n_step}, gamma={demos.gamma} but "
                f"the config has n_step={cfg.n_step}, gamma={cfg.gamma}"
            )
        return jnp.asarray(demos.valid_rows()), round(cfg.batch_size * cfg.demo_ratio)

    def _begin_episode(self) -> None:
        obs, _ = self.env.reset(seed=self.seed + self.episodes)
        self._obs_raw, self._obs_flat = obs, self.sac.obs_spec.flatten(obs)
        self._ep_return, self._ep_len = 0.0, 0

    @property
    def last_metrics(self) -> dict[str, float]:
        """Metrics of the latest update block (empty before the first)."""
        return {k: float(v) for k, v in self._metrics.items()}

    # -- stepping -----------------------------------------------------------------------------
    def _next_action_without_update(self) -> np.ndarray:
        if self.env_steps < self.warmup_steps:
            return self._rng.uniform(-1.0, 1.0, self._adim).astype(np.float32)
        self.state, action = self._act_only(self.state, self._obs_flat)
        return np.asarray(action)

    def _stage(self, new_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pad the step's rows to n_step (fixed shape: one compilation) and assign slots."""
        n = self.sac.config.n_step
        padded = np.zeros((n, self._width), np.float32)
        idx = np.full(n, self.capacity, np.int32)
        for i, row in enumerate(new_rows):
            padded[i], idx[i] = row, self._pos
            self._pos = (self._pos + 1) % self.capacity
            self._size = min(self._size + 1, self.capacity)
        return padded, idx

    def _learn(self, new_rows: np.ndarray) -> np.ndarray:
        """Insert rows; after warm-up also update and return the policy's next action."""
        padded, idx = self._stage(new_rows)
        if self.env_steps < self.warmup_steps or self._size == 0:
            if len(new_rows):
                self._rows = _insert_jit(self._rows, padded, idx)
            return self._next_action_without_update()
        self.state, self._rows, action, self._metrics = self._fused(
            self.state, self._rows, padded, idx, np.int32(self._size), self._obs_flat,
            self._demo_rows,
        )  # fmt: skip
        action = np.asarray(action)
        self.updates += self.sac.config.utd
        self._check_nonfinite(float(self._metrics["update/nonfinite"]))
        return action

    def _check_nonfinite(self, flag: float) -> None:
        self._nonfinite_streak = self._nonfinite_streak + 1 if flag > 0 else 0
        limit = self.sac.config.max_nonfinite_updates
        if self._nonfinite_streak >= limit:
            raise RuntimeError(
                f"{self._nonfinite_streak} consecutive update blocks had non-finite losses "
                f"(config.max_nonfinite_updates={limit}); each was skipped. Check the env's "
                "rewards and observations for NaN/inf, or lower the learning rates"
            )

    def step(self) -> list[EpisodeStats]:
        """One env step, its replay insert and (after warm-up) one UTD block of updates."""
        action = self._action
        env_action = self.sac.action_spec.to_env(action)
        next_obs, reward, terminated, truncated, info = self.env.step(env_action)
        reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
        for sink in self.sinks:
            sink.add(self._obs_raw, env_action, reward, next_obs, terminated, truncated, info)
        next_flat = self.sac.obs_spec.flatten(next_obs)
        new_rows = self._builder.add(
            self._obs_flat, action, reward, next_flat, terminated, truncated
        )
        self.env_steps += 1
        self._ep_return += reward
        self._ep_len += 1
        finished: list[EpisodeStats] = []
        if terminated or truncated:
            success = info.get(self.success_key, info.get("is_success"))
            finished.append(
                EpisodeStats(self._ep_return, self._ep_len, None if success is None else bool(success))
            )  # fmt: skip
            self.episodes += 1
            self._begin_episode()
        else:
            self._obs_raw, self._obs_flat = next_obs, next_flat
        self._action = self._learn(new_rows)
        return finished

    def run(
        self,
        num_env_steps: int,
        callback: Callable[[Trainer, list[EpisodeStats]], None] | None = None,
    ) -> None:
        """Take ``num_env_steps`` steps; ``callback(trainer, finished_episodes)`` after each."""
        for _ in range(num_env_steps):
            finished = self.step()
            if callback is not None:
                callback(self, finished)

    # -- save / resume ------------------------------------------------------------------------
    def _counters(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "episodes": self.episodes,
            "pos": self._pos,
            "size": self._size,
            "capacity": self.capacity,
            "nonfinite_streak": self._nonfinite_streak,
            "np_rng": json.dumps(self._rng.bit_generator.state),
        }

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Save learner checkpoint (``learner/``), replay and counters; only at episode ends."""
        if self._ep_len != 0 or not self._builder.empty:
            raise RuntimeError(
                "Trainer.save: call it at an episode boundary (e.g. from the run() callback "
                "when finished episodes are reported); mid-episode state is not saved"
            )
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        save_checkpoint(
            path / "learner",
            self.state,
            self.sac.config,
            self.sac.obs_spec,
            self.sac.action_spec,
            extra=self._counters(),
        )
        tmp = path / ("tmp_" + TRAINER_FILE)
        np.savez(tmp, rows=np.asarray(self._rows[: self._size]), action=self._action)
        os.replace(tmp, path / TRAINER_FILE)
        return path

    def load(self, directory: str | os.PathLike[str]) -> None:
        """Restore a :meth:`save` (same env, config, seed and capacity) and continue from it."""
        path = Path(directory)
        self.state, extra = load_checkpoint(path / "learner", self.sac)
        for name, mine in (("seed", self.seed), ("capacity", self.capacity)):
            if extra[name] != mine:
                raise ValueError(
                    f"Trainer.load: the saved run has {name}={extra[name]} but this trainer has "
                    f"{name}={mine}; construct the Trainer with the saved value"
                )
        with np.load(path / TRAINER_FILE) as data:
            saved_rows, self._action = data["rows"], data["action"]
        rows = np.zeros((self.capacity + 1, self._width), np.float32)
        rows[: len(saved_rows)] = saved_rows
        self._rows = jnp.asarray(rows)
        self.env_steps, self.updates = extra["env_steps"], extra["updates"]
        self.episodes, self._nonfinite_streak = extra["episodes"], extra["nonfinite_streak"]
        self._pos, self._size = extra["pos"], extra["size"]
        self._rng.bit_generator.state = json.loads(extra["np_rng"])
        self._builder.reset()
        self._begin_episode()


# Jitted bodies live at module level with the learner as a static argument, so every Trainer
# built on the same SAC shares one compilation (tests and resumes build several). Only the
# replay rows are donated: callers may keep references to an old `trainer.state`.


def _insert_rows(rows: jax.Array, new_rows: jax.Array, idx: jax.Array) -> jax.Array:
    return rows.at[idx].set(new_rows)


_insert_jit = jax.jit(_insert_rows, donate_argnums=0)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=3)
def _fused_jit(
    sac: SAC,
    n_demo: int,
    state: SACState,
    rows: jax.Array,
    new_rows: jax.Array,
    idx: jax.Array,
    size: jax.Array,
    obs: jax.Array,
    demo_rows: jax.Array,
) -> tuple[SACState, jax.Array, jax.Array, dict[str, jax.Array]]:
    """Insert rows, sample utd minibatches on device, run the update block, act on ``obs``."""
    cfg = sac.config
    rows = _insert_rows(rows, new_rows, idx)
    rng, key_online, key_demo, key_act = jax.random.split(state.rng, 4)
    state = dataclasses.replace(state, rng=rng)
    parts = []
    if n_demo > 0:
        parts.append(demo_rows[jax.random.randint(key_demo, (cfg.utd, n_demo), 0, len(demo_rows))])
    if cfg.batch_size > n_demo:
        pick = jax.random.randint(key_online, (cfg.utd, cfg.batch_size - n_demo), 0, size)
        parts.append(rows[pick])
    sample = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=1)
    batch = unpack(sample, sac.obs_spec.dim, sac.action_spec.dim)
    state, metrics = sac.update_fn(state, batch, n_demo)
    action = sac.policy_fn(state.actor_params, obs, key_act)[0]
    return state, rows, action, metrics


@functools.partial(jax.jit, static_argnums=0)
def _pretrain_jit(
    sac: SAC, state: SACState, demo_rows: jax.Array
) -> tuple[SACState, dict[str, jax.Array]]:
    """``config.pretrain_steps`` demo-only steps (critic + BC actor), sampled on device."""
    cfg = sac.config

    def body(state: SACState, _: None) -> tuple[SACState, dict[str, jax.Array]]:
        rng, key = jax.random.split(state.rng)
        pick = jax.random.randint(key, (cfg.batch_size,), 0, len(demo_rows))
        batch = unpack(demo_rows[pick], sac.obs_spec.dim, sac.action_spec.dim)
        return sac.pretrain_step(dataclasses.replace(state, rng=rng), batch)

    state, metrics = jax.lax.scan(body, state, None, length=cfg.pretrain_steps)
    return state, {k: v[-1] for k, v in metrics.items()}


@functools.partial(jax.jit, static_argnums=0)
def _act_only_jit(sac: SAC, state: SACState, obs: jax.Array) -> tuple[SACState, jax.Array]:
    rng, key = jax.random.split(state.rng)
    return dataclasses.replace(state, rng=rng), sac.policy_fn(state.actor_params, obs, key)[0]
