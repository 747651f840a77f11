"""Every ROS 2 mirror matches its sim task, and the hw defaults match the simulated arm's."""

import dataclasses

import numpy as np
import pytest

import handrail.sim as sim
from handrail.control.reset import ResetConfig
from handrail.control.safety import SIM_ARM_LIMITS, SIM_TASK_LIMITS
from handrail.hw import safety_node
from handrail.hw.mirrors import MIRRORS, mirror
from handrail.hw.ros_env import RosEnvConfig
from handrail.sim.base import default_safety


@pytest.mark.parametrize("task", sorted(MIRRORS))
def test_mirror_rebuilds_the_task_observation_from_object_poses(task):
    env = sim.make(task)
    m = MIRRORS[task]
    assert env.unwrapped.config.action == m.action
    assert env.unwrapped.config.episode_steps == m.episode_steps
    assert env.unwrapped.config.terminate_on_success == m.terminate_on_success
    obs, _ = env.reset(seed=4)
    for _ in range(5):
        obs, *_ = env.step(env.action_space.sample())
        rebuilt = m.observe(obs["proprio"], env.unwrapped.object_poses())
        assert list(rebuilt) == list(obs)
        for key in obs:
            assert rebuilt[key].shape == obs[key].shape and rebuilt[key].dtype == obs[key].dtype
            np.testing.assert_allclose(rebuilt[key], obs[key], atol=1e-6, err_msg=f"{task}: {key}")
    assert sorted(env.unwrapped.object_poses()) == sorted(m.objects)


def test_every_sim_task_has_a_mirror_and_unknown_names_say_which_exist():
    assert set(MIRRORS) == set(sim.available_tasks())
    with pytest.raises(ValueError, match="has no ROS 2 mirror; choose one of"):
        mirror("fold_laundry")


def test_missing_object_pose_is_named():
    with pytest.raises(KeyError, match="no pose for object"):
        MIRRORS["pick_cube"].observe(np.zeros(14, np.float32), {})


def test_hw_defaults_are_the_simulated_arms():
    """The ROS 2 layer's defaults are the arm's reachable box, defined once; the sim tasks keep
    the box they were trained and measured in, also defined once."""
    limits = SIM_ARM_LIMITS
    assert default_safety() == SIM_TASK_LIMITS
    assert RosEnvConfig().safety == limits
    p = safety_node.PARAMETERS
    assert tuple(p["workspace_low_m"]) == limits.workspace_low_m
    assert tuple(p["workspace_high_m"]) == limits.workspace_high_m
    for name in ("max_step_m", "max_rot_step_rad", "max_tilt_rad", "max_yaw_rad"):
        assert p[name] == pytest.approx(getattr(limits, name))
    env = sim.make("pick_cube")
    env.reset(seed=0)
    home = np.array(ResetConfig().home_pos_m)
    assert np.linalg.norm(env.unwrapped.ee_pos - home) < 0.01  # reset_node's home is the sim's
    assert dataclasses.asdict(RosEnvConfig())["gripper_max_m"] == pytest.approx(0.08)
