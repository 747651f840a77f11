"""A frozen image encoder for the CPU path: camera frames -> keypoints a state learner reads.

An end-to-end pixel critic costs 134-579 ms per update on this class of CPU; a frozen encoder
costs one forward pass per env step (about a millisecond for two 64x64 cameras), after which
the learner is the state learner, as fast as ever. Its price: no per-update augmentation, and
features fixed before the policy learns. ``handrail encoder train --demos STORE --out DIR``
pretrains one from any store's recorded frames, since no weights can be downloaded here.

The network is a deep spatial autoencoder (Finn et al. 2016): per camera, 3x3 convolutions, a
1x1 convolution to ``keypoints`` maps, and a spatial softmax whose expected (x, y) per map are
the features, ``2 * keypoints`` numbers in [-1, 1] that say where things are. A linear decoder
reconstructs the frame at ``target_size`` from them (self-supervised, any store); with
``action_weight > 0`` a small head also predicts the recorded action from them (learning from
demonstrations: the features must then hold what the demonstrator acted on).

:class:`CameraFeatures` wraps an env so that its cameras become one float key,
``camera_features``; :func:`encode_episodes` does the same to recorded episodes; the run folder
keeps a copy of the encoder, so ``handrail eval``, ``run:`` bases and ``actor_node`` encode the
same way (:func:`encoded_policy`).
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
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

from handrail.learners.agents.networks import MLP
from handrail.learners.images import (
    check_cameras,
    check_frames,
    progress_bar,
    read_model_meta,
    resize,
    to_unit,
)

FEATURES_KEY = "camera_features"
"""The observation key that replaces the cameras."""
RUN_FOLDER = "encoder"
"""A run folder's copy of the encoder its policy reads the cameras through."""
META_FILE = "encoder.json"
PARAMS_FILE = "encoder.msgpack"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class EncoderConfig:
    """What ``handrail encoder train`` builds and how it trains it."""

    cameras: tuple[str, ...] = ()
    """Camera fields to encode (empty: every camera field of the first store)."""
    image_size: int = 64
    """Frames are resized once to image_size x image_size where they enter."""
    channels: tuple[int, ...] = (16, 32, 32)
    """Output channels of each 3x3 convolution."""
    strides: tuple[int, ...] = (2, 2, 1)
    """Stride of each convolution (16x16 keypoint maps from 64x64 frames)."""
    keypoints: int = 16
    """Keypoint maps per camera: 2 * keypoints features each."""
    target_size: int = 32
    """Size of the frame the decoder reconstructs."""
    action_weight: float = 1.0
    """Weight of predicting the recorded (standardised) action from the features (0: off).
    Its squared error, about 1 untrained, is scaled by 0.01 to the reconstruction's."""
    goal_key: str = ""
    """A state key whose value at the end of each successful episode the features also
    predict, from every frame of it (e.g. ``proprio``: where the arm ends up is where the task
    is, the cube or the hole); empty: off. Failed episodes do not count in it."""
    goal_weight: float = 1.0
    """Weight of the ``goal_key`` prediction (scaled as ``action_weight``)."""
    steps: int = 2000
    """Gradient steps."""
    batch_size: int = 64
    """Frames per step."""
    lr: float = 1e-3
    """Adam learning rate."""
    val_fraction: float = 0.2
    """Share of the episodes held out to report the validation loss on (at least one)."""
    eval_every: int = 100
    """Steps between validation losses."""
    seed: int = 0
    """Seed of the initialisation, the batches and the split."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cameras", tuple(str(c) for c in self.cameras))
        object.__setattr__(self, "channels", tuple(int(c) for c in self.channels))
        object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))
        checks = {
            "image_size": self.image_size >= 8,
            "channels": bool(self.channels) and min(self.channels) >= 1,
            "strides": len(self.strides) == len(self.channels)
            and min(self.strides, default=1) >= 1,
            "keypoints": self.keypoints >= 1,
            "target_size": 4 <= self.target_size <= self.image_size,
            "action_weight": self.action_weight >= 0.0,
            "goal_weight": self.goal_weight >= 0.0,
            "steps": self.steps >= 1,
            "batch_size": self.batch_size >= 2,
            "lr": self.lr > 0,
            "val_fraction": 0.0 < self.val_fraction < 1.0,
            "eval_every": self.eval_every >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"--encoder.{n.replace('_', '-')} {getattr(self, n)!r}" for n in bad)
            raise ValueError(
                f"encoder: invalid {values} (need: image size >= 8, one stride >= 1 per channel "
                "width, keypoints >= 1, 4 <= target size <= image size, action weight >= 0, "
                "steps >= 1, batch >= 2, lr > 0, val fraction in (0, 1), eval every >= 1)"
            )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EncoderConfig:
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items()
        }
        return cls(**values)


class SpatialSoftmax(nn.Module):
    """Feature maps (B, H, W, K) -> the expected (x, y) of each map's softmax, (B, 2K) in
    [-1, 1], with a learned temperature."""

    @nn.compact
    def __call__(self, maps: jax.Array) -> jax.Array:
        b, h, w, k = maps.shape
        log_temperature = self.param("log_temperature", nn.initializers.zeros, ())
        p = jax.nn.softmax(maps.reshape((b, h * w, k)) / jnp.exp(log_temperature), axis=1)
        ys, xs = jnp.meshgrid(jnp.linspace(-1.0, 1.0, h), jnp.linspace(-1.0, 1.0, w),
                              indexing="ij")  # fmt: skip
        ex = jnp.einsum("bpk,p->bk", p, xs.reshape(-1))
        ey = jnp.einsum("bpk,p->bk", p, ys.reshape(-1))
        return jnp.concatenate([ex, ey], axis=-1)


class KeypointEncoder(nn.Module):
    """uint8 frames (..., H, W, C) -> keypoints (..., 2 * keypoints)."""

    channels: tuple[int, ...]
    strides: tuple[int, ...]
    keypoints: int

    @nn.compact
    def __call__(self, frames: jax.Array) -> jax.Array:
        lead = frames.shape[:-3]
        x = to_unit(frames.reshape((-1, *frames.shape[-3:])))
        for width, stride in zip(self.channels, self.strides, strict=True):
            x = nn.relu(nn.Conv(width, (3, 3), strides=(stride, stride), padding="SAME")(x))
        x = SpatialSoftmax()(nn.Conv(self.keypoints, (1, 1))(x))
        return x.reshape((*lead, 2 * self.keypoints))


class EncoderNet(nn.Module):
    """The encoders of every camera; in training also the decoders and the action head."""

    cameras: tuple[str, ...]
    config: EncoderConfig
    channels_in: tuple[int, ...]
    action_dim: int
    goal_dim: int = 0

    def setup(self) -> None:
        c = self.config
        self.encoders = {cam: KeypointEncoder(c.channels, c.strides, c.keypoints,
                                              name=f"encoder_{cam}") for cam in self.cameras}  # fmt: skip
        self.decoders = {
            cam: nn.Dense(c.target_size * c.target_size * ch, name=f"decoder_{cam}")
            for cam, ch in zip(self.cameras, self.channels_in, strict=True)
        }
        self.action_head = MLP((64,), layer_norm=True)
        self.action_out = nn.Dense(max(self.action_dim, 1))
        self.goal_head = MLP((64,), layer_norm=True)
        self.goal_out = nn.Dense(max(self.goal_dim, 1))

    def encode(self, frames: Mapping[str, jax.Array]) -> jax.Array:
        return jnp.concatenate([self.encoders[cam](frames[cam]) for cam in self.cameras], -1)

    def __call__(
        self, frames: Mapping[str, jax.Array]
    ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
        """(reconstructions per camera, predicted action, predicted goal) of a batch."""
        parts = {cam: self.encoders[cam](frames[cam]) for cam in self.cameras}
        size = self.config.target_size
        recon = {
            cam: self.decoders[cam](parts[cam]).reshape((-1, size, size, ch))
            for cam, ch in zip(self.cameras, self.channels_in, strict=True)
        }
        features = jnp.concatenate([parts[cam] for cam in self.cameras], -1)
        return (recon, self.action_out(self.action_head(features)),
                self.goal_out(self.goal_head(features)))  # fmt: skip


@dataclass(frozen=True)
class FramesAndActions:
    """What the encoder learns from: every recorded observation's frames and the action taken."""

    frames: dict[str, np.ndarray]
    """uint8 (N, S, S, C) per camera, at the encoder's size."""
    action: np.ndarray
    """(N, A) float32: the action taken on each frame."""
    episode: np.ndarray
    """(N,) int: the episode (numbered over all stores) of each frame."""
    goal: np.ndarray
    """(N, G) float32: ``goal_key`` at the end of each frame's episode (G = 0 without it)."""
    goal_mask: np.ndarray
    """(N,) bool: the frame's episode succeeded (its goal counts)."""
    frame_shapes: dict[str, tuple[int, ...]]
    """Each camera's frame shape as recorded (before the resize)."""
    sources: tuple[str, ...]
    """The stores."""


