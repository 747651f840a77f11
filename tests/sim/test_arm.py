"""The MJCF arm: loads offline, matches the Panda's home pose, accepts task fragments."""

from __future__ import annotations

import mujoco
import numpy as np

from handrail.sim import arm


def test_home_pose_matches_panda_forward_kinematics() -> None:
    model = arm.load_model()
    data = mujoco.MjData(model)
    data.qpos[:7] = arm.HOME_QPOS_RAD
    mujoco.mj_forward(model, data)
    tcp = model.site(arm.TCP_SITE).id
    # Franka's documented home TCP: (0.307, 0, 0.487) m, gripper pointing down.
    np.testing.assert_allclose(data.site_xpos[tcp], [0.3069, 0.0, 0.4869], atol=1e-3)
    np.testing.assert_allclose(data.site_xmat[tcp].reshape(3, 3), np.diag([1, -1, -1]), atol=1e-5)


def test_joint_limits_and_cameras_are_in_the_model() -> None:
    model = arm.load_model()
    for name, (lo, hi) in zip(arm.ARM_JOINTS, arm.JOINT_LIMITS_RAD, strict=True):
        np.testing.assert_allclose(model.joint(name).range, [lo, hi])
    # The observation cameras: "front" fixed in the world, "wrist" riding on the hand.
    camera_body = {
        cam: model.body(model.cam_bodyid[model.camera(cam).id]).name for cam in arm.CAMERAS
    }
    assert camera_body == {"front": "world", "wrist": "hand"}


def test_task_fragment_adds_bodies() -> None:
    xml = arm.build_mjcf(
        worldbody='<body name="box" pos="0.5 0 0.1"><freejoint/><geom size="0.02"/></body>'
    )
    model = arm.load_model(xml)
    box = model.body("box")
    assert model.body_parentid[box.id] == model.body("world").id  # it lands in the worldbody
    np.testing.assert_allclose(box.pos, [0.5, 0.0, 0.1])
    assert model.nq == 9 + 7


def test_gripper_command_maps_open_and_closed() -> None:
    assert arm.finger_target_m(-1.0) == arm.FINGER_MAX_M
    assert arm.finger_target_m(1.0) == 0.0
    assert arm.finger_target_m(5.0) == 0.0
