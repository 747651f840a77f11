"""Base env behaviour, exercised through every task that exists."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from handrail import sim
from handrail.control.safety import SafetyLimits

TASKS = sim.available_tasks()


def test_reach_and_pick_cube_exist() -> None:
    assert {"reach", "pick_cube"} <= set(TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_gymnasium_env_checker(task: str) -> None:
    env = sim.make(task, episode_steps=5)
    gym_check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("task", TASKS)
def test_sb3_env_checker(task: str) -> None:
    env = sim.make(task, episode_steps=5)
    sb3_check_env(env, warn=True)
    env.close()


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_same_rollout(task: str) -> None:
    def rollout() -> list[np.ndarray]:
        env = sim.make(task, episode_steps=8)
        obs, _ = env.reset(seed=7)
        rng = np.random.default_rng(0)
        out = [obs["proprio"]]
        for _ in range(8):
            obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            out.append(np.concatenate([v.ravel() for v in obs.values()]))
        return out

    first, second = rollout(), rollout()
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_different_seeds_differ() -> None:
    env = sim.make("reach")
    a, _ = env.reset(seed=1)
    b, _ = env.reset(seed=2)
    assert not np.array_equal(a["goal"], b["goal"])


def test_time_limit_is_truncation() -> None:
    env = sim.make("reach", episode_steps=3)
    env.reset(seed=0)
    zero = np.zeros(env.action_space.shape, np.float32)
    flags = [env.step(zero)[2:4] for _ in range(3)]
    assert flags[-1] == (False, True)
    assert all(f == (False, False) for f in flags[:-1])


def test_camera_images_have_the_right_shape_and_dtype() -> None:
    env = sim.make("pick_cube", cameras=("front", "wrist"), image_size=32, render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    for cam in ("front", "wrist"):
        assert obs[cam].shape == (32, 32, 3) and obs[cam].dtype == np.uint8
        assert env.observation_space[cam].contains(obs[cam])
        assert obs[cam].std() > 0  # something was drawn
    frame = env.render()
    assert frame is not None and frame.shape == (240, 320, 3)
    env.close()


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"physics_dt_s": 0.003}, "multiple of physics_dt_s"),
        ({"image_size": 0}, "image_size"),
        ({"cameras": ("top",)}, "cameras"),
        ({"reward": "shaped"}, "reward"),
        ({"episode_steps": 0}, "episode_steps"),
        ({"no_such_field": 1}, "unknown config field"),
    ],
)
def test_bad_config_is_a_clear_error(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sim.make("reach", **overrides)


def test_safety_limits_low_above_high_is_rejected() -> None:
    with pytest.raises(ValueError):
        SafetyLimits(
            workspace_low_m=(0.8, 0.0, 0.0),
            workspace_high_m=(0.2, 0.1, 0.1),
            max_step_m=0.05,
            max_rot_step_rad=0.3,
        )


def test_unknown_task_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="reach"):
        sim.make("reahc")


def test_gymnasium_registration() -> None:
    env = gymnasium.make("handrail/reach-v0", episode_steps=4)
    obs, _ = env.reset(seed=0)
    assert "goal" in obs
    assert env.unwrapped.control_dt_s == pytest.approx(0.1)
    env.close()


def test_dense_reward_is_shaped() -> None:
    env = sim.make("reach", reward="dense")
    env.reset(seed=0)
    _, reward, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
    assert -1.0 < reward < 0.0
