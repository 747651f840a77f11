"""Behaviour cloning in JAX: an MLP from observations to (chunks of) actions, as a frozen base.

``train_bc`` fits ``tanh(MLP(normalise(obs)))`` to the demonstrations' actions (normalised to
[-1, 1]) by mean squared error, optionally predicting ``horizon`` actions per observation (an
action chunk, as ACT; Zhao et al. 2023): the targets of step t are the actions t..t+H-1 of its
episode, and the rows past the episode's end are left out of the loss (masked). Episodes are
split into training and validation sets (whole episodes, seeded), and the params with the
lowest validation loss are kept. Observations are standardised with the training split's mean
and standard deviation, saved with the params.

With camera keys in the spec (``handrail bc --pixels``) the policy reads each camera through
its own small conv encoder (:class:`~handrail.learners.agents.networks.CameraEncoders`),
trained with the rest end to end; every training batch shifts each frame by its own random
offset (DrQ's augmentation), validation and acting never do. Frames stay uint8 until the
encoder; the state keys beside them are standardised as above.

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
from handrail.learners.agents.networks import (
    IMAGE_NEEDS,
    IMAGE_TUPLES,
    MLP,
    CameraEncoders,
    image_checks,
)
from handrail.learners.images import check_cameras, random_shift
from handrail.learners.obs_norm import Pairs, extend, meeting_pairs
from handrail.learners.specs import ActionSpec, ObsSpec

PARAMS_FILE = "bc.msgpack"
"""The policy's params."""
META_FILE = "bc.json"
"""Config, specs, normaliser and validation loss."""
FORMAT_VERSION = 1
"""Bumped when the BC checkpoint layout changes."""


