"""Behaviour cloning in JAX: an MLP from observations to (chunks of) actions, as a frozen base.

``train_bc`` fits ``tanh(MLP(normalise(obs)))`` to the demonstrations' actions (normalised to
[-1, 1]) by mean squared error, optionally predicting ``horizon`` actions per observation (an
action chunk, as ACT; Zhao et al. 2023): the targets of step t are the actions t..t+H-1 of its
episode, and the rows past the episode's end are left out of the loss (masked). Episodes are
split into training and validation sets (whole episodes, seeded), and the params with the
lowest validation loss are kept. Observations are standardised with the training split's mean
and standard deviation, saved with the params.

A checkpoint folder holds ``bc.msgpack`` (flax.serialization) and ``bc.json`` (config, specs,
normaliser, validation loss); :func:`load_bc_policy` turns it into a
:class:`~handrail.control.base_policy.BasePolicy`, chunked (queried every ``execute`` steps or
temporally ensembled) when ``horizon > 1``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flax.linen as nn
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from handrail.control.base_policy import BasePolicy, CallableBase, ChunkedBase
from handrail.learners.agents.networks import MLP
from handrail.learners.obs_norm import Pairs, extend, meeting_pairs
from handrail.learners.specs import ActionSpec, ObsSpec

PARAMS_FILE = "bc.msgpack"
"""The policy's params."""
META_FILE = "bc.json"
"""Config, specs, normaliser and validation loss."""
FORMAT_VERSION = 1
"""Bumped when the BC checkpoint layout changes."""


