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


# ---- issue 36: the robot's safety layer ------------------------------------------------------


def moved_in(g: SafetyGate, outside: np.ndarray, t: float = 0.1) -> None:
    """The arm seen inside the box, then at ``outside`` (an overshoot)."""
    g.on_state(HOME, DOWN, 0.0)
    g.on_state(outside, DOWN, t)


def box_distance(p: np.ndarray) -> float:
    low, high = np.array(LIMITS.workspace_low_m), np.array(LIMITS.workspace_high_m)
    return float(np.linalg.norm(np.maximum(low - p, 0) + np.maximum(p - high, 0)))


def test_an_arm_that_overshot_the_box_is_moved_back_towards_it_only():
    g = SafetyGate(LIMITS)
    out = np.array([0.79, 0.0, 0.3])  # 40 mm beyond x = 0.75
    moved_in(g, out)
    assert g.state_problem(0.1) == "" and not g.ready(0.1)
    for target in ([2.0, 0.0, 0.3], [0.5, 0.3, 0.1], [0.9, -1.0, 1.0]):
        d = g.command(np.array(target), DOWN, 0.1)
        assert (
            d.send and "recovering: end effector is outside the workspace box (x=0.790" in d.reason
        )
        assert np.linalg.norm(d.pos_m - out) <= LIMITS.max_step_m + 1e-12
        assert box_distance(d.pos_m) < box_distance(out)  # every target brings it nearer


def test_an_arm_far_outside_or_outside_since_start_up_is_not_moved():
    g = SafetyGate(LIMITS)
    moved_in(g, np.array([0.9, 0.0, 0.3]))  # 150 mm out: something else moved it
    d = g.command(HOME, DOWN, 0.1)
    assert not d.send and "by 0.150 m, more than the 0.1 m it is moved back from" in d.reason
    g = SafetyGate(LIMITS)
    g.on_state([0.76, 0.0, 0.3], DOWN, 0.0)  # never inside: the box may be wrong
    d = g.command(HOME, DOWN, 0.0)
    assert not d.send and "since start-up: move the arm into the box by hand" in d.reason


def test_targets_near_a_face_lead_the_arm_by_half_its_distance_to_it():
    g = SafetyGate(LIMITS)
    near = np.array([0.73, 0.0, 0.3])  # 20 mm from the face x = 0.75
    g.on_state(near, DOWN, 0.0)
    d = g.command(np.array([3.0, 0.0, 0.3]), DOWN, 0.0)
    assert d.pos_m[0] == pytest.approx(0.74) and "braking" in d.reason
    far = g.command(near - np.array([0.04, 0.0, 0.0]), DOWN, 0.0)  # away from it: as commanded
    assert far.reason == "" and far.pos_m[0] == pytest.approx(0.69)


@pytest.mark.parametrize("frame", ["world", ""])
def test_a_target_in_another_frame_is_refused(frame):
    d = gate().command(HOME, DOWN, 0.01, frame)
    assert not d.send
    assert d.reason == (
        f"refused: target frame {frame!r} is not 'base': send targets in 'base' (header.frame_id)"
    )


@pytest.mark.parametrize(
    ("pos", "quat", "words"),
    [
        (
            HOME,
            [0.0, 0.0, 0.0, 0.0],
            "hold: target quaternion (0.000, 0.000, 0.000, 0.000) is zero",
        ),
        (
            HOME,
            [np.nan, 1.0, 0.0, 0.0],
            "hold: target quaternion (nan, 1.000, 0.000, 0.000) is not",
        ),
        ([0.5, np.inf, 0.3], DOWN, "hold: target position (0.500, inf, 0.300) is not finite"),
    ],
)
def test_a_bad_target_holds_the_arm_and_says_what_was_wrong(pos, quat, words):
    d = gate().command(np.array(pos), np.array(quat), 0.01)
    assert d.send and d.reason.startswith(words), d.reason
    np.testing.assert_allclose(d.pos_m, HOME)


def test_a_quaternion_that_is_not_unit_is_normalised_and_said_so():
    d = gate().command(HOME, 2 * DOWN, 0.01)
    assert d.send and d.reason == "clipped: quaternion normalised (its norm was 2)"
    np.testing.assert_allclose(d.quat_wxyz, DOWN)
    assert gate().command(HOME, DOWN * (1 + 1e-9), 0.01).reason == ""


def test_gripper_commands_are_filtered_like_poses():
    limits = SafetyLimits(**{**LIMITS.__dict__, "gripper_max_m": 0.08})
    g = SafetyGate(limits)
    assert g.gripper(0.05).opening_m == 0.05 and g.gripper(0.05).reason == ""
    for bad in (np.nan, np.inf, -np.inf):
        d = g.gripper(bad)
        assert d.opening_m is None and d.reason == f"refused: gripper opening {bad} is not finite"
    assert g.gripper(0.2).opening_m == 0.08 and "to [0, 0.08] m" in g.gripper(0.2).reason
    assert g.gripper(-0.01).opening_m == 0.0
    g.estop(True)
    assert g.gripper(0.05).opening_m is None


def test_a_pose_going_stale_is_refused_at_its_deadline_without_a_command():
    g = gate(state_timeout_s=0.5, watchdog_s=0.5, stall_s=0.1)
    assert g.ready(0.0)
    assert g.command(HOME + np.array([0.02, 0, 0]), DOWN, 0.0).send
    events = []
    for k in range(1, 75):  # ticks every 20 ms; the driver hung at 0.0, the actor went quiet too
        d = g.tick(k * 0.02)
        if d.reason:
            events.append((round(k * 0.02, 2), d.reason, d.send))
    # The stale pose first: holding the arm at a pose 0.5 s old could move it back.
    assert events == [(0.52, "refused: end-effector pose is 0.52 s old (limit 0.5 s)", False)]
    assert not g.ready(1.5)


def test_a_stalled_owner_neither_fires_the_watchdog_nor_refuses_a_fresh_pose():
    # The node did not run for 1 s (its process stalled) while commands and poses queued up:
    # the tick after the stall must not read the queue's silence as a silent actor or a hung arm.
    g = gate(state_timeout_s=0.5, watchdog_s=0.5, stall_s=0.1)
    g.command(HOME, DOWN, 0.0)
    assert g.tick(0.02).reason == ""
    assert g.tick(1.02).reason == ""  # the first tick after the stall
    g.on_state(HOME, DOWN, 1.025)  # what queued meanwhile is read now
    assert g.command(HOME, DOWN, 1.03).send
    for k in range(52, 77):  # ticks every 20 ms again, the arm's poses too; no more commands
        g.on_state(HOME, DOWN, k * 0.02)
        assert g.tick(k * 0.02).reason == "", k
    hold = g.tick(1.54)  # no command since 1.03: the watchdog keeps its deadline
    assert hold.send and hold.reason == "hold: watchdog (0.51 s without a command)"


def test_ready_says_whether_commands_are_forwarded():
    g = SafetyGate(LIMITS, state_timeout_s=0.5)
    assert not g.ready(0.0)  # no pose yet
    g.on_state(HOME, DOWN, 0.0)
    assert g.ready(0.1)
    assert not g.ready(0.6)  # stale
    g.on_state(HOME, DOWN, 0.6)
    g.estop(True)
    assert not g.ready(0.6)
    g.estop(False)
    assert g.ready(0.6)
