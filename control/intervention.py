"""Intervention arbitration: who acts this tick, the policy or the person at the device.

Pure NumPy with an injected clock, so every timing rule is tested without hardware or sleeps.
Each control tick, :meth:`Arbiter.decide` takes the policy's proposed action (normalised, in
the policy's action frame), the latest :class:`~handrail.control.teleop.DeviceState` and the
end effector's orientation, and returns a :class:`Decision`: exactly the policy's action, or
exactly the person's action mapped into the policy's action frame, never a mixture.

Taking over (``ArbiterConfig.engage``):

- ``motion``: moving the device beyond the dead band (or changing its gripper command) takes
  over at once; ``button``: only the hold-to-intervene button (or the toggle event, for a
  terminal keyboard) does, so bumping the device never moves the robot; ``either``: both.
- The person keeps control while the button is held or the toggle is on, and for
  ``release_after_s`` after the last motion; then control returns to the policy. While in
  control, a device at rest means "hold still" (a zero motion), not "let the policy act".

Mapping the person's motion into the policy's action frame (where SERL once had a bug): the
device twist is in the operator frame (:mod:`handrail.control.teleop`); it is rotated by
``operator_yaw_rad`` into the robot base frame, scaled so that a full deflection asks for the
action's full step (``ActionConfig.max_step_m``/``max_rot_step_rad``) and encoded with
:func:`~handrail.control.spaces.encode_action`, which rotates it into the end-effector frame when
the policy acts in that frame and keeps only the components the action layout has (tool z for
``rotation="yaw"`` with ``frame="ee"``). Decoding the human action therefore gives back the base
frame motion the person asked for, whatever the frame and rotation options (tested for each).

The gripper is the person's last gripper command; until the device gives one, the gripper stays
where the last executed action left it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from handrail.control.spaces import ActionConfig, EeCommand, encode_action
from handrail.control.step import ActedBy
from handrail.control.teleop import HOLD_TO_INTERVENE, TWIST_AXES, DeviceState, TeleopEvent

_ENGAGE = ("motion", "button", "either")


@dataclass(frozen=True)
class ArbiterConfig:
    """When a person takes over and how their device motion maps onto the policy's actions."""

    engage: Literal["motion", "button", "either"] = "either"
    """What takes over: device motion, the intervene button (held, or toggled), or either."""
    deadband: float = 0.1
    """Device axis deflection (of 1) below which the axis counts as at rest."""
    release_after_s: float = 0.5
    """Quiet time (s) without motion or button after which control returns to the policy."""
    axis_scale: tuple[float, float, float, float, float, float] = (1.0,) * 6
    """Per-axis gain (x, y, z, roll, pitch, yaw) on the device twist; 1 = full action step."""
    axis_mask: tuple[bool, bool, bool, bool, bool, bool] = (True,) * 6
    """Axes the person may move; masked axes are zero (e.g. lock rotations for a novice)."""
    operator_yaw_rad: float = 0.0
    """Yaw of the operator frame in the robot base frame (rad): 0 when the operator stands
    behind the base looking along its +x, pi when facing the robot from the front."""

    def __post_init__(self) -> None:
        problems = []
        if self.engage not in _ENGAGE:
            problems.append(f"engage={self.engage!r} (choose one of {', '.join(_ENGAGE)})")
        if not 0.0 <= self.deadband < 1.0:
            problems.append(f"deadband={self.deadband!r} (need 0 <= deadband < 1)")
        if not (math.isfinite(self.release_after_s) and self.release_after_s >= 0.0):
            problems.append(f"release_after_s={self.release_after_s!r} (need >= 0 seconds)")
        if len(self.axis_scale) != 6 or not all(
            math.isfinite(s) and s >= 0 for s in self.axis_scale
        ):
            problems.append(
                f"axis_scale={self.axis_scale!r} (need 6 finite gains >= 0, {TWIST_AXES})"
            )
        if len(self.axis_mask) != 6:
            problems.append(f"axis_mask={self.axis_mask!r} (need 6 booleans, {TWIST_AXES})")
        if not math.isfinite(self.operator_yaw_rad):
            problems.append(f"operator_yaw_rad={self.operator_yaw_rad!r} (need a finite angle)")
        if problems:
            raise ValueError("ArbiterConfig: invalid " + "; ".join(problems))


@dataclass(frozen=True, eq=False)
class Decision:
    """What runs this tick, and why."""

    action: NDArray[np.float32]
    """The action to execute: the policy's proposal itself, or the person's mapped action."""
    acted_by: ActedBy
    """POLICY or HUMAN."""
    events: tuple[TeleopEvent, ...] = ()
    """The person's one-shot events this tick (success, failure, end, rerecord...)."""
    paused: bool = False
    """The person has paused the loop (toggled with the pause event)."""


def apply_deadband(values: ArrayLike, deadband: float) -> NDArray[np.float64]:
    """Zero inside ``deadband``; outside it rescaled so the output still spans [-1, 1]
    continuously (``(|v| - db) / (1 - db)`` with v's sign)."""
    v = np.asarray(values, dtype=np.float64)
    magnitude = np.clip((np.abs(v) - deadband) / (1.0 - deadband), 0.0, 1.0)
    return np.sign(v) * magnitude


