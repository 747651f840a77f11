"""Teleop devices as ROS 2 drivers report them, turned into a :class:`DeviceState` (pure NumPy).

``spacenav_node`` publishes the SpaceMouse as a Twist (``spacenav/twist``: linear x forward,
y left, z up; angular about the same axes; about [-1, 1] at full deflection) plus a Joy
(``spacenav/joy``: the buttons, left first). ``joy_node`` publishes a gamepad as a Joy
(``joy``: axes and buttons in the driver's order). The mappings below say which axis and
button does what; the defaults follow the SpaceMouse and the common Xbox-style layout, and
match the hidraw/evdev defaults of :mod:`handrail.control.device_maps` in behaviour (hold the
left button to take over, the right one toggles the gripper).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from handrail.control.teleop import HOLD_TO_INTERVENE, DeviceState, TeleopEvent

__all__ = ["JoyTopicMapping", "SpacenavTopicMapping", "TopicDevice"]


@dataclass(frozen=True)
class SpacenavTopicMapping:
    """How ``spacenav/twist`` and ``spacenav/joy`` drive the arm."""

    scale: float = 1.0
    """Gain on the twist (spacenav_node's full deflection is about 1)."""
    intervene_button: int = 0
    """``spacenav/joy`` button held to take over (-1: none; motion alone takes over)."""
    gripper_toggle_button: int = 1
    """Button that switches the gripper between open and closed (-1: none)."""
    event_buttons: dict[int, TeleopEvent] = field(default_factory=dict)
    """Buttons that give an event when pressed."""


@dataclass(frozen=True)
class JoyTopicMapping:
    """How a gamepad's ``joy`` message drives the arm (Xbox-style layout by default)."""

    axes: tuple[tuple[int, float], ...] = (
        (1, 1.0),
        (0, 1.0),
        (4, 1.0),
        (-1, 0.0),
        (-1, 0.0),
        (3, 1.0),
    )
    """(Joy axis, gain) for x, y, z, roll, pitch, yaw; axis -1 for none. Default: left stick
    x/y, right stick up/down z, right stick left/right yaw."""
    dead_zone: float = 0.1
    """Stick deflection read as zero."""
    intervene_button: int = 4
    """Button held to take over (LB)."""
    gripper_toggle_button: int = 0
    """Button that toggles the gripper (A)."""
    event_buttons: dict[int, TeleopEvent] = field(
        default_factory=lambda: {7: TeleopEvent.SUCCESS, 6: TeleopEvent.FAILURE, 1: TeleopEvent.END}
    )
    """Buttons that give an event when pressed (start: success, back: failure, B: end)."""


class TopicDevice:
    """Keeps the newest teleop messages and reports them as one :class:`DeviceState`.

    Button presses (rising edges) become events and gripper toggles; the twist is the newest
    one, zeroed once it is older than ``stale_s`` (a driver that stopped publishing must not
    keep the arm moving).
    """

    def __init__(
        self,
        spacenav: SpacenavTopicMapping | None = None,
        joy: JoyTopicMapping | None = None,
        stale_s: float = 0.5,
    ) -> None:
        self.spacenav, self.joy, self.stale_s = (
            spacenav or SpacenavTopicMapping(),
            joy or JoyTopicMapping(),
            stale_s,
        )
        self._twist = np.zeros(6)
        self._twist_t = -np.inf
        self._held: dict[str, frozenset[int]] = {"spacenav": frozenset(), "joy": frozenset()}
        self._gripper = -1.0
        self._events: list[TeleopEvent] = []

    def on_spacenav_twist(
        self, linear: Sequence[float], angular: Sequence[float], now_s: float
    ) -> None:
        """A ``spacenav/twist`` message."""
        twist = np.clip(np.array([*linear, *angular], np.float64) * self.spacenav.scale, -1.0, 1.0)
        self._set_twist(twist, now_s)

    def on_spacenav_buttons(self, buttons: Sequence[int]) -> None:
        """A ``spacenav/joy`` message's buttons."""
        m = self.spacenav
        self._buttons("spacenav", buttons, m.gripper_toggle_button, m.event_buttons)

    def on_joy(self, axes: Sequence[float], buttons: Sequence[int], now_s: float) -> None:
        """A gamepad ``joy`` message."""
        m = self.joy
        twist = np.zeros(6)
        for i, (axis, gain) in enumerate(m.axes):
            if 0 <= axis < len(axes):
                v = float(axes[axis])
                twist[i] = 0.0 if abs(v) < m.dead_zone else gain * v
        self._set_twist(np.clip(twist, -1.0, 1.0), now_s)
        self._buttons("joy", buttons, m.gripper_toggle_button, m.event_buttons)

    def _set_twist(self, twist: np.ndarray, now_s: float) -> None:
        self._twist, self._twist_t = twist, now_s

    def _buttons(
        self, source: str, buttons: Sequence[int], toggle: int, events: dict[int, TeleopEvent]
    ) -> None:
        now = frozenset(i for i, b in enumerate(buttons) if b)
        pressed = now - self._held[source]
        self._held[source] = now
        if toggle in pressed:
            self._gripper = -self._gripper
        self._events += [events[i] for i in sorted(pressed) if i in events]

    def state(self, now_s: float) -> DeviceState:
        """The device state now, with the events since the last call."""
        twist = self._twist if now_s - self._twist_t <= self.stale_s else np.zeros(6)
        held = set()
        if (
            self.spacenav.intervene_button in self._held["spacenav"]
            or self.joy.intervene_button in self._held["joy"]
        ):
            held.add(HOLD_TO_INTERVENE)
        events, self._events = tuple(self._events), []
        return DeviceState(
            twist=twist.copy(),
            gripper=self._gripper,
            held=frozenset(held),
            events=events,
            timestamp_s=now_s,
        )
