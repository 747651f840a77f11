"""A learned success detector: a binary classifier on camera frames (optionally with state).

A robot gives no success flag. As SERL and HIL-SERL do, a small classifier is trained on
labelled frames (``handrail label``: the frame after each step marked success or failure) and
then stands in for the task's reward: 1 and the end of the episode where it fires.

- :func:`frames_dataset` gathers labelled frames from episode stores: the frames *after* each
  labelled step (the step's next observation, or the episode's final one), resized once to the
  classifier's size, stored uint8.
- :func:`train_classifier` fits :class:`SuccessNet` (one :class:`ConvEncoder` per camera, the
  state standardised beside them, an MLP, one logit) by binary cross-entropy on balanced
  minibatches (half success frames: they are rare), each frame shifted at random per sample.
  Whole episodes are held out for validation; the params with the lowest validation loss are
  kept, and the threshold is chosen on the validation frames only: the lowest probability whose
  precision reaches ``target_precision`` (the most recall at that precision).
- :func:`save_classifier` writes ``classifier.msgpack`` and ``classifier.json`` (config,
  cameras, frame sizes, state normaliser, threshold, validation metrics, what it was trained
  on); :class:`SuccessClassifier` loads it and scores observations.

The env side, :class:`ClassifierReward`, lives in :mod:`handrail.learners.agents.learned_reward`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flax.linen as nn
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from handrail.learners.agents.bc import split_episodes
from handrail.learners.agents.networks import MLP, ConvEncoder
from handrail.learners.images import (
    check_frames,
    progress_bar,
    random_shift,
    read_model_meta,
    resize,
    to_unit,
)

PARAMS_FILE = "classifier.msgpack"
"""The classifier's params."""
META_FILE = "classifier.json"
"""Config, cameras, state normaliser, threshold and validation metrics."""
FORMAT_VERSION = 1
"""Bumped when the classifier's file layout changes."""