def map_twist(
    twist: ArrayLike,
    gripper: float,
    cfg: ArbiterConfig,
    action: ActionConfig,
    ee_quat: ArrayLike | None,
) -> NDArray[np.float32]:
    """A device twist (operator frame, after the dead band) as a normalised policy action.

    Args:
        twist: (6,) in [-1, 1]: x, y, z, roll, pitch, yaw in the operator frame.
        gripper: absolute gripper command for the action (-1 open, +1 closed).
        cfg: scales, masks and the operator's yaw.
        action: the policy's action layout and scales.
        ee_quat: the end effector's orientation (w, x, y, z); needed when ``action.frame == "ee"``.
    """
    t = np.asarray(twist, dtype=np.float64) * np.asarray(cfg.axis_scale)
    t = np.where(np.asarray(cfg.axis_mask, dtype=bool), t, 0.0)
    c, s = math.cos(cfg.operator_yaw_rad), math.sin(cfg.operator_yaw_rad)
    to_base = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    cmd = EeCommand(
        delta_pos_m=to_base @ (t[:3] * action.max_step_m),
        delta_rotvec_rad=to_base @ (t[3:] * action.max_rot_step_rad),
        gripper=gripper,
    )
    return encode_action(cmd, action, ee_quat)


class Arbiter:
    """Decides each tick who acts (see the module docstring).

    Args:
        config: engage/release rules, scales, masks, operator yaw.
        action: the policy's action layout (frame, rotation, gripper, scales).
    """

    def __init__(self, config: ArbiterConfig, action: ActionConfig) -> None:
        self.config, self.action_config = config, action
        self.engaged = False
        self.toggled = False
        self.paused = False
        self.last_input_s = -math.inf
        self.human_gripper: float | None = None
        self.last_device_gripper: float | None = None
        self.last_executed_gripper = -1.0  # open until an action says otherwise

    def reset(self, take_over: bool = False) -> None:
        """Start of an episode: the policy acts until the person takes over again (or, with
        ``take_over``, the person is in control as if they had toggled, e.g. to record demos)."""
        self.engaged = self.toggled = take_over
        self.last_input_s = -math.inf
        self.human_gripper = None

    def decide(
        self,
        policy_action: ArrayLike,
        device: DeviceState,
        now_s: float,
        ee_quat: ArrayLike | None = None,
    ) -> Decision:
        """The action to execute this tick.

        Args:
            policy_action: the policy's proposal, normalised, shape ``(action.dim,)``.
            device: the device's latest state (its events are consumed here).
            now_s: the caller's clock (s); only differences matter.
            ee_quat: end-effector orientation (w, x, y, z); needed for ``frame="ee"``.
        """
        proposal = np.asarray(policy_action, dtype=np.float32)
        if proposal.shape != (self.action_config.dim,):
            raise ValueError(
                f"Arbiter.decide: policy_action has shape {proposal.shape}, the action layout "
                f"{self.action_config.names} needs ({self.action_config.dim},)"
            )
        cfg = self.config
        handed_back = False
        for event in device.events:
            if event is TeleopEvent.INTERVENE:
                self.toggled = not self.toggled
                handed_back = not self.toggled
            elif event is TeleopEvent.PAUSE:
                self.paused = not self.paused
        twist = apply_deadband(device.twist, cfg.deadband)
        moving = bool(np.any(np.where(np.asarray(cfg.axis_mask, bool), twist, 0.0) != 0.0))
        # The first gripper report is the device's starting state, not a command.
        gripper_changed = (
            device.gripper is not None
            and self.last_device_gripper is not None
            and device.gripper != self.last_device_gripper
        )
        if device.gripper is not None:
            self.last_device_gripper = device.gripper
        button = cfg.engage != "motion" and (self.toggled or HOLD_TO_INTERVENE in device.held)
        # In "button" mode motion only keeps an engaged person in control; it never takes over.
        motion = (moving or gripper_changed) and (cfg.engage != "button" or self.engaged)
        if handed_back and not button:
            self.engaged = False  # toggling off hands back at once
        elif button or motion:
            self.engaged = True
            self.last_input_s = now_s
        elif self.engaged and now_s - self.last_input_s >= cfg.release_after_s:
            self.engaged = False
        if self.engaged and gripper_changed:
            self.human_gripper = device.gripper
        events = tuple(
            e for e in device.events if e not in (TeleopEvent.INTERVENE, TeleopEvent.PAUSE)
        )
        if not self.engaged:
            self._remember_gripper(proposal)
            return Decision(proposal, ActedBy.POLICY, events, self.paused)
        gripper = self.last_executed_gripper if self.human_gripper is None else self.human_gripper
        human = map_twist(twist, gripper, cfg, self.action_config, ee_quat)
        self._remember_gripper(human)
        return Decision(human, ActedBy.HUMAN, events, self.paused)

    def _remember_gripper(self, action: NDArray[np.float32]) -> None:
        if self.action_config.gripper:
            self.last_executed_gripper = float(action[-1])
