"""Networks: ensemble shapes and independence, LayerNorm, tanh-Gaussian log-probabilities, the
camera encoder's patch layers."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from handrail.learners.agents.networks import (
    Actor,
    ConvEncoder,
    CriticEnsemble,
    tanh_gaussian_sample,
)


def test_critic_ensemble_shape_and_independent_members() -> None:
    critic = CriticEnsemble((32, 32), num_critics=4, layer_norm=True)
    obs, act = jnp.ones((5, 3)), jnp.zeros((5, 2))
    params = critic.init(jax.random.PRNGKey(0), obs, act)
    q = critic.apply(params, obs, act)
    assert q.shape == (4, 5)
    assert len(np.unique(np.asarray(q[:, 0]).round(6))) == 4  # differently initialised members
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
    assert any("LayerNorm" in p for p in paths)


def test_critic_without_layer_norm_has_no_norm_params() -> None:
    critic = CriticEnsemble((32,), num_critics=2, layer_norm=False)
    params = critic.init(jax.random.PRNGKey(0), jnp.ones((1, 3)), jnp.zeros((1, 2)))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
    assert not any("LayerNorm" in p for p in paths)


def test_actor_outputs_and_log_std_bounds() -> None:
    actor = Actor((32, 32), action_dim=3)
    params = actor.init(jax.random.PRNGKey(1), jnp.ones((1, 4)))
    mean, log_std = actor.apply(params, 1e4 * jnp.ones((6, 4)))
    assert mean.shape == log_std.shape == (6, 3)
    assert float(log_std.min()) >= -10.0 and float(log_std.max()) <= 2.0


def test_tanh_gaussian_log_prob_matches_change_of_variables() -> None:
    mean = jnp.array([[0.3, -1.2], [2.0, 0.0]])
    log_std = jnp.array([[-0.5, 0.2], [0.1, -1.0]])
    key = jax.random.PRNGKey(3)
    action, log_prob = tanh_gaussian_sample(mean, log_std, key)
    assert float(jnp.abs(action).max()) <= 1.0
    # Recover the pre-tanh sample from the same noise and apply the textbook formula.
    eps = np.asarray(jax.random.normal(key, mean.shape))
    std = np.exp(np.asarray(log_std))
    u = np.asarray(mean) + std * eps
    normal = -0.5 * ((u - np.asarray(mean)) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    expected = (normal - np.log(1.0 - np.tanh(u) ** 2)).sum(-1)
    np.testing.assert_allclose(np.asarray(action), np.tanh(u), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(log_prob), expected, rtol=1e-4, atol=1e-4)


class _Reference(nn.Module):
    """ConvEncoder written with nn.Conv only (its param names), to check the patch path by."""

    channels: tuple[int, ...]
    strides: tuple[int, ...]
    kernels: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        layers = zip(self.channels, self.strides, self.kernels, strict=True)
        for i, (width, stride, kernel) in enumerate(layers):
            x = nn.relu(nn.Conv(width, (kernel, kernel), strides=(stride, stride),
                                padding="SAME", name=f"Conv_{i}")(x))  # fmt: skip
        x = nn.Dense(8, kernel_init=nn.initializers.xavier_uniform())(x.reshape((x.shape[0], -1)))
        return jnp.tanh(nn.LayerNorm()(x))


@pytest.mark.parametrize("size", [16, 13])  # 13: "SAME" pads the last patch of each row
def test_a_kernel_equal_to_its_stride_is_the_same_convolution_as_a_matmul(size: int) -> None:
    channels, strides, kernels = (6, 5, 4), (4, 2, 1), (4, 3, 3)
    encoder = ConvEncoder(channels, strides, features=8, kernels=kernels)
    frames = jax.random.uniform(jax.random.PRNGKey(1), (2, 3, size, size, 3))
    params = encoder.init(jax.random.PRNGKey(0), frames)
    # The same param tree as a plain nn.Conv encoder: a checkpoint reads either way.
    reference = _Reference(channels, strides, kernels)
    flat = frames.reshape((-1, size, size, 3))
    ref_params = reference.init(jax.random.PRNGKey(0), flat)
    shapes = jax.tree_util.tree_map(jnp.shape, params)
    assert shapes == jax.tree_util.tree_map(jnp.shape, ref_params)
    assert shapes["params"]["Conv_0"]["kernel"] == (4, 4, 3, 6)
    out = encoder.apply(params, frames)
    assert out.shape == (2, 3, 8)
    expected = reference.apply(params, flat).reshape((2, 3, 8))
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-5, atol=1e-5)

    # Its gradient is the convolution's too.
    def loss(module, p, x):
        return jnp.sum(module.apply(p, x) ** 2)

    g = jax.grad(lambda p: loss(encoder, p, frames))(params)
    g_ref = jax.grad(lambda p: loss(reference, p, flat))(params)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g_ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_no_kernels_is_three_everywhere() -> None:
    encoder = ConvEncoder((4, 4), (2, 1), features=8)
    params = encoder.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 3)))
    assert [params["params"][f"Conv_{i}"]["kernel"].shape[:2] for i in (0, 1)] == [(3, 3)] * 2