@dataclass(frozen=True)
class ClassifierConfig:
    """Settings of the success classifier."""

    cameras: tuple[str, ...] = ()
    """Camera keys it reads (default: every camera of the stores)."""
    state_keys: tuple[str, ...] = ()
    """State keys it also reads (default: none, frames only, as a robot's success looks)."""
    image_size: int = 64
    """Frames are resized once to this height and width."""
    channels: tuple[int, ...] = (16, 32, 32)
    """Convolution widths of each camera's encoder."""
    strides: tuple[int, ...] = (4, 2, 2)
    """Convolution strides (one per width): a first stride of 4 keeps an update near 20 ms on
    a CPU core (batch 64, two 64x64 cameras; 2, 2, 2 took 190 ms) for a coarse judgement."""
    features: int = 32
    """Feature size of each camera."""
    hidden_dims: tuple[int, ...] = (64,)
    """Hidden widths of the head."""
    lr: float = 1e-3
    """AdamW learning rate."""
    weight_decay: float = 1e-3
    """AdamW weight decay."""
    batch_size: int = 64
    """Frames per gradient step (half success, half failure)."""
    steps: int = 1500
    """Gradient steps."""
    eval_every: int = 100
    """Gradient steps between validation losses (the best params are kept)."""
    shift_px: int = 4
    """Random shift of each training frame, in pixels (0: none)."""
    val_fraction: float = 0.25
    """Share of the episodes with success frames, and of those without, held out."""
    target_precision: float = 0.99
    """The threshold keeps the most validation recall at this precision: a false success
    rewards a failure and ends its episode, a missed one only delays the reward."""
    seed: int = 0
    """Seeds the split, the init, the minibatches and the shifts."""

    def __post_init__(self) -> None:
        for name in ("cameras", "state_keys", "channels", "strides", "hidden_dims"):
            value = getattr(self, name)
            object.__setattr__(self, name, tuple(value) if not isinstance(value, str) else (value,))
        checks = {
            "image_size": self.image_size >= 8,
            "channels": bool(self.channels) and len(self.channels) == len(self.strides)
            and min(self.channels) >= 1 and min(self.strides) >= 1,
            "features": self.features >= 1,
            "hidden_dims": min(self.hidden_dims, default=1) >= 1,
            "lr": self.lr > 0,
            "weight_decay": self.weight_decay >= 0,
            "batch_size": self.batch_size >= 2,
            "steps": self.steps >= 1,
            "eval_every": self.eval_every >= 1,
            "shift_px": self.shift_px >= 0,
            "val_fraction": 0.0 < self.val_fraction < 1.0,
            "target_precision": 0.0 < self.target_precision <= 1.0,
        }  # fmt: skip
        bad = [f"{n}={getattr(self, n)!r}" for n, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"ClassifierConfig: invalid {', '.join(bad)} (need image_size >= 8, one stride "
                "per channel width, widths/strides/features >= 1, lr > 0, weight_decay >= 0, "
                "batch_size >= 2, steps/eval_every >= 1, shift_px >= 0, val_fraction in (0, 1), "
                "target_precision in (0, 1])"
            )

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict of every field."""
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items()}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClassifierConfig:
        """Inverse of :meth:`to_json`."""
        return cls(**data)


class SuccessNet(nn.Module):
    """Frames of each camera (uint8) and a standardised state -> one success logit."""

    cameras: tuple[str, ...]
    channels: tuple[int, ...]
    strides: tuple[int, ...]
    features: int
    hidden_dims: tuple[int, ...]

    @nn.compact
    def __call__(self, frames: Mapping[str, jax.Array], state: jax.Array) -> jax.Array:
        parts = [
            ConvEncoder(self.channels, self.strides, self.features, name=f"encoder_{cam}")(
                to_unit(frames[cam])
            )
            for cam in self.cameras
        ]
        x = jnp.concatenate([*parts, state], axis=-1)
        x = MLP(self.hidden_dims, layer_norm=True)(x)
        return nn.Dense(1)(x)[..., 0]


@dataclass(frozen=True)
class FramesDataset:
    """Labelled frames: what :func:`train_classifier` learns from."""

    frames: dict[str, np.ndarray]
    """uint8 (N, S, S, C) per camera, at the classifier's size."""
    state: np.ndarray
    """(N, D) float32 state beside them (D = 0 without state keys)."""
    label: np.ndarray
    """(N,) bool: success."""
    episode: np.ndarray
    """(N,) int: which episode (numbered over all stores) each frame comes from."""
    frame_shapes: dict[str, tuple[int, ...]]
    """Each camera's frame shape as stored (before the resize)."""
    state_shapes: dict[str, tuple[int, ...]]
    """Each state key's shape."""
    sources: tuple[str, ...] = ()
    """What the labels came from, per store (for the classifier's record)."""
    train_only: np.ndarray | None = None
    """(N,) bool: frames never held out for validation (a person's corrections: each one is
    there to teach; the threshold stays chosen on the episodes held out before them)."""

    def __len__(self) -> int:
        return len(self.label)


def with_failed_episodes(
    dataset: FramesDataset, episodes: Sequence[Mapping[str, np.ndarray]], config: ClassifierConfig
) -> FramesDataset:
    """``dataset`` plus ``episodes`` (each a dict of per-step arrays of the classifier's cameras
    and state keys, the frames after its steps), every frame of them labelled failure and kept
    in training (:attr:`FramesDataset.train_only`): a person's "that was no success".

    Raises:
        ValueError: an episode lacks a camera or state key of ``dataset``, or holds no frame.
    """
    cameras, keys = tuple(dataset.frames), tuple(dataset.state_shapes)
    frames = {c: [dataset.frames[c]] for c in cameras}
    state, episode = [dataset.state], [dataset.episode]
    first = int(dataset.episode.max()) + 1 if len(dataset) else 0
    for i, ep in enumerate(episodes):
        missing = [k for k in (*cameras, *config.state_keys) if k not in ep]
        n = len(ep[cameras[0]]) if cameras[0] in ep else 0
        if missing or n == 0:
            raise ValueError(f"a failed episode to add lacks {missing or 'frames'}: it needs "
                             f"{[*cameras, *config.state_keys]}")  # fmt: skip
        for cam in cameras:
            check_frames(cam, ep[cam])
            frames[cam].append(resize(np.asarray(ep[cam]), config.image_size))
        state.append(_flat_state(ep, keys, n))
        episode.append(np.full(n, first + i, dataset.episode.dtype))
    added = sum(len(e) for e in episode[1:])
    pinned = np.zeros(len(dataset), bool) if dataset.train_only is None else dataset.train_only
    return dataclasses.replace(
        dataset, frames={c: np.concatenate(parts) for c, parts in frames.items()},
        state=np.concatenate(state), label=np.concatenate([dataset.label, np.zeros(added, bool)]),
        episode=np.concatenate(episode), train_only=np.concatenate([pinned, np.ones(added, bool)]),
    )  # fmt: skip