@dataclass(frozen=True)
class BCConfig:
    """Behaviour-cloning settings."""

    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layer widths."""
    horizon: int = 1
    """Actions predicted per observation (an action chunk when > 1)."""
    execute: int = 1
    """Actions of each chunk played before the next query (1..horizon)."""
    temporal_ensemble: bool = False
    """Query every step and average every prediction for the current step (ACT)."""
    lr: float = 1e-3
    """Adam learning rate."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    batch_size: int = 256
    """Rows per gradient step."""
    steps: int = 3000
    """Gradient steps."""
    eval_every: int = 100
    """Gradient steps between validation losses (the best params are kept)."""
    val_fraction: float = 0.1
    """Share of the episodes held out for validation (at least one when there are two)."""
    seed: int = 0
    """Seeds the split, the init and the minibatches."""
    relative_inputs: bool = True
    """Also read the differences of the columns every demonstration brings together (the
    gripper and the object: ``obs_norm.meeting_pairs``), as ``handrail train`` does."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_dims", tuple(int(h) for h in self.hidden_dims))
        checks = {
            "hidden_dims": bool(self.hidden_dims) and min(self.hidden_dims) >= 1,
            "horizon": self.horizon >= 1,
            "execute": 1 <= self.execute <= self.horizon,
            "lr": self.lr > 0,
            "weight_decay": self.weight_decay >= 0,
            "batch_size": self.batch_size >= 1,
            "steps": self.steps >= 1,
            "eval_every": self.eval_every >= 1,
            "val_fraction": 0.0 <= self.val_fraction < 1.0,
        }
        bad = [f"{n}={getattr(self, n)!r}" for n, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"BCConfig: invalid {', '.join(bad)} (need widths/horizon/batch/steps >= 1, "
                "1 <= execute <= horizon, lr > 0, weight_decay >= 0, val_fraction in [0, 1))"
            )

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict of every field."""
        return {**dataclasses.asdict(self), "hidden_dims": list(self.hidden_dims)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BCConfig:
        """Inverse of :meth:`to_json`."""
        return cls(**{**data, "hidden_dims": tuple(data["hidden_dims"])})


class BCNet(nn.Module):
    """MLP -> ``horizon * action_dim`` outputs squashed by tanh, shaped (..., horizon, A)."""

    hidden_dims: tuple[int, ...]
    horizon: int
    action_dim: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = MLP(self.hidden_dims)(obs)
        out = nn.Dense(self.horizon * self.action_dim)(x)
        return jnp.tanh(out).reshape((*obs.shape[:-1], self.horizon, self.action_dim))


@dataclass(frozen=True)
class BCResult:
    """What :func:`train_bc` returns."""

    params: Any
    """The params with the lowest validation loss (the last ones without a validation set)."""
    obs_mean: np.ndarray
    """Training split's observation mean (flat)."""
    obs_std: np.ndarray
    """Training split's observation std (flat, floored)."""
    history: list[dict[str, float | None]]
    """One record per evaluation: step, train loss, validation loss (None without one)."""
    best_val_loss: float | None
    """Lowest validation loss (None without validation episodes)."""
    train_episodes: list[int]
    """Episode indices (in the data) trained on."""
    val_episodes: list[int]
    """Episode indices held out."""
    pairs: Pairs = ()
    """Columns whose differences the policy also reads (``relative_inputs``)."""


def split_episodes(
    num_episodes: int, val_fraction: float, seed: int
) -> tuple[list[int], list[int]]:
    """Whole episodes into (train, validation), seeded; >= 1 validation episode when possible."""
    order = np.random.default_rng(seed).permutation(num_episodes).tolist()
    n_val = (
        0 if val_fraction == 0 or num_episodes < 2 else max(1, round(val_fraction * num_episodes))
    )
    return sorted(order[n_val:]), sorted(order[:n_val])


def chunk_targets(
    actions: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    horizon: int,
    selected: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For every step t: actions t..t+H-1 of its episode (T, H, A) and their mask (T, H).

    Rows past the episode's end repeat its last action and are masked out (0), as are the
    actions of steps not ``selected`` (a boolean per step; None: every step).
    """
    total, dim = actions.shape
    targets = np.zeros((total, horizon, dim), np.float32)
    mask = np.zeros((total, horizon), np.float32)
    for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
        end = start + length
        for k in range(horizon):
            src = np.minimum(np.arange(start, end) + k, end - 1)
            targets[start:end, k] = actions[src]
            mask[start:end, k] = (np.arange(start, end) + k < end).astype(np.float32)
            if selected is not None:
                mask[start:end, k] *= selected[src]
    return targets, mask


def train_bc(
    data: Any,
    obs_spec: ObsSpec,
    action_spec: ActionSpec,
    config: BCConfig,
    *,
    progress: bool = False,
    on_eval: Callable[[dict[str, float | None]], None] | None = None,
    selected: np.ndarray | None = None,
) -> BCResult:
    """Fit the policy to ``data`` (``handrail.demos.EpisodeData``); see the module docstring.

    ``selected`` (a boolean per step; None: every step) clones only those steps' actions, e.g.
    a person's corrections in a rollout: the other steps are neither inputs nor chunk targets.
    """
    starts = np.asarray(data.episode_starts, np.int64)
    lengths = np.asarray(data.episode_lengths, np.int64)
    if len(lengths) == 0 or int(lengths.sum()) == 0:
        raise ValueError("behaviour cloning needs at least one episode with steps")
    obs = obs_spec.flatten(data.obs)
    pairs: Pairs = ()
    if config.relative_inputs and len(lengths) > 1:  # where each episode starts and ends
        first, last = np.zeros(len(obs), bool), np.zeros(len(obs), bool)
        first[starts[lengths > 0]] = True
        last[(starts + lengths - 1)[lengths > 0]] = True
        pairs = meeting_pairs(obs_spec, obs, first, last)
        obs = extend(obs, pairs)
    actions = action_spec.from_env(np.asarray(data.action, np.float32))
    if selected is not None:
        selected = np.asarray(selected, bool)
        if selected.shape != (len(actions),) or not selected.any():
            raise ValueError(
                f"selected must be a boolean per step ({len(actions)}) with at least one true, "
                f"got shape {selected.shape} with {int(selected.sum())} true"
            )
    targets, mask = chunk_targets(actions, starts, lengths, config.horizon, selected)
    train_eps, val_eps = split_episodes(len(lengths), config.val_fraction, config.seed)

    def rows(episodes: list[int]) -> np.ndarray:
        parts = [np.arange(starts[e], starts[e] + lengths[e]) for e in episodes]
        out = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return out if selected is None else out[selected[out]]

    train_rows, val_rows = rows(train_eps), rows(val_eps)
    if not train_rows.size:
        raise ValueError("the training episodes hold no selected step; lower --bc.val-fraction")
    mean = obs[train_rows].mean(axis=0)
    std = np.maximum(obs[train_rows].std(axis=0), 1e-3)
    norm = ((obs - mean) / std).astype(np.float32)
    net = BCNet(config.hidden_dims, config.horizon, action_spec.dim)
    key = jax.random.PRNGKey(config.seed)
    params = net.init(key, jnp.zeros((1, obs.shape[1])))["params"]
    tx = optax.adamw(config.lr, weight_decay=config.weight_decay)

    def loss_fn(p: Any, x: jax.Array, y: jax.Array, m: jax.Array) -> jax.Array:
        pred: jax.Array = net.apply({"params": p}, x)  # type: ignore[assignment]
        err = jnp.mean((pred - y) ** 2, axis=-1)
        return jnp.sum(err * m) / jnp.maximum(jnp.sum(m), 1.0)

    x_train, y_train, m_train = (jnp.asarray(a[train_rows]) for a in (norm, targets, mask))
    x_val, y_val, m_val = (jnp.asarray(a[val_rows]) for a in (norm, targets, mask))
    batch = min(config.batch_size, len(train_rows))

    @jax.jit
    def block(p: Any, opt: Any, k: jax.Array) -> tuple[Any, Any, jax.Array, Any]:
        def one(carry: tuple[Any, Any], kk: jax.Array) -> tuple[tuple[Any, Any], jax.Array]:
            p, opt = carry
            idx = jax.random.randint(kk, (batch,), 0, x_train.shape[0])
            loss, grads = jax.value_and_grad(loss_fn)(p, x_train[idx], y_train[idx], m_train[idx])
            updates, opt = tx.update(grads, opt, p)
            return (optax.apply_updates(p, updates), opt), loss

        (p, opt), losses = jax.lax.scan(one, (p, opt), jax.random.split(k, config.eval_every))
        val = loss_fn(p, x_val, y_val, m_val) if val_rows.size else jnp.nan
        return p, opt, jnp.mean(losses), val

    opt = tx.init(params)
    best, best_val = params, math.inf
    history: list[dict[str, float | None]] = []
    blocks = math.ceil(config.steps / config.eval_every)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=blocks * config.eval_every, desc="handrail bc", unit="step")
    for i in range(blocks):
        key, sub = jax.random.split(key)
        params, opt, train_loss, val_loss = block(params, opt, sub)
        record: dict[str, float | None] = {
            "step": (i + 1) * config.eval_every, "train_loss": float(train_loss),
            "val_loss": float(val_loss) if val_rows.size else None,
        }  # fmt: skip
        history.append(record)
        if on_eval is not None:
            on_eval(record)
        if not val_rows.size or float(val_loss) < best_val:
            best, best_val = params, float(val_loss) if val_rows.size else best_val
        if bar is not None:
            bar.update(config.eval_every)
            bar.set_postfix_str(f"train {float(train_loss):.4f} val {float(val_loss):.4f}")
    if bar is not None:
        bar.close()
    return BCResult(
        params=jax.device_get(best), obs_mean=mean, obs_std=std, history=history,
        best_val_loss=best_val if val_rows.size else None, train_episodes=train_eps,
        val_episodes=val_eps, pairs=pairs,
    )  # fmt: skip


def save_bc(
    path: str | Path, result: BCResult, config: BCConfig, obs_spec: ObsSpec,
    action_spec: ActionSpec, extra: Mapping[str, Any] | None = None,
) -> Path:  # fmt: skip
    """Write a BC checkpoint into the (existing, empty) folder ``path``."""
    path = Path(path)
    (path / PARAMS_FILE).write_bytes(flax.serialization.to_bytes(result.params))
    meta = {
        "kind": "bc", "format_version": FORMAT_VERSION, "config": config.to_json(),
        "obs_spec": obs_spec.to_json(), "action_spec": action_spec.to_json(),
        "obs_mean": result.obs_mean.tolist(), "obs_std": result.obs_std.tolist(),
        "best_val_loss": result.best_val_loss, "extra": dict(extra or {}),
        "pairs": [list(pair) for pair in result.pairs],
    }  # fmt: skip
    (path / META_FILE).write_text(json.dumps(meta, indent=1))
    return path


def load_bc_policy(path: str | Path, encoder: Any = None) -> BasePolicy:
    """A BC checkpoint as a frozen base policy (env-unit actions; chunked if horizon > 1);
    ``encoder``: the image encoder it was cloned through (its run's copy), which then reads the
    cameras of every observation.

    Raises:
        ValueError: the folder is not a BC checkpoint (a SAC checkpoint is named as such).
    """
    path = Path(path)
    if not (path / META_FILE).is_file():
        hint = (" it is a SAC checkpoint: use run:PATH as a base, or load_policy"
                if (path / "state.msgpack").is_file() else "")  # fmt: skip
        raise ValueError(f"{path} is not a handrail bc checkpoint (no {META_FILE});{hint}")
    meta = json.loads((path / META_FILE).read_text())
    if meta.get("kind") != "bc" or meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: {META_FILE} is not a version-{FORMAT_VERSION} BC checkpoint")
    config = BCConfig.from_json(meta["config"])
    obs_spec, action_spec = (
        ObsSpec.from_json(meta["obs_spec"]),
        ActionSpec.from_json(meta["action_spec"]),
    )
    pairs = tuple((int(i), int(j)) for i, j in meta.get("pairs", ()))
    net = BCNet(config.hidden_dims, config.horizon, action_spec.dim)
    template = net.init(jax.random.PRNGKey(0), jnp.zeros((1, obs_spec.dim + len(pairs))))["params"]
    params = flax.serialization.from_bytes(template, (path / PARAMS_FILE).read_bytes())
    mean = np.asarray(meta["obs_mean"], np.float32)
    std = np.asarray(meta["obs_std"], np.float32)
    apply = jax.jit(lambda x: net.apply({"params": params}, x))

    def chunk(obs: Mapping[str, np.ndarray]) -> np.ndarray:
        flat = (extend(obs_spec.flatten(obs), pairs) - mean) / std
        return action_spec.to_env(np.asarray(apply(jnp.asarray(flat[None])))[0])

    query: Callable[[Mapping[str, Any]], Any] = chunk
    if encoder is not None:
        from handrail.learners.agents.encoder import encoded_policy

        query = encoded_policy(chunk, encoder)

    if config.horizon == 1:
        return CallableBase(lambda obs: query(obs)[0], name=f"bc:{path}")
    return ChunkedBase(query, execute=config.execute, temporal_ensemble=config.temporal_ensemble)