def frames_and_actions(readers: Sequence[Any], config: EncoderConfig) -> FramesAndActions:
    """Every step's frames and action of every episode of ``readers`` (``EpisodeReader``).

    Raises:
        ValueError: a store has no camera, lacks one of ``config.cameras``, holds no step, or
            its cameras or actions differ from an earlier store's (each naming the fix).
    """
    cameras = config.cameras
    frames: dict[str, list[np.ndarray]] = {}
    actions: list[np.ndarray] = []
    episodes: list[np.ndarray] = []
    goals: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    shapes: dict[str, tuple[int, ...]] = {}
    offset = 0
    for reader in readers:
        fields = {f.name: f for f in reader.obs_fields}
        cameras = cameras or tuple(f.name for f in reader.obs_fields if f.is_image)
        if not cameras:
            raise ValueError(
                f"{reader.path} has no camera field (its fields: {sorted(fields)}); record with "
                "cameras, e.g. `handrail record --cameras front,wrist`"
            )
        missing = [c for c in cameras if c not in fields]
        if missing:
            raise ValueError(
                f"{reader.path} has no camera field {missing} (its fields: {sorted(fields)}); "
                "record those cameras, or pick --encoder.cameras from its fields"
            )
        if config.goal_key and config.goal_key not in fields:
            raise ValueError(
                f"{reader.path} has no field {config.goal_key!r} for --encoder.goal-key (its "
                f"fields: {sorted(fields)}); pick a state key, or leave it empty"
            )
        if reader.num_episodes == 0:
            continue
        data = reader.load()
        for cam in cameras:
            check_frames(cam, data.obs[cam])
            shape = tuple(data.obs[cam].shape[1:])
            if shapes.setdefault(cam, shape) != shape:
                raise ValueError(f"camera {cam!r} has {shape} frames in {reader.path} and "
                                 f"{shapes[cam]} in an earlier store: give one camera set")  # fmt: skip
            frames.setdefault(cam, []).append(resize(data.obs[cam], config.image_size))
        if actions and actions[0].shape[1] != data.action.shape[1]:
            raise ValueError(f"{reader.path} has {data.action.shape[1]}-d actions; an earlier "
                             f"store has {actions[0].shape[1]}-d: give stores of one arm")  # fmt: skip
        actions.append(np.asarray(data.action, np.float32))
        episodes.append(offset + np.repeat(np.arange(data.num_episodes), data.episode_lengths))
        success = np.array([r.success for r in data.records], bool)
        masks.append(np.repeat(success, data.episode_lengths))
        if config.goal_key:
            final = np.asarray(data.final_obs[config.goal_key], np.float32)
            goals.append(np.repeat(final.reshape((len(final), -1)), data.episode_lengths, axis=0))
        else:
            goals.append(np.zeros((len(data.action), 0), np.float32))
        offset += data.num_episodes
    if not actions or sum(len(a) for a in actions) == 0:
        raise ValueError("the stores hold no recorded step: record episodes with cameras first")
    return FramesAndActions(
        frames={c: np.concatenate(parts) for c, parts in frames.items()},
        action=np.concatenate(actions), episode=np.concatenate(episodes),
        goal=np.concatenate(goals), goal_mask=np.concatenate(masks), frame_shapes=shapes, sources=tuple(str(r.path) for r in readers),
    )  # fmt: skip


