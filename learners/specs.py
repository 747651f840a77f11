"""Observation and action specs: what a learner needs to know about an env, and nothing more.

A learner is built from an :class:`ObsSpec` and an :class:`ActionSpec`, never from an env object.
Both are plain frozen dataclasses that round-trip through JSON, so a checkpoint can rebuild the
policy's input/output mapping without the env that trained it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from handrail.control.spaces import is_image
from handrail.control.step import BOX_KEY


def _jnp() -> Any:
    import jax.numpy as jnp  # only where JAX arrays come in

    return jnp


def _is_image(space: gym.spaces.Box) -> bool:
    return is_image(space.shape, space.dtype)


@dataclass(frozen=True)
class ObsSpec:
    """Which observation keys a learner reads, their shapes, and how they are flattened."""

    keys: tuple[str, ...]
    """Observation keys in flattening order (``("obs",)`` for a plain Box space)."""
    shapes: tuple[tuple[int, ...], ...]
    """Shape of one observation per key (without leading batch dims)."""
    images: tuple[str, ...] = ()
    """Keys that are camera frames ``(H, W, C)`` (uint8, 0..255 in the flat vector as float32),
    for a learner with an image encoder: never normalised, read through the encoder."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(str(k) for k in self.keys))
        object.__setattr__(self, "shapes", tuple(tuple(int(d) for d in s) for s in self.shapes))
        object.__setattr__(self, "images", tuple(str(k) for k in self.images))
        for key in self.images:
            if key not in self.keys:
                raise ValueError(f"ObsSpec: image key {key!r} is not one of the keys {self.keys}")
            shape = self.shapes[self.keys.index(key)]
            if len(shape) != 3 or shape[-1] not in (1, 3, 4):
                raise ValueError(
                    f"ObsSpec: image key {key!r} has shape {shape}; a camera frame is (H, W, C) "
                    "with C in 1, 3, 4"
                )
        if len(self.keys) != len(self.shapes):
            raise ValueError(
                f"ObsSpec: keys has {len(self.keys)} entries but shapes has {len(self.shapes)}; "
                "give one shape per key"
            )
        if not self.keys:
            raise ValueError("ObsSpec: keys is empty; the learner needs at least one state key")
        if len(set(self.keys)) != len(self.keys):
            raise ValueError(f"ObsSpec: keys must be unique, got {self.keys}")

    @property
    def dim(self) -> int:
        """Length of the flat observation vector."""
        return sum(math.prod(s) for s in self.shapes)

    def slices(self) -> list[tuple[str, slice]]:
        """Each key and its columns in the flat observation vector, in flattening order."""
        out, start = [], 0
        for key, shape in zip(self.keys, self.shapes, strict=True):
            out.append((key, slice(start, start + math.prod(shape))))
            start += math.prod(shape)
        return out

    def image_slices(self) -> list[tuple[str, slice, tuple[int, ...]]]:
        """Each image key, its columns in the flat observation and its frame shape."""
        columns = dict(self.slices())
        return [(k, columns[k], self.shapes[self.keys.index(k)]) for k in self.images]

    def state_columns(self) -> np.ndarray:
        """The flat observation's columns that are not camera frames, in order."""
        return np.asarray(
            [c for k, cols in self.slices() if k not in self.images
             for c in range(cols.start, cols.stop)], np.int64,
        )  # fmt: skip

    def state_spec(self) -> ObsSpec:
        """The spec of the keys that are not camera frames (itself without cameras).

        Raises:
            ValueError: every key is a camera (a learner on cameras needs a state key too).
        """
        if not self.images:
            return self
        keep = [(k, s) for k, s in zip(self.keys, self.shapes, strict=True) if k not in self.images]
        if not keep:
            raise ValueError(
                f"ObsSpec: every key is a camera ({list(self.images)}); a learner on cameras "
                "needs a state key beside them (the arm's joints or its gripper's pose)"
            )
        return ObsSpec(tuple(k for k, _ in keep), tuple(s for _, s in keep))

    def takes(self, key: str, shape: tuple[int, ...]) -> bool:
        """Whether observations of ``key`` in ``shape`` fit: the spec's shape, or for a camera
        read at a square size, frames of any size with its channels (:meth:`frames`)."""
        want = self.shapes[self.keys.index(key)]
        if tuple(shape) == want:
            return True
        return (
            key in self.images
            and want[0] == want[1]
            and tuple(shape)[-1:] == want[-1:]
            and len(shape) == 3
        )

    def frames(self, key: str, frames: Any) -> np.ndarray:
        """A camera's uint8 frames ``(..., H, W, C)`` at this spec's size: resized once where
        they enter (a 128x128 camera for a 64x64 encoder), the frames themselves when they fit.

        Raises:
            ValueError: frames that are not uint8 images, or of another channel count, or of
                another size when the spec's is not square (naming the key and the fix).
        """
        from handrail.learners.images import check_frames, resize

        shape = self.shapes[self.keys.index(key)]
        frames = np.asarray(frames)
        check_frames(key, frames)
        if frames.shape[-3:] == shape:
            return frames
        if not self.takes(key, frames.shape[-3:]):
            raise ValueError(
                f"camera {key!r}: frames of shape {frames.shape[-3:]}, the learner reads {shape}; "
                "give it the camera it was trained on"
            )
        return resize(frames, shape[0])

    def split(self, obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One observation (or a batch) as a replay keeps it: the flat state under ``obs``
        (float32) and each camera's frames as uint8, at the spec's size."""
        out = {"obs": self.state_spec().flatten(obs)}
        for key in self.images:
            out[key] = self.frames(key, obs[key])
        return out

    def join(self, fields: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`split` into the flat float32 observation (NumPy or JAX: inside a
        jitted update the frames become floats only there)."""
        state = fields["obs"]
        if not self.images:
            return state
        xp = np if isinstance(state, np.ndarray) else _jnp()
        lead, parts, at = state.shape[:-1], [], 0
        for key, shape in zip(self.keys, self.shapes, strict=True):
            if key in self.images:
                parts.append(xp.reshape(fields[key], (*lead, -1)).astype(xp.float32))
            else:
                width = math.prod(shape)
                parts.append(state[..., at : at + width])
                at += width
        return xp.concatenate(parts, axis=-1)

    @classmethod
    def from_space(
        cls, space: gym.Space, ignore: tuple[str, ...] | list[str] = (), images: bool = False,
        image_size: int | None = None,
    ) -> ObsSpec:  # fmt: skip
        """Spec of a Box or Dict-of-Box space, every key in the space's order.

        Args:
            space: the env's observation space.
            ignore: Dict keys to leave out (e.g. camera images a state learner cannot use).
            images: keep uint8 camera keys as :attr:`images` (a learner with an image encoder
                reads them); else they are refused, naming how to leave them out.
            image_size: the learner reads every camera at ``image_size x image_size`` (frames
                of another size are resized where they enter: :meth:`frames`); None: as given.

        Raises:
            TypeError: for a key the learner cannot use (an image, a non-Box space), naming it
                and how to leave it out; for other spaces (Discrete, Tuple, nested Dict...).
            ValueError: for an ``ignore`` key the space does not have.
        """
        if isinstance(space, gym.spaces.Box):
            if _is_image(space):
                raise TypeError(
                    f"ObsSpec: got an image Box observation space {space}; state learners need "
                    "a float Box or a Dict of Boxes with at least one non-image key"
                )
            return cls(keys=(BOX_KEY,), shapes=(tuple(space.shape),))
        if not isinstance(space, gym.spaces.Dict):
            raise TypeError(
                f"ObsSpec: unsupported observation space {space}; supported are a Box or a "
                "Dict of Box spaces"
            )
        unknown = sorted(set(ignore) - set(space.spaces))
        if unknown:
            raise ValueError(
                f"ObsSpec: cannot ignore {unknown}: the observation has keys {list(space.spaces)}"
            )
        keys, shapes, cameras = [], [], []
        for key, sub in space.spaces.items():
            if key in ignore:
                continue
            if images and isinstance(sub, gym.spaces.Box) and _is_image(sub):
                cameras.append(key)
            elif not isinstance(sub, gym.spaces.Box) or _is_image(sub):
                what = "a uint8 camera image" if isinstance(sub, gym.spaces.Box) else str(sub)
                raise TypeError(
                    f"observation key {key!r} is {what}, which the state learner cannot use; "
                    f"learn from it with --pixels, or leave it out with --ignore-obs-keys {key} "
                    "(or configure the env without it)"
                )
            keys.append(key)
            shape = tuple(sub.shape)
            if key in cameras and image_size:
                shape = (image_size, image_size, shape[-1])
            shapes.append(shape)
        if not keys:
            raise TypeError(
                f"ObsSpec: Dict observation space {space} has no key left for the learner"
            )
        return cls(keys=tuple(keys), shapes=tuple(shapes), images=tuple(cameras))

    def flatten(self, obs: Mapping[str, Any] | np.ndarray) -> np.ndarray:
        """Concatenate one observation (or a batch with leading dims) into float32 (..., dim)."""
        if not isinstance(obs, Mapping):
            arr = np.asarray(obs, dtype=np.float32)
            if (
                len(self.keys) == 1
                and arr.shape[arr.ndim - len(self.shapes[0]) :] == self.shapes[0]
            ):
                lead = arr.shape[: arr.ndim - len(self.shapes[0])]
                return arr.reshape((*lead, self.dim))
            if arr.ndim >= 1 and arr.shape[-1] == self.dim:
                return arr
            raise ValueError(
                f"ObsSpec.flatten: array of shape {arr.shape} does not match spec {self.keys} "
                f"{self.shapes}; pass a dict of observations or a flat (..., {self.dim}) array"
            )
        if len(self.keys) == 1 and self.keys[0] == BOX_KEY and BOX_KEY not in obs:
            raise ValueError(f"ObsSpec.flatten: missing key {BOX_KEY!r} in {sorted(obs)}")
        parts: list[np.ndarray] = []
        batch_dims: tuple[int, ...] | None = None
        for key, shape in zip(self.keys, self.shapes, strict=True):
            if key not in obs:
                raise ValueError(
                    f"ObsSpec.flatten: observation has no key {key!r}; it has {sorted(obs)}"
                )
            arr = np.asarray(self.frames(key, obs[key]) if key in self.images else obs[key],
                             dtype=np.float32)  # fmt: skip
            if arr.shape[arr.ndim - len(shape) :] != shape or arr.ndim < len(shape):
                raise ValueError(
                    f"ObsSpec.flatten: key {key!r} has shape {arr.shape}, expected (..., *{shape})"
                )
            this_lead = arr.shape[: arr.ndim - len(shape)]
            if batch_dims is None:
                batch_dims = this_lead
            elif this_lead != batch_dims:
                raise ValueError(f"ObsSpec.flatten: leading dims differ across keys at {key!r}")
            parts.append(arr.reshape((*this_lead, -1)))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict (see :meth:`from_json`)."""
        out: dict[str, Any] = {"keys": list(self.keys), "shapes": [list(s) for s in self.shapes]}
        if self.images:  # absent for state learners: their records stay as they were
            out["images"] = list(self.images)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> ObsSpec:
        """Inverse of :meth:`to_json`; also accepts the JSON text."""
        doc: Mapping[str, Any] = json.loads(data) if isinstance(data, str) else data
        return cls(keys=tuple(doc["keys"]), shapes=tuple(tuple(s) for s in doc["shapes"]),
                   images=tuple(doc.get("images", ())))  # fmt: skip


@dataclass(frozen=True)
class ActionSpec:
    """Bounds of a continuous action space; policies act in [-1, 1] and are rescaled to them."""

    low: tuple[float, ...]
    """Lower bound per action dimension, in env units."""
    high: tuple[float, ...]
    """Upper bound per action dimension, in env units."""

    def __post_init__(self) -> None:
        low = tuple(float(x) for x in self.low)
        high = tuple(float(x) for x in self.high)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        if len(low) != len(high) or not low:
            raise ValueError(
                f"ActionSpec: low and high need the same non-zero length, got {len(low)} and "
                f"{len(high)}"
            )
        if not all(math.isfinite(x) for x in low + high):
            raise ValueError(
                "ActionSpec: action bounds must be finite (SAC squashes actions with tanh); "
                f"got low={low}, high={high}. Wrap the env with a RescaleAction/ClipAction"
            )
        if any(h <= lo for lo, h in zip(low, high, strict=True)):
            raise ValueError(f"ActionSpec: need high > low everywhere, got {low} / {high}")

    @property
    def dim(self) -> int:
        """Number of action dimensions."""
        return len(self.low)

    @classmethod
    def from_space(cls, space: gym.Space) -> ActionSpec:
        """Spec of a 1-D Box action space.

        Raises:
            TypeError: for a non-Box (e.g. Discrete) or multi-dimensional Box space.
        """
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(
                f"SAC needs a continuous Box action space; got {space}. Use a discrete-action "
                "algorithm or wrap the env so that its action space is a 1-D Box"
            )
        if len(space.shape) != 1:
            raise TypeError(
                f"ActionSpec: the action Box must be 1-D, got shape {space.shape}; flatten it "
                "with gymnasium.wrappers.FlattenObservation-style action wrapping"
            )
        return cls(low=tuple(space.low.tolist()), high=tuple(space.high.tolist()))

    def to_env(self, action: np.ndarray) -> np.ndarray:
        """Map a normalised action in [-1, 1] (clipped) to env units (float32)."""
        low = np.asarray(self.low, dtype=np.float32)
        high = np.asarray(self.high, dtype=np.float32)
        a = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        return (low + (a + 1.0) * 0.5 * (high - low)).astype(np.float32)

    def from_env(self, action: np.ndarray) -> np.ndarray:
        """Map an action in env units to [-1, 1] (clipped), inverse of :meth:`to_env`."""
        low = np.asarray(self.low, dtype=np.float32)
        high = np.asarray(self.high, dtype=np.float32)
        a = (np.asarray(action, dtype=np.float32) - low) / (high - low) * 2.0 - 1.0
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict (see :meth:`from_json`)."""
        return {"low": list(self.low), "high": list(self.high)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> ActionSpec:
        """Inverse of :meth:`to_json`; also accepts the JSON text."""
        doc: Mapping[str, Any] = json.loads(data) if isinstance(data, str) else data
        return cls(low=tuple(doc["low"]), high=tuple(doc["high"]))
