"""Operational-space (task-space impedance) controller run at the physics rate.

The law is the Cartesian impedance controller of Khatib (1987), as Franka's example
controllers run it::

    F   = Lambda(q) kp (e - J qd * 2 zeta / sqrt(kp))     task-space wrench, e = pose error (6)
    tau = J^T F + P_null (kn (q_home - q) - dn qd) + c(q, qd) + g(q)

with ``Lambda = (J M^-1 J^T)^-1``, the null-space projector ``P_null = I - J^+ J`` (here the
single null direction ``v`` of the 7-dof arm, ``P_null = v v^T``) that pulls the elbow towards
home without moving the end effector, gravity ``g`` compensated exactly at every step (MuJoCo
``gravcomp`` routed through the actuators) and Coriolis ``c`` from ``qfrc_bias``. Joint torques
are clamped to the Panda's limits by the joints' ``actuatorfrcrange``, like a drive would.

How it runs fast: the law is linear in ``(q, qd)`` once ``J``, ``Lambda`` and ``v`` are fixed.
Factor ``J^T Lambda J = W^T W`` (``W = L^T J`` with ``L L^T = Lambda``); then the task term is
six springs ``kp (r - W q) - kd W qd`` acting along the rows of ``W``, and the null term one more
along ``v``. Those seven are MuJoCo position actuators on fixed tendons whose coefficients are
``W`` and ``v``, so MuJoCo evaluates the law in C at every physics step. Every
``refresh_substeps`` steps Python recomputes ``J``, ``Lambda``, ``v``, the pose error and the
Coriolis feed-forward, writes the tendon coefficients and the spring set-points ``r``, and lets
MuJoCo run the next block with one ``mj_step(nstep=...)`` call. Between refreshes the pose error
is linearised (``e ~ e0 - J (q - q0)``), which is exact to second order in the motion. A refresh
is a short run of MuJoCo's own small-matrix routines on preallocated buffers (no NumPy linear
algebra, whose per-call overhead is larger than these 6 x 6 problems), and the null direction is
the previous one projected onto the Jacobian's null space (no SVD after the first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True)
class ControllerConfig:
    """Gains of the operational-space controller."""

    stiffness_1_s2: float = 600.0
    """Task-space stiffness per unit task-space inertia (1/s^2), translation and rotation alike;
    its square root is the closed-loop natural frequency (rad/s)."""
    damping_ratio: float = 1.0
    """Task-space damping ratio (1 = critically damped)."""
    null_stiffness_nm_rad: float = 10.0
    """Joint stiffness of the null-space pull towards the home pose (N m/rad)."""
    null_damping_nm_s_rad: float = 2.0
    """Joint damping of the null-space motion (N m s/rad)."""
    refresh_substeps: int = 50
    """Recompute Jacobian, inertia, null direction and error every this many physics steps (the
    default, 50, is once per 0.1 s control step of the 2 ms physics: tracking stays within the
    controller tests' tolerances and the Python cost is paid once per env step)."""
    singular_eps: float = 1e-4
    """Regulariser added to J M^-1 J^T before inverting, keeps Lambda finite near singularities."""

    def __post_init__(self) -> None:
        for name in ("stiffness_1_s2", "damping_ratio"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ControllerConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.null_stiffness_nm_rad < 0 or self.null_damping_nm_s_rad < 0:
            raise ValueError("ControllerConfig null-space gains must be >= 0")
        if self.refresh_substeps < 1:
            raise ValueError(
                f"ControllerConfig.refresh_substeps must be >= 1, got {self.refresh_substeps}"
            )


class OperationalSpaceController:
    """Tracks an end-effector pose target with a task-space impedance law.

    The model must come from :func:`handrail.sim.arm.build_mjcf` (its ``osc*`` tendons and
    actuators carry the law). Use :meth:`step` to advance the physics.
    The model is modified at run time (tendon coefficients, actuator gains): give each
    controller its own model.

    Args:
        model: the compiled model; the arm's joints must be its first seven dofs.
        data: the data the controller reads and writes.
        site: the end-effector site (tool centre point) whose pose is controlled.
        home_qpos: joint positions the null-space term pulls towards (rad).
        config: gains and refresh rate.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        site: str,
        home_qpos: Sequence[float],
        config: ControllerConfig | None = None,
    ) -> None:
        self.model, self.data = model, data
        self.config = config or ControllerConfig()
        n = self._n = len(home_qpos)
        if n != 7 or not np.array_equal(model.jnt_dofadr[:n], np.arange(n)):
            raise ValueError("the arm's seven joints must be the model's first dofs")
        self._site = model.site(site).id
        self._home = np.asarray(home_qpos, dtype=np.float64)
        self._motors = np.array([model.actuator(f"tau{i + 1}").id for i in range(n)])
        osc = np.array([model.actuator(f"osc{i}").id for i in range(n)])
        self._osc0 = int(osc[0])
        if not np.array_equal(osc, np.arange(self._osc0, self._osc0 + n)):
            raise ValueError("the osc actuators must be consecutive")
        adr = model.tendon_adr[model.tendon("osc0").id]
        self._wrap = model.wrap_prm[adr : adr + n * n].reshape(n, n)  # view: rows = tendons
        self._set_gains(osc)
        self._allocate_buffers()
        self._bind_data_views()
        self.target_pos = np.zeros(3)
        self.target_quat = np.array([1.0, 0.0, 0.0, 0.0])

    def _set_gains(self, osc: np.ndarray) -> None:
        """Write the impedance gains into the ``osc`` position actuators of the model."""
        cfg = self.config
        kd = 2.0 * cfg.damping_ratio * np.sqrt(cfg.stiffness_1_s2)
        gains = np.array([cfg.stiffness_1_s2] * 6 + [cfg.null_stiffness_nm_rad])
        damps = np.array([kd] * 6 + [cfg.null_damping_nm_s_rad])
        self.model.actuator_gainprm[osc, 0] = gains
        self.model.actuator_biasprm[osc, 1] = -gains
        self.model.actuator_biasprm[osc, 2] = -damps

    def _allocate_buffers(self) -> None:
        """Preallocate the refresh's work arrays, so that a refresh does not allocate."""
        n, nv = self._n, self.model.nv
        self._jac = np.zeros((6, nv))
        self._jacp, self._jacr = self._jac[:3], self._jac[3:]  # contiguous row views
        self._jn = np.zeros((6, n))  # the arm's columns of the Jacobian, contiguous
        self._minv_jt = np.zeros((6, nv))
        self._chol = np.zeros((6, 6))
        self._lam = np.zeros((6, 6))
        self._eye6 = np.eye(6)
        self._tril6 = np.tril(np.ones((6, 6)))
        self._jjt = np.zeros((6, 6))
        self._err = np.zeros(6)
        self._vec6 = np.zeros(6)
        self._y = np.zeros(6)
        self._vecn = np.zeros(n)
        self._q = np.zeros(n)
        self._quat = np.zeros(4)
        self._conj = np.zeros(4)
        self._dquat = np.zeros(4)
        self._null = np.zeros(n)
        self._has_null = False
        self._eps = self.config.singular_eps

    def _bind_data_views(self) -> None:
        """Views into ``data``'s arrays (they never move) that a refresh reads and writes."""
        n, data = self._n, self.data
        tau = _as_slice(self._motors)
        self._ctrl_osc = data.ctrl[self._osc0 : self._osc0 + 6]
        self._ctrl_tau = data.ctrl[tau]
        self._qpos, self._qvel = data.qpos[:n], data.qvel[:n]
        self._bias, self._gravcomp = data.qfrc_bias[:n], data.qfrc_gravcomp[:n]
        self._site_pos, self._site_mat = data.site_xpos[self._site], data.site_xmat[self._site]

    def set_target(self, pos_m: np.ndarray, quat: np.ndarray) -> None:
        """Set the end-effector target (world frame position in m, quaternion w, x, y, z)."""
        self.target_pos[:] = pos_m
        self.target_quat[:] = quat
        mujoco.mju_normalize4(self.target_quat)

    def ee_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """End-effector position (m) and quaternion (w, x, y, z) from the last kinematics pass."""
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self._site])
        return self.data.site_xpos[self._site].copy(), quat

    def reset(self) -> None:
        """Forget the null direction (call after teleporting the arm, e.g. on env reset)."""
        self._null[:] = 0.0
        self._has_null = False

    def _null_direction(self) -> np.ndarray:
        """Unit null vector of the arm Jacobian ``self._jn`` (6 x 7), continued from the last."""
        jn, jjt, null = self._jn, self._jjt, self._null
        if not self._has_null:
            null[:] = np.linalg.svd(jn)[2][-1]
            self._has_null = True
        # Project the previous direction onto the null space, v - J^T (J J^T)^-1 J v: the null
        # space is one-dimensional, so this is the new direction with the old one's sign.
        mujoco.mju_mulMatMatT(jjt, jn, jn)
        mujoco.mju_cholFactor(jjt, 1e-12)
        mujoco.mju_mulMatVec(self._vec6, jn, null)
        mujoco.mju_cholSolve(self._y, jjt, self._vec6)
        mujoco.mju_mulMatTVec(self._vecn, jn, self._y)
        mujoco.mju_subFrom(null, self._vecn)
        mujoco.mju_normalize(null)
        return null

    def _pose_error(self) -> None:
        """Position error and world-frame rotation vector to the target, into ``self._err``."""
        mujoco.mju_sub(self._err[:3], self.target_pos, self._site_pos)
        mujoco.mju_mat2Quat(self._quat, self._site_mat)
        mujoco.mju_negQuat(self._conj, self._quat)
        mujoco.mju_mulQuat(self._dquat, self.target_quat, self._conj)
        if self._dquat[0] < 0:  # the shortest way round
            mujoco.mju_scl(self._dquat, self._dquat, -1.0)
        mujoco.mju_quat2Vel(self._err[3:], self._dquat, 1.0)

    def refresh(self) -> None:
        """Recompute the linearised law from the kinematics of the last forward pass."""
        m, d, n = self.model, self.data, self._n
        mujoco.mj_jacSite(m, d, self._jacp, self._jacr, self._site)
        mujoco.mj_solveM(m, d, self._minv_jt, self._jac)
        np.copyto(self._jn, self._jac[:, :n])
        # Lambda^-1 = J M^-1 J^T + eps = C C^T. With Lambda = L L^T (L lower) and R = L^T,
        # J^T Lambda J = W^T W for W = R J: the springs' rows; their set-points r = R (e0 + J q0).
        chol, lam = self._chol, self._lam
        mujoco.mju_mulMatMatT(chol, self._jac, self._minv_jt)
        chol.flat[::7] += self._eps
        mujoco.mju_cholFactor(chol, 0.0)
        for i in range(6):
            mujoco.mju_cholSolve(lam[i], chol, self._eye6[i])  # rows of Lambda (symmetric)
        mujoco.mju_cholFactor(lam, 0.0)
        np.multiply(lam, self._tril6, out=lam)  # L; its upper part still held Lambda
        mujoco.mju_mulMatTMat(self._wrap[:6], lam, self._jn)  # W = L^T J
        self._wrap[6] = self._null_direction()
        self._pose_error()
        # Kinematics come from the last forward pass, i.e. before the last Euler position update
        # qpos += dt * qvel; linearise about that configuration.
        mujoco.mju_addScl(self._q, self._qpos, self._qvel, -m.opt.timestep)
        mujoco.mju_mulMatVec(self._vec6, self._jn, self._q)
        mujoco.mju_addTo(self._vec6, self._err)
        mujoco.mju_mulMatTVec(self._ctrl_osc, lam, self._vec6)
        d.ctrl[self._osc0 + 6] = mujoco.mju_dot(self._null, self._home)
        # Coriolis/centrifugal feed-forward; gravity is compensated by MuJoCo itself.
        mujoco.mju_sub(self._ctrl_tau, self._bias, self._gravcomp)

    def step(self, substeps: int) -> None:
        """Advance the physics ``substeps`` steps, refreshing the law every few steps.

        Needs current kinematics in ``data`` (after ``mj_forward`` or a previous ``mj_step``).
        """
        m, d, k = self.model, self.data, self.config.refresh_substeps
        done = 0
        while done < substeps:
            block = min(k, substeps - done)
            self.refresh()
            mujoco.mj_step(m, d, nstep=block)  # its first forward pass uses the new tendons
            done += block


def _as_slice(ids: np.ndarray) -> slice:
    """``ids`` (consecutive integers) as a slice, so writes through it need no fancy indexing."""
    first = int(ids[0])
    if not np.array_equal(ids, np.arange(first, first + len(ids))):
        raise ValueError(f"the arm's motors must be consecutive actuators, got ids {ids.tolist()}")
    return slice(first, first + len(ids))
