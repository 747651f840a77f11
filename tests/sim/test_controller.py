"""The operational-space controller tracks pose targets within stated tolerances."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from handrail.control.transforms import quat_conj, quat_mul, quat_to_rotvec, rotvec_to_quat
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


def test_refresh_writes_the_impedance_law() -> None:
    """Tendon rows W, null row v and set-points r encode J^T Lambda (e0 + J q0) as in the doc."""
    model, data, ctrl = _setup(50)
    data.qvel[:7] = np.linspace(-0.3, 0.3, 7)
    mujoco.mj_forward(model, data)
    pos0, quat0 = ctrl.ee_pose()
    target_quat = quat_mul(rotvec_to_quat(np.array([0.1, -0.2, 0.15])), quat0)
    ctrl.set_target(pos0 + np.array([0.03, -0.02, 0.05]), target_quat)
    ctrl.refresh()
    jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    mujoco.mj_jacSite(model, data, jacp, jacr, model.site(arm.TCP_SITE).id)
    jac = np.vstack([jacp, jacr])
    mass = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, mass)
    lam = np.linalg.inv(jac @ np.linalg.solve(mass, jac.T) + 1e-4 * np.eye(6))
    jn = jac[:, :7]
    osc0 = model.actuator("osc0").id
    wrap = model.wrap_prm[model.tendon_adr[model.tendon("osc0").id] :][:49].reshape(7, 7)
    w, v = wrap[:6], wrap[6]
    np.testing.assert_allclose(w.T @ w, jn.T @ lam @ jn, rtol=1e-9, atol=1e-9)
    assert np.linalg.norm(jn @ v) < 1e-9 and abs(np.linalg.norm(v) - 1.0) < 1e-12
    err = np.concatenate(
        [ctrl.target_pos - pos0, quat_to_rotvec(quat_mul(target_quat, quat_conj(quat0)))]
    )
    q0 = data.qpos[:7] - model.opt.timestep * data.qvel[:7]
    r = data.ctrl[osc0 : osc0 + 6]
    np.testing.assert_allclose(w.T @ r, jn.T @ lam @ (err + jn @ q0), rtol=1e-8, atol=1e-8)
    assert data.ctrl[osc0 + 6] == pytest.approx(v @ np.asarray(arm.HOME_QPOS_RAD))
