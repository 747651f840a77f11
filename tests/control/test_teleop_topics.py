"""TopicDevice: spacenav and joy messages as a DeviceState."""

import numpy as np

from handrail.control.teleop import HOLD_TO_INTERVENE, TeleopEvent
from handrail.control.teleop_topics import TopicDevice


def test_spacenav_twist_buttons_and_gripper_toggle():
    dev = TopicDevice()
    dev.on_spacenav_twist((0.5, 0.0, -2.0), (0.0, 0.0, 0.1), now_s=0.0)
    dev.on_spacenav_buttons([1, 0])
    state = dev.state(0.1)
    np.testing.assert_allclose(state.twist, [0.5, 0, -1.0, 0, 0, 0.1])  # clipped to [-1, 1]
    assert HOLD_TO_INTERVENE in state.held and state.gripper == -1.0
    dev.on_spacenav_buttons([1, 1])  # right pressed: toggle
    dev.on_spacenav_buttons([1, 1])  # still held: no second toggle
    assert dev.state(0.2).gripper == 1.0


def test_a_stale_twist_is_zero():
    dev = TopicDevice(stale_s=0.5)
    dev.on_spacenav_twist((1.0, 0, 0), (0, 0, 0), now_s=0.0)
    assert dev.state(0.4).twist[0] == 1.0
    assert not np.any(dev.state(0.6).twist)


def test_joy_axes_dead_zone_hold_and_events_once():
    dev = TopicDevice()
    axes = [0.05, 0.8, 0.0, -0.5, 0.3, 0.0]
    buttons = [0] * 8
    buttons[4] = buttons[7] = 1
    dev.on_joy(axes, buttons, now_s=0.0)
    state = dev.state(0.0)
    np.testing.assert_allclose(state.twist, [0.8, 0.0, 0.3, 0, 0, -0.5])
    assert HOLD_TO_INTERVENE in state.held and state.events == (TeleopEvent.SUCCESS,)
    dev.on_joy(axes, buttons, now_s=0.1)
    assert dev.state(0.1).events == ()  # held, not pressed again