@dataclass
class EncoderResult:
    """What :func:`train_encoder` learned."""

    params: Any
    """The whole network's params (encoders, decoders, action head)."""
    history: list[dict[str, float]]
    """Step, training loss and validation loss per evaluation."""
    action_mean: np.ndarray
    action_std: np.ndarray
    counts: dict[str, int]


def _net(config: EncoderConfig, cameras: Sequence[str], shapes: Mapping[str, Sequence[int]],
         action_dim: int, goal_dim: int) -> EncoderNet:  # fmt: skip
    return EncoderNet(tuple(cameras), config, tuple(int(shapes[c][-1]) for c in cameras),
                      action_dim, goal_dim)  # fmt: skip


def train_encoder(
    data: FramesAndActions, config: EncoderConfig, *, progress: bool = False
) -> EncoderResult:
    """Fit the encoder (and its decoders and action head) on ``data``; the params with the
    lowest validation loss are kept."""
    cameras = tuple(data.frames)
    rng = np.random.default_rng(config.seed)
    ids = np.unique(data.episode)
    held = rng.permutation(ids)[: max(1, round(config.val_fraction * len(ids)))]
    is_val = np.isin(data.episode, held) if len(ids) > 1 else np.zeros(len(data.episode), bool)
    train_rows, val_rows = np.flatnonzero(~is_val), np.flatnonzero(is_val)
    if len(val_rows) == 0:  # one episode: validate on its last fifth of frames
        cut = int(len(train_rows) * (1 - config.val_fraction))
        train_rows, val_rows = train_rows[:cut], train_rows[cut:]
    mean = data.action[train_rows].mean(axis=0)
    std = np.maximum(data.action[train_rows].std(axis=0), 1e-3)
    size = config.target_size
    net = _net(config, cameras, data.frame_shapes, data.action.shape[1], data.goal.shape[1])
    goal_rows = train_rows[data.goal_mask[train_rows]]
    if data.goal.shape[1] and len(goal_rows) == 0:
        raise ValueError(
            f"--encoder.goal-key {config.goal_key}: no successful episode among the training "
            "episodes, so there is no goal to predict; add demonstrations, or leave it empty"
        )
    goal_mean = data.goal[goal_rows].mean(axis=0) if len(goal_rows) else data.goal.mean(axis=0)
    goal_std = np.maximum(data.goal[goal_rows].std(axis=0), 1e-3) if len(goal_rows) else 1.0
    key = jax.random.PRNGKey(config.seed)
    key, init_key = jax.random.split(key)
    params = net.init(init_key, {c: jnp.asarray(data.frames[c][:1]) for c in cameras})["params"]
    tx = optax.adam(config.lr)
    # Arguments, not closed over: XLA would fold the frames into the program as constants.
    arrays = {
        "frames": {c: jnp.asarray(data.frames[c]) for c in cameras},
        "target": {c: jnp.asarray(resize(data.frames[c], size)) for c in cameras},
        "action": jnp.asarray((data.action - mean) / std),
        "goal": jnp.asarray((data.goal - goal_mean) / goal_std),
        "goal_mask": jnp.asarray(data.goal_mask, jnp.float32),
        "train": jnp.asarray(train_rows),
    }

    def loss_fn(p: Any, d: Any, rows: jax.Array) -> jax.Array:
        out: Any = net.apply({"params": p}, {c: d["frames"][c][rows] for c in cameras})
        recon, action, goal = out
        loss = jnp.mean(jnp.stack([jnp.mean((recon[c] - to_unit(d["target"][c][rows])) ** 2)
                                   for c in cameras]))  # fmt: skip
        if config.action_weight > 0:
            loss = loss + config.action_weight * 0.01 * jnp.mean((action - d["action"][rows]) ** 2)
        if data.goal.shape[1] and config.goal_weight > 0:
            mask = d["goal_mask"][rows]
            err = jnp.mean((goal - d["goal"][rows]) ** 2, axis=-1)
            loss = loss + config.goal_weight * 0.01 * jnp.sum(mask * err) / jnp.maximum(
                jnp.sum(mask), 1.0
            )
        return loss

    @jax.jit
    def step(p: Any, opt: Any, d: Any, k: jax.Array) -> tuple[Any, Any, jax.Array]:
        rows = d["train"][jax.random.randint(k, (config.batch_size,), 0, len(d["train"]))]
        loss, grads = jax.value_and_grad(loss_fn)(p, d, rows)
        updates, opt = tx.update(grads, opt, p)
        return optax.apply_updates(p, updates), opt, loss

    val_loss_of = jax.jit(loss_fn)

    def validation(p: Any) -> float:
        chunks = [val_rows[i : i + 256] for i in range(0, len(val_rows), 256)]
        total = sum(float(val_loss_of(p, arrays, jnp.asarray(c))) * len(c) for c in chunks)
        return total / len(val_rows)

    opt = tx.init(params)
    best, best_val = params, math.inf
    history: list[dict[str, float]] = []
    bar = progress_bar(progress, config.steps, "handrail encoder train")
    done = 0
    while done < config.steps:
        n = min(config.eval_every, config.steps - done)
        losses = []
        # A Python loop of jitted steps: XLA:CPU runs convolutions about 10x slower inside a
        # lax.scan (learners/agents/classifier.py).
        for k in jax.random.split(jax.random.fold_in(key, done), n):
            params, opt, loss = step(params, opt, arrays, k)
            losses.append(loss)
        done += n
        val = validation(params)
        train_loss = float(np.mean(jax.device_get(losses)))
        history.append({"step": float(done), "train_loss": train_loss, "val_loss": val})
        if val < best_val:
            best, best_val = params, val
        if bar is not None:
            bar.update(n)
            bar.set_postfix_str(f"train {train_loss:.4f} val {val:.4f}")
    if bar is not None:
        bar.close()
    counts = {"frames": len(data.episode), "train_frames": len(train_rows),
              "val_frames": len(val_rows), "episodes": len(ids)}  # fmt: skip
    return EncoderResult(jax.device_get(best), history, mean, std, counts)


