"""Networks: ensemble shapes and independence, LayerNorm, tanh-Gaussian log-probabilities."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from handrail.learners.agents.networks import Actor, CriticEnsemble, tanh_gaussian_sample


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
