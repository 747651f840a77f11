"""SAC update: scan equals loop, determinism, temperature direction, non-finite guard, config."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from handrail.learners.agents.losses import Batch
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.specs import ActionSpec, ObsSpec

OBS_DIM, ACT_DIM, UTD, BATCH, N_DEMO = 4, 2, 3, 32, 8


def _sac(**overrides) -> SAC:
    base = {"hidden_dims": (32, 32), "num_critics": 3, "utd": UTD, "batch_size": BATCH}
    cfg = SACConfig(**{**base, **overrides})
    return SAC(
        ObsSpec(("obs",), ((OBS_DIM,),)), ActionSpec((-1.0,) * ACT_DIM, (1.0,) * ACT_DIM), cfg
    )


@pytest.fixture(scope="module")
def sac() -> SAC:
    """One learner shared by the tests below, so its jitted functions compile once."""
    return _sac()


def _batch(seed: int = 0, utd: int = UTD) -> Batch:
    rng = np.random.default_rng(seed)
    shape = (utd, BATCH)
    return Batch(
        obs=rng.normal(size=(*shape, OBS_DIM)).astype(np.float32),
        action=rng.uniform(-1, 1, size=(*shape, ACT_DIM)).astype(np.float32),
        reward=rng.normal(size=shape).astype(np.float32),
        discount=np.full(shape, 0.99, np.float32),
        next_obs=rng.normal(size=(*shape, OBS_DIM)).astype(np.float32),
        online=np.broadcast_to(np.arange(BATCH) >= N_DEMO, shape),  # the first rows are demos
    )


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_scan_equals_python_loop(sac: SAC) -> None:
    """The block's scan equals critic steps one by one, each with its own minibatch, the next
    actions drawn for the whole block up front, then one actor step on the last minibatch."""
    state = sac.init(jax.random.PRNGKey(0))
    batch = jax.tree_util.tree_map(jnp.asarray, _batch())
    scanned, metrics = sac.update(state, batch)
    rng, key_critic, key_actor = jax.random.split(state.rng, 3)
    key_next, key_subset = jax.random.split(key_critic)
    next_action, next_log_prob = sac.policy_fn(state.actor_params, batch.next_obs, key_next)
    subset_keys = jax.random.split(key_subset, UTD)
    looped = state.replace(rng=rng)
    critic_step, actor_step = jax.jit(sac.critic_step), jax.jit(sac.actor_step)
    for i in range(UTD):
        minibatch = jax.tree_util.tree_map(lambda x, i=i: x[i], batch)
        looped, _ = critic_step(looped, (minibatch, next_action[i], next_log_prob[i],
                                         subset_keys[i]))  # fmt: skip
    looped, _ = actor_step(looped, jax.tree_util.tree_map(lambda x: x[-1], batch), key_actor)
    for a, b in zip(_leaves(scanned), _leaves(looped), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert int(scanned.step) == 1
    assert float(metrics["update/nonfinite"]) == 0.0


def test_actor_utd_steps_the_actor_on_each_of_the_blocks_last_minibatches() -> None:
    """actor_utd=k: the critic block, then k actor+temperature steps, one per minibatch of the
    block's last k, each with its own key; the block still counts as one step."""
    sac = _sac(actor_utd=2)
    state = sac.init(jax.random.PRNGKey(0))
    batch = jax.tree_util.tree_map(jnp.asarray, _batch())
    updated, _ = sac.update(state, batch)
    rng, key_critic, key_actor = jax.random.split(state.rng, 3)
    looped, _ = jax.jit(sac._critic_block)(state.replace(rng=rng), batch, key_critic)
    actor_step = jax.jit(sac.actor_step)
    for i, key in zip((UTD - 2, UTD - 1), jax.random.split(key_actor, 2), strict=True):
        looped, _ = actor_step(looped, jax.tree_util.tree_map(lambda x, i=i: x[i], batch), key)
    for a, b in zip(_leaves(updated.replace(step=0)), _leaves(looped.replace(step=0)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert int(updated.step) == 1
    every, _ = _sac(actor_utd=0).update(state, batch)  # 0: one per critic step (UTD of them)
    three, _ = _sac(actor_utd=UTD).update(state, batch)
    for a, b in zip(_leaves(every), _leaves(three), strict=True):
        np.testing.assert_array_equal(a, b)
    one, _ = _sac().update(state, batch)  # actor_utd=1: a different actor after the block
    assert any(not np.allclose(a, b) for a, b in
               zip(_leaves(one.actor_params), _leaves(updated.actor_params), strict=True))  # fmt: skip


def test_update_changes_every_trained_part(sac: SAC) -> None:
    state = sac.init(jax.random.PRNGKey(0))
    new, _ = sac.update(state, _batch())
    for name in ("actor_params", "critic_params", "target_critic_params", "log_temperature"):
        before, after = _leaves(getattr(state, name)), _leaves(getattr(new, name))
        assert any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True)), name