def save_resnet10(path: str | Path, params: Any, cameras: Sequence[str], image_size: int,
                  source: str) -> Path:  # fmt: skip
    """Write converted ResNet-10 params (:func:`~handrail.learners.agents.resnet.
    params_from_serl`) as an encoder folder reading ``cameras`` at ``image_size``."""
    from handrail.learners.agents.resnet import FEATURES

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / PARAMS_FILE).write_bytes(flax.serialization.to_bytes(params))
    config = EncoderConfig(cameras=tuple(cameras), image_size=image_size,
                           target_size=min(32, image_size))  # fmt: skip
    meta = {
        "kind": "image_encoder", "format_version": FORMAT_VERSION, "arch": "resnet10",
        "config": config.to_json(), "cameras": list(cameras),
        "frame_shapes": {c: [image_size, image_size, 3] for c in cameras},
        "action_dim": 0, "goal_dim": 0, "features": FEATURES * len(cameras),
        "history": [], "sources": [source], "extra": {"converted_from": source},
    }  # fmt: skip
    (path / META_FILE).write_text(json.dumps(meta, indent=1))
    return path


def save_encoder(
    path: str | Path, result: EncoderResult, config: EncoderConfig, data: FramesAndActions,
    extra: Mapping[str, Any] | None = None,
) -> Path:  # fmt: skip
    """Write the encoder into the folder ``path`` (created if missing)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / PARAMS_FILE).write_bytes(flax.serialization.to_bytes(result.params))
    meta = {
        "kind": "image_encoder", "format_version": FORMAT_VERSION, "config": config.to_json(),
        "cameras": list(data.frames),
        "frame_shapes": {c: list(s) for c, s in data.frame_shapes.items()},
        "action_dim": int(data.action.shape[1]), "goal_dim": int(data.goal.shape[1]),
        "features": 2 * config.keypoints * len(data.frames),
        "action_mean": result.action_mean.tolist(), "action_std": result.action_std.tolist(),
        "history": result.history, "counts": result.counts, "sources": list(data.sources),
        "extra": dict(extra or {}),
    }  # fmt: skip
    (path / META_FILE).write_text(json.dumps(meta, indent=1))
    return path


class EncoderCameras:
    """What a saved encoder reads (its ``cameras`` and their ``frame_shapes``), from its record
    alone: no network is built.

    Raises (on load):
        ValueError: the folder is not a handrail image encoder of this version.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.meta = read_model_meta(self.path, META_FILE, kind="image_encoder",
                                    version=FORMAT_VERSION, what="image encoder", short="encoder",
                                    make="handrail encoder train --demos STORE --out PATH")  # fmt: skip
        self.cameras: tuple[str, ...] = tuple(self.meta["cameras"])
        self.frame_shapes = {c: tuple(s) for c, s in self.meta["frame_shapes"].items()}


