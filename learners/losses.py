"""SAC losses as pure functions of explicit params (RLPD / SERL variant).

References:
    [SAC] Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905.
    [RLPD] Ball et al., "Efficient Online RL with Offline Data", ICML 2023 (Algorithm 1).
    [REDQ] Chen et al., "Randomized Ensembled Double Q-Learning", ICLR 2021 (Eq. 1 / Alg. 1).

``policy_fn(actor_params, obs, key) -> (action, log_prob)`` and
``critic_fn(critic_params, obs, action) -> q of shape (num_critics, batch)`` are passed in, so
the losses can be checked against hand-computed values with constant networks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from handrail.learners.replay import Batch

Params = Any
PolicyFn = Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
CriticFn = Callable[[Params, jax.Array, jax.Array], jax.Array]


def subsample_min(q: jax.Array, subset: int, key: jax.Array) -> jax.Array:
    """Min over ``subset`` critics drawn without replacement ([REDQ] Eq. 1; [RLPD] Alg. 1).

    Args:
        q: (num_critics, batch) Q-values.
        subset: how many critics to draw (the same draw for the whole batch).
        key: PRNG key for the draw.
    """
    idx = jax.random.permutation(key, q.shape[0])[:subset]
    return jnp.min(q[idx], axis=0)


def critic_loss(
    critic_params: Params,
    target_critic_params: Params,
    actor_params: Params,
    temperature: jax.Array,
    batch: Batch,
    key: jax.Array,
    *,
    policy_fn: PolicyFn,
    critic_fn: CriticFn,
    critic_subset: int,
    backup_entropy: bool = True,
    subset_critic_fn: CriticFn | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Soft Bellman residual ([SAC] Eq. 5, with the soft value of Eq. 3).

    y = r + discount * (min_{i in M} Q_targ_i(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s'),
    where M is a random subset of the ensemble and ``discount = gamma^k (1 - terminated)``
    already carries the n-step horizon. The entropy term is dropped when ``backup_entropy`` is
    False. Loss = mean over critics and batch of (Q_i(s, a) - y)^2 (no 1/2 factor, as rlpd).
    ``subset_critic_fn`` (an ensemble of ``critic_subset`` members) evaluates only the drawn
    target critics (params gathered along the ensemble axis): same value, less compute.
    """
    key_pi, key_subset = jax.random.split(key)
    next_action, next_log_prob = policy_fn(actor_params, batch.next_obs, key_pi)
    if subset_critic_fn is None:
        next_q = subsample_min(
            critic_fn(target_critic_params, batch.next_obs, next_action), critic_subset, key_subset
        )
    else:  # same draw as subsample_min, but only the drawn critics are evaluated
        num_critics = jax.tree_util.tree_leaves(target_critic_params)[0].shape[0]
        idx = jax.random.permutation(key_subset, num_critics)[:critic_subset]
        drawn = jax.tree_util.tree_map(lambda x: x[idx], target_critic_params)
        next_q = jnp.min(subset_critic_fn(drawn, batch.next_obs, next_action), axis=0)
    if backup_entropy:
        next_q = next_q - temperature * next_log_prob
    target = jax.lax.stop_gradient(batch.reward + batch.discount * next_q)
    q = critic_fn(critic_params, batch.obs, batch.action)
    loss = jnp.mean((q - target[None]) ** 2)
    return loss, {"critic/loss": loss, "critic/q_mean": jnp.mean(q), "critic/target": target.mean()}


def actor_loss(
    actor_params: Params,
    critic_params: Params,
    temperature: jax.Array,
    obs: jax.Array,
    key: jax.Array,
    *,
    policy_fn: PolicyFn,
    critic_fn: CriticFn,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Policy loss ([SAC] Eq. 7): E[alpha * log pi(a|s) - mean_i Q_i(s, a)], a ~ pi (reparam.).

    The Q-value is the mean over the whole ensemble ([RLPD] Alg. 1).
    """
    action, log_prob = policy_fn(actor_params, obs, key)
    q = jnp.mean(critic_fn(critic_params, obs, action), axis=0)
    loss = jnp.mean(temperature * log_prob - q)
    return loss, {"actor/loss": loss, "actor/entropy": -jnp.mean(log_prob)}


def temperature_loss(
    log_temperature: jax.Array, entropy: jax.Array, target_entropy: float
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Automatic entropy tuning ([SAC] Eq. 18): alpha * (H - H_target) with alpha = exp(log_alpha).

    Minimising it raises alpha when the entropy H (= -E log pi, treated as a constant) is below
    the target and lowers it when above.
    """
    temperature = jnp.exp(log_temperature)
    loss = temperature * (jax.lax.stop_gradient(entropy) - target_entropy)
    return loss, {"temperature/loss": loss, "temperature/value": temperature}


def polyak(params: Params, target_params: Params, tau: float) -> Params:
    """Soft target update: target <- tau * params + (1 - tau) * target ([SAC] Alg. 1)."""
    return jax.tree_util.tree_map(lambda p, t: tau * p + (1.0 - tau) * t, params, target_params)
