"""Losses against hand-computed values with constant networks; subsampled min; Polyak."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from handrail.learners.agents import losses
from handrail.learners.agents.losses import Batch

BATCH = Batch(
    obs=jnp.zeros((2, 3)),
    action=jnp.zeros((2, 1)),
    reward=jnp.array([1.0, -0.5]),
    discount=jnp.array([0.9, 0.0]),  # second row terminated
    next_obs=jnp.zeros((2, 3)),
    online=jnp.array([False, True]),  # the first row is a demonstration
)
LOG_PROB = -0.7
NEXT_ACTION = jnp.full((2, 1), 0.5)
NEXT_LOG_PROB = jnp.full((2,), LOG_PROB)


def constant_policy(params, obs, key):
    """Action 0.5 with log-prob LOG_PROB for every row, scaled by params['scale']."""
    n = obs.shape[0]
    return jnp.full((n, 1), 0.5) * params["scale"], jnp.full((n,), LOG_PROB)


def constant_critic(params, obs, action):
    """Q_i(s, a) = params['q'][i] + params['w'][i] * a for every row."""
    return params["q"][:, None] + params["w"][:, None] * action[None, :, 0]


@pytest.mark.parametrize("backup_entropy", [True, False])
def test_critic_loss_matches_hand_computation(backup_entropy: bool) -> None:
    critic = {"q": jnp.array([1.0, 2.0, 4.0]), "w": jnp.zeros(3)}
    target = {"q": jnp.array([2.0, 3.0, 5.0]), "w": jnp.zeros(3)}
    alpha = 0.5
    loss, metrics = losses.critic_loss(
        critic, target, jnp.asarray(alpha), BATCH, NEXT_ACTION, NEXT_LOG_PROB,
        jax.random.PRNGKey(0), critic_fn=constant_critic, critic_subset=3,
        backup_entropy=backup_entropy,
    )  # fmt: skip
    # min over all 3 target critics = 2; soft value = 2 - 0.5 * (-0.7) = 2.35
    v_next = 2.35 if backup_entropy else 2.0
    y = [1.0 + 0.9 * v_next, -0.5 + 0.0 * v_next]
    expected = np.mean([(q - t) ** 2 for q in (1.0, 2.0, 4.0) for t in y])
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(metrics["critic/q_mean"]) == pytest.approx(7.0 / 3.0)


def test_critic_loss_gradient_flows_only_into_online_critic() -> None:
    critic = {"q": jnp.array([1.0, 2.0]), "w": jnp.zeros(2)}
    target = {"q": jnp.array([2.0, 3.0]), "w": jnp.zeros(2)}
    grads = jax.grad(lambda tp: losses.critic_loss(
        critic, tp, jnp.asarray(0.1), BATCH, NEXT_ACTION, NEXT_LOG_PROB, jax.random.PRNGKey(0),
        critic_fn=constant_critic, critic_subset=2,
    )[0])(target)  # fmt: skip
    assert float(jnp.abs(grads["q"]).sum()) == 0.0


def test_actor_loss_matches_hand_computation() -> None:
    critic = {"q": jnp.array([1.0, 3.0]), "w": jnp.array([2.0, 4.0])}
    loss, metrics = losses.actor_loss(
        {"scale": 1.0}, critic, jnp.asarray(0.2), BATCH, jax.random.PRNGKey(0),
        policy_fn=constant_policy, critic_fn=constant_critic,
    )  # fmt: skip
    # a = 0.5: Q = (1 + 1, 3 + 2) -> mean 3.5; loss = 0.2 * (-0.7) - 3.5
    assert float(loss) == pytest.approx(0.2 * LOG_PROB - 3.5, rel=1e-6)
    assert float(metrics["actor/entropy"]) == pytest.approx(0.7)
    # d loss / d scale = -mean_i w_i * 0.5 = -1.5: the actor moves towards larger Q.
    grad = jax.grad(lambda p: losses.actor_loss(
        p, critic, jnp.asarray(0.2), BATCH, jax.random.PRNGKey(0),
        policy_fn=constant_policy, critic_fn=constant_critic,
    )[0])({"scale": 1.0})  # fmt: skip
    assert float(grad["scale"]) == pytest.approx(-1.5)


@pytest.mark.parametrize(("entropy", "sign"), [(3.0, 1.0), (-3.0, -1.0)])
def test_temperature_gradient_sign(entropy: float, sign: float) -> None:
    """Entropy above target -> positive gradient -> gradient descent lowers alpha (and back)."""
    log_alpha = jnp.log(0.5)
    loss, metrics = losses.temperature_loss(log_alpha, jnp.asarray(entropy), 0.0)
    assert float(loss) == pytest.approx(0.5 * entropy)
    assert float(metrics["temperature/value"]) == pytest.approx(0.5)
    grad = jax.grad(lambda la: losses.temperature_loss(la, jnp.asarray(entropy), 0.0)[0])(log_alpha)
    assert np.sign(float(grad)) == sign


def test_subsample_min_draws_each_pair_and_only_pairs() -> None:
    q = jnp.array([[4.0], [1.0], [3.0], [2.0]])
    pair_mins = {min(a, b) for a, b in itertools.combinations([4.0, 1.0, 3.0, 2.0], 2)}
    seen = {float(losses.subsample_min(q, 2, jax.random.PRNGKey(i))[0]) for i in range(60)}
    assert seen == pair_mins  # {1, 2, 3}: never 4, which no pair has as its min
    assert float(losses.subsample_min(q, 4, jax.random.PRNGKey(0))[0]) == 1.0
    singles = {float(losses.subsample_min(q, 1, jax.random.PRNGKey(i))[0]) for i in range(60)}
    assert singles == {1.0, 2.0, 3.0, 4.0}


def test_polyak_is_exact() -> None:
    params = {"a": jnp.array([4.0, 0.0]), "b": jnp.array(8.0)}
    target = {"a": jnp.array([8.0, 4.0]), "b": jnp.array(0.0)}
    out = losses.polyak(params, target, 0.25)
    np.testing.assert_array_equal(np.asarray(out["a"]), [7.0, 3.0])
    assert float(out["b"]) == 2.0
    same = losses.polyak(params, target, 1.0)
    np.testing.assert_array_equal(np.asarray(same["a"]), np.asarray(params["a"]))


def test_subset_evaluation_equals_full_ensemble_min() -> None:
    critic = {"q": jnp.array([1.0, 2.0, 4.0, 0.5]), "w": jnp.zeros(4)}
    target = {"q": jnp.array([2.0, 3.0, 5.0, 7.0]), "w": jnp.array([1.0, -1.0, 0.0, 2.0])}
    kwargs = {"critic_fn": constant_critic, "critic_subset": 2}
    values = set()
    for seed in range(12):
        args = (critic, target, jnp.asarray(0.3), BATCH, NEXT_ACTION, NEXT_LOG_PROB,
                jax.random.PRNGKey(seed))  # fmt: skip
        full, _ = losses.critic_loss(*args, **kwargs)
        subset, _ = losses.critic_loss(*args, **kwargs, subset_critic_fn=constant_critic)
        assert float(full) == pytest.approx(float(subset), rel=1e-6)
        values.add(round(float(full), 5))
    assert len(values) > 1  # different draws were exercised


def constant_mode(params, obs):
    """Deterministic action 0.5 * params['scale'] for every row."""
    return jnp.full((obs.shape[0], 1), 0.5) * params["scale"]


def test_actor_loss_bc_term_matches_hand_computation() -> None:
    critic = {"q": jnp.array([1.0, 3.0]), "w": jnp.array([2.0, 4.0])}
    # the demo row (online False) has action -0.5; the online row's action must not matter
    batch = BATCH._replace(action=jnp.array([[-0.5], [9.0]]))

    def loss_fn(params, weight):
        return losses.actor_loss(
            params, critic, jnp.asarray(0.2), batch, jax.random.PRNGKey(0),
            policy_fn=constant_policy, critic_fn=constant_critic, bc_weight=weight,
            mode_fn=constant_mode,
        )  # fmt: skip

    loss, metrics = loss_fn({"scale": 1.0}, 0.4)
    # SAC part as above: 0.2 * (-0.7) - 3.5; mean |Q| = 3.5; BC mse = (0.5 - (-0.5))^2 = 1.
    assert float(metrics["actor/bc_mse"]) == pytest.approx(1.0)
    assert float(loss) == pytest.approx(0.2 * LOG_PROB - 3.5 + 0.4 * 3.5 * 1.0, rel=1e-6)
    # d/d scale: SAC part -1.5; BC part 0.4 * 3.5 (|Q| is a constant) * 2 * (0.5s + 0.5) * 0.5.
    grad = jax.grad(lambda p: loss_fn(p, 0.4)[0])({"scale": 1.0})
    assert float(grad["scale"]) == pytest.approx(-1.5 + 0.4 * 3.5 * 1.0, rel=1e-6)
    off, off_metrics = loss_fn({"scale": 1.0}, 0.0)
    assert float(off) == pytest.approx(0.2 * LOG_PROB - 3.5, rel=1e-6)
    assert "actor/bc_mse" not in off_metrics


def test_intervention_bc_term_covers_the_persons_rows_only() -> None:
    critic = {"q": jnp.array([1.0, 3.0]), "w": jnp.array([2.0, 4.0])}
    # three rows: a demo (action 9: must not count), a correction (action -0.5), an online row
    batch = Batch(obs=jnp.zeros((3, 3)), action=jnp.array([[9.0], [-0.5], [7.0]]),
                  reward=jnp.zeros(3), discount=jnp.zeros(3), next_obs=jnp.zeros((3, 3)),
                  online=jnp.array([False, False, True]), human=jnp.array([False, True, False]))  # fmt: skip

    def loss_fn(bc: float, human_bc: float) -> tuple:
        return losses.actor_loss(
            {"scale": 1.0}, critic, jnp.asarray(0.2), batch, jax.random.PRNGKey(0),
            policy_fn=constant_policy, critic_fn=constant_critic, bc_weight=bc,
            intervention_bc_weight=human_bc, mode_fn=constant_mode,
        )  # fmt: skip

    sac_part = 0.2 * LOG_PROB - 3.5
    loss, metrics = loss_fn(0.0, 2.0)
    # mode 0.5 vs the correction's -0.5: mse 1; mean |Q| = 3.5
    assert float(metrics["actor/intervention_bc_mse"]) == pytest.approx(1.0)
    assert "actor/bc_mse" not in metrics
    assert float(loss) == pytest.approx(sac_part + 2.0 * 3.5 * 1.0, rel=1e-6)
    both, metrics = loss_fn(0.5, 2.0)  # offline BC: the demo (8.5^2) and the correction (1)
    assert float(metrics["actor/bc_mse"]) == pytest.approx((8.5**2 + 1.0) / 2)
    assert float(both) == pytest.approx(
        sac_part + 3.5 * (0.5 * (8.5**2 + 1.0) / 2 + 2.0 * 1.0), rel=1e-6
    )
    no_human = losses.actor_loss(
        {"scale": 1.0}, critic, jnp.asarray(0.2), batch._replace(human=None),
        jax.random.PRNGKey(0), policy_fn=constant_policy, critic_fn=constant_critic,
        intervention_bc_weight=2.0, mode_fn=constant_mode,
    )[0]  # fmt: skip
    assert float(no_human) == pytest.approx(sac_part, rel=1e-6)


def test_anchor_term_pulls_every_rows_action_towards_the_anchor() -> None:
    critic = {"q": jnp.array([1.0, 3.0]), "w": jnp.array([2.0, 4.0])}
    # a residual's anchor is its base action: 0.2 on the demo row, -0.3 on the online row
    anchor = jnp.array([[0.2], [-0.3]])
    batch = BATCH._replace(obs=jnp.zeros((2, 3)).at[:, 0].set(anchor[:, 0]))

    def loss_fn(params, weight):
        return losses.actor_loss(
            params, critic, jnp.asarray(0.2), batch, jax.random.PRNGKey(0),
            policy_fn=constant_policy, critic_fn=constant_critic, mode_fn=constant_mode,
            anchor_weight=weight, anchor_fn=lambda obs: obs[:, :1],
        )  # fmt: skip

    loss, metrics = loss_fn({"scale": 1.0}, 0.5)
    # mode 0.5 on both rows: (0.3^2 + 0.8^2) / 2 = 0.365, over every row (online ones too);
    # mean |Q| = 3.5 as above, a constant of the gradient
    assert float(metrics["actor/anchor_mse"]) == pytest.approx(0.365, rel=1e-6)
    assert float(loss) == pytest.approx(0.2 * LOG_PROB - 3.5 + 0.5 * 3.5 * 0.365, rel=1e-6)
    # d/d scale of the anchor part: 0.5 * 3.5 * (2 * 0.3 * 0.5 + 2 * 0.8 * 0.5) / 2
    grad = jax.grad(lambda p: loss_fn(p, 0.5)[0])({"scale": 1.0})
    assert float(grad["scale"]) == pytest.approx(-1.5 + 0.5 * 3.5 * 0.55, rel=1e-6)
    assert "actor/anchor_mse" not in loss_fn({"scale": 1.0}, 0.0)[1]
    with pytest.raises(ValueError, match="anchor_fn"):
        losses.actor_loss(
            {"scale": 1.0}, critic, jnp.asarray(0.2), batch, jax.random.PRNGKey(0),
            policy_fn=constant_policy, critic_fn=constant_critic, mode_fn=constant_mode,
            anchor_weight=1.0,
        )  # fmt: skip


def test_actor_loss_bc_without_mode_fn_is_a_clear_error() -> None:
    critic = {"q": jnp.array([1.0]), "w": jnp.array([0.0])}
    with pytest.raises(ValueError, match="mode_fn"):
        losses.actor_loss(
            {"scale": 1.0}, critic, jnp.asarray(0.2), BATCH, jax.random.PRNGKey(0),
            policy_fn=constant_policy, critic_fn=constant_critic, bc_weight=1.0,
        )  # fmt: skip


def test_entropy_metrics_split_online_and_offline_rows() -> None:
    def policy(params, obs, key):  # log-prob -1 on the demo row, -3 on the online row
        return jnp.zeros((2, 1)), jnp.array([-1.0, -3.0])

    critic = {"q": jnp.array([0.0]), "w": jnp.array([0.0])}
    _, metrics = losses.actor_loss({"scale": 1.0}, critic, jnp.asarray(0.2), BATCH,
                                   jax.random.PRNGKey(0), policy_fn=policy,
                                   critic_fn=constant_critic)  # fmt: skip
    assert float(metrics["actor/entropy"]) == pytest.approx(2.0)
    assert float(metrics["actor/entropy_online"]) == pytest.approx(3.0)
    assert float(metrics["actor/entropy_offline"]) == pytest.approx(1.0)
