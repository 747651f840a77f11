"""Trainer: runs on Box and Dict envs, sinks, resume equals uninterrupted, guards and errors."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import jax
import numpy as np
import pytest

from handrail.learners.loop import EpisodeStats, Trainer
from handrail.learners.replay import ReplayBuffer
from handrail.learners.sac import SAC, SACConfig
from handrail.learners.specs import ActionSpec, ObsSpec

CONFIG = SACConfig(hidden_dims=(32, 32), num_critics=2, utd=2, batch_size=32, n_step=2)


class FakeDictEnv(gym.Env):
    """Dict obs with an image key; 2-D action in [-2, 2]; episodes end after 5 or 6 steps."""

    def __init__(self, nan_reward: bool = False) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "proprio": gym.spaces.Box(-10, 10, (3,), np.float32),
                "front": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
            }
        )
        self.action_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
        self.nan_reward = nan_reward

    def _obs(self) -> dict[str, np.ndarray]:
        return {"proprio": self._pos.copy(), "front": np.zeros((8, 8, 3), np.uint8)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        self._t, self._limit = 0, 5 + int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action: np.ndarray):
        assert self.action_space.contains(action.astype(np.float32))
        self._pos[:2] += 0.1 * action
        self._t += 1
        reward = float("nan") if self.nan_reward else -float(np.sum(self._pos**2))
        success = bool(np.linalg.norm(self._pos) < 0.5)
        terminated = self._t == self._limit and self._limit == 5
        truncated = self._t == self._limit and not terminated
        return self._obs(), reward, terminated, truncated, {"success": success}


class ListSink:
    def __init__(self) -> None:
        self.items: list[tuple] = []

    def add(self, obs, action, reward, next_obs, terminated, truncated, info) -> None:
        self.items.append((obs, action, reward, next_obs, terminated, truncated, info))


def _make_sac(env: gym.Env, config: SACConfig = CONFIG) -> SAC:
    obs_spec = ObsSpec.from_space(env.observation_space)
    return SAC(obs_spec, ActionSpec.from_space(env.action_space), config)


@pytest.fixture(scope="module")
def pendulum_sac() -> SAC:
    return _make_sac(gym.make("Pendulum-v1", max_episode_steps=10))


def _pendulum() -> gym.Env:
    return gym.make("Pendulum-v1", max_episode_steps=10)


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_resume_equals_uninterrupted(tmp_path: Path, pendulum_sac: SAC) -> None:
    kwargs = {"seed": 3, "warmup_steps": 15, "buffer_capacity": 64}
    full = Trainer(_pendulum(), pendulum_sac, **kwargs)
    full.run(40)
    first = Trainer(_pendulum(), pendulum_sac, **kwargs)
    first.run(20)  # 10-step episodes: step 20 ends an episode
    first.save(tmp_path / "run")
    resumed = Trainer(_pendulum(), pendulum_sac, **kwargs)
    resumed.load(tmp_path / "run")
    assert (resumed.env_steps, resumed.episodes) == (20, 2)
    resumed.run(20)
    assert (resumed.env_steps, resumed.updates, resumed.episodes) == (40, 2 * 26, 4)
    assert (full.env_steps, full.updates) == (resumed.env_steps, resumed.updates)
    for a, b in zip(_leaves(full.state), _leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.asarray(full._rows), np.asarray(resumed._rows))


def test_same_seed_twice_identical_and_save_only_at_episode_end(
    tmp_path: Path, pendulum_sac: SAC
) -> None:
    runs = []
    for _ in range(2):
        trainer = Trainer(_pendulum(), pendulum_sac, seed=1, warmup_steps=5, buffer_capacity=64)
        trainer.run(13)
        runs.append(trainer)
    for a, b in zip(_leaves(runs[0].state), _leaves(runs[1].state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert set(runs[0].last_metrics) >= {"critic/loss", "actor/entropy", "update/nonfinite"}
    with pytest.raises(RuntimeError, match="episode boundary"):
        runs[0].save(tmp_path / "mid")


def test_dict_env_sinks_stats_and_callback() -> None:
    env = FakeDictEnv()
    sink = ListSink()
    sac = _make_sac(env)
    trainer = Trainer(env, sac, seed=0, warmup_steps=8, buffer_capacity=100, sinks=[sink])
    seen: list[EpisodeStats] = []
    trainer.run(30, callback=lambda t, eps: seen.extend(eps))
    assert len(sink.items) == 30 and trainer.env_steps == 30
    assert trainer.updates == 2 * (30 - 8 + 1)  # one UTD-2 block per step from step 8 on
    assert trainer.episodes == len(seen) >= 4
    assert sum(s.length for s in seen) <= 30
    rewards = [item[2] for item in sink.items]
    assert seen[0].return_ == pytest.approx(sum(rewards[: seen[0].length]))
    assert all(isinstance(s.success, bool) for s in seen)
    assert all(np.abs(item[1]).max() <= 2.0 for item in sink.items)  # env units
    assert "front" in sink.items[0][0]  # raw observations go to sinks


def test_demos_are_used_and_mismatched_demos_rejected(pendulum_sac: SAC) -> None:
    demos = ReplayBuffer(3, 1, capacity=50, n_step=2, gamma=CONFIG.gamma)
    demos.add_episode(np.zeros((6, 3)), np.zeros((5, 1)), np.ones(5), np.zeros(5), np.zeros(5))
    trainer = Trainer(_pendulum(), pendulum_sac, seed=0, warmup_steps=3, buffer_capacity=64,
                      demos=demos)  # fmt: skip
    assert trainer._n_demo == 16
    trainer.run(6)
    assert np.isfinite(trainer.last_metrics["critic/loss"])
    wrong = ReplayBuffer(4, 1, capacity=5, n_step=2)
    wrong.add(np.zeros(4), np.zeros(1), 0.0, np.zeros(4), True, False)
    with pytest.raises(ValueError, match="obs_dim"):
        Trainer(_pendulum(), pendulum_sac, seed=0, demos=wrong)


def test_nonfinite_updates_stop_the_run() -> None:
    env = FakeDictEnv(nan_reward=True)
    sac = _make_sac(env, SACConfig(hidden_dims=(32,), num_critics=2, utd=1, batch_size=32,
                                   max_nonfinite_updates=3))  # fmt: skip
    trainer = Trainer(env, sac, seed=0, warmup_steps=2, buffer_capacity=50)
    before = _leaves(trainer.state.critic_params)
    with pytest.raises(RuntimeError, match="3 consecutive update blocks had non-finite"):
        trainer.run(20)
    assert trainer.env_steps == 4
    assert trainer.last_metrics["update/nonfinite"] == 1.0
    for a, b in zip(before, _leaves(trainer.state.critic_params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_spaces_are_clear_errors(pendulum_sac: SAC) -> None:
    class DiscreteEnv(FakeDictEnv):
        def __init__(self) -> None:
            super().__init__()
            self.action_space = gym.spaces.Discrete(3)

    with pytest.raises(TypeError, match="SAC needs a continuous Box action space"):
        Trainer(DiscreteEnv(), pendulum_sac, seed=0)
    tuple_env = FakeDictEnv()
    tuple_env.observation_space = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,)),))
    with pytest.raises(TypeError, match="supported"):
        Trainer(tuple_env, pendulum_sac, seed=0)
    with pytest.raises(ValueError, match=r"differ from sac\.obs_spec"):
        Trainer(FakeDictEnv(), pendulum_sac, seed=0)


def test_pretraining_clones_the_demos_before_the_first_step() -> None:
    env = _pendulum()
    config = SACConfig(hidden_dims=(32, 32), num_critics=2, utd=1, batch_size=32, n_step=2,
                       pretrain_steps=200, actor_lr=3e-3, bc_weight=1.0)  # fmt: skip
    sac = _make_sac(env, config)
    rng = np.random.default_rng(0)
    demos = ReplayBuffer(3, 1, capacity=40, n_step=2, gamma=config.gamma)
    obs = rng.uniform(-1, 1, (21, 3))
    demos.add_episode(obs, np.full((20, 1), 0.4), np.ones(20), np.zeros(20), np.zeros(20))
    fresh = Trainer(env, sac, seed=0, warmup_steps=3, buffer_capacity=64)
    trainer = Trainer(env, sac, seed=0, warmup_steps=3, buffer_capacity=64, demos=demos)
    mode = np.asarray(sac.mode_fn(trainer.state.actor_params, obs[:20]))
    np.testing.assert_allclose(mode, 0.4, atol=0.05)
    assert trainer.last_metrics["actor/bc_mse"] < 0.01
    assert fresh.last_metrics == {}  # no demos: nothing to pretrain on
    assert (trainer.env_steps, trainer.updates) == (0, 0)
    trainer.run(6)
    assert np.isfinite(trainer.last_metrics["actor/bc_mse"])  # the BC term runs online too
