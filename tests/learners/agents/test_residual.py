"""Residual RL: the zero-initialised residual is the base, the correction stays within its
scale, the critic target uses the next observation's base action, the base never changes,
warm-up and critic-only blocks are counted exactly, chunked bases and relabelling."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from handrail.control.base_policy import BASE_ACTION_KEY, CallableBase, ChunkedBase
from handrail.control.step import ActedBy
from handrail.learners.agents import losses
from handrail.learners.agents.residual import (
    BaseWarmup,
    ResidualObservation,
    base_only,
    query_base,
    relabel,
)
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.learner import LoopConfig
from handrail.learners.loop import Trainer
from handrail.learners.specs import ActionSpec, ObsSpec


class Point(gym.Env):  # type: ignore[type-arg]
    """A point in the plane pushed by the action towards a goal; success within 0.1, reward
    minus the distance (1 more on success)."""

    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-5, 5, (2,), np.float32), "goal": gym.spaces.Box(-5, 5, (2,))}
    )
    action_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)  # not [-1, 1]: units matter

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.t = 0
        return self._obs(), {}

    def _obs(self) -> dict[str, np.ndarray]:
        return {"pos": self.pos.copy(), "goal": self.goal.copy()}

    def step(self, action: Any) -> Any:
        self.pos = (self.pos + 0.5 * np.clip(action, -2, 2)).astype(np.float32)
        self.t += 1
        dist = float(np.linalg.norm(self.pos - self.goal))
        done = dist < 0.1
        return self._obs(), float(done) - dist, done, self.t >= 20, {"success": done}


def sloppy(obs: Any) -> np.ndarray:
    """A base that almost works: pushes towards a goal off by a constant."""
    return np.clip(obs["goal"] + 0.15 - obs["pos"], -2, 2).astype(np.float32)


def residual_sac(**overrides: Any) -> SAC:
    env = ResidualObservation(Point(), CallableBase(sloppy))
    fields = {"hidden_dims": (32,), "num_critics": 2, "utd": 2, "batch_size": 32, "n_step": 1,
              "residual_scale": 0.1, **overrides}  # fmt: skip
    config = SACConfig(**fields)
    return SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
               config)  # fmt: skip


def test_the_base_action_joins_every_observation_normalised() -> None:
    env = ResidualObservation(Point(), CallableBase(sloppy))
    obs, _ = env.reset(seed=3)
    spec = ActionSpec.from_space(env.action_space)
    for _ in range(30):
        np.testing.assert_array_equal(obs[BASE_ACTION_KEY], spec.from_env(sloppy(obs)))
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:  # the final observation has its base action too
            np.testing.assert_array_equal(obs[BASE_ACTION_KEY], spec.from_env(sloppy(obs)))
            obs, _ = env.reset()


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_zero_initialised_residual_is_the_base_action_bit_for_bit(algorithm: str) -> None:
    sac = residual_sac(algorithm=algorithm)
    state = sac.init(jax.random.PRNGKey(1))
    obs = np.random.default_rng(0).uniform(-1, 1, (64, sac.obs_spec.dim)).astype(np.float32)
    mode = np.asarray(sac.mode_fn(state.actor_params, jnp.asarray(obs)))
    np.testing.assert_array_equal(mode, obs[:, sac.base_columns])


def test_plain_sac_is_unchanged_by_the_residual_code_path() -> None:
    """residual_scale 0: the critic sees the whole observation and the actor is not composed."""
    sac = SAC(ObsSpec(("x",), ((3,),)), ActionSpec((-1.0,), (1.0,)), SACConfig(hidden_dims=(8,)))
    assert sac.base_columns is None and sac.critic_columns is None
    with pytest.raises(ValueError, match="base_action"):
        SAC(ObsSpec(("x",), ((3,),)), ActionSpec((-1.0,), (1.0,)),
            SACConfig(hidden_dims=(8,), residual_scale=0.1))  # fmt: skip


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_the_correction_never_exceeds_the_scale(algorithm: str) -> None:
    """Even with a trained-to-saturation actor, executed - base is within +-scale."""
    sac = residual_sac(algorithm=algorithm, td3_noise=5.0)
    state = sac.init(jax.random.PRNGKey(0))
    big = jax.tree_util.tree_map(lambda p: p + 3.0, state.actor_params)  # saturates tanh
    rng = np.random.default_rng(1)
    obs = rng.uniform(-0.8, 0.8, (256, sac.obs_spec.dim)).astype(np.float32)
    base = obs[:, sac.base_columns]
    for params in (state.actor_params, big):
        for fn in (sac.policy_fn, sac.target_policy_fn):
            action = np.asarray(fn(params, jnp.asarray(obs), jax.random.PRNGKey(2))[0])
            assert np.abs(action - base).max() <= 0.1 + 1e-6
        assert np.abs(np.asarray(sac.mode_fn(params, jnp.asarray(obs))) - base).max() <= 0.1 + 1e-6
    # and actions stay inside [-1, 1] when the base is at its bound
    obs[:, sac.base_columns] = 1.0
    action = np.asarray(sac.policy_fn(big, jnp.asarray(obs), jax.random.PRNGKey(3))[0])
    assert action.max() <= 1.0


def test_the_residual_penalty_is_the_corrections_size_and_pulls_it_back() -> None:
    """``residual_penalty`` measures executed - base on every row; with the critics' pull
    outweighed, actor steps shrink a saturated correction towards the base."""
    sac = residual_sac(algorithm="td3", residual_penalty=1000.0, actor_lr=1e-3)
    state = sac.init(jax.random.PRNGKey(0))
    params = jax.tree_util.tree_map(jnp.asarray, state.actor_params)
    mean_layer = params["Dense_0"]  # the mean head: zero kernel, so the correction is its bias
    assert mean_layer["bias"].shape == (sac.action_spec.dim,)
    params["Dense_0"] = {**mean_layer, "bias": jnp.ones_like(mean_layer["bias"])}
    state = dataclasses.replace(state, actor_params=params)  # correction 0.1 * tanh(1)
    rng = np.random.default_rng(0)
    obs = jnp.asarray(rng.uniform(-0.8, 0.8, (32, sac.obs_spec.dim)), jnp.float32)
    batch = losses.Batch(obs=obs, action=jnp.zeros((32, sac.action_spec.dim)),
                         reward=jnp.zeros(32), discount=jnp.full(32, 0.9), next_obs=obs,
                         online=jnp.ones(32, bool))  # fmt: skip

    def size(params: Any) -> float:
        correction = np.asarray(sac.mode_fn(params, obs)) - np.asarray(obs)[:, sac.base_columns]
        return float(np.mean(correction**2))

    step = jax.jit(sac.actor_step)
    new, metrics = step(state, batch, jax.random.PRNGKey(1))
    assert float(metrics["actor/anchor_mse"]) == pytest.approx(size(state.actor_params), rel=1e-5)
    assert size(state.actor_params) == pytest.approx((0.1 * np.tanh(1.0)) ** 2, rel=1e-5)
    unpenalised = residual_sac(algorithm="td3", actor_lr=1e-3)
    free_step, free = jax.jit(unpenalised.actor_step), state
    for i in range(200):
        new, _ = step(new, batch, jax.random.PRNGKey(2 + i))
        free, metrics = free_step(free, batch, jax.random.PRNGKey(2 + i))
    assert "actor/anchor_mse" not in metrics
    assert size(new.actor_params) < 0.1 * size(state.actor_params)
    assert size(free.actor_params) > 0.5 * size(state.actor_params)  # the critics alone


def test_the_critic_target_uses_the_next_observations_base_action() -> None:
    """TD3 without smoothing noise and a zero residual: a' is exactly the next base action, and
    the critics see the observation without the base columns."""
    sac = residual_sac(algorithm="td3", td3_target_noise=0.0)
    state = sac.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    dim, adim = sac.obs_spec.dim, sac.action_spec.dim
    obs, next_obs = (jnp.asarray(rng.uniform(-1, 1, (8, dim)), jnp.float32) for _ in range(2))
    batch = losses.Batch(obs=obs, action=jnp.asarray(rng.uniform(-1, 1, (8, adim)), jnp.float32),
                         reward=jnp.ones(8), discount=jnp.full(8, 0.9), next_obs=next_obs,
                         online=jnp.ones(8, bool))  # fmt: skip
    next_action, _ = sac.target_policy_fn(state.actor_params, next_obs, jax.random.PRNGKey(1))
    np.testing.assert_array_equal(
        np.asarray(next_action), np.asarray(next_obs)[:, sac.base_columns]
    )
    _, metrics = losses.critic_loss(
        state.critic_params, state.target_critic_params, sac.temperature(state), batch,
        next_action, jnp.zeros(8), jax.random.PRNGKey(2), critic_fn=sac.critic_fn,
        critic_subset=2,
    )  # fmt: skip
    state_cols = np.asarray(next_obs)[:, sac.critic_columns]
    q_next = sac.critic.apply({"params": state.target_critic_params}, state_cols,
                              np.asarray(next_obs)[:, sac.base_columns])  # fmt: skip
    expected = 1.0 + 0.9 * np.min(np.asarray(q_next), axis=0)
    np.testing.assert_allclose(float(metrics["critic/target"]), expected.mean(), rtol=1e-5)


def test_critic_only_blocks_then_the_actor_counted_exactly() -> None:
    sac = residual_sac(actor_delay_blocks=3)
    trainer = Trainer(ResidualObservation(Point(), CallableBase(sloppy)), sac,
                      LoopConfig(warmup_steps=10, buffer_capacity=256), seed=0)  # fmt: skip
    initial = jax.tree_util.tree_leaves(trainer.state.actor_params)
    critic0 = jax.tree_util.tree_leaves(trainer.state.critic_params)
    changed = []
    for _ in range(10 + 5):
        before = jax.tree_util.tree_leaves(trainer.state.actor_params)
        trainer.step()
        after = jax.tree_util.tree_leaves(trainer.state.actor_params)
        changed.append(any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True)))
    # steps 1-9: warm-up (no block); step 10 onwards one block per step: 3 critic-only blocks
    assert trainer.learner.version == 6
    assert changed == [False] * 9 + [False, False, False, True, True, True]
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(
            critic0, jax.tree_util.tree_leaves(trainer.state.critic_params), strict=True
        )
    )
    assert initial  # the actor had params to compare


def test_warm_up_runs_the_base_plus_small_noise() -> None:
    sac = residual_sac()
    env = ResidualObservation(Point(), CallableBase(sloppy))
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    class Spy:
        def add(self, step: Any) -> None:
            seen.append((step.obs[BASE_ACTION_KEY], sac.action_spec.from_env(step.action)))

    trainer = Trainer(env, sac, LoopConfig(warmup_steps=200, warmup_noise=0.05), seed=0,
                      sinks=[Spy()])  # fmt: skip
    assert isinstance(trainer.actor.warmup_policy, BaseWarmup)
    trainer.run(200)
    diff = np.concatenate([a - b for b, a in seen])
    inside = np.concatenate([b for b, _ in seen])
    diff = diff[np.abs(inside) < 0.8]  # away from the clip at +-1
    assert 0.04 < diff.std() < 0.06 and abs(diff.mean()) < 0.01


def test_progressive_enabling_runs_the_base_alone_with_falling_probability() -> None:
    env = ResidualObservation(Point(), CallableBase(sloppy), enable_steps=2000, seed=0)
    obs, _ = env.reset(seed=0)
    spec = ActionSpec.from_space(env.action_space)
    base_steps = []
    for _ in range(2000):
        proposal = env.action_space.sample()
        base = obs[BASE_ACTION_KEY]
        obs, _, term, trunc, info = env.step(proposal)
        alone = info.get("acted_by") == int(ActedBy.SCRIPTED)
        if alone:
            np.testing.assert_allclose(info["executed_action"], spec.to_env(base))
        base_steps.append(alone)
        if term or trunc:
            obs, _ = env.reset()
    first, last = np.mean(base_steps[:500]), np.mean(base_steps[1500:])
    assert 0.8 < first < 0.95 and 0.05 < last < 0.2  # expected 0.875 and 0.125


def test_a_chunked_base_is_queried_once_per_k_steps_and_reset_with_the_episode() -> None:
    calls = []

    def model(obs: Any) -> np.ndarray:
        calls.append(obs["pos"].copy())
        return np.tile(sloppy(obs), (4, 1))

    base = ChunkedBase(model, execute=3)
    env = ResidualObservation(Point(), base)
    env.reset(seed=0)
    assert len(calls) == 1
    for _ in range(5):  # observations 2..6 use chunk rows 1, 2, then a new query...
        env.step(np.zeros(2, np.float32))
    assert len(calls) == 2
    env.reset(seed=1)
    assert len(calls) == 3  # a new episode starts a new chunk


def test_relabelling_runs_the_base_over_each_recorded_episode() -> None:
    from handrail.demos.episodes import EpisodeCollector, data_from_episodes
    from handrail.learners.actor import Actor

    collector = EpisodeCollector("point", successful_only=False)
    Actor(Point(), sloppy, seed=5, sinks=[collector]).run_episodes(3)
    data = data_from_episodes(collector.episodes)
    spec = ActionSpec.from_space(Point.action_space)
    labelled = relabel(data, CallableBase(sloppy), spec)
    # the base made these episodes, so its relabelled action is the recorded one
    np.testing.assert_allclose(labelled.obs[BASE_ACTION_KEY], spec.from_env(data.action))
    final = {k: v for k, v in data.final_obs.items()}
    np.testing.assert_array_equal(labelled.final_obs[BASE_ACTION_KEY],
                                  spec.from_env(sloppy(final)))  # fmt: skip
    with pytest.raises(ValueError, match="relabel once"):
        relabel(labelled, CallableBase(sloppy), spec)


@pytest.mark.parametrize(
    ("returned", "match"),
    [
        (
            np.zeros(3),
            r"mine returned an action of shape \(3,\); the env's actions have shape \(2,\)",
        ),
        (np.array([0.0, np.nan]), r"mine returned a non-finite action \[0.0, nan\]"),
        ("left", r"could not convert .*\(raised by the base policy mine"),
    ],
)
def test_a_bad_base_action_is_named_before_it_reaches_the_learner(
    returned: Any, match: str
) -> None:
    """A user's base returning the wrong shape, a NaN or no numbers stops the wrapper and the
    demos' relabelling with the base's name, not a broadcast error deep inside or a NaN in
    the replay; an exception of its own keeps its type and gains a note naming the base."""
    base = CallableBase(lambda obs: returned, name="mine")
    spec = ActionSpec.from_space(Point.action_space)
    obs = Point().reset(seed=0)[0]

    def message(exc: pytest.ExceptionInfo[BaseException]) -> str:
        return " ".join([str(exc.value), *getattr(exc.value, "__notes__", [])])

    from handrail.demos.episodes import EpisodeCollector, data_from_episodes
    from handrail.learners.actor import Actor

    collector = EpisodeCollector("point", successful_only=False)
    Actor(Point(), sloppy, seed=5, sinks=[collector]).run_episodes(1)
    demos = data_from_episodes(collector.episodes)
    for call in (lambda: query_base(base, obs, spec),
                 lambda: ResidualObservation(Point(), base).reset(seed=0),
                 lambda: relabel(demos, base, spec)):  # fmt: skip
        with pytest.raises(ValueError) as exc:
            call()
        assert re.search(match, message(exc)), message(exc)

    def boom(obs: Any) -> np.ndarray:
        raise RuntimeError("my policy broke")

    with pytest.raises(RuntimeError, match="my policy broke") as exc:
        query_base(CallableBase(boom, name="mine"), obs, spec)
    assert "raised by the base policy mine" in message(exc)
    np.testing.assert_allclose(query_base(CallableBase(sloppy), obs, spec),
                               spec.from_env(sloppy(obs)))  # fmt: skip


def test_base_only_policy_reads_the_observed_base() -> None:
    env = ResidualObservation(Point(), CallableBase(sloppy))
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(base_only(ActionSpec.from_space(env.action_space))(obs),
                               sloppy(obs), atol=1e-6)  # fmt: skip


def test_residual_learning_beats_its_base_on_the_point_task() -> None:
    """A base that always misses by 0.15 per axis; a 0.1-scale correction fixes it."""
    from handrail.learners.evaluation import evaluate

    sac = residual_sac(
        utd=4,
        batch_size=64,
        actor_lr=1e-3,
        actor_delay_blocks=50,
        gamma=0.9,
        init_temperature=0.05,
        backup_entropy=False,
    )
    env = ResidualObservation(Point(), CallableBase(sloppy))
    trainer = Trainer(env, sac, LoopConfig(warmup_steps=200), seed=0)
    eval_env = ResidualObservation(Point(), CallableBase(sloppy))
    alone = evaluate(eval_env, base_only(sac.action_spec), 30, 99).success_rate
    trainer.run(1500)
    from handrail.learners.checkpoint import StaticParams
    from handrail.learners.loop import make_learned_policy

    policy = make_learned_policy(sac, StaticParams(sac.policy_params(trainer.state)), 0)
    policy.make_policy = lambda params: sac.make_policy(params, deterministic=True)
    learned = evaluate(eval_env, policy, 30, 99).success_rate
    assert alone < 0.2 and learned > 0.8, (alone, learned)


@pytest.mark.parametrize("mode", ["deploy", "always"])
def test_the_q_filter_runs_the_correction_only_where_every_critic_prefers_it(mode: str) -> None:
    sac = residual_sac(algorithm="td3", residual_q_filter=mode)
    state = sac.init(jax.random.PRNGKey(4))
    # a saturated correction, so that composed and base actions differ on every row
    state = state.replace(actor_params=jax.tree_util.tree_map(lambda p: p + 3.0,
                                                              state.actor_params))  # fmt: skip
    params = sac.policy_params(state)
    assert set(params) == {"actor", "obs_norm", "critic"}
    obs = jnp.asarray(np.random.default_rng(5).uniform(-0.8, 0.8, (256, sac.obs_spec.dim)),
                      jnp.float32)  # fmt: skip
    base = np.asarray(sac.base_action(obs))
    for deterministic in (True, False):
        key = jax.random.PRNGKey(6)
        raw = np.asarray(sac.mode_fn(state.actor_params, obs) if deterministic
                         else sac.policy_fn(state.actor_params, obs, key)[0])  # fmt: skip
        gain = np.asarray(sac.critic_fn(state.critic_params, obs, jnp.asarray(raw))
                          - sac.critic_fn(state.critic_params, obs, jnp.asarray(base)))  # fmt: skip
        keep = gain.min(axis=0) > 0
        acted = np.asarray(sac.act_fn(params, obs, key, deterministic))
        if mode == "deploy" and not deterministic:  # the training policy is not filtered
            np.testing.assert_array_equal(acted, raw)
            continue
        assert 0 < keep.sum() < len(keep)  # both branches are exercised
        np.testing.assert_array_equal(acted[keep], raw[keep])
        np.testing.assert_array_equal(acted[~keep], base[~keep])
    # one observation, as the actor and actor_node act
    single = np.asarray(sac.act_fn(params, obs[0], jax.random.PRNGKey(7), True))
    np.testing.assert_array_equal(single, np.asarray(sac.act_fn(params, obs, key, True))[0])
    _, metrics = sac.update(state, _batch(sac, 2, 32))
    assert 0.0 <= float(metrics["actor/q_filter_keep"]) <= 1.0
    assert "critic" not in residual_sac().policy_params(state)  # no filter, no critics published
    # a margin no critic's gain reaches: the base everywhere
    strict = residual_sac(algorithm="td3", residual_q_filter=mode, residual_q_margin=1e6)
    np.testing.assert_array_equal(np.asarray(strict.act_fn(params, obs, key, True)), base)


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_the_deployed_policy_is_the_mode_or_the_training_policy_itself(algorithm: str) -> None:
    mode_sac = residual_sac(algorithm=algorithm, residual_q_filter="always")
    trained = residual_sac(algorithm=algorithm, residual_q_filter="always", deployed="training")
    state = mode_sac.init(jax.random.PRNGKey(4))
    state = state.replace(actor_params=jax.tree_util.tree_map(lambda p: p + 0.5,
                                                              state.actor_params))  # fmt: skip
    params = mode_sac.policy_params(state)
    obs = jnp.asarray(np.random.default_rng(5).uniform(-0.8, 0.8, (256, mode_sac.obs_spec.dim)),
                      jnp.float32)  # fmt: skip
    key = jax.random.PRNGKey(6)
    training = np.asarray(mode_sac.act_fn(params, obs, key, False))
    # deployed: training runs the training policy, noise and Q-filter included, key for key
    learning = trained.policy_params(state.replace(step=jnp.asarray(1)))
    assert set(learning) == {"actor", "obs_norm", "critic", "actor_on"}
    np.testing.assert_array_equal(np.asarray(trained.act_fn(learning, obs, key, True)), training)
    other = np.asarray(trained.act_fn(learning, obs, jax.random.PRNGKey(7), True))
    assert not np.array_equal(other, training)  # fresh noise with every key
    # ... once the actor learns: before, the deployed action is the (filtered) mode
    delayed = residual_sac(algorithm=algorithm, residual_q_filter="always", deployed="training",
                           actor_delay_blocks=5)  # fmt: skip
    for step, expected in ((5, False), (6, True)):
        waiting = delayed.policy_params(state.replace(step=jnp.asarray(step)))
        acted = np.asarray(delayed.act_fn(waiting, obs, key, True))
        np.testing.assert_array_equal(acted, training if expected
                                      else np.asarray(mode_sac.act_fn(params, obs, key, True)))  # fmt: skip
    # deployed: mode (the default) runs the filtered deterministic action, whatever the key
    mode = np.asarray(mode_sac.q_filter(state.critic_params, obs,
                                        mode_sac.mode_fn(state.actor_params, obs))[0])  # fmt: skip
    np.testing.assert_array_equal(np.asarray(mode_sac.act_fn(params, obs, key, True)), mode)
    assert not np.array_equal(mode, training)
    with pytest.raises(ValueError, match="deployed"):
        SACConfig(deployed="sample")  # type: ignore[arg-type]


def _batch(sac: SAC, utd: int, size: int) -> Any:
    rng = np.random.default_rng(8)
    obs = rng.uniform(-0.8, 0.8, (utd, size, sac.obs_spec.dim)).astype(np.float32)
    return losses.Batch(
        obs=obs,
        action=rng.uniform(-1, 1, (utd, size, sac.action_spec.dim)).astype(np.float32),
        reward=rng.uniform(-1, 0, (utd, size)).astype(np.float32),
        discount=np.full((utd, size), 0.9, np.float32),
        next_obs=obs[:, ::-1].copy(),
        online=np.ones((utd, size), bool),
    )


def test_residual_config_checks() -> None:
    with pytest.raises(ValueError, match="residual_scale"):
        SACConfig(residual_scale=-0.1)
    with pytest.raises(ValueError, match="residual_penalty"):
        SACConfig(residual_penalty=-1.0, residual_scale=0.1)
    with pytest.raises(ValueError, match="residual_penalty"):
        SACConfig(residual_penalty=1.0)  # plain SAC has no correction to penalise
    plain = SAC(ObsSpec(("x",), ((3,),)), ActionSpec((-1.0,), (1.0,)),
                SACConfig(hidden_dims=(8,), residual_q_filter="always"))  # fmt: skip
    assert plain.q_filtered == "off"  # no base to fall back on: no filter
    with pytest.raises(ValueError, match="residual_q_filter"):
        SACConfig(residual_q_filter="eval", residual_scale=0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="residual_q_margin"):
        SACConfig(residual_q_filter="deploy", residual_scale=0.1, residual_q_margin=-0.1)
    with pytest.raises(ValueError, match="algorithm"):
        SACConfig(algorithm="ppo")  # type: ignore[arg-type]
    assert (
        SACConfig.from_json(dataclasses.asdict(SACConfig(residual_scale=0.2))).residual_scale == 0.2
    )


def test_a_box_observation_env_gets_a_dict_with_the_base_action() -> None:
    env = ResidualObservation(gym.make("Pendulum-v1"), CallableBase(lambda obs: np.array([0.5])))
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"obs", BASE_ACTION_KEY} and obs["obs"].shape == (3,)
    np.testing.assert_allclose(obs[BASE_ACTION_KEY], [0.25])  # 0.5 of the +-2 torque range
    sac = SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
              SACConfig(hidden_dims=(8,), num_critics=2, residual_scale=0.1))  # fmt: skip
    params = sac.init(jax.random.PRNGKey(0)).actor_params
    mode = sac.mode_fn(params, jnp.asarray(sac.obs_spec.flatten(obs)))
    np.testing.assert_array_equal(np.asarray(mode), obs[BASE_ACTION_KEY])
