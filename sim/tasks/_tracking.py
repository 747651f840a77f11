"""Pose-target bookkeeping shared by the peg_insert and push experts.

The base env integrates actions into a pose target (``target += delta``, then the safety
filter). An expert that sends ``gain * (goal - ee)`` therefore runs an integrator, which winds
up while the arm is blocked by a contact and presses ever harder. These experts instead say
where the target should be, e.g. ``ee + small step`` while pushing or inserting, so the contact
force stays at ``stiffness * step``. :class:`TargetTracker` keeps a copy of the env's target,
updated with exactly the decoded action and the same safety filter the env applies, and turns a
wanted target into the action that produces it. It reads only the observation, unless told to
follow the env's own target (:meth:`TargetTracker.follow`): the copy is right only while the
expert alone acts, so an expert that takes over from a policy or a person (the simulated person,
a residual's expert base) must follow the env, or it steers from a target the others moved.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from handrail.control.safety import SafetyFilter
from handrail.control.spaces import decode_action
from handrail.control.transforms import quat_mul, rotvec_to_quat, wrap_angle, yaw_from_quat
from handrail.sim.base import PROPRIO_SLICES, SimConfig, expert_action


class TargetTracker:
    """Mirror of the env's end-effector target; turns wanted targets into actions.

    Args:
        config: the env's config (action layout and safety limits).
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self._safety = SafetyFilter(config.safety)
        self._source: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None
        self.reset()

    def follow(self, target_pose: Callable[[], tuple[np.ndarray, np.ndarray]]) -> None:
        """Read the env's target (``ArmEnv.target_pose``) at every action instead of the copy."""
        self._source = target_pose

    def reset(self) -> None:
        """Forget the target; the next observation's pose becomes the target (as at env reset)."""
        self._pos: np.ndarray | None = None
        self._quat = np.array([0.0, 1.0, 0.0, 0.0])

    def action(
        self,
        proprio: np.ndarray,
        target_pos_m: np.ndarray,
        target_yaw_rad: float | None = None,
        gripper: float = 1.0,
    ) -> np.ndarray:
        """The action moving the env's target to ``target_pos_m`` (and yaw), as far as allowed.

        Args:
            proprio: the observation's ``proprio`` vector.
            target_pos_m: wanted tool-centre-point target (m, base frame).
            target_yaw_rad: wanted tool yaw (rad); None keeps the current target's yaw.
            gripper: gripper command in [-1, 1].

        Returns:
            float32 action of the env's action space.
        """
        proprio = np.asarray(proprio, dtype=np.float64)
        ee = proprio[PROPRIO_SLICES["ee_pos_m"]]
        quat = proprio[PROPRIO_SLICES["ee_quat_wxyz"]]
        if self._source is not None:
            self._pos, self._quat = self._source()
        elif self._pos is None:
            self._pos, self._quat = ee.copy(), quat.copy()
        rotvec = np.zeros(3)
        if target_yaw_rad is not None:
            rotvec[2] = wrap_angle(target_yaw_rad - float(yaw_from_quat(self._quat)))
        action = expert_action(
            self.config, quat, np.asarray(target_pos_m) - self._pos, rotvec, gripper
        )
        cmd = decode_action(action, self.config.action, quat)
        pos = self._pos + cmd.delta_pos_m
        rot = quat_mul(rotvec_to_quat(cmd.delta_rotvec_rad), self._quat)
        self._pos, self._quat, _ = self._safety.filter(ee, quat, pos, rot)
        return action
