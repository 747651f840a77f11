"""The operational-space controller tracks pose targets within stated tolerances."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from handrail.sim import arm
from handrail.sim.controller import ControllerConfig, OperationalSpaceController

POS_TOL_M = 0.002  # steady-state position error after 1 s
ROT_TOL_RAD = 0.01  # steady-state orientation error after 1 s


def _setup(refresh: int) -> tuple[mujoco.MjModel, mujoco.MjData, OperationalSpaceController]:
    model = arm.load_model()
    data = mujoco.MjData(model)
    data.qpos[:7] = arm.HOME_QPOS_RAD
    mujoco.mj_forward(model, data)
    ctrl = OperationalSpaceController(
        model, data, arm.TCP_SITE, arm.HOME_QPOS_RAD, ControllerConfig(refresh_substeps=refresh)
    )
    return model, data, ctrl


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    return float(2 * np.arccos(min(1.0, abs(float(a @ b)))))


@pytest.mark.parametrize("refresh", [1, 25, 50])
def test_tracks_a_pose_target(refresh: int) -> None:
    _, data, ctrl = _setup(refresh)
    pos0, quat0 = ctrl.ee_pose()
    target = pos0 + np.array([0.15, 0.1, -0.2])
    turn = np.array([np.cos(0.2), 0.0, 0.0, np.sin(0.2)])  # 0.4 rad about z
    target_quat = np.zeros(4)
    mujoco.mju_mulQuat(target_quat, turn, quat0)
    ctrl.set_target(target, target_quat)
    ctrl.step(500)  # 1 s
    pos, quat = ctrl.ee_pose()
    assert np.linalg.norm(pos - target) < POS_TOL_M
    assert _angle(quat, target_quat) < ROT_TOL_RAD
    assert np.all(np.abs(data.qfrc_actuator[:7]) <= np.array(arm.TORQUE_LIMITS_NM) + 1e-9)


def test_holds_still_against_gravity() -> None:
    _, data, ctrl = _setup(25)
    pos0, quat0 = ctrl.ee_pose()
    ctrl.set_target(pos0, quat0)
    ctrl.step(500)
    pos, _ = ctrl.ee_pose()
    assert np.linalg.norm(pos - pos0) < 1e-3
    assert np.abs(data.qvel[:7]).max() < 1e-2


def test_bad_gains_are_rejected() -> None:
    with pytest.raises(ValueError, match="refresh_substeps"):
        ControllerConfig(refresh_substeps=0)
    with pytest.raises(ValueError, match="stiffness_1_s2"):
        ControllerConfig(stiffness_1_s2=-1.0)
