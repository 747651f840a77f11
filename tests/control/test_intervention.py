"""The intervention arbiter: engage/release timing, dead band, masks, frame mapping, events."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.control.intervention import (
    Arbiter,
    ArbiterConfig,
    apply_deadband,
    map_twist,
)
from handrail.control.spaces import ActionConfig, decode_action
from handrail.control.step import ActedBy
from handrail.control.teleop import HOLD_TO_INTERVENE, DeviceState, TeleopEvent
from handrail.control.transforms import quat_from_yaw, quat_mul, quat_rotate, rotvec_to_quat

ACTION = ActionConfig()  # base frame, xyz + gripper
POLICY = np.array([0.3, -0.2, 0.1, 0.9], np.float32)


def still(**kw: object) -> DeviceState:
    return DeviceState(**kw)  # type: ignore[arg-type]


def moving(axis: int = 0, value: float = 0.8, **kw: object) -> DeviceState:
    twist = np.zeros(6)
    twist[axis] = value
    return DeviceState(twist=twist, **kw)  # type: ignore[arg-type]


def test_policy_acts_while_the_device_rests_and_its_action_passes_unchanged() -> None:
    arb = Arbiter(ArbiterConfig(), ACTION)
    for t in range(5):
        d = arb.decide(POLICY, still(twist=np.full(6, 0.05)), now_s=0.1 * t)  # inside dead band
        assert d.acted_by == ActedBy.POLICY
        np.testing.assert_array_equal(d.action, POLICY)


def test_motion_takes_over_at_once_and_releases_after_the_quiet_time() -> None:
    arb = Arbiter(ArbiterConfig(release_after_s=0.5), ACTION)
    assert arb.decide(POLICY, moving(), now_s=1.0).acted_by == ActedBy.HUMAN
    # at rest but within the quiet time: the person still holds the arm still
    d = arb.decide(POLICY, still(), now_s=1.3)
    assert d.acted_by == ActedBy.HUMAN
    np.testing.assert_array_equal(d.action[:3], 0.0)
    assert arb.decide(POLICY, still(), now_s=1.49).acted_by == ActedBy.HUMAN
    assert arb.decide(POLICY, still(), now_s=1.5).acted_by == ActedBy.POLICY


def test_button_mode_ignores_bumps_and_hold_to_intervene_keeps_control() -> None:
    arb = Arbiter(ArbiterConfig(engage="button", release_after_s=0.25), ACTION)
    assert arb.decide(POLICY, moving(), now_s=0.0).acted_by == ActedBy.POLICY  # a bump
    held = frozenset({HOLD_TO_INTERVENE})
    for t in (0.1, 0.5, 1.0):  # held without motion: the person holds the arm still
        d = arb.decide(POLICY, still(held=held), now_s=t)
        assert d.acted_by == ActedBy.HUMAN
        np.testing.assert_array_equal(d.action[:3], 0.0)
    assert arb.decide(POLICY, still(), now_s=1.125).acted_by == ActedBy.HUMAN  # quiet time
    assert arb.decide(POLICY, still(), now_s=1.25).acted_by == ActedBy.POLICY


def test_motion_mode_ignores_the_button() -> None:
    arb = Arbiter(ArbiterConfig(engage="motion"), ACTION)
    d = arb.decide(POLICY, still(held=frozenset({HOLD_TO_INTERVENE})), now_s=0.0)
    assert d.acted_by == ActedBy.POLICY


def test_toggle_takes_over_and_toggling_again_hands_back_at_once() -> None:
    arb = Arbiter(ArbiterConfig(release_after_s=5.0), ACTION)
    assert arb.decide(POLICY, still(events=(TeleopEvent.INTERVENE,)), 0.0).acted_by == ActedBy.HUMAN
    assert arb.decide(POLICY, still(), 10.0).acted_by == ActedBy.HUMAN  # toggled: no timeout
    d = arb.decide(POLICY, still(events=(TeleopEvent.INTERVENE,)), 10.1)
    assert d.acted_by == ActedBy.POLICY
    assert d.events == ()  # the toggle is the arbiter's own, not passed on


def test_events_pass_through_once_and_pause_toggles() -> None:
    arb = Arbiter(ArbiterConfig(), ACTION)
    d = arb.decide(POLICY, still(events=(TeleopEvent.SUCCESS, TeleopEvent.PAUSE)), 0.0)
    assert d.events == (TeleopEvent.SUCCESS,) and d.paused
    d = arb.decide(POLICY, still(), 0.1)
    assert d.events == () and d.paused
    assert not arb.decide(POLICY, still(events=(TeleopEvent.PAUSE,)), 0.2).paused


def test_deadband_zeroes_small_deflections_and_keeps_full_scale() -> None:
    out = apply_deadband([0.05, -0.1, 0.55, -1.0, 1.0, 0.0], 0.1)
    np.testing.assert_allclose(out, [0.0, 0.0, 0.5, -1.0, 1.0, 0.0])


def test_masked_axes_neither_move_nor_take_over() -> None:
    mask = (True, True, False, True, True, True)
    arb = Arbiter(ArbiterConfig(axis_mask=mask), ActionConfig(rotation="full"))
    policy = np.zeros(7, np.float32)
    assert arb.decide(policy, moving(axis=2), 0.0).acted_by == ActedBy.POLICY
    d = arb.decide(policy, DeviceState(twist=[0.6, 0, 0.9, 0, 0, 0]), 0.1)
    assert d.acted_by == ActedBy.HUMAN
    assert d.action[2] == 0.0 and d.action[0] > 0


def test_axis_scale_scales_the_mapped_action() -> None:
    cfg = ArbiterConfig(axis_scale=(0.5, 1, 1, 1, 1, 1), deadband=0.0)
    a = map_twist([1.0, 1.0, 0, 0, 0, 0], -1.0, cfg, ACTION, None)
    np.testing.assert_allclose(a[:2], [0.5, 1.0])


def test_gripper_stays_until_the_person_changes_it() -> None:
    arb = Arbiter(ArbiterConfig(), ACTION)
    closed = np.array([0, 0, 0, 1.0], np.float32)
    arb.decide(closed, still(gripper=-1.0), 0.0)  # the policy closed; device starts "open"
    d = arb.decide(closed, moving(gripper=-1.0), 0.1)
    assert d.acted_by == ActedBy.HUMAN and d.action[-1] == 1.0  # not dropped
    d = arb.decide(closed, moving(gripper=1.0), 0.2)
    assert d.action[-1] == 1.0
    d = arb.decide(closed, moving(gripper=-1.0), 0.3)  # the person opens it
    assert d.action[-1] == -1.0


def test_a_gripper_command_alone_takes_over() -> None:
    arb = Arbiter(ArbiterConfig(), ACTION)
    assert arb.decide(POLICY, still(gripper=-1.0), 0.0).acted_by == ActedBy.POLICY
    d = arb.decide(POLICY, still(gripper=1.0), 0.1)
    assert d.acted_by == ActedBy.HUMAN and d.action[-1] == 1.0


def test_reset_hands_control_back_to_the_policy() -> None:
    arb = Arbiter(ArbiterConfig(release_after_s=10.0), ACTION)
    arb.decide(POLICY, still(events=(TeleopEvent.INTERVENE,)), 0.0)
    arb.reset()
    assert arb.decide(POLICY, still(), 0.1).acted_by == ActedBy.POLICY


def test_wrong_action_shape_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"needs \(4,\)"):
        Arbiter(ArbiterConfig(), ACTION).decide(np.zeros(3), still(), 0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"engage": "sometimes"},
        {"deadband": 1.0},
        {"release_after_s": -1.0},
        {"axis_scale": (1.0,) * 5},
        {"operator_yaw_rad": math.nan},
    ],
)
def test_invalid_config_names_the_field(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ArbiterConfig(**kwargs)  # type: ignore[arg-type]


# ---- frame mapping: the person's motion means the same in every action frame (SERL PR #38) ----

# The tool pointing down (as the arms here grasp), then turned about base z, then tilted.
DOWN = np.array([0.0, 1.0, 0.0, 0.0])
QUATS = {
    "identity": np.array([1.0, 0.0, 0.0, 0.0]),
    "down": DOWN,
    "down_yawed": quat_mul(quat_from_yaw(0.7), DOWN),
    "tilted": quat_mul(rotvec_to_quat([0.3, -0.2, 0.1]), quat_mul(quat_from_yaw(-1.2), DOWN)),
}


@pytest.mark.parametrize(
    ("frame", "rotation", "quat"),
    list(itertools.product(("base", "ee"), ("none", "yaw", "full"), QUATS)),
)
@pytest.mark.parametrize("operator_yaw", [0.0, math.pi / 2, math.pi])
def test_translation_means_the_same_base_motion_in_every_frame(
    frame: str, rotation: str, quat: str, operator_yaw: float
) -> None:
    action = ActionConfig(frame=frame, rotation=rotation)  # type: ignore[arg-type]
    cfg = ArbiterConfig(operator_yaw_rad=operator_yaw, deadband=0.0)
    twist = np.array([0.5, -0.3, 0.2, 0.0, 0.0, 0.0])
    q = QUATS[quat]
    cmd = decode_action(map_twist(twist, 1.0, cfg, action, q), action, q)
    # operator x (away from the person) is base x turned by the operator's yaw
    expected = quat_rotate(quat_from_yaw(operator_yaw), twist[:3] * action.max_step_m)
    np.testing.assert_allclose(cmd.delta_pos_m, expected, atol=1e-6)
    assert cmd.gripper == 1.0


@pytest.mark.parametrize("frame", ["base", "ee"])
@pytest.mark.parametrize("quat", list(QUATS))
def test_full_rotation_means_the_same_base_rotation_in_every_frame(frame: str, quat: str) -> None:
    action = ActionConfig(frame=frame, rotation="full")  # type: ignore[arg-type]
    cfg = ArbiterConfig(operator_yaw_rad=0.4, deadband=0.0)
    twist = np.array([0.0, 0.0, 0.0, 0.2, -0.4, 0.5])
    q = QUATS[quat]
    cmd = decode_action(map_twist(twist, 0.0, cfg, action, q), action, q)
    expected = quat_rotate(quat_from_yaw(0.4), twist[3:] * action.max_rot_step_rad)
    np.testing.assert_allclose(cmd.delta_rotvec_rad, expected, atol=1e-6)


@pytest.mark.parametrize("frame", ["base", "ee"])
@pytest.mark.parametrize("quat", ["identity", "down", "down_yawed"])
def test_yaw_twist_turns_the_tool_the_way_the_person_turns_in_every_frame(
    frame: str, quat: str
) -> None:
    """Twisting the device counter-clockwise (seen from above) turns the tool counter-clockwise
    about base z, also when the action's yaw is about a tool z that points down."""
    action = ActionConfig(frame=frame, rotation="yaw")  # type: ignore[arg-type]
    q = QUATS[quat]
    cmd = decode_action(map_twist([0, 0, 0, 0, 0, 0.5], 0.0, ArbiterConfig(), action, q), action, q)
    np.testing.assert_allclose(cmd.delta_rotvec_rad, [0, 0, 0.5 * action.max_rot_step_rad],
                               atol=1e-6)  # fmt: skip


