"""SafetyGate: e-stop latch, start-up check, filter, watchdog (no ROS, injected clock)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.control.safety import SafetyLimits
from handrail.control.safety_gate import SafetyGate

LIMITS = SafetyLimits(
    workspace_low_m=(0.25, -0.35, 0.015),
    workspace_high_m=(0.75, 0.35, 0.6),
    max_step_m=0.05,
    max_rot_step_rad=0.3,
    max_tilt_rad=0.6,
    max_yaw_rad=np.pi,
)
DOWN = np.array([0.0, 1.0, 0.0, 0.0])
HOME = np.array([0.5, 0.0, 0.3])


def gate(**kw) -> SafetyGate:
    g = SafetyGate(LIMITS, **kw)
    g.on_state(HOME, DOWN, 0.0)
    return g


def test_forwards_a_small_step_unchanged():
    d = gate().command(HOME + np.array([0.01, 0, 0]), DOWN, 0.01)
    assert d.send and d.reason == ""
    np.testing.assert_allclose(d.pos_m, HOME + np.array([0.01, 0, 0]))


def test_clips_a_far_target_to_the_step_limit_and_says_so():
    d = gate().command(HOME + np.array([0.3, 0, 0]), DOWN, 0.01)
    assert d.send and d.reason.startswith("clipped")
    assert np.linalg.norm(d.pos_m - HOME) == pytest.approx(0.05)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=3, max_size=3))
def test_every_forwarded_target_is_inside_the_box(target):
    d = gate().command(np.array(target), DOWN, 0.01)
    assert d.send
    assert np.all(d.pos_m >= np.array(LIMITS.workspace_low_m) - 1e-9)
    assert np.all(d.pos_m <= np.array(LIMITS.workspace_high_m) + 1e-9)


def test_estop_holds_once_drops_commands_and_latches_until_cleared():
    g = gate()
    hold = g.estop(True)
    assert hold.send and hold.reason == "hold: estop"
    np.testing.assert_allclose(hold.pos_m, HOME)
    assert not g.estop(True).send  # latched already: no second hold
    for t in (0.1, 0.2, 5.0):
        g.on_state(HOME, DOWN, t)
        assert not g.command(HOME + np.array([0.01, 0, 0]), DOWN, t).send
    assert not g.gripper_allowed()
    g.estop(False)
    assert g.command(HOME + np.array([0.01, 0, 0]), DOWN, 5.0).send and g.gripper_allowed()


def test_refuses_without_a_pose_with_a_stale_pose_and_outside_the_box():
    g = SafetyGate(LIMITS, state_timeout_s=0.5)
    assert g.command(HOME, DOWN, 0.0).reason == "refused: no end-effector pose received yet"
    g.on_state(HOME, DOWN, 0.0)
    assert "0.70 s old" in g.command(HOME, DOWN, 0.7).reason
    g.on_state([0.9, 0.0, 0.3], DOWN, 1.0)
    refused = g.command(HOME, DOWN, 1.0)
    assert not refused.send and "outside the workspace box (x=0.900" in refused.reason
    g.on_state([0.5, 0.0, np.nan], DOWN, 1.1)
    assert "not finite" in g.command(HOME, DOWN, 1.1).reason


def test_watchdog_holds_once_after_commands_stop():
    g = gate(watchdog_s=0.5)
    assert not g.tick(0.3).send  # never commanded: nothing to hold
    g.on_state(HOME, DOWN, 1.0)
    assert g.command(HOME + np.array([0.02, 0, 0]), DOWN, 1.0).send
    g.on_state(HOME + np.array([0.01, 0, 0]), DOWN, 1.4)
    assert not g.tick(1.4).send
    hold = g.tick(1.6)
    assert hold.send and hold.reason.startswith("hold: watchdog")
    np.testing.assert_allclose(
        hold.pos_m, HOME + np.array([0.01, 0, 0])
    )  # where the arm is, not the target
    assert not g.tick(2.5).send  # once


def test_bad_timing_arguments_are_refused():
    with pytest.raises(ValueError, match="watchdog_s"):
        SafetyGate(LIMITS, watchdog_s=0)