def test_same_seed_gives_identical_params(sac: SAC) -> None:
    outs = []
    for _ in range(2):
        state = sac.init(jax.random.PRNGKey(7))
        for i in range(3):
            state, _ = sac.update(state, _batch(seed=i))
        outs.append(_leaves(state))
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a, b)
    other = sac.init(jax.random.PRNGKey(8))
    assert not np.array_equal(_leaves(other.actor_params)[0], _leaves(outs[0])[0])


def test_bc_term_pulls_the_deterministic_action_towards_demo_actions() -> None:
    """With only the BC term active (huge weight), demo rows' mode actions move to the demo's."""
    learner = _sac(bc_weight=1e3, utd=1, actor_lr=1e-2)
    batch = _batch(utd=1)._replace(action=np.full((1, BATCH, ACT_DIM), 0.5, np.float32))
    state = learner.init(jax.random.PRNGKey(0))
    demo_obs = batch.obs[0, :8]

    def bc_error(s) -> float:
        return float(np.mean((np.asarray(learner.mode_fn(s.actor_params, demo_obs)) - 0.5) ** 2))

    with_bc, without_bc = state, state
    plain_learner = _sac(utd=1, actor_lr=1e-2)
    for _ in range(20):
        with_bc, metrics = learner.update(with_bc, batch)
        without_bc, plain = plain_learner.update(without_bc, batch)
    assert "actor/bc_mse" in metrics and "actor/bc_mse" not in plain
    assert bc_error(with_bc) < 0.05 < bc_error(state)
    assert bc_error(with_bc) < bc_error(without_bc)


def test_pretrain_step_clones_demo_actions_and_trains_critic_only_otherwise() -> None:
    learner = _sac(actor_lr=1e-2)
    batch = jax.tree_util.tree_map(lambda x: x[0], _batch())
    batch = batch._replace(action=np.full((BATCH, ACT_DIM), -0.5, np.float32))
    state = learner.init(jax.random.PRNGKey(0))
    step = jax.jit(learner.pretrain_step)
    new = state
    for _ in range(50):
        new, metrics = step(new, batch)
    mode = np.asarray(learner.mode_fn(new.actor_params, batch.obs))
    np.testing.assert_allclose(mode, -0.5, atol=0.1)
    assert float(metrics["actor/bc_mse"]) < 0.01
    assert float(new.log_temperature) == float(state.log_temperature)
    assert int(new.step) == 0  # online update blocks are counted separately
    assert not np.array_equal(_leaves(new.critic_params)[0], _leaves(state.critic_params)[0])


@pytest.mark.parametrize(("target_entropy", "direction"), [(50.0, 1.0), (-50.0, -1.0)])
def test_temperature_moves_towards_target_entropy(target_entropy: float, direction: float) -> None:
    learner = _sac(target_entropy=target_entropy, temperature_lr=1e-2, num_critics=2, utd=1)
    state = learner.init(jax.random.PRNGKey(0))
    new, metrics = learner.update(state, _batch(utd=1))
    change = float(new.log_temperature - state.log_temperature)
    assert np.sign(change) == direction
    assert float(metrics["temperature/value"]) == pytest.approx(1.0)


def test_temperature_follows_the_entropy_of_the_configured_rows() -> None:
    """A target between the online rows' entropy and all rows' moves alpha opposite ways."""
    probe = _sac(utd=1)
    state = probe.init(jax.random.PRNGKey(0))
    batch = jax.tree_util.tree_map(lambda x: x[0], _batch(utd=1))
    # Demo rows far from the online ones, so their entropy estimates differ.
    batch = batch._replace(obs=np.where(batch.online[:, None], batch.obs, 5.0 * batch.obs))
    _, metrics = probe.actor_step(state, batch, jax.random.PRNGKey(1))
    online, overall = float(metrics["actor/entropy_online"]), float(metrics["actor/entropy"])
    assert online != overall
    target = (online + overall) / 2
    changes = {}
    for rows in ("all", "online"):
        learner = _sac(utd=1, entropy_rows=rows, target_entropy=target, temperature_lr=1e-2)
        new, _ = learner.actor_step(state, batch, jax.random.PRNGKey(1))
        changes[rows] = float(new.log_temperature - state.log_temperature)
    # alpha falls when the measured entropy is above the target and rises when it is below
    assert np.sign(changes["online"]) == np.sign(target - online)
    assert np.sign(changes["all"]) == np.sign(target - overall) == -np.sign(changes["online"])


def test_the_late_target_entropy_applies_from_its_block_on() -> None:
    """Blocks before ``late_entropy_blocks`` tune the temperature to ``target_entropy``, the
    rest to ``late_target_entropy``: with +50 early and -50 late, the temperature's loss
    alpha * (H - target) asks alpha to rise for exactly 2 blocks, then to fall (counted through
    ``update``, the learner's own step counter; Adam's momentum delays the turn itself)."""
    learner = _sac(target_entropy=50.0, late_target_entropy=-50.0, late_entropy_blocks=2,
                   temperature_lr=1e-2, num_critics=2, utd=1)  # fmt: skip
    state = learner.init(jax.random.PRNGKey(0))
    signs = []
    for block in range(4):
        state, metrics = learner.update(state, _batch(seed=block, utd=1))
        signs.append(float(np.sign(metrics["temperature/loss"])))
    assert signs == [-1.0, -1.0, 1.0, 1.0]
    assert float(learner.entropy_target(jnp.asarray(1))) == 50.0
    assert float(learner.entropy_target(jnp.asarray(2))) == -50.0
    assert _sac().entropy_target(jnp.asarray(10**6)) == -ACT_DIM / 2  # none set: one target
    with pytest.raises(ValueError, match="late_entropy_blocks=-1"):
        SACConfig(late_entropy_blocks=-1)