class ImageEncoder(EncoderCameras):
    """A saved encoder: observations (dicts holding its cameras) -> features.

    Raises (on load):
        ValueError: the folder is not a handrail image encoder of this version.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        meta = self.meta
        self.config = EncoderConfig.from_json(meta["config"])
        self.dim = int(meta["features"])
        self.arch = str(meta.get("arch", "keypoints"))
        s = self.config.image_size
        frames = {c: jnp.zeros((1, s, s, self.frame_shapes[c][-1]), jnp.uint8)
                  for c in self.cameras}  # fmt: skip
        encode: Callable[[Any, Mapping[str, jax.Array]], jax.Array]
        if self.arch == "resnet10":  # one frozen network for every camera
            from handrail.learners.agents.resnet import ResNet10

            resnet = ResNet10()
            template = resnet.init(jax.random.PRNGKey(0), frames[self.cameras[0]])["params"]

            def encode(p: Any, frames: Mapping[str, jax.Array]) -> jax.Array:
                parts = [resnet.apply({"params": p}, frames[c]) for c in self.cameras]
                return jnp.concatenate(parts, -1)  # type: ignore[arg-type]
        else:
            net = _net(self.config, self.cameras, self.frame_shapes, int(meta["action_dim"]),
                       int(meta["goal_dim"]))  # fmt: skip
            template = net.init(jax.random.PRNGKey(0), frames)["params"]

            def encode(p: Any, frames: Mapping[str, jax.Array]) -> jax.Array:
                out: jax.Array = net.apply({"params": p}, frames, method=EncoderNet.encode)  # type: ignore[assignment]
                return out

        self.params = flax.serialization.from_bytes(
            template, (self.path / PARAMS_FILE).read_bytes()
        )
        self._encode = jax.jit(encode)

    def check_keys(self, shapes: Mapping[str, tuple[int, ...]], where: str) -> None:
        """Raise a one-line ValueError unless ``shapes`` (key -> per-step shape) holds every
        camera of this encoder, with its channels and its frames' aspect."""
        missing = [c for c in self.cameras if c not in shapes]
        if missing:
            raise ValueError(
                f"the image encoder {self.path} reads cameras {list(self.cameras)} but {where} "
                f"lacks {missing} (it has {sorted(shapes)}): an encoder for another camera set; "
                "train one on these cameras (`handrail encoder train`), or give the env them"
            )
        for cam in self.cameras:
            got, trained = tuple(shapes[cam]), self.frame_shapes[cam]
            if (
                len(got) != 3
                or got[-1] != trained[-1]
                or got[0] * trained[1] != got[1] * trained[0]
            ):
                raise ValueError(
                    f"camera {cam!r} of {where} gives {got} frames; the image encoder "
                    f"{self.path} was trained on {trained} frames. Any size of the same aspect "
                    "and channels works (frames are resized once); train an encoder on this "
                    "camera's frames, or render them at that shape"
                )

    def features(self, obs: Mapping[str, Any]) -> np.ndarray:
        """Features of one observation (dict of per-step arrays) -> (dim,), or of a batch
        (leading dim N) -> (N, dim), float32 in [-1, 1]."""
        single = np.ndim(obs[self.cameras[0]]) == 3
        frames = {}
        for cam in self.cameras:
            arr = np.asarray(obs[cam])
            check_frames(cam, arr)
            frames[cam] = resize(arr[None] if single else arr, self.config.image_size)
        n = len(frames[self.cameras[0]])
        out = np.concatenate([
            np.asarray(self._encode(self.params, {c: f[i : i + 512] for c, f in frames.items()}))
            for i in range(0, n, 512)
        ]) if n else np.zeros((0, self.dim), np.float32)  # fmt: skip
        return out[0] if single else out.astype(np.float32)


