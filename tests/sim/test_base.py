"""Base env behaviour, exercised through every task that exists."""

from __future__ import annotations

import dataclasses

import gymnasium
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from handrail import sim
from handrail.control.safety import SafetyLimits, SafetyReport
from handrail.control.spaces import ActionConfig, decode_action
from handrail.control.transforms import quat_mul, rotvec_to_quat
from handrail.sim._action_math import decode_scalar

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


@pytest.mark.parametrize("frame", ["base", "ee"])
@pytest.mark.parametrize("rotation", ["none", "yaw", "full"])
@pytest.mark.parametrize("gripper", [True, False])
def test_scalar_decode_matches_decode_action(frame: str, rotation: str, gripper: bool) -> None:
    cfg = ActionConfig(frame=frame, rotation=rotation, gripper=gripper)  # type: ignore[arg-type]
    rng = np.random.default_rng(3)
    for _ in range(50):
        action = rng.uniform(-1.6, 1.6, cfg.dim).astype(np.float32)
        quat = rng.normal(size=4)
        quat *= rng.uniform(0.5, 2.0) / np.linalg.norm(quat)  # not unit: both normalise
        ref = decode_action(action, cfg, quat)
        pos, rotvec, grip = decode_scalar(action, cfg, tuple(quat))
        np.testing.assert_allclose(pos, ref.delta_pos_m, rtol=0, atol=1e-12)
        expected_rot = np.zeros(3) if rotvec is None else rotvec
        np.testing.assert_allclose(expected_rot, ref.delta_rotvec_rad, rtol=0, atol=1e-12)
        assert (rotvec is None) == (rotation == "none")
        assert grip == ref.gripper


def test_scalar_decode_passes_nan_through_and_rejects_bad_shapes() -> None:
    cfg = ActionConfig(rotation="yaw")
    pos, rotvec, grip = decode_scalar(np.array([np.nan, 2.0, -2.0, 0.5, np.nan]), cfg, (0, 1, 0, 0))
    assert np.isnan(pos[0]) and pos[1:] == (cfg.max_step_m, -cfg.max_step_m)
    assert rotvec == (0.0, 0.0, 0.5 * cfg.max_rot_step_rad) and np.isnan(grip)
    with pytest.raises(ValueError, match="action must have shape"):
        decode_scalar(np.zeros(3), cfg, (0, 1, 0, 0))


def test_env_step_target_matches_the_reference_pipeline() -> None:
    """The env's target after a step is decode_action + rotvec composition + safety filter."""
    env = sim.make("pick_cube").unwrapped
    env.reset(seed=5)
    action = np.array([0.7, -1.0, 0.4, 0.9, 0.2], np.float32)
    pos, quat = env.ee_pos, env.ee_quat
    prev_pos, prev_quat = env._target_pos.copy(), env._target_quat.copy()
    cmd = decode_action(action, env.config.action, quat)
    target_quat = quat_mul(rotvec_to_quat(cmd.delta_rotvec_rad), prev_quat)
    ref_pos, ref_quat, _ = env.safety.filter(pos, quat, prev_pos + cmd.delta_pos_m, target_quat)
    *_, info = env.step(action)
    np.testing.assert_allclose(env._target_pos, ref_pos, atol=1e-12)
    np.testing.assert_allclose(env._target_quat, ref_quat, atol=1e-12)
    assert set(info["safety"]) == {f.name for f in dataclasses.fields(SafetyReport)}


def test_observations_are_fresh_arrays() -> None:
    env = sim.make("reach")
    first, _ = env.reset(seed=0)
    kept = {k: v.copy() for k, v in first.items()}
    second, *_ = env.step(np.ones(env.action_space.shape, np.float32))
    for key in first:
        assert not np.shares_memory(first[key], second[key])
        np.testing.assert_array_equal(first[key], kept[key])  # stepping did not overwrite it
    second["proprio"][:] = 0.0
    third, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
    assert np.any(third["proprio"] != 0.0)
    np.testing.assert_allclose(third["proprio"][:3], env.unwrapped.ee_pos, atol=1e-6)


@pytest.mark.parametrize("task", ["pick_cube", "push"])
def test_nonfinite_action_holds_pose_and_fingers(task: str) -> None:
    """A NaN or inf action must never reach the actuators: the arm and the fingers hold."""
    env = sim.make(task)
    obs, _ = env.reset(seed=3)
    env.step(np.full(env.action_space.shape, -1.0, np.float32))  # open the gripper fully
    before = env.unwrapped.data.ctrl.copy()
    for bad in (np.nan, np.inf, -np.inf):
        obs, _, _, _, info = env.step(np.full(env.action_space.shape, bad, np.float32))
        assert info["safety"]["nonfinite"]
        assert np.all(np.isfinite(env.unwrapped.data.ctrl))
        fingers = list(env.unwrapped._finger_ids)
        np.testing.assert_array_equal(env.unwrapped.data.ctrl[fingers], before[fingers])
        for value in obs.values():
            assert np.all(np.isfinite(value))
    env.close()