def test_default_target_entropy_is_minus_half_action_dim(sac: SAC) -> None:
    assert sac.target_entropy == -ACT_DIM / 2


def test_nonfinite_loss_leaves_state_unchanged(sac: SAC) -> None:
    state = sac.init(jax.random.PRNGKey(0))
    bad = _batch()._replace(reward=np.full((UTD, BATCH), np.nan, np.float32))
    new, metrics = sac.update(state, bad)
    assert float(metrics["update/nonfinite"]) == 1.0
    for a, b in zip(_leaves(state.replace(rng=new.rng)), _leaves(new), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(np.asarray(state.rng), np.asarray(new.rng))  # the next draw differs
    _, ok = sac.update(state, _batch())
    assert float(ok["update/nonfinite"]) == 0.0


def test_act_shapes_bounds_and_determinism(sac: SAC) -> None:
    state = sac.init(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    single = sac.act(state, np.zeros(OBS_DIM), key)
    many = sac.act(state, np.ones((5, OBS_DIM)), key)
    assert single.shape == (ACT_DIM,) and many.shape == (5, ACT_DIM)
    assert np.abs(many).max() <= 1.0
    det = [sac.act(state, np.ones(OBS_DIM), jax.random.PRNGKey(i), True) for i in range(2)]
    np.testing.assert_array_equal(det[0], det[1])
    policy = sac.make_policy(sac.policy_params(state), deterministic=True)
    np.testing.assert_allclose(np.asarray(policy(np.ones(OBS_DIM), key)), det[0], rtol=1e-6)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("critic_subset", 4),
        ("num_critics", 0),
        ("gamma", 1.5),
        ("utd", 0),
        ("bc_weight", -1.0),
        ("entropy_rows", "demos"),
        ("actor_utd", -1),
        ("actor_utd", 21),  # more than utd (20)
    ],
)
def test_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        SACConfig(**{"num_critics": 3, field: value})


def test_presets() -> None:
    rlpd = SACConfig.rlpd()
    assert (rlpd.num_critics, rlpd.critic_subset, rlpd.utd, rlpd.batch_size) == (10, 2, 20, 256)
    assert rlpd.critic_layer_norm and rlpd.hidden_dims == (256, 256)
    cpu = SACConfig.cpu(utd=2)
    assert cpu.num_critics == 2 and cpu.utd == 2
    hil = SACConfig.hil_serl()
    assert (hil.num_critics, hil.gamma, hil.init_temperature) == (2, 0.97, 0.01)
    assert SACConfig.from_json(hil.to_json()) == hil


def test_subset_target_on_real_networks_equals_the_min_over_the_drawn_critics() -> None:
    """The target evaluates only the drawn critics (params gathered from the ensemble); it must
    equal evaluating the whole ensemble and taking the min over the same draw."""
    from handrail.learners.agents import losses

    learner = _sac(num_critics=5, critic_subset=2)
    state = learner.init(jax.random.PRNGKey(3))
    batch = jax.tree_util.tree_map(lambda x: jnp.asarray(x[0]), _batch())
    next_action, next_log_prob = learner.policy_fn(state.actor_params, batch.next_obs,
                                                   jax.random.PRNGKey(4))  # fmt: skip
    for seed in range(4):
        key = jax.random.PRNGKey(seed)
        args = (state.critic_params, state.target_critic_params, jnp.asarray(0.1), batch,
                next_action, next_log_prob, key)  # fmt: skip
        kwargs = {"critic_fn": learner.critic_fn, "critic_subset": 2}
        _, subset = losses.critic_loss(*args, **kwargs, subset_critic_fn=learner.subset_critic_fn)
        _, full = losses.critic_loss(*args, **kwargs)
        np.testing.assert_allclose(float(subset["critic/target"]), float(full["critic/target"]),
                                   rtol=1e-5)  # fmt: skip
        all_q = learner.critic_fn(state.target_critic_params, batch.next_obs, next_action)
        drawn = jax.random.permutation(key, 5)[:2]
        expected = batch.reward + batch.discount * (jnp.min(all_q[drawn], axis=0)
                                                    - 0.1 * next_log_prob)  # fmt: skip
        np.testing.assert_allclose(float(full["critic/target"]), float(expected.mean()), rtol=1e-5)


def test_agents_built_alike_are_equal_and_share_their_compiled_functions() -> None:
    """A resume, an evaluation or the next run in one process builds the agent again: it
    compiles nothing anew (jitted code takes the agent as a static argument)."""
    first, again = _sac(), _sac()
    assert first == again and hash(first) == hash(again)
    assert again.update is first.update and again._act is first._act
    other = _sac(utd=first.config.utd + 1)
    assert other != first and other.update is not first.update