class CameraFeatures(gym.ObservationWrapper):
    """The env with its encoder's cameras replaced by one key, ``camera_features``.

    Raises:
        ValueError: the observation is not a Dict holding the encoder's cameras.
    """

    def __init__(self, env: gym.Env, encoder: ImageEncoder) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise ValueError(f"--encoder needs an env with a Dict observation holding the "
                             f"cameras {list(encoder.cameras)}; this one's is {space}")  # fmt: skip
        encoder.check_keys({k: tuple(s.shape) for k, s in space.spaces.items()
                            if s.shape is not None}, "the env's observation")  # fmt: skip
        self.encoder = encoder
        spaces = {k: s for k, s in space.spaces.items() if k not in encoder.cameras}
        spaces[FEATURES_KEY] = gym.spaces.Box(-1.0, 1.0, (encoder.dim,), np.float32)
        self.observation_space = gym.spaces.Dict(spaces)

    def observation(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        return encode_observation(self.encoder, observation)


def encode_observation(encoder: ImageEncoder, obs: Mapping[str, Any]) -> dict[str, Any]:
    """One observation (or a batch) with the encoder's cameras replaced by their features."""
    out = {k: v for k, v in obs.items() if k not in encoder.cameras}
    out[FEATURES_KEY] = encoder.features(obs)
    return out


def encode_episodes(data: Any, encoder: ImageEncoder) -> Any:
    """Recorded episodes (``EpisodeData``) with their cameras replaced by the features.

    Raises:
        ValueError: the episodes lack the encoder's cameras (naming what they have).
    """
    encoder.check_keys({k: tuple(np.shape(v)[1:]) for k, v in data.obs.items()},
                       "the demonstrations")  # fmt: skip
    return dataclasses.replace(data, obs=encode_observation(encoder, data.obs),
                               final_obs=encode_observation(encoder, data.final_obs))  # fmt: skip


def encoded_policy(policy: Callable[..., Any], encoder: ImageEncoder) -> Callable[..., Any]:
    """``policy`` (on observations with ``camera_features``) acting on observations with the
    cameras themselves (further arguments are passed on)."""

    def act(obs: Mapping[str, Any], *args: Any) -> Any:
        check_cameras(obs, encoder.cameras, "this policy", f" through its encoder {encoder.path}")
        return policy(encode_observation(encoder, obs), *args)

    return act
