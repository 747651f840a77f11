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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

Params = Any
PolicyFn = Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
CriticFn = Callable[[Params, jax.Array, jax.Array], jax.Array]
ModeFn = Callable[[Params, jax.Array], jax.Array]
AnchorFn = Callable[[jax.Array], jax.Array]


class Batch(NamedTuple):
    """A minibatch (or a stack of them, leading dims shared by every leaf)."""

    obs: Any
    """(..., obs_dim) float32 flat observations."""
    action: Any
    """(..., action_dim) executed actions in [-1, 1]."""
    reward: Any
    """(...,) n-step return sum_{j<k} gamma^j r_j."""
    discount: Any
    """(...,) gamma^k, 0 when the k-th transition terminated."""
    next_obs: Any
    """(..., obs_dim) the observation k steps later (bootstrap state)."""
    online: Any
    """(...,) bool: the row came from the online buffer (else demos or interventions)."""
    human: Any = None
    """(...,) bool: the row is a person's correction (the intervention buffer); None: no row."""


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
    temperature: jax.Array,
    batch: Batch,
    next_action: jax.Array,
    next_log_prob: jax.Array,
    key: jax.Array,
    *,
    critic_fn: CriticFn,
    critic_subset: int,
    backup_entropy: bool = True,
    subset_critic_fn: CriticFn | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Soft Bellman residual ([SAC] Eq. 5, with the soft value of Eq. 3).

    y = r + discount * (min_{i in M} Q_targ_i(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s'),
    where M is a random subset of the ensemble (drawn with ``key``) and ``discount = gamma^k
    (1 - terminated)`` already carries the n-step horizon. ``next_action`` and
    ``next_log_prob`` are a' and log pi(a'|s'), sampled by the caller (the actor is fixed
    during a block of critic steps, so a block samples them all at once). The entropy term is
    dropped when ``backup_entropy`` is False. Loss = mean over critics and batch of
    (Q_i(s, a) - y)^2 (no 1/2 factor, as rlpd). ``subset_critic_fn`` (an ensemble of
    ``critic_subset`` members) evaluates only the drawn target critics (params gathered along
    the ensemble axis): same value, less compute.
    """
    if subset_critic_fn is None:
        next_q = subsample_min(
            critic_fn(target_critic_params, batch.next_obs, next_action), critic_subset, key
        )
    else:  # same draw as subsample_min, but only the drawn critics are evaluated
        num_critics = jax.tree_util.tree_leaves(target_critic_params)[0].shape[0]
        idx = jax.random.permutation(key, num_critics)[:critic_subset]
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
    batch: Batch,
    key: jax.Array,
    *,
    policy_fn: PolicyFn,
    critic_fn: CriticFn,
    bc_weight: float = 0.0,
    intervention_bc_weight: float = 0.0,
    mode_fn: ModeFn | None = None,
    anchor_weight: float = 0.0,
    anchor_fn: AnchorFn | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Policy loss ([SAC] Eq. 7): E[alpha * log pi(a|s) - mean_i Q_i(s, a)], a ~ pi (reparam.).

    The Q-value is the mean over the whole ensemble ([RLPD] Alg. 1). With ``bc_weight > 0`` a
    behaviour-cloning term on the offline rows (``batch.online`` False: demonstrations and
    interventions, with their executed actions) is added, scaled as in [TD3+BC] Eq. 3 so that
    it does not depend on the reward scale:
    ``bc_weight * stop_grad(mean |Q|) * mean_offline((mode(s) - a)^2)``, where ``mode_fn``
    gives the deterministic action tanh(mean) (the one evaluation uses). With
    ``intervention_bc_weight > 0`` the same term, over the person's corrections only
    (``batch.human``), is added with that weight: the policy imitates what the person did in
    the states it got itself into (HG-DAgger's rule, on top of HIL-SERL's sampling). With
    ``anchor_weight > 0`` the same term, over every row, pulls the deterministic action towards
    ``anchor_fn(obs)`` (a residual's base action: a penalty on the size of its correction).

    Metrics include the entropy estimate -log pi over all rows, the online rows and the
    offline rows (``actor/entropy``, ``actor/entropy_online``, ``actor/entropy_offline``).
    """
    action, log_prob = policy_fn(actor_params, batch.obs, key)
    q = jnp.mean(critic_fn(critic_params, batch.obs, action), axis=0)
    sac_loss = jnp.mean(temperature * log_prob - q)
    online = jnp.asarray(batch.online, jnp.float32)
    metrics = {
        "actor/entropy": -jnp.mean(log_prob),
        "actor/entropy_online": -masked_mean(log_prob, online),
        "actor/entropy_offline": -masked_mean(log_prob, 1.0 - online),
    }
    loss = sac_loss
    human = batch.human is not None and intervention_bc_weight > 0.0
    if bc_weight > 0.0 or human or anchor_weight > 0.0:
        if mode_fn is None:
            raise ValueError("actor_loss: a behaviour-cloning or anchor weight > 0 needs mode_fn")
        mode = mode_fn(actor_params, batch.obs)
        err = jnp.mean((mode - batch.action) ** 2, axis=-1)
        scale = jax.lax.stop_gradient(jnp.mean(jnp.abs(q)))
        if bc_weight > 0.0:
            bc = masked_mean(err, 1.0 - online)
            loss = loss + bc_weight * scale * bc
            metrics["actor/bc_mse"] = bc
        if human:
            human_bc = masked_mean(err, jnp.asarray(batch.human, jnp.float32))
            loss = loss + intervention_bc_weight * scale * human_bc
            metrics["actor/intervention_bc_mse"] = human_bc
        if anchor_weight > 0.0:
            if anchor_fn is None:
                raise ValueError("actor_loss: an anchor weight > 0 needs anchor_fn")
            anchor = jnp.mean((mode - anchor_fn(batch.obs)) ** 2)
            loss = loss + anchor_weight * scale * anchor
            metrics["actor/anchor_mse"] = anchor
    metrics["actor/loss"] = loss
    return loss, metrics


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``x`` over the rows where ``mask`` is 1 (0 when no row is)."""
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def bc_mse(
    actor_params: Params, obs: jax.Array, action: jax.Array, *, mode_fn: ModeFn
) -> jax.Array:
    """Behaviour cloning: mean over rows and action dims of (mode(s) - a)^2 ([TD3+BC] Eq. 3)."""
    return jnp.mean((mode_fn(actor_params, obs) - action) ** 2)


def temperature_loss(
    log_temperature: jax.Array, entropy: jax.Array, target_entropy: float | jax.Array
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