_TUPLE_FIELDS = ("hidden_dims", *IMAGE_TUPLES)
"""BCConfig's tuple fields: tuples of ints in the config, lists in its JSON."""


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
    image_features: int = 64
    """Camera keys (``--pixels``): features per camera of the image encoder."""
    image_channels: tuple[int, ...] = (32, 32, 32, 32)
    """Camera keys: channels of each convolution of the image encoder."""
    image_strides: tuple[int, ...] = (2, 2, 2, 1)
    """Camera keys: the stride of each convolution (as many as ``image_channels``)."""
    image_kernels: tuple[int, ...] = ()
    """Camera keys: the kernel size of each convolution (none: 3 everywhere); a kernel equal
    to its stride is a patch embedding, run as a matmul (fast on a CPU)."""
    image_shift: int = 4
    """Camera keys: each training batch shifts every frame by its own random offset of up to
    this many pixels (0 = off); validation and acting never do."""
    flow_steps: int = 0
    """0: regress the actions (mean squared error). K > 0: a flow-matching policy, a generative
    base: a velocity field trained to carry Gaussian noise to the demonstrations' action chunks
    (Lipman et al. 2023; pi0's action expert), integrated in K Euler steps when acting. Its
    noise is what a steering learner chooses (DSRL, Wagenmaker et al. 2025; the example
    ``handrail.examples.steer_flow_base``)."""
    flow_noise: float = 1.0
    """A flow policy acting alone draws its noise from N(0, flow_noise^2) (seeded by each
    episode's reset seed); 0 acts deterministically from zero noise."""

    def __post_init__(self) -> None:
        for name in _TUPLE_FIELDS:
            object.__setattr__(self, name, tuple(int(h) for h in getattr(self, name)))
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
            "flow_steps": self.flow_steps >= 0,
            "flow_noise": self.flow_noise >= 0,
            **image_checks(self.image_channels, self.image_strides, self.image_features,
                           self.image_shift, self.image_kernels),
        }  # fmt: skip
        bad = [f"{n}={getattr(self, n)!r}" for n, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"BCConfig: invalid {', '.join(bad)} (need widths/horizon/batch/steps >= 1, "
                "1 <= execute <= horizon, lr > 0, weight_decay >= 0, val_fraction in [0, 1), "
                "flow_steps and flow_noise >= 0, "
                f"{IMAGE_NEEDS})"
            )

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict of every field."""
        out = dataclasses.asdict(self)
        return {**out, **{k: list(out[k]) for k in _TUPLE_FIELDS}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BCConfig:
        """Inverse of :meth:`to_json` (a record from before the camera fields gets their
        defaults)."""
        return cls(**data)

    def net(self, action_dim: int, cameras: tuple[str, ...] = ()) -> BCNet:
        """The policy network for ``action_dim`` actions, reading ``cameras`` through an
        encoder each (none: the state alone)."""
        return BCNet(self.hidden_dims, self.horizon, action_dim, cameras, self.image_channels,
                     self.image_strides, self.image_features, self.image_kernels,
                     self.flow_steps > 0)  # fmt: skip


class BCNet(nn.Module):
    """MLP -> ``horizon * action_dim`` outputs squashed by tanh, shaped (..., horizon, A); with
    ``cameras``, the MLP reads their encoder's features after the state.

    A ``flow`` net also reads a noisy chunk ``noisy`` (..., horizon, A) and its time ``t``
    (..., 1) in [0, 1] (with sine features) and returns the velocity that carries it towards
    the data, unsquashed.
    """

    hidden_dims: tuple[int, ...]
    horizon: int
    action_dim: int
    cameras: tuple[str, ...] = ()
    image_channels: tuple[int, ...] = (32, 32, 32, 32)
    image_strides: tuple[int, ...] = (2, 2, 2, 1)
    image_features: int = 64
    image_kernels: tuple[int, ...] = ()
    flow: bool = False

    @nn.compact
    def __call__(
        self,
        obs: jax.Array,
        frames: tuple[jax.Array, ...] = (),
        noisy: jax.Array | None = None,
        t: jax.Array | None = None,
    ) -> jax.Array:
        x = obs
        if self.cameras:  # uint8 frames, one (..., H, W, C) per camera
            encoder = CameraEncoders(self.cameras, self.image_channels, self.image_strides,
                                     self.image_features, self.image_kernels,
                                     name="encoder")  # fmt: skip
            x = jnp.concatenate([obs, encoder(frames)], axis=-1)
        shape = (*obs.shape[:-1], self.horizon, self.action_dim)
        if self.flow:
            if noisy is None or t is None:
                raise ValueError("a flow BCNet needs the noisy chunk and its time")
            angles = t * jnp.pi * 2.0 ** jnp.arange(4)
            x = jnp.concatenate([x, noisy.reshape((*obs.shape[:-1], -1)), t,
                                 jnp.sin(angles), jnp.cos(angles)], axis=-1)  # fmt: skip
        x = MLP(self.hidden_dims)(x)
        out = nn.Dense(self.horizon * self.action_dim)(x).reshape(shape)
        return out if self.flow else jnp.tanh(out)


def flow_sample(
    net: BCNet, params: Any, obs: jax.Array, frames: tuple[jax.Array, ...], noise: jax.Array,
    steps: int,
) -> jax.Array:  # fmt: skip
    """The chunks (..., horizon, A) a flow ``net`` makes of ``noise`` (same shape) on ``obs``:
    ``steps`` Euler steps of its velocity from t = 0 to 1, clipped to [-1, 1]."""
    chunk, dt = noise, 1.0 / steps
    for i in range(steps):
        t = jnp.full((*obs.shape[:-1], 1), i * dt, obs.dtype)
        velocity: jax.Array = net.apply({"params": params}, obs, frames, chunk, t)  # type: ignore[assignment]
        chunk = chunk + dt * velocity
    return jnp.clip(chunk, -1.0, 1.0)


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
    state_spec = obs_spec.state_spec()  # the spec itself without cameras
    obs = state_spec.flatten(data.obs)
    frames = tuple(jnp.asarray(obs_spec.frames(k, data.obs[k])) for k in obs_spec.images)
    pairs: Pairs = ()
    if config.relative_inputs and len(lengths) > 1:  # where each episode starts and ends
        first, last = np.zeros(len(obs), bool), np.zeros(len(obs), bool)
        first[starts[lengths > 0]] = True
        last[(starts + lengths - 1)[lengths > 0]] = True
        pairs = meeting_pairs(state_spec, obs, first, last)
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
    net = config.net(action_spec.dim, obs_spec.images)
    key = jax.random.PRNGKey(config.seed)
    flow = config.flow_steps > 0
    dummy = jnp.zeros((1, config.horizon, action_spec.dim)) if flow else None
    params = net.init(key, jnp.zeros((1, obs.shape[1])), tuple(f[:1] for f in frames), dummy,
                      jnp.zeros((1, 1)) if flow else None)["params"]  # fmt: skip
    tx = optax.adamw(config.lr, weight_decay=config.weight_decay)

    def sums(
        p: Any, rows: jax.Array, k: jax.Array | None, k_flow: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """The masked squared error of ``rows`` summed, and their mask's sum; ``k``: shift
        each frame by its own random offset (training only); ``k_flow``: a flow policy's
        noise and times (the error is then its velocity's)."""
        seen = tuple(f[rows] for f in frames)
        if seen and k is not None and config.image_shift > 0:
            keys = jax.random.split(k, len(seen))
            shift = config.image_shift
            seen = tuple(random_shift(f, kk, shift) for f, kk in zip(seen, keys, strict=True))
        target = targets_d[rows]
        if flow:
            assert k_flow is not None
            k_noise, k_time = jax.random.split(k_flow)
            noise = jax.random.normal(k_noise, target.shape)
            t = jax.random.uniform(k_time, (target.shape[0], 1))
            noisy = (1.0 - t[:, :, None]) * noise + t[:, :, None] * target
            pred = net.apply({"params": p}, norm_d[rows], seen, noisy, t)
            target = target - noise  # the straight path's velocity
        else:
            pred = net.apply({"params": p}, norm_d[rows], seen)
        err = jnp.mean((pred - target) ** 2, axis=-1)  # type: ignore[operator]
        return jnp.sum(err * mask_d[rows]), jnp.sum(mask_d[rows])

    def loss_fn(p: Any, rows: jax.Array, k: jax.Array | None, k_flow: jax.Array | None) -> Any:
        total, weight = sums(p, rows, k, k_flow)
        return total / jnp.maximum(weight, 1.0)

    norm_d, targets_d, mask_d = (jnp.asarray(a) for a in (norm, targets, mask))
    train_d = jnp.asarray(train_rows)
    batch = min(config.batch_size, len(train_rows))

    def one(carry: tuple[Any, Any], kk: jax.Array) -> tuple[tuple[Any, Any], jax.Array]:
        p, opt = carry
        kk, k_flow = jax.random.split(kk) if flow else (kk, None)
        # A state policy draws its rows from ``kk`` itself, as before cameras came in.
        k_rows, k_shift = jax.random.split(kk) if frames else (kk, None)
        rows = train_d[jax.random.randint(k_rows, (batch,), 0, train_d.shape[0])]
        loss, grads = jax.value_and_grad(loss_fn)(p, rows, k_shift, k_flow)
        updates, opt = tx.update(grads, opt, p)
        return (optax.apply_updates(p, updates), opt), loss

    val_chunks = [
        jnp.asarray(c) for c in np.array_split(val_rows, max(1, -(-len(val_rows) // 512)))
    ]

    val_sums = jax.jit(sums)
    # A flow policy's validation loss draws the same noise and times at every evaluation.
    val_keys = jax.random.split(jax.random.PRNGKey(config.seed + 1), len(val_chunks))

    def validate(p: Any) -> jax.Array:
        """The validation loss, in chunks of at most 512 rows (frames need the memory)."""
        parts = ([val_sums(p, rows, None, k if flow else None)
                  for rows, k in zip(val_chunks, val_keys, strict=True)]
                 if val_rows.size else [])  # fmt: skip
        if not parts:
            return jnp.asarray(jnp.nan)
        return sum(t for t, _ in parts) / jnp.maximum(sum(w for _, w in parts), 1.0)

    if frames:  # XLA:CPU runs convolutions far slower inside a scan: one jitted step a call
        step = jax.jit(one)

        def block(p: Any, opt: Any, k: jax.Array) -> tuple[Any, Any, jax.Array, Any]:
            losses = []
            for kk in jax.random.split(k, config.eval_every):
                (p, opt), loss = step((p, opt), kk)
                losses.append(loss)
            return p, opt, jnp.mean(jnp.stack(losses)), validate(p)
    else:

        @jax.jit
        def scanned(p: Any, opt: Any, k: jax.Array) -> tuple[Any, Any, jax.Array]:
            (p, opt), losses = jax.lax.scan(one, (p, opt), jax.random.split(k, config.eval_every))
            return p, opt, jnp.mean(losses)

        def block(p: Any, opt: Any, k: jax.Array) -> tuple[Any, Any, jax.Array, Any]:
            p, opt, loss = scanned(p, opt, k)
            return p, opt, loss, validate(p)  # the block's params, not those it began with

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
    return load_bc(path, encoder).per_step()


def load_bc(path: str | Path, encoder: Any = None) -> BCPolicy:
    """A BC checkpoint's policy, chunks and all (:class:`BCPolicy`); see :func:`load_bc_policy`.

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
    state_spec, cameras = obs_spec.state_spec(), obs_spec.images
    net = config.net(action_spec.dim, cameras)
    zeros = tuple(jnp.zeros((1, *shape), jnp.uint8) for *_, shape in obs_spec.image_slices())
    flow = config.flow_steps > 0
    template = net.init(
        jax.random.PRNGKey(0), jnp.zeros((1, state_spec.dim + len(pairs))), zeros,
        jnp.zeros((1, config.horizon, action_spec.dim)) if flow else None,
        jnp.zeros((1, 1)) if flow else None,
    )["params"]  # fmt: skip
    params = flax.serialization.from_bytes(template, (path / PARAMS_FILE).read_bytes())
    mean = np.asarray(meta["obs_mean"], np.float32)
    std = np.asarray(meta["obs_std"], np.float32)
    if flow:
        apply = jax.jit(lambda x, frames, noise: flow_sample(net, params, x, frames, noise,
                                                             config.flow_steps))  # fmt: skip
    else:
        apply = jax.jit(lambda x, frames, _: net.apply({"params": params}, x, frames))
    shape = (config.horizon, action_spec.dim)

    def decode(obs: Mapping[str, Any], noise: np.ndarray | None = None) -> Any:
        if cameras:
            check_cameras(obs, cameras, f"the bc policy {path}")
        flat = (extend(state_spec.flatten(obs), pairs) - mean) / std
        frames = tuple(obs_spec.frames(k, obs[k])[None] for k in cameras)
        given = None  # a regression policy reads no noise: nothing to build or copy per step
        if flow:
            given = jnp.asarray(np.zeros(shape, np.float32) if noise is None else noise)[None]
        return action_spec.to_env(np.asarray(apply(jnp.asarray(flat[None]), frames, given))[0])

    if encoder is not None:
        from handrail.learners.agents.encoder import encoded_policy

        decode = encoded_policy(decode, encoder)
    return BCPolicy(decode, config, action_spec.dim, name=f"bc:{path}")


class BCPolicy:
    """A BC checkpoint's policy: :meth:`chunk` is its (horizon, A) actions on an observation,
    in env units; called, it is a per-step :class:`BasePolicy` (a horizon-1 chunk's action).

    A flow policy (``config.flow_steps > 0``) decodes noise into the chunk: :meth:`chunk` draws
    it from N(0, flow_noise^2), seeded by each :meth:`reset`'s seed; :meth:`decode` takes it
    given (a steering learner's). A regression policy's :meth:`decode` ignores the noise.

    Attributes:
        shape: (horizon, action_dim) of a chunk, and of its noise.
    """

    def __init__(self, decode: Callable[..., np.ndarray], config: BCConfig, action_dim: int,
                 name: str) -> None:  # fmt: skip
        self.decode, self.config, self.name = decode, config, name
        self.shape = (config.horizon, action_dim)
        self.noise = config.flow_noise if config.flow_steps > 0 else 0.0
        self.rng = np.random.default_rng()

    def chunk(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The chunk to act on (a flow policy's on its own noise)."""
        if self.noise == 0:
            return self.decode(obs)
        return self.decode(obs, self.noise * self.rng.standard_normal(self.shape, np.float32))

    def per_step(self, query: Callable[[Mapping[str, np.ndarray]], Any] | None = None) -> Any:
        """A per-step :class:`BasePolicy` that plays the chunks of ``query`` (obs -> chunk;
        default :meth:`chunk`) as the checkpoint was trained to: the first action of each
        (horizon 1), else every ``execute`` steps or temporally ensembled (ChunkedBase)."""
        if query is None and self.config.horizon == 1:
            return self
        query = query or self.chunk
        if self.config.horizon == 1:
            return CallableBase(lambda obs: np.asarray(query(obs))[0], name=self.name)
        return ChunkedBase(query, execute=self.config.execute,
                           temporal_ensemble=self.config.temporal_ensemble,
                           reset_fn=self.reset)  # fmt: skip

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.chunk(obs)[0], np.float32)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