def frames_dataset(
    stores: Sequence[tuple[Any, np.ndarray, str]], config: ClassifierConfig
) -> FramesDataset:
    """Labelled frames of ``stores``: (``EpisodeReader``, int8 label per step, description).

    A step's frame is the observation after it (the step's label says what that frame shows).
    Steps labelled -1 are left out.

    Raises:
        ValueError: a store lacks a camera or state key (naming what it has), the stores'
            cameras differ, a camera is not uint8 frames, or no frame is labelled.
    """
    cameras = config.cameras
    frames: dict[str, list[np.ndarray]] = {}
    state, labels, episodes, sources = [], [], [], []
    frame_shapes: dict[str, tuple[int, ...]] = {}
    state_shapes: dict[str, tuple[int, ...]] = {}
    offset = 0
    for reader, step_labels, source in stores:
        image_fields = [f.name for f in reader.obs_fields if f.is_image]
        cameras = cameras or tuple(image_fields)
        if not cameras:
            raise ValueError(
                f"{reader.path} has no camera field (its fields: "
                f"{[f.name for f in reader.obs_fields]}); record with cameras, e.g. `handrail "
                "record --cameras front,wrist`"
            )
        fields = {f.name: f for f in reader.obs_fields}
        for key in (*cameras, *config.state_keys):
            if key not in fields:
                raise ValueError(
                    f"{reader.path} has no observation field {key!r}; it has {sorted(fields)}. "
                    "Record the same cameras, or pick --reward.cameras / --reward.state-keys "
                    "from its fields"
                )
        ids = sorted({int(np.searchsorted(_ends(reader), t, side="right"))
                      for t in np.flatnonzero(step_labels >= 0)})  # fmt: skip
        if not ids:
            continue
        data = reader.load(episodes=ids)
        rows = np.concatenate([np.arange(reader.episodes[e].start, reader.episodes[e].start
                                         + reader.episodes[e].num_steps) for e in ids])  # fmt: skip
        keep = step_labels[rows] >= 0
        nxt = data.next_obs()
        for cam in cameras:
            check_frames(cam, nxt[cam])
            shape = tuple(nxt[cam].shape[1:])
            if frame_shapes.setdefault(cam, shape)[-1] != shape[-1]:
                raise ValueError(f"camera {cam!r} has {shape[-1]} channels in {reader.path} "
                                 f"and {frame_shapes[cam][-1]} in an earlier store")  # fmt: skip
            frames.setdefault(cam, []).append(resize(nxt[cam][keep], config.image_size))
        for key in config.state_keys:
            state_shapes[key] = tuple(nxt[key].shape[1:])
        state.append(_flat_state(nxt, config.state_keys, int(keep.sum())))
        labels.append(step_labels[rows][keep] == 1)
        episode_of_row = np.repeat(np.arange(len(ids)), data.episode_lengths)
        episodes.append(offset + episode_of_row[keep])
        offset += len(ids)
        sources.append(source)
    if not labels:
        raise ValueError(
            "no labelled frame in the stores: label them first (`handrail label STORE --from "
            "success`), or train from stores whose episodes have success flags"
        )
    return FramesDataset(
        frames={cam: np.concatenate(parts) for cam, parts in frames.items()},
        state=np.concatenate(state), label=np.concatenate(labels),
        episode=np.concatenate(episodes), frame_shapes=frame_shapes, state_shapes=state_shapes,
        sources=tuple(sources),
    )  # fmt: skip


