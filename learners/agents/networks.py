"""Flax modules for SAC: an MLP, a LayerNorm critic ensemble, a tanh-Gaussian actor and the
camera encoders.

Networks only build modules and the action distribution's maths; losses live in
``losses.py`` and take the params explicitly.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

LOG_STD_MIN = -10.0
"""Lower bound of the actor's log standard deviation (as in rlpd/jaxrl)."""
LOG_STD_MAX = 2.0
"""Upper bound of the actor's log standard deviation."""


class MLP(nn.Module):
    """Dense layers with ReLU; optional LayerNorm after each hidden Dense (RLPD's critic)."""

    hidden_dims: Sequence[int]
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.hidden_dims:
            x = nn.Dense(width, kernel_init=nn.initializers.xavier_uniform())(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = nn.relu(x)
        return x


class Critic(nn.Module):
    """One Q-function Q(s, a) -> scalar."""

    hidden_dims: Sequence[int]
    layer_norm: bool = True

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)
        x = MLP(self.hidden_dims, self.layer_norm)(x)
        return nn.Dense(1, kernel_init=nn.initializers.xavier_uniform())(x)[..., 0]


class CriticEnsemble(nn.Module):
    """``num_critics`` independent critics evaluated in one vectorised call -> (num_critics, ...)."""

    hidden_dims: Sequence[int]
    num_critics: int
    layer_norm: bool = True

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            Critic,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )
        return ensemble(self.hidden_dims, self.layer_norm)(obs, action)


class Actor(nn.Module):
    """Gaussian head before the tanh squashing: returns (mean, log_std), each (..., action_dim)."""

    hidden_dims: Sequence[int]
    action_dim: int
    zero_mean: bool = False
    """Start the mean layer at exactly zero (a residual actor starts as "no correction")."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = MLP(self.hidden_dims, layer_norm=False)(obs)
        init = nn.initializers.zeros if self.zero_mean else nn.initializers.xavier_uniform()
        mean = nn.Dense(self.action_dim, kernel_init=init)(x)
        log_std = nn.Dense(self.action_dim, kernel_init=nn.initializers.xavier_uniform())(x)
        # Clipped (as rlpd/jaxrl), so a fresh actor starts near std = 1.
        log_std = jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)
        return mean, log_std


def tanh_gaussian_sample(
    mean: jax.Array, log_std: jax.Array, key: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Reparameterised sample a = tanh(mean + std * eps) and its log-probability.

    The log-density includes the tanh change of variables (Haarnoja et al. 2018, Appendix C,
    Eq. 21): log pi(a|s) = log N(u) - sum log(1 - tanh(u)^2), written stably as
    2 * (log 2 - u - softplus(-2u)).
    """
    eps = jax.random.normal(key, mean.shape, mean.dtype)
    u = mean + jnp.exp(log_std) * eps
    log_normal = -0.5 * eps**2 - log_std - 0.5 * jnp.log(2.0 * jnp.pi)
    log_det = 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.tanh(u), jnp.sum(log_normal - log_det, axis=-1)


class PatchConv(nn.Module):
    """A convolution whose kernel equals its stride (``patch`` x ``patch``, "SAME" padding),
    computed as a reshape and one matmul: equal to ``nn.Conv`` with those settings and the same
    params, and several times faster on a CPU, where XLA's convolution gradients are slow."""

    features: int
    patch: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        p, (n, h, w, c) = self.patch, x.shape
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (p, p, c, self.features))
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        rows, cols = -(-h // p), -(-w // p)  # "SAME": ceil(size / stride) outputs
        pad_h, pad_w = rows * p - h, cols * p - w
        x = jnp.pad(x, ((0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2),
                        (0, 0)))  # fmt: skip
        x = x.reshape(n, rows, p, cols, p, c).transpose(0, 1, 3, 2, 4, 5)
        return x.reshape(n, rows, cols, p * p * c) @ kernel.reshape(p * p * c, -1) + bias


class ConvEncoder(nn.Module):
    """Camera frames ``(..., H, W, C)`` in [0, 1] -> a feature vector (..., ``features``).

    Convolutions with ReLU (``channels``, ``strides`` and ``kernels`` per layer; no kernels:
    3x3 everywhere), flattened, then a Dense layer, LayerNorm and tanh: DrQ-v2's and RLPD's
    pixel encoder, small enough for a CPU. A layer whose kernel equals its stride (a patch
    embedding, as ViTs and ConvNeXt begin) runs as a :class:`PatchConv`.
    """

    channels: Sequence[int] = (32, 32, 32, 32)
    strides: Sequence[int] = (2, 2, 2, 1)
    features: int = 64
    kernels: Sequence[int] = ()

    @nn.compact
    def __call__(self, frames: jax.Array) -> jax.Array:
        lead = frames.shape[:-3]
        x = frames.reshape((-1, *frames.shape[-3:]))
        kernels = self.kernels or (3,) * len(self.channels)
        layers = zip(self.channels, self.strides, kernels, strict=True)
        for i, (width, stride, kernel) in enumerate(layers):
            if kernel == stride > 1:
                x = PatchConv(width, kernel, name=f"Conv_{i}")(x)
            else:
                x = nn.Conv(width, (kernel, kernel), strides=(stride, stride), padding="SAME",
                            name=f"Conv_{i}")(x)  # fmt: skip
            x = nn.relu(x)
        x = x.reshape((x.shape[0], -1))
        x = nn.Dense(self.features, kernel_init=nn.initializers.xavier_uniform())(x)
        x = jnp.tanh(nn.LayerNorm()(x))
        return x.reshape((*lead, self.features))


IMAGE_TUPLES = ("image_channels", "image_strides", "image_kernels")
"""The image-encoder settings of an agent's config that are tuples of ints (lists in JSON)."""

IMAGE_NEEDS = (
    "image_features >= 1, one stride >= 1 per image channel count >= 1, no image_kernels or "
    "one >= 1 per channel count, image_shift >= 0"
)
"""What :func:`image_checks` asks of the settings, for the configs' error messages."""


def image_checks(
    channels: Sequence[int],
    strides: Sequence[int],
    features: int,
    shift: int,
    kernels: Sequence[int] = (),
) -> dict[str, bool]:
    """Whether each camera-encoder setting of an agent's config is valid, by field name (SAC's
    and BC's share them)."""
    return {
        "image_features": features >= 1,
        "image_channels": bool(channels) and min(channels) >= 1,
        "image_strides": len(strides) == len(channels) and min(strides, default=0) >= 1,
        "image_kernels": not kernels or (len(kernels) == len(channels) and min(kernels) >= 1),
        "image_shift": shift >= 0,
    }


class CameraEncoders(nn.Module):
    """uint8 frames of each camera ``(..., H, W, C)`` -> one feature vector: a
    :class:`ConvEncoder` per camera (cameras see different things), features concatenated in
    ``cameras`` order."""

    cameras: Sequence[str]
    channels: Sequence[int] = (32, 32, 32, 32)
    strides: Sequence[int] = (2, 2, 2, 1)
    features: int = 64
    kernels: Sequence[int] = ()

    @nn.compact
    def __call__(self, frames: Sequence[jax.Array]) -> jax.Array:
        parts = [
            ConvEncoder(
                self.channels, self.strides, self.features, self.kernels, name=f"camera_{cam}"
            )(frame.astype(jnp.float32) / 255.0)
            for cam, frame in zip(self.cameras, frames, strict=True)
        ]
        return jnp.concatenate(parts, axis=-1)