def test_no_rotation_layout_drops_the_rotation_and_keeps_translation() -> None:
    a = map_twist([0.4, 0, 0, 0.9, 0.9, 0.9], -1.0, ArbiterConfig(), ACTION, None)
    assert a.shape == (4,)
    np.testing.assert_allclose(a, [0.4, 0, 0, -1.0], atol=1e-6)


# ---- never a mixture -----------------------------------------------------------------------

unit = st.floats(-1.0, 1.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    policy=st.lists(unit, min_size=5, max_size=5),
    ticks=st.lists(
        st.tuples(st.lists(unit, min_size=6, max_size=6), st.booleans(), st.booleans(),
                  st.sampled_from([None, -1.0, 1.0]), st.floats(0.0, 0.4)),
        min_size=1, max_size=12),
    engage=st.sampled_from(["motion", "button", "either"]),
    frame=st.sampled_from(["base", "ee"]),
)  # fmt: skip
def test_output_is_exactly_the_policy_action_or_the_mapped_human_action(
    policy: list[float], ticks: list[tuple], engage: str, frame: str
) -> None:
    action = ActionConfig(frame=frame, rotation="yaw")  # type: ignore[arg-type]
    cfg = ArbiterConfig(engage=engage)  # type: ignore[arg-type]
    arb = Arbiter(cfg, action)
    proposal = np.asarray(policy, np.float32)
    now, q = 0.0, QUATS["down_yawed"]
    for twist, hold, toggle, gripper, dt in ticks:
        now += dt
        state = DeviceState(
            twist=twist, gripper=gripper,
            held=frozenset({HOLD_TO_INTERVENE}) if hold else frozenset(),
            events=(TeleopEvent.INTERVENE,) if toggle else (),
        )  # fmt: skip
        before = arb.last_executed_gripper if arb.human_gripper is None else arb.human_gripper
        d = arb.decide(proposal, state, now, q)
        if d.acted_by == ActedBy.POLICY:
            np.testing.assert_array_equal(d.action, proposal)
        else:
            assert d.acted_by == ActedBy.HUMAN
            grip = arb.human_gripper if arb.human_gripper is not None else before
            human = map_twist(apply_deadband(state.twist, cfg.deadband), grip, cfg, action, q)
            np.testing.assert_array_equal(d.action, human)
