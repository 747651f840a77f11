"""push: env checkers, determinism, expert success, config errors, success detection, friction."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from handrail import sim
from handrail.sim.tasks._push_expert import PushPlanner
from handrail.sim.tasks.push import PushEnv


def _rollout(seed: int, steps: int) -> list[np.ndarray]:
    env = sim.make("push", episode_steps=steps)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(0)
    out = [np.concatenate([v.ravel() for v in obs.values()])]
    for _ in range(steps):
        obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        out.append(np.concatenate([v.ravel() for v in obs.values()]))
    return out


def _place_puck(env: PushEnv, xy: np.ndarray) -> None:
    adr = env.model.joint("puck").qposadr[0]
    env.data.qpos[adr : adr + 2] = xy
    mujoco.mj_forward(env.model, env.data)


def test_env_checkers_pass() -> None:
    env = sim.make("push", episode_steps=5)
    gym_check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env, warn=True)
    env.close()


def test_same_seed_same_rollout_and_different_seeds_differ() -> None:
    first, second = _rollout(4, 10), _rollout(4, 10)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    env = sim.make("push")
    a, _ = env.reset(seed=1)
    b, _ = env.reset(seed=2)
    assert not np.array_equal(a["object"], b["object"])
    assert not np.array_equal(a["goal"], b["goal"])


def test_reset_draws_start_and_goal_inside_their_regions_and_apart() -> None:
    env = sim.make("push")
    cfg = env.unwrapped.config
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        puck, goal = obs["object"], obs["goal"]
        assert np.all(puck[:2] >= cfg.puck_low_m) and np.all(puck[:2] <= cfg.puck_high_m)
        assert np.all(goal[:2] >= cfg.goal_low_m) and np.all(goal[:2] <= cfg.goal_high_m)
        assert np.linalg.norm(puck[:2] - goal[:2]) >= cfg.min_goal_distance_m - 1e-6
        assert not info["success"]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"puck_high_m": (0.95, 0.15)}, "outside the reachable table"),
        ({"goal_low_m": (0.4, -0.6)}, "outside the reachable table"),
        ({"goal_low_m": (0.6, 0.0), "goal_high_m": (0.5, 0.1)}, "goal_low_m"),
        ({"min_goal_distance_m": 1.0}, "min_goal_distance_m"),
        ({"puck_friction": 0.0}, "puck_friction"),
        ({"puck_radius_m": 0.2}, "puck_radius_m"),
        ({"success_radius_m": 0.0}, "success_radius_m"),
    ],
)
def test_bad_config_is_a_clear_error(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sim.make("push", **overrides)


def test_success_detection_in_hand_made_states() -> None:
    env = sim.make("push")
    env.reset(seed=0)
    raw: PushEnv = env.unwrapped
    goal = raw.goal_pos()[:2]
    _place_puck(raw, goal + np.array([0.02, 0.0]))
    assert raw.is_success()
    _place_puck(raw, goal + np.array([0.0, 0.035]))
    assert not raw.is_success()
    _place_puck(raw, goal + np.array([0.01, -0.01]))
    _, reward, terminated, truncated, info = env.step(np.zeros(4, np.float32))
    assert info["success"] and terminated and not truncated and reward == 1.0


def test_failure_names_where_the_puck_stopped() -> None:
    env = sim.make("push")
    env.reset(seed=0)
    raw: PushEnv = env.unwrapped
    start, goal = raw.puck_pos()[:2], raw.goal_pos()[:2]
    towards = (goal - start) / np.linalg.norm(goal - start)
    assert raw.failure() == "puck not moved"
    _place_puck(raw, start + 0.005 * towards)  # half a centimetre: not pushed
    assert raw.failure() == "puck not moved"
    _place_puck(raw, start + 0.03 * towards)
    assert raw.failure() == "puck pushed, short of the goal"
    _place_puck(raw, start - 0.03 * towards)
    assert raw.failure() == "puck pushed, no nearer the goal"


def test_dense_reward_is_higher_closer_to_the_goal() -> None:
    env = sim.make("push", reward="dense")
    env.reset(seed=0)
    raw: PushEnv = env.unwrapped
    goal = raw.goal_pos()[:2]
    _place_puck(raw, goal + np.array([0.15, 0.0]))
    far = raw.dense_reward()
    _place_puck(raw, goal + np.array([0.06, 0.0]))
    near = raw.dense_reward()
    assert far < near < 0.0


@pytest.mark.parametrize("friction", [0.25, 0.5])
def test_friction_sets_how_far_a_flicked_puck_slides(friction: float) -> None:
    env = sim.make("push", puck_friction=friction)
    env.reset(seed=0)
    raw: PushEnv = env.unwrapped
    start = raw.puck_pos()
    speed_m_s = 0.5
    raw.data.qvel[raw.model.joint("puck").dofadr[0]] = speed_m_s
    for _ in range(5):
        env.step(np.zeros(4, np.float32))
    slide = np.linalg.norm(raw.puck_pos()[:2] - start[:2])
    expected = speed_m_s**2 / (2 * friction * 9.81)  # Coulomb friction: v^2 / (2 mu g)
    assert slide == pytest.approx(expected, rel=0.25)


def test_planner_backs_off_when_the_pusher_is_ahead_of_the_puck() -> None:
    planner = PushPlanner()
    puck, goal = np.array([0.5, 0.0, 0.02]), np.array([0.6, 0.0, 0.0])
    planner.phase = "push"
    ahead = np.array([0.55, 0.0, 0.018])  # between puck and goal: pushing would pull it back
    delta = planner(ahead, puck, goal)
    assert planner.phase == "approach" and delta[2] > 0  # lifts before going around
