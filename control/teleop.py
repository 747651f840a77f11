"""What a human teleoperation device reports, in one device-independent form.

Every device (terminal keyboard, gamepad, SpaceMouse) is read into a :class:`DeviceState`: a
6-D motion command in the OPERATOR frame, an optional absolute gripper command, the logical
buttons held right now and the one-shot events since the last read. The intervention arbiter
(:mod:`handrail.control.intervention`) turns it into the policy's action frame; nothing
downstream knows which device it came from.

Operator frame (right-handed): x points away from the operator (towards the robot's far side
when the operator faces it), y to the operator's left, z up. Rotations are about those axes
(roll about x, pitch about y, yaw about z), positive counter-clockwise seen from the axis tip.
Where the operator stands relative to the robot base is the arbiter's ``operator_yaw_rad``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import numpy as np

TWIST_AXES = ("x", "y", "z", "roll", "pitch", "yaw")
"""Names of the six motion axes of :attr:`DeviceState.twist`, in order."""


class TeleopEvent(StrEnum):
    """One-shot commands a person can give from any device."""

    SUCCESS = "success"
    """Mark the episode a success (ends it with the success flag and reward of a success)."""
    FAILURE = "failure"
    """Mark the episode a failure (ends it, terminated, no success)."""
    END = "end"
    """End the episode now without a verdict (truncated: the learner bootstraps through it)."""
    RERECORD = "rerecord"
    """Throw the episode in progress away and start it again (recording only)."""
    PAUSE = "pause"
    """Pause or resume the control loop."""
    INTERVENE = "intervene"
    """Toggle taking over (for devices that cannot report a held button, e.g. a terminal)."""


HOLD_TO_INTERVENE = "intervene"
"""Logical button name of the hold-to-take-over button in :attr:`DeviceState.held`."""


@dataclass(frozen=True, eq=False)
class DeviceState:
    """A device's state at one instant (see the module docstring for the frame)."""

    twist: np.ndarray = field(default_factory=lambda: np.zeros(6))
    """Motion command, shape (6,), each axis in [-1, 1]: x, y, z, roll, pitch, yaw (operator
    frame), already through the device's own mapping (signs, scales, dead zones)."""
    gripper: float | None = None
    """Absolute gripper command in [-1 open, +1 closed]; None: the device says nothing."""
    held: frozenset[str] = frozenset()
    """Logical buttons held now (e.g. :data:`HOLD_TO_INTERVENE`)."""
    events: tuple[TeleopEvent, ...] = ()
    """One-shot events since the previous read, oldest first."""
    timestamp_s: float = 0.0
    """When the state was read (s, the reader's clock)."""

    def __post_init__(self) -> None:
        twist = np.asarray(self.twist, dtype=np.float64)
        if twist.shape != (6,):
            raise ValueError(
                f"DeviceState.twist must have shape (6,) {TWIST_AXES}; got {twist.shape}"
            )
        object.__setattr__(self, "twist", np.clip(np.nan_to_num(twist), -1.0, 1.0))
        if self.gripper is not None:
            object.__setattr__(self, "gripper", float(np.clip(self.gripper, -1.0, 1.0)))


class TeleopDevice(Protocol):
    """A human input device, read without blocking at the control rate."""

    name: str
    """Short name shown in status lines ("keyboard", "gamepad", "spacemouse", "simulated")."""

    def read(self) -> DeviceState:
        """The latest state, with the events since the previous call. Never blocks."""
        ...

    def close(self) -> None:
        """Release the device (restore the terminal, close file descriptors)."""
        ...
