"""ResNet-10, a frozen image encoder converted from published weights (SERL's).

SERL and HIL-SERL read their cameras through a ResNet-10 pretrained on ImageNet: ResNet v1 with
one basic block per stage (64, 128, 256, 512 channels), GroupNorm of 4 groups instead of batch
norm, convolutions without bias, inputs scaled to [0, 1] and standardised with ImageNet's mean
and standard deviation. No weights can be downloaded at run time here, so handrail holds the
network (:class:`ResNet10`) and a converter of the published flax params
(:func:`params_from_serl`): ``handrail encoder import-resnet10`` writes an encoder folder that
``handrail train --encoder`` reads like one it trained itself.

As a frozen encoder it gives, per camera, the mean of its last feature map over the image:
512 numbers, whatever the frame's size (SERL's 128x128: a 4x4 map). SERL trains a spatial
embedding head on that map with the policy; a frozen encoder here has no trainable part, so the
policy's own layers are the head.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from handrail.learners.images import to_unit

STAGES = (64, 128, 256, 512)
"""Channels of the four stages (one basic block each)."""
FEATURES = STAGES[-1]
"""Features per camera: the last stage's channels, averaged over the map."""
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

SERL_NAMES = {
    "conv_init": "stem_conv",
    "norm_init": "stem_norm",
    **{f"ResNetBlock_{i}": f"stage{i}" for i in range(len(STAGES))},
    "Conv_0": "conv1",
    "Conv_1": "conv2",
    "MyGroupNorm_0": "norm1",
    "MyGroupNorm_1": "norm2",
    "conv_proj": "proj_conv",
    "norm_proj": "proj_norm",
}
"""SERL's name of each module in its ResNet-10 params -> this network's."""


def _norm(name: str) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=4, epsilon=1e-5, name=name)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with GroupNorm, added to the input (projected by a strided 1x1
    convolution where the shape changes), then ReLU."""

    filters: int
    stride: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s = (self.stride, self.stride)
        y = nn.Conv(self.filters, (3, 3), s, use_bias=False, name="conv1")(x)
        y = nn.relu(_norm("norm1")(y))
        y = nn.Conv(self.filters, (3, 3), use_bias=False, name="conv2")(y)
        y = _norm("norm2")(y)
        if x.shape != y.shape:
            x = nn.Conv(self.filters, (1, 1), s, use_bias=False, name="proj_conv")(x)
            x = _norm("proj_norm")(x)
        return nn.relu(x + y)


class ResNet10(nn.Module):
    """uint8 frames (..., H, W, 3) -> (..., 512): the last stage's map averaged over it."""

    @nn.compact
    def __call__(self, frames: jax.Array) -> jax.Array:
        lead = frames.shape[:-3]
        x = to_unit(frames.reshape((-1, *frames.shape[-3:])))
        x = (x - jnp.asarray(IMAGENET_MEAN)) / jnp.asarray(IMAGENET_STD)
        x = nn.Conv(STAGES[0], (7, 7), (2, 2), padding=[(3, 3), (3, 3)], use_bias=False,
                    name="stem_conv")(x)  # fmt: skip
        x = nn.relu(_norm("stem_norm")(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, filters in enumerate(STAGES):
            x = BasicBlock(filters, 2 if i else 1, name=f"stage{i}")(x)
        return jnp.mean(x, axis=(1, 2)).reshape((*lead, FEATURES))


def template(size: int = 128) -> Any:
    """The params of a fresh :class:`ResNet10` (their tree and shapes; the values are random)."""
    return ResNet10().init(jax.random.PRNGKey(0), jnp.zeros((1, size, size, 3), jnp.uint8))[
        "params"
    ]


def read_params(path: Path) -> Mapping[str, Any]:
    """A params tree from ``path``: a pickle of nested dicts of arrays (SERL's
    ``resnet10_params.pkl``) or an ``.npz`` whose names join the levels with ``/``.

    Raises:
        ValueError: the file cannot be read as either (naming it and what it should be).
    """
    path = Path(path)
    try:
        if path.suffix == ".npz":
            tree: dict[str, Any] = {}
            with np.load(path) as flat:
                for name in flat.files:
                    *parents, leaf = name.split("/")
                    node = tree
                    for part in parents:
                        node = node.setdefault(part, {})
                    node[leaf] = flat[name]
            return tree
        with path.open("rb") as f:  # the user's own download: a pickle runs code, as torch's do
            loaded = pickle.load(f)
    except (OSError, ValueError, pickle.UnpicklingError, EOFError) as exc:
        raise ValueError(
            f"{path}: cannot read it as ResNet-10 params ({exc}); give SERL's "
            "resnet10_params.pkl (nested dicts of arrays) or an .npz of 'a/b/kernel' arrays"
        ) from exc
    if not isinstance(loaded, Mapping):
        raise ValueError(f"{path}: holds a {type(loaded).__name__}, not a params dict")
    return loaded


def params_from_serl(tree: Mapping[str, Any]) -> Any:
    """SERL's ResNet-10 params as :class:`ResNet10`'s, every array checked.

    Also takes params already in this network's names, and a tree that holds SERL's under
    one more level (a ``params`` or ``pretrained_encoder`` key).

    Raises:
        ValueError: a module or array is missing, unexpected or of another shape (named).
    """
    want = template()
    if "conv_init" not in tree and "stem_conv" not in tree and len(tree) == 1:
        (inner,) = tree.values()
        if isinstance(inner, Mapping):
            tree = inner

    def convert(node: Mapping[str, Any], like: Mapping[str, Any], where: str) -> dict[str, Any]:
        renamed = {SERL_NAMES.get(k, k): v for k, v in node.items()}
        extra = sorted(set(renamed) - set(like))
        missing = sorted(set(like) - set(renamed))
        if extra or missing:
            raise ValueError(
                f"ResNet-10 params{where}: missing {missing}, unexpected {extra}; these are not "
                "the params of SERL's resnetv1-10 (one basic block per stage, GroupNorm)"
            )
        out: dict[str, Any] = {}
        for key, value in renamed.items():
            if isinstance(like[key], Mapping):
                if not isinstance(value, Mapping):
                    raise ValueError(f"ResNet-10 params{where}/{key}: an array, not a module")
                out[key] = convert(value, like[key], f"{where}/{key}")
                continue
            array = np.asarray(value, np.float32)
            if array.shape != like[key].shape:
                raise ValueError(
                    f"ResNet-10 params{where}/{key}: shape {array.shape}, the network's is "
                    f"{like[key].shape}"
                )
            out[key] = array
        return out

    return convert(tree, want, "")
