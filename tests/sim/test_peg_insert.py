"""peg_insert: env checkers, determinism, expert success, config errors, success detection."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from handrail import sim
from handrail.control.transforms import quat_from_yaw, quat_rotate, yaw_from_quat
from handrail.sim.base import PROPRIO_SLICES
from handrail.sim.tasks._peg_expert import PegInsertPlanner
from handrail.sim.tasks.peg_insert import PegInsertEnv, peg_inserted


def _rollout(seed: int, steps: int) -> list[np.ndarray]:
    env = sim.make("peg_insert", episode_steps=steps)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(0)
    out = [np.concatenate([v.ravel() for v in obs.values()])]
    for _ in range(steps):
        obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        out.append(np.concatenate([v.ravel() for v in obs.values()]))
    return out


def _move_hole(env: PegInsertEnv, entry_offset_from_tip_m: np.ndarray) -> None:
    """Put the hole's entry at tip + offset (hole frame = current hole yaw), then recompute."""
    tip, _ = env.peg_tip()
    _, quat = env.hole_entry()
    mocap = env.model.body("hole").mocapid[0]
    entry = tip + quat_rotate(quat, entry_offset_from_tip_m)
    env.data.mocap_pos[mocap] = entry - np.array([0.0, 0.0, env.config.hole_depth_m])
    mujoco.mj_forward(env.model, env.data)


def test_env_checkers_pass() -> None:
    env = sim.make("peg_insert", episode_steps=5)
    gym_check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env, warn=True)
    env.close()


def test_spaces_and_observation_keys() -> None:
    env = sim.make("peg_insert")
    obs, info = env.reset(seed=0)
    assert set(obs) == {"proprio", "peg", "hole", "entry_from_tip_dm", "hole_yaw_from_peg_rad"}
    np.testing.assert_allclose(
        obs["entry_from_tip_dm"], (obs["hole"][:3] - obs["peg"][:3]) * 10, rtol=1e-5
    )
    assert env.action_space.shape == (4,)  # dx, dy, dz, dyaw: no gripper, the peg stays held
    assert info["success"] is False
    assert obs["hole"][2] == pytest.approx(env.unwrapped.config.hole_depth_m)


def test_same_seed_same_rollout_and_different_seeds_differ() -> None:
    first, second = _rollout(3, 10), _rollout(3, 10)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    env = sim.make("peg_insert")
    a, _ = env.reset(seed=1)
    b, _ = env.reset(seed=2)
    assert not np.array_equal(a["hole"], b["hole"])


