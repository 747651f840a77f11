"""SAC losses as pure functions of explicit params (RLPD / SERL variant).

References:
    [SAC] Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905.
    [RLPD] Ball et al., "Efficient Online RL with Offline Data", ICML 2023 (Algorithm 1).
    [REDQ] Chen et al., "Randomized Ensembled Double Q-Learning", ICLR 2021 (Eq. 1 / Alg. 1).
    [TD3+BC] Fujimoto & Gu, "A Minimalist Approach to Offline RL", NeurIPS 2021 (Eq. 3).

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
ModeFn = Callable[[Params, jax.Array], jax.Array]


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
    bc_weight: float = 0.0,
    num_demo: int = 0,
    demo_action: jax.Array | None = None,
    mode_fn: ModeFn | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Policy loss ([SAC] Eq. 7): E[alpha * log pi(a|s) - mean_i Q_i(s, a)], a ~ pi (reparam.).

    The Q-value is the mean over the whole ensemble ([RLPD] Alg. 1). With ``bc_weight > 0`` the
    first ``num_demo`` rows of ``obs`` are demonstrations with actions ``demo_action``
    (num_demo, A), and a behaviour-cloning term is added, scaled as in [TD3+BC] Eq. 3 so that it
    does not depend on the reward scale:
    ``bc_weight * stop_grad(mean |Q|) * mean((mode(s_demo) - a_demo)^2)``, where ``mode_fn``
    gives the deterministic action tanh(mean) (the one evaluation uses).
    """
    action, log_prob = policy_fn(actor_params, obs, key)
    q = jnp.mean(critic_fn(critic_params, obs, action), axis=0)
    sac_loss = jnp.mean(temperature * log_prob - q)
    metrics = {"actor/entropy": -jnp.mean(log_prob)}
    loss = sac_loss
    if bc_weight > 0.0 and num_demo > 0:
        if mode_fn is None or demo_action is None:
            raise ValueError("actor_loss: bc_weight > 0 needs mode_fn and demo_action")
        bc = bc_mse(actor_params, obs[:num_demo], demo_action, mode_fn=mode_fn)
        scale = jax.lax.stop_gradient(jnp.mean(jnp.abs(q)))
        loss = sac_loss + bc_weight * scale * bc
        metrics["actor/bc_mse"] = bc
    metrics["actor/loss"] = loss
    return loss, metrics


def bc_mse(
    actor_params: Params, obs: jax.Array, action: jax.Array, *, mode_fn: ModeFn
) -> jax.Array:
    """Behaviour cloning: mean over rows and action dims of (mode(s) - a)^2 ([TD3+BC] Eq. 3)."""
    return jnp.mean((mode_fn(actor_params, obs) - action) ** 2)


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