@pytest.mark.parametrize(
    ("task", "key", "target", "origin"),
    [("reach", "goal_from_tcp_dm", "goal", "proprio"),
     ("pick_cube", "cube_from_tcp_dm", "object", "proprio"),
     ("push", "puck_from_tcp_dm", "object", "proprio"),
     ("push", "goal_from_puck_dm", "goal", "object"),
     ("peg_insert", "entry_from_tip_dm", "hole", "peg")],
)  # fmt: skip
def test_offsets_in_decimetres_match_the_absolute_positions(
    task: str, key: str, target: str, origin: str
) -> None:
    env = sim.make(task)
    obs, _ = env.reset(seed=3)
    for _ in range(2):
        np.testing.assert_allclose(obs[key], 10.0 * (obs[target][:3] - obs[origin][:3]),
                                   rtol=1e-5, atol=1e-5)  # fmt: skip
        obs, *_ = env.step(env.action_space.sample())


@pytest.mark.parametrize("reward", ["sparse", "dense"])
def test_a_diverged_simulation_ends_the_episode_truncated_and_says_so(reward: str) -> None:
    # MuJoCo resets a diverged simulation to the model's initial state mid-step (the cube
    # back at its XML pose): the step after it must not pass for the action's outcome.
    from handrail.sim.base import SIM_DIVERGED_KEY

    env = sim.make("pick_cube", reward=reward)
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, np.float32)
    _, _, terminated, truncated, info = env.step(action)
    assert not truncated and info[SIM_DIVERGED_KEY] is False
    env.unwrapped.data.qvel[:] = 1e12  # a blow-up MuJoCo detects and resets
    _, r, terminated, truncated, info = env.step(action)
    assert info[SIM_DIVERGED_KEY] is True and truncated and not terminated
    assert r == 0.0 and info["success"] is False
    assert info["outcome"] == "the simulation diverged"
    env.reset(seed=1)
    assert env.step(action)[4][SIM_DIVERGED_KEY] is False


@pytest.mark.parametrize(
    ("task", "outcome"),
    [("reach", "stopped far from the goal"), ("pick_cube", "gripper above the cube, not holding it"),
     ("push", "puck not moved"), ("peg_insert", "far from the socket")],
)  # fmt: skip
def test_the_last_step_says_how_an_idle_episode_ended(task: str, outcome: str) -> None:
    """The arm holds still: only the episode's last step names the outcome."""
    env = sim.make(task, episode_steps=5)
    env.reset(seed=3)
    infos = [env.step(np.zeros(env.action_space.shape, np.float32))[4] for _ in range(5)]
    assert all("outcome" not in info for info in infos[:-1])
    assert infos[-1]["outcome"] == outcome


def test_a_task_that_names_no_failures_says_only_success() -> None:
    """ArmEnv's default ``failure()`` names none: no outcome, not a word that says nothing."""
    from handrail.sim.base import ArmEnv
    from handrail.sim.tasks.reach import ReachConfig, ReachEnv

    class Plain(ReachEnv):
        failure = ArmEnv.failure

    env = Plain(ReachConfig(episode_steps=2))
    env.reset(seed=3)
    infos = [env.step(np.zeros(env.action_space.shape, np.float32))[4] for _ in range(2)]
    assert not infos[-1]["success"] and all("outcome" not in info for info in infos)


def test_pick_cube_failure_names_where_cube_and_gripper_stopped() -> None:
    env = sim.make("pick_cube")
    env.reset(seed=0)
    raw = env.unwrapped
    adr = raw.model.joint("cube").qposadr[0]
    h = raw.config.cube_half_size_m

    def place(dx: float, lift: float) -> str:  # the cube dx beside the tcp, lifted by lift
        tcp = raw.data.site_xpos[raw.model.site("tcp").id]
        raw.data.qpos[adr : adr + 3] = (tcp[0] + dx, tcp[1], h + lift)
        mujoco.mj_forward(raw.model, raw.data)
        assert not raw.is_success()
        return raw.failure()

    assert place(0.0, 0.0) == "gripper above the cube, not holding it"  # the tcp starts high
    down = np.zeros(env.action_space.shape, np.float32)
    down[2] = -1.0
    for _ in range(15):  # the tool down to the safety box's floor, 2 cm above the cube's top
        env.step(down)
    assert place(0.0, 0.0) == "cube on the table, gripper at it"
    assert place(0.2, 0.0) == "cube on the table, gripper beside it"
    assert place(0.2, 0.03) == "cube lifted, not high enough"  # 3 cm of 10