def test_peg_stays_in_the_grasp_under_random_actions() -> None:
    env = sim.make("peg_insert", episode_steps=30)
    obs, _ = env.reset(seed=5)
    rng = np.random.default_rng(1)
    below = env.unwrapped.config.peg_below_tcp_m
    for _ in range(30):
        obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        tcp = obs["proprio"][PROPRIO_SLICES["ee_pos_m"]]
        assert np.linalg.norm(obs["peg"][:3] - tcp) == pytest.approx(below, abs=0.004)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"clearance_m": 0.0}, "clearance_m must be > 0"),
        ({"clearance_m": -0.001}, "clearance_m must be > 0"),
        ({"hole_high_m": (0.9, 0.15)}, "outside the reachable table"),
        ({"hole_low_m": (0.42, -0.5)}, "outside the reachable table"),
        ({"hole_low_m": (0.6, 0.0), "hole_high_m": (0.5, 0.1)}, "hole_low_m"),
        ({"insert_depth_m": 0.05}, "insert_depth_m"),
        ({"peg_half_width_m": 0.0}, "peg_half_width_m"),
        ({"peg_below_tcp_m": 0.03}, "peg_below_tcp_m"),
    ],
)
def test_bad_config_is_a_clear_error(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sim.make("peg_insert", **overrides)


def test_success_rule_on_hand_made_tip_positions() -> None:
    half, depth = 0.011, 0.02
    assert peg_inserted(np.array([0.0, 0.0, -0.025]), half, depth)
    assert peg_inserted(np.array([0.0105, -0.0105, -0.02]), half, depth)
    assert not peg_inserted(np.array([0.0, 0.0, -0.015]), half, depth)  # not deep enough
    assert not peg_inserted(np.array([0.012, 0.0, -0.03]), half, depth)  # beside the hole
    assert not peg_inserted(np.array([0.0, 0.0, 0.01]), half, depth)  # above the entry


def test_success_detection_in_hand_made_states() -> None:
    env = sim.make("peg_insert")
    env.reset(seed=0)
    raw: PegInsertEnv = env.unwrapped
    _move_hole(raw, np.array([0.0, 0.0, 0.025]))  # tip 2.5 cm below the entry, centred
    assert raw.is_success()
    assert raw.dense_reward() == 1.0
    _move_hole(raw, np.array([0.0, 0.0, 0.015]))  # only 1.5 cm deep
    assert not raw.is_success()
    _move_hole(raw, np.array([0.03, 0.0, 0.025]))  # deep enough but 3 cm to the side
    assert not raw.is_success()
    _move_hole(raw, np.array([0.0, 0.0, -0.05]))  # 5 cm above the hole
    assert not raw.is_success()
    assert 0.0 < raw.dense_reward() < 1.0
    _move_hole(raw, np.array([0.0, 0.0, 0.03]))
    _, reward, terminated, truncated, info = env.step(np.zeros(4, np.float32))
    assert info["success"] and terminated and not truncated and reward == 1.0
    assert info["outcome"] == "success"


def test_failure_names_where_the_tip_stopped() -> None:
    env = sim.make("peg_insert")
    env.reset(seed=0)
    raw: PegInsertEnv = env.unwrapped
    for entry_from_tip, outcome in [
        ((0.0, 0.0, 0.015), "over the hole, not deep enough"),  # centred, 1.5 cm of 2 deep
        ((0.03, 0.0, 0.02), "down beside the socket"),  # 3 cm off, below the entry
        ((0.0, -0.015, -0.002), "on the socket's rim"),  # 1.5 cm off, 2 mm above the entry
        ((0.0, 0.08, -0.05), "far from the socket"),
    ]:
        _move_hole(raw, np.array(entry_from_tip))
        assert not raw.is_success() and raw.failure() == outcome, entry_from_tip


def test_dense_reward_grows_as_the_tip_nears_the_hole() -> None:
    env = sim.make("peg_insert", reward="dense")
    env.reset(seed=0)
    raw: PegInsertEnv = env.unwrapped
    rewards = []
    for height in (-0.2, -0.05, -0.01, 0.01):  # tip above the entry, then 1 cm inside
        _move_hole(raw, np.array([0.0, 0.0, height]))
        rewards.append(raw.dense_reward())
    assert rewards == sorted(rewards) and rewards[0] < rewards[-1] < 1.0


def test_planner_spiral_searches_after_a_jam_on_the_rim() -> None:
    planner = PegInsertPlanner()
    hole = np.array([0.5, 0.0, 0.04])
    tip = hole + np.array([0.0, 0.0, planner.params.hover_m])
    assert planner(tip, hole)[2] < 0 and planner.phase == "insert"
    stuck = hole + np.array([0.0, 0.0, 0.001])  # resting on the rim, no progress
    moves = [planner(stuck, hole) for _ in range(planner.params.stall_steps + 1)]
    assert moves[-1][2] > 0 and planner.phase == "align"  # backs off upwards
    aim = planner.hover_step(tip, hole)
    assert np.linalg.norm(aim[:2]) > 0  # the next try is off the hole axis (spiral point)


@pytest.mark.parametrize(
    ("offset", "descends"),
    [((0.0, 0.0, 0.006), True),  # on the axis, below the hover point: carry on down
     ((0.0007, 0.0, -0.008), True),  # 8 mm inside the hole, 0.7 mm off the axis
     ((0.002, 0.0, 0.006), False),  # 2 mm off the axis above the entry: align first
     ((0.0, 0.0, 0.05), False)],  # far above: down to the hover point, then align
)  # fmt: skip
def test_planner_taking_over_mid_descent_goes_on_from_where_the_tip_is(
    offset: tuple[float, float, float], descends: bool
) -> None:
    """A fresh planner (the simulated person taking over from a policy) decides from the tip's
    position alone: it does not lift a peg that is on its way in back to the hover point."""
    planner = PegInsertPlanner()
    hole = np.array([0.5, 0.0, 0.04])
    move = planner(hole + np.array(offset), hole)
    assert (planner.phase == "insert") is descends
    if descends:
        assert move[2] == -planner.params.insert_step_m
    elif offset[2] < planner.params.hover_m:  # off the axis, low: line up at this height
        assert move[2] == 0 and move[0] < 0


def test_planner_backs_off_all_the_way_to_the_hover_point_after_a_jam() -> None:
    planner = PegInsertPlanner()
    hole = np.array([0.5, 0.0, 0.04])
    stuck = hole + np.array([0.0, 0.0, 0.001])
    planner(hole + np.array([0.0, 0.0, planner.params.hover_m]), hole)
    for _ in range(planner.params.stall_steps + 1):
        planner(stuck, hole)
    assert planner.phase == "align"
    halfway = hole + np.array([0.0, 0.0, 0.007])  # on the axis, but backing off: keep lifting
    assert planner(halfway, hole)[2] > 0 and planner.phase == "align"


@pytest.mark.parametrize(("turn", "observed"), [(0.3, 0.3), (0.3 + np.pi / 2, 0.3),
                                                 (np.pi / 2 - 0.1, -0.1), (-np.pi, 0.0)])  # fmt: skip
def test_hole_yaw_is_the_smallest_turn_that_lines_the_peg_up(turn: float, observed: float) -> None:
    env = sim.make("peg_insert")
    env.reset(seed=1)
    u = env.unwrapped
    peg_yaw = float(yaw_from_quat(u.peg_tip()[1]))
    mocap = u.model.body("hole").mocapid[0]
    u.data.mocap_quat[mocap] = quat_from_yaw(peg_yaw + turn)
    mujoco.mj_forward(u.model, u.data)
    obs = u.task_obs()
    assert obs["hole_yaw_from_peg_rad"].shape == (1,)
    assert float(obs["hole_yaw_from_peg_rad"][0]) == pytest.approx(observed, abs=1e-6)
    env.close()