def _ends(reader: Any) -> np.ndarray:
    """Exclusive end step of every episode of a store."""
    return np.array([r.start + r.num_steps for r in reader.episodes], np.int64)


def _flat_state(obs: Mapping[str, np.ndarray], keys: Sequence[str], n: int) -> np.ndarray:
    if not keys:
        return np.zeros((n, 0), np.float32)
    return np.concatenate([np.asarray(obs[k], np.float32).reshape((len(obs[k]), -1))
                           for k in keys], axis=-1)  # fmt: skip


def split_by_episode(
    dataset: FramesDataset, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Frame indices (train, validation), whole episodes apart: ``val_fraction`` of the
    episodes with a success frame and of those without are held out (at least one of each
    group that has two); episodes pinned to training (``train_only``) never are."""
    train, val = [], []
    positive = np.zeros(dataset.episode.max() + 1, bool)
    positive[dataset.episode[dataset.label]] = True
    present = np.unique(dataset.episode)
    if dataset.train_only is not None:  # pinned to training: split the others as before
        pinned = np.unique(dataset.episode[dataset.train_only])
        train.extend(pinned.tolist())
        present = np.setdiff1d(present, pinned)
    for group, group_seed in ((present[positive[present]], seed), (present[~positive[present]],
                                                                      seed + 1)):  # fmt: skip
        tr, va = split_episodes(len(group), val_fraction, group_seed)
        train.extend(group[tr].tolist())
        val.extend(group[va].tolist())
    return (np.flatnonzero(np.isin(dataset.episode, train)),
            np.flatnonzero(np.isin(dataset.episode, val)))  # fmt: skip


def choose_threshold(prob: np.ndarray, label: np.ndarray, target_precision: float) -> float:
    """The cut with the most recall among those whose frames above it reach ``target_precision``
    (without one, the cut of the best F1), placed halfway in logits between the lowest
    probability kept and the next lower one. 0.5 without a success frame."""
    if not label.any():
        return 0.5
    order = np.argsort(-prob, kind="stable")
    p_sorted, hits = prob[order], label[order].astype(np.float64)
    tp = np.cumsum(hits)
    precision = tp / np.arange(1, len(prob) + 1)
    recall = tp / hits.sum()
    last = np.r_[p_sorted[1:] != p_sorted[:-1], True]  # cut only between distinct values
    ok = last & (precision >= target_precision)
    if ok.any():
        i = int(np.flatnonzero(ok)[np.argmax(recall[ok])])
    else:
        f1 = np.where(last, 2 * precision * recall / np.maximum(precision + recall, 1e-12), -1)
        i = int(np.argmax(f1))
    if i + 1 == len(p_sorted):
        return float(p_sorted[i])
    # Halfway, in logits, to the next lower probability: a margin on both sides of the cut.
    logit = np.log(np.clip(p_sorted[i : i + 2], 1e-7, 1 - 1e-7))
    logit -= np.log1p(-np.clip(p_sorted[i : i + 2], 1e-7, 1 - 1e-7))
    return float(1.0 / (1.0 + np.exp(-logit.mean())))


def scores(prob: np.ndarray, label: np.ndarray, threshold: float) -> dict[str, float | int]:
    """Precision, recall and the counts behind them of ``prob >= threshold`` against labels."""
    pred = prob >= threshold
    tp, fp = int(np.sum(pred & label)), int(np.sum(pred & ~label))
    fn, tn = int(np.sum(~pred & label)), int(np.sum(~pred & ~label))
    return {
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "recall": tp / (tp + fn) if tp + fn else float("nan"),
        "true_positives": tp, "false_positives": fp, "false_negatives": fn,
        "true_negatives": tn,
    }  # fmt: skip


@dataclass(frozen=True)
class ClassifierResult:
    """What :func:`train_classifier` returns."""

    params: Any
    """The params with the lowest validation loss."""
    state_mean: np.ndarray
    """Training frames' state mean."""
    state_std: np.ndarray
    """Training frames' state std (floored)."""
    threshold: float
    """Chosen on the validation frames."""
    validation: dict[str, float | int]
    """Precision, recall and counts on the validation frames at ``threshold``."""
    history: list[dict[str, float]]
    """Step, training loss and validation loss per evaluation."""
    counts: dict[str, int]
    """Frames and episodes trained on and held out, success frames among them."""


def _net(config: ClassifierConfig, cameras: Sequence[str]) -> SuccessNet:
    return SuccessNet(tuple(cameras), config.channels, config.strides, config.features,
                      config.hidden_dims)  # fmt: skip


def train_classifier(
    dataset: FramesDataset,
    config: ClassifierConfig,
    *,
    progress: bool = False,
    on_eval: Callable[[dict[str, float]], None] | None = None,
) -> ClassifierResult:
    """Fit the classifier on ``dataset``; see the module docstring.

    Raises:
        ValueError: the training or validation episodes hold no success frame or no failure
            frame (naming the counts and how to get more).
    """
    train, val = split_by_episode(dataset, config.val_fraction, config.seed)
    counts = {
        "train_frames": len(train), "train_success": int(dataset.label[train].sum()),
        "val_frames": len(val), "val_success": int(dataset.label[val].sum()),
        "train_episodes": len(np.unique(dataset.episode[train])),
        "val_episodes": len(np.unique(dataset.episode[val])),
    }  # fmt: skip
    for part in ("train", "val"):
        n, pos = counts[f"{part}_frames"], counts[f"{part}_success"]
        if pos == 0 or pos == n:
            raise ValueError(
                f"the {'training' if part == 'train' else 'validation'} episodes hold {pos} "
                f"success frame(s) of {n}: a classifier needs both kinds on each side. Label "
                "more episodes (`handrail label`), with at least two that succeed and two that "
                "fail, or record failures to add (`--demos A B`)"
            )
    cameras = tuple(dataset.frames)
    state = dataset.state
    mean = state[train].mean(axis=0) if state.shape[1] else np.zeros(0, np.float32)
    std = np.maximum(state[train].std(axis=0), 1e-3) if state.shape[1] else np.ones(0, np.float32)
    norm_state = ((state - mean) / std).astype(np.float32)
    net = _net(config, cameras)
    key = jax.random.PRNGKey(config.seed)
    key, init_key = jax.random.split(key)
    params = net.init(init_key, {c: jnp.asarray(dataset.frames[c][:1]) for c in cameras},
                      jnp.asarray(norm_state[:1]))["params"]  # fmt: skip
    tx = optax.adamw(config.lr, weight_decay=config.weight_decay)
    # The frames go in as arguments: closed over, XLA would fold megabytes of constants.
    data = {
        "frames": {c: jnp.asarray(dataset.frames[c]) for c in cameras},
        "state": jnp.asarray(norm_state), "label": jnp.asarray(dataset.label, jnp.float32),
        "pos": jnp.asarray(train[dataset.label[train]]),
        "neg": jnp.asarray(train[~dataset.label[train]]),
    }  # fmt: skip
    half = config.batch_size // 2

    def logits(p: Any, d: Any, rows: jax.Array, shift_key: jax.Array | None) -> jax.Array:
        batch = {c: d["frames"][c][rows] for c in cameras}
        if shift_key is not None:
            keys = jax.random.split(shift_key, len(cameras))
            batch = {c: random_shift(batch[c], k, config.shift_px)
                     for c, k in zip(cameras, keys, strict=True)}  # fmt: skip
        out: jax.Array = net.apply({"params": p}, batch, d["state"][rows])  # type: ignore[assignment]
        return out

    def balanced_loss(p: Any, d: Any, rows: jax.Array, k: jax.Array) -> jax.Array:
        y = d["label"][rows]
        bce = optax.sigmoid_binary_cross_entropy(logits(p, d, rows, k), y)
        return 0.5 * jnp.mean(bce[:half]) + 0.5 * jnp.mean(bce[half:])

    @jax.jit
    def step(p: Any, opt: Any, d: Any, k: jax.Array) -> tuple[Any, Any, jax.Array]:
        k_pos, k_neg, k_shift = jax.random.split(k, 3)
        rows = jnp.concatenate([  # half success frames, half failures
            d["pos"][jax.random.randint(k_pos, (half,), 0, len(d["pos"]))],
            d["neg"][jax.random.randint(k_neg, (config.batch_size - half,), 0, len(d["neg"]))],
        ])  # fmt: skip
        loss, grads = jax.value_and_grad(balanced_loss)(p, d, rows, k_shift)
        updates, opt = tx.update(grads, opt, p)
        return optax.apply_updates(p, updates), opt, loss

    def block(p: Any, opt: Any, k: jax.Array) -> tuple[Any, Any, float]:
        # A Python loop of jitted steps, not a lax.scan: XLA:CPU ran these convolutions about
        # 10x slower inside a scan's loop (880 against 80 ms a step, measured side by side).
        losses = []
        for kk in jax.random.split(k, config.eval_every):
            p, opt, loss = step(p, opt, data, kk)
            losses.append(loss)
        return p, opt, float(np.mean(jax.device_get(losses)))

    predict_chunk = jax.jit(lambda p, d, rows: jax.nn.sigmoid(logits(p, d, rows, None)))
    val_label = dataset.label[val]

    def predict(p: Any) -> np.ndarray:
        return np.concatenate([np.asarray(predict_chunk(p, data, jnp.asarray(val[i : i + 256])))
                               for i in range(0, len(val), 256)])  # fmt: skip

    opt = tx.init(params)
    best, best_val = params, math.inf
    history: list[dict[str, float]] = []
    blocks = math.ceil(config.steps / config.eval_every)
    bar = progress_bar(progress, blocks * config.eval_every, "handrail reward train")
    for i in range(blocks):
        key, sub = jax.random.split(key)
        params, opt, train_loss = block(params, opt, sub)
        val_loss = _balanced_bce(predict(params), val_label)
        record = {"step": float((i + 1) * config.eval_every), "train_loss": float(train_loss),
                  "val_loss": val_loss}  # fmt: skip
        history.append(record)
        if on_eval is not None:
            on_eval(record)
        if val_loss < best_val:
            best, best_val = params, val_loss
        if bar is not None:
            bar.update(config.eval_every)
            bar.set_postfix_str(f"train {float(train_loss):.3f} val {val_loss:.3f}")
    if bar is not None:
        bar.close()
    prob = predict(best)
    threshold = choose_threshold(prob, val_label, config.target_precision)
    return ClassifierResult(
        params=jax.device_get(best), state_mean=mean, state_std=std, threshold=threshold,
        validation=scores(prob, val_label, threshold), history=history, counts=counts,
    )  # fmt: skip


def _balanced_bce(prob: np.ndarray, label: np.ndarray) -> float:
    """Mean cross-entropy of the success frames and of the failures, averaged."""
    p = np.clip(prob.astype(np.float64), 1e-7, 1 - 1e-7)
    return float(0.5 * np.mean(-np.log(p[label])) + 0.5 * np.mean(-np.log(1 - p[~label])))


def save_classifier(
    path: str | Path, result: ClassifierResult, config: ClassifierConfig,
    dataset: FramesDataset, extra: Mapping[str, Any] | None = None,
) -> Path:  # fmt: skip
    """Write the classifier into the folder ``path`` (created if missing)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / PARAMS_FILE).write_bytes(flax.serialization.to_bytes(result.params))
    meta = {
        "kind": "success_classifier", "format_version": FORMAT_VERSION,
        "config": config.to_json(), "cameras": list(dataset.frames),
        "frame_shapes": {c: list(s) for c, s in dataset.frame_shapes.items()},
        "state_keys": list(config.state_keys),
        "state_shapes": {k: list(s) for k, s in dataset.state_shapes.items()},
        "state_mean": result.state_mean.tolist(), "state_std": result.state_std.tolist(),
        "threshold": result.threshold, "validation": result.validation,
        "counts": result.counts, "history": result.history, "sources": list(dataset.sources),
        "extra": dict(extra or {}),
    }  # fmt: skip
    (path / META_FILE).write_text(json.dumps(meta, indent=1))
    return path


class SuccessClassifier:
    """A saved classifier, scoring observations (dicts with its cameras and state keys).

    Raises (on load):
        ValueError: the folder is not a handrail success classifier of this version.
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        meta = read_model_meta(path, META_FILE, kind="success_classifier", version=FORMAT_VERSION,
                               what="success classifier", short="classifier",
                               make="handrail reward train --demos STORE --out PATH")  # fmt: skip
        self.path = path
        self.meta = meta
        self.config = ClassifierConfig.from_json(meta["config"])
        self.cameras: tuple[str, ...] = tuple(meta["cameras"])
        self.frame_shapes = {c: tuple(s) for c, s in meta["frame_shapes"].items()}
        self.state_keys: tuple[str, ...] = tuple(meta["state_keys"])
        self.state_shapes = {k: tuple(s) for k, s in meta["state_shapes"].items()}
        self.threshold = float(meta["threshold"])
        self._mean = np.asarray(meta["state_mean"], np.float32)
        self._std = np.asarray(meta["state_std"], np.float32)
        net = _net(self.config, self.cameras)
        size, dim = self.config.image_size, len(self._mean)
        template = net.init(
            jax.random.PRNGKey(0),
            {c: jnp.zeros((1, size, size, self.frame_shapes[c][-1]), jnp.uint8)
             for c in self.cameras},
            jnp.zeros((1, dim), jnp.float32),
        )["params"]  # fmt: skip
        params = flax.serialization.from_bytes(template, (path / PARAMS_FILE).read_bytes())

        def prob(frames: Any, state: jax.Array) -> jax.Array:
            logit: jax.Array = net.apply({"params": params}, frames, state)  # type: ignore[assignment]
            return jax.nn.sigmoid(logit)

        self._prob = jax.jit(prob)

    def check_keys(self, shapes: Mapping[str, tuple[int, ...]], where: str) -> None:
        """Raise a one-line ValueError unless ``shapes`` (key -> per-step shape) holds every
        camera (with its channel count) and state key this classifier reads."""
        missing = [k for k in (*self.cameras, *self.state_keys) if k not in shapes]
        if missing:
            raise ValueError(
                f"the success classifier {self.path} reads {list(self.cameras)} "
                f"{list(self.state_keys) or ''} but {where} lacks {missing} (it has "
                f"{sorted(shapes)}): a classifier for another camera set; train one on this "
                "robot's cameras, or give the env these cameras"
            )
        for cam in self.cameras:
            got = tuple(shapes[cam])
            if len(got) != 3 or got[-1] != self.frame_shapes[cam][-1]:
                raise ValueError(
                    f"camera {cam!r} of {where} has per-step shape {got}; the classifier "
                    f"{self.path} was trained on {self.frame_shapes[cam]} frames (any height "
                    "and width works, the channels must match)"
                )
        for key in self.state_keys:
            if tuple(shapes[key]) != self.state_shapes[key]:
                raise ValueError(f"state key {key!r} of {where} has shape {tuple(shapes[key])}; "
                                 f"the classifier read {self.state_shapes[key]}")  # fmt: skip

    def probability(self, obs: Mapping[str, Any]) -> np.ndarray:
        """Success probability of observations: one (dict of per-step arrays) -> a 0-d array,
        or a batch (leading dim N) -> (N,)."""
        first = np.asarray(obs[self.cameras[0]])
        single = first.ndim == 3
        frames = {}
        for cam in self.cameras:
            arr = np.asarray(obs[cam])
            check_frames(cam, arr)
            arr = resize(arr[None] if single else arr, self.config.image_size)
            frames[cam] = jnp.asarray(arr)
        n = len(frames[self.cameras[0]])
        state = _flat_state({k: np.asarray(obs[k]).reshape((n, -1)) for k in self.state_keys},
                            self.state_keys, n)  # fmt: skip
        state = (state - self._mean) / self._std
        out = np.concatenate([np.asarray(self._prob({c: f[i : i + 256] for c, f in frames.items()},
                                                    jnp.asarray(state[i : i + 256])))
                              for i in range(0, n, 256)])  # fmt: skip
        return out[0] if single else out

    def detect(self, obs: Mapping[str, Any]) -> bool:
        """Whether one observation shows success (probability at or above the threshold)."""
        return bool(self.probability(obs) >= self.threshold)
