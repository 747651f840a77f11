"""Safety filter: hand-computed cases, validation, and hypothesis properties of the limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from handrail.control.safety import SIM_ARM_LIMITS, SafetyFilter, SafetyLimits, SafetyReport
from handrail.control.transforms import (
    quat_angle,
    quat_conj,
    quat_from_yaw,
    quat_mul,
    quat_normalize,
    quat_rotate,
    rotvec_to_quat,
)

DOWN = np.array([0.0, 1.0, 0.0, 0.0])
BOX = dict(workspace_low_m=(0.2, -0.3, 0.0), workspace_high_m=(0.7, 0.3, 0.5))
TOL = 1e-8


def make_filter(**overrides: object) -> SafetyFilter:
    kwargs: dict[str, object] = dict(BOX, max_step_m=0.5, max_rot_step_rad=3.2)
    kwargs.update(overrides)
    return SafetyFilter(SafetyLimits(**kwargs))  # type: ignore[arg-type]


def same_rotation(a: np.ndarray, b: np.ndarray, atol: float = 1e-9) -> bool:
    return bool(np.allclose(a, b, atol=atol) or np.allclose(a, -b, atol=atol))


def tilt_twist(q: np.ndarray, nominal: np.ndarray) -> tuple[float, float]:
    """Reference computation from the definitions, independent of the filter's internals."""
    tool_z, nominal_z = quat_rotate(q, [0, 0, 1]), quat_rotate(nominal, [0, 0, 1])
    tilt = math.acos(float(np.clip(tool_z @ nominal_z, -1.0, 1.0)))
    rel = quat_mul(quat_conj(nominal), q)  # = swing * twist, twist about z
    twist = 2.0 * math.atan2(rel[3], rel[0])
    twist = (twist + math.pi) % (2 * math.pi) - math.pi
    return tilt, twist


def pose_from(nominal: np.ndarray, tilt: float, axis_rad: float, twist: float) -> np.ndarray:
    swing = rotvec_to_quat([tilt * math.cos(axis_rad), tilt * math.sin(axis_rad), 0.0])
    return quat_mul(nominal, quat_mul(swing, rotvec_to_quat([0.0, 0.0, twist])))


# ---------------------------------------------------------------- hand-computed cases


def test_target_inside_limits_passes_unchanged() -> None:
    f = make_filter()
    tq = quat_mul(quat_from_yaw(0.2), DOWN)
    pos, quat, report = f.filter([0.4, 0.0, 0.2], DOWN, [0.45, 0.1, 0.3], tq)
    np.testing.assert_array_equal(pos, [0.45, 0.1, 0.3])
    assert same_rotation(quat, tq, atol=1e-15)
    assert report == SafetyReport()
    assert not report.any


def test_workspace_clip() -> None:
    pos, _, report = make_filter().filter([0.4, 0.0, 0.2], DOWN, [1.0, -0.5, 0.2], DOWN)
    np.testing.assert_allclose(pos, [0.7, -0.3, 0.2])
    assert report.as_dict() == {**SafetyReport().as_dict(), "workspace_clipped": True}


def test_translation_step_is_shortened_along_the_segment() -> None:
    f = make_filter(max_step_m=0.01)
    pos, _, report = f.filter([0.4, 0.0, 0.2], DOWN, [0.43, 0.04, 0.2], DOWN)
    np.testing.assert_allclose(pos, [0.406, 0.008, 0.2], atol=1e-15)  # (0.03, 0.04) -> 0.01
    assert report.step_clipped and not report.workspace_clipped


def test_rotation_step_is_shortened_along_the_geodesic() -> None:
    f = make_filter(max_rot_step_rad=0.1)
    _, quat, report = f.filter(
        [0.4, 0, 0.2], DOWN, [0.4, 0, 0.2], quat_mul(quat_from_yaw(0.5), DOWN)
    )
    assert same_rotation(quat, quat_mul(quat_from_yaw(0.1), DOWN))
    assert report.rotation_step_clipped
    assert not (report.tilt_clipped or report.yaw_clipped)


def test_tilt_is_clamped_about_the_same_axis() -> None:
    f = make_filter(max_tilt_rad=0.5)
    target = quat_mul(rotvec_to_quat([0.8, 0, 0]), DOWN)  # tool z tipped 0.8 rad about base x
    _, quat, report = f.filter([0.4, 0, 0.2], DOWN, [0.4, 0, 0.2], target)
    assert same_rotation(quat, quat_mul(rotvec_to_quat([0.5, 0, 0]), DOWN))
    assert report.tilt_clipped and not report.yaw_clipped and not report.rotation_step_clipped


def test_twist_about_tool_axis_is_clamped_and_unlimited_at_pi() -> None:
    target = quat_mul(DOWN, rotvec_to_quat([0, 0, 1.2]))  # 1.2 rad about the tool z axis
    _, quat, report = make_filter(max_yaw_rad=1.0).filter(
        [0.4, 0, 0.2], DOWN, [0.4, 0, 0.2], target
    )
    assert same_rotation(quat, quat_mul(DOWN, rotvec_to_quat([0, 0, 1.0])))
    assert report.yaw_clipped and not report.tilt_clipped
    far = quat_mul(DOWN, rotvec_to_quat([0, 0, 3.0]))
    _, quat, report = make_filter().filter([0.4, 0, 0.2], DOWN, [0.4, 0, 0.2], far)
    assert same_rotation(quat, far) and not report.any


def test_far_target_is_not_amplified_by_the_orientation_clamp() -> None:
    """Tipped far past the tilt limit, the clamped target may be further from current."""
    f = make_filter(max_tilt_rad=0.3)
    current = pose_from(DOWN, 0.3, 0.0, 0.0)
    target = pose_from(DOWN, 2.8, math.pi * 0.9, 1.0)
    _, quat, report = f.filter([0.4, 0, 0.2], current, [0.4, 0, 0.2], target)
    assert quat_angle(quat, current) <= quat_angle(target, current) + 1e-12
    assert tilt_twist(quat, DOWN)[0] <= 0.3 + TOL
    assert report.tilt_clipped


@pytest.mark.parametrize(
    ("current_params", "target_params"),
    [
        ((0.5, -0.2, 0.6), (0.5, -0.7, -0.5)),  # clamping the step's end is enough
        ((0.5, 0.5, -0.5), (0.49, 1.1, 0.4)),  # clamping overshoots: the step is bisected
    ],
)
def test_geodesic_bulge_is_clamped_back_without_freezing(
    current_params: tuple[float, float, float], target_params: tuple[float, float, float]
) -> None:
    """Both poses sit on (or near) the tilt limit; the geodesic between them bulges past it."""
    f = make_filter(max_tilt_rad=0.5, max_yaw_rad=0.6, max_rot_step_rad=0.3)
    current = pose_from(DOWN, *current_params)
    target = pose_from(DOWN, *target_params)
    _, quat, report = f.filter([0.4, 0, 0.2], current, [0.4, 0, 0.2], target)
    tilt, twist = tilt_twist(quat, DOWN)
    assert tilt <= 0.5 + TOL and abs(twist) <= 0.6 + TOL
    assert report.rotation_step_clipped and report.tilt_clipped
    assert 0.25 < quat_angle(quat, current) <= 0.3 + TOL  # slides along the limit


@pytest.mark.parametrize(
    ("tpos", "tquat"),
    [
        ([np.nan, 0.3, 0.2], DOWN),
        ([0.4, 0.0, 0.2], [np.inf, 0, 0, 0]),
        ([0.4, 0.0, 0.2], [0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_nonfinite_target_holds_current(tpos: list[float], tquat: object) -> None:
    current = quat_mul(quat_from_yaw(0.1), DOWN)
    pos, quat, report = make_filter().filter([0.4, 0.1, 0.2], current, tpos, tquat)
    np.testing.assert_array_equal(pos, [0.4, 0.1, 0.2])
    assert same_rotation(quat, current, atol=1e-15)
    assert report.nonfinite and report.any
    assert sum(report.as_dict().values()) == 1


def test_nonfinite_target_holds_current_clipped_into_limits() -> None:
    pos, _, report = make_filter().filter([0.9, 0.0, 0.2], DOWN, [np.nan] * 3, DOWN)
    np.testing.assert_allclose(pos, [0.7, 0.0, 0.2])
    assert report.nonfinite and report.workspace_clipped


def test_current_outside_box_steps_from_its_projection() -> None:
    f = make_filter(max_step_m=0.05)
    pos, _, report = f.filter([0.9, 0.0, 0.2], DOWN, [0.2, 0.0, 0.2], DOWN)
    np.testing.assert_allclose(pos, [0.65, 0.0, 0.2])
    assert report.step_clipped and not report.workspace_clipped


def test_nonfinite_current_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="stop the arm"):
        make_filter().filter([np.nan, 0, 0], DOWN, [0.4, 0, 0.2], DOWN)
    with pytest.raises(ValueError, match="target_pos_m must have 3 elements"):
        make_filter().filter([0.4, 0, 0.2], DOWN, [0.4, 0], DOWN)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"workspace_low_m": (0.2, 0.5, 0.0)},
            "axis y: workspace_low_m\\[1\\] = 0.5 must be below",
        ),
        ({"workspace_high_m": (0.7, 0.3)}, "workspace_high_m must be 3 finite"),
        ({"workspace_low_m": (0.2, -0.3, math.nan)}, "workspace_low_m must be 3 finite"),
        ({"max_step_m": 0.0}, "max_step_m must be a positive finite"),
        ({"max_rot_step_rad": math.inf}, "max_rot_step_rad must be a positive finite"),
        ({"nominal_quat": (0.0, 2.0, 0.0, 0.0)}, "nominal_quat must be a unit quaternion"),
        ({"max_tilt_rad": 0.0}, "max_tilt_rad must be a positive finite"),
        ({"max_tilt_rad": 3.5}, "max_tilt_rad must be in \\(0, pi\\]"),
        ({"max_yaw_rad": -1.0}, "max_yaw_rad must be a positive finite"),
        ({"braking_margin_m": 0.25}, "braking_margin_m must be >= 0 and below half the box"),
        ({"braking_margin_m": -0.01}, "braking_margin_m must be >= 0"),
        ({"gripper_max_m": 0.0}, "gripper_max_m must be > 0 m"),
    ],
)
def test_limits_validation_names_the_field(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SafetyLimits(**{**BOX, "max_step_m": 0.1, "max_rot_step_rad": 0.1, **overrides})  # type: ignore[arg-type]


def test_limits_store_floats_and_reject_non_limits() -> None:
    limits = SafetyLimits([0, 0, 0], np.array([1, 1, 1]), np.float32(0.5), 1)  # type: ignore[arg-type]
    assert limits.workspace_low_m == (0.0, 0.0, 0.0)
    assert limits.workspace_high_m == (1.0, 1.0, 1.0)
    assert type(limits.max_step_m) is float and type(limits.max_rot_step_rad) is float
    with pytest.raises(TypeError, match="max_step_m must be a number"):
        SafetyLimits(**BOX, max_step_m="0.1", max_rot_step_rad=0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="workspace_low_m must be 3 numbers"):
        SafetyLimits("012", (1, 1, 1), 0.1, 0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SafetyLimits"):
        SafetyFilter({"max_step_m": 0.1})  # type: ignore[arg-type]


# ---------------------------------------------------------------- properties

UNIT = st.floats(0.0, 1.0)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[SafetyFilter, tuple[np.ndarray, ...]]:
    """Random limits, a current pose inside them, and a target anywhere (often nearby)."""
    low = np.array([draw(st.floats(-1.0, 0.5)) for _ in range(3)])
    high = low + np.array([draw(st.floats(0.02, 1.0)) for _ in range(3)])
    nominal = draw(st.sampled_from([DOWN, None]))
    if nominal is None:
        nominal = quat_normalize(
            [draw(st.floats(-1, 1)) for _ in range(4)] + np.array([1e-3, 0, 0, 0])
        )
    limits = SafetyLimits(
        tuple(low), tuple(high), draw(st.floats(0.001, 0.3)), draw(st.floats(0.01, 1.5)),
        nominal_quat=tuple(nominal), max_tilt_rad=draw(st.floats(0.02, math.pi)),
        max_yaw_rad=draw(st.floats(0.02, 4.0)),
    )  # fmt: skip
    cur_p = low + (high - low) * np.array([draw(UNIT) for _ in range(3)])
    cur_q = pose_from(
        nominal,
        limits.max_tilt_rad * draw(UNIT),
        draw(st.floats(-math.pi, math.pi)),
        min(limits.max_yaw_rad, math.pi) * draw(st.floats(-1.0, 1.0)),
    )
    scale = draw(st.sampled_from([0.02, 0.3, 3.0]))
    tgt_p = cur_p + np.array([draw(st.floats(-1.0, 1.0)) * scale for _ in range(3)])
    rotvec = np.array([draw(st.floats(-1.0, 1.0)) for _ in range(3)]) * scale
    tgt_q = quat_mul(rotvec_to_quat(rotvec), cur_q) * draw(st.sampled_from([1.0, -1.0, 2.5]))
    return SafetyFilter(limits), (cur_p, cur_q, tgt_p, tgt_q)


PROPERTY = settings(max_examples=300, deadline=None)


def assert_inside(f: SafetyFilter, pos: np.ndarray, quat: np.ndarray) -> None:
    lim = f.limits
    assert np.all(pos >= lim.workspace_low_m) and np.all(pos <= lim.workspace_high_m)
    assert abs(np.linalg.norm(quat) - 1.0) < 1e-12
    tilt, twist = tilt_twist(quat, np.asarray(lim.nominal_quat))
    assert tilt <= lim.max_tilt_rad + 1e-7  # acos reference is only ~1e-8 accurate near 0
    assert abs(twist) <= min(lim.max_yaw_rad, math.pi) + TOL


@PROPERTY
@given(scenarios())
def test_output_inside_limits_and_steps(scenario: tuple[SafetyFilter, tuple]) -> None:
    f, (cur_p, cur_q, tgt_p, tgt_q) = scenario
    pos, quat, _ = f.filter(cur_p, cur_q, tgt_p, tgt_q)
    assert_inside(f, pos, quat)
    assert quat @ cur_q >= 0.0  # same hemisphere as the current orientation
    assert np.linalg.norm(pos - cur_p) <= f.limits.max_step_m * (1 + TOL)
    assert quat_angle(quat, cur_q) <= f.limits.max_rot_step_rad * (1 + TOL) + TOL


@PROPERTY
@given(scenarios())
def test_never_amplifies(scenario: tuple[SafetyFilter, tuple]) -> None:
    f, (cur_p, cur_q, tgt_p, tgt_q) = scenario
    pos, quat, _ = f.filter(cur_p, cur_q, tgt_p, tgt_q)
    assert np.linalg.norm(pos - cur_p) <= np.linalg.norm(tgt_p - cur_p) + 1e-12
    assert quat_angle(quat, cur_q) <= quat_angle(tgt_q / np.linalg.norm(tgt_q), cur_q) + 1e-9


@PROPERTY
@given(scenarios())
def test_idempotent(scenario: tuple[SafetyFilter, tuple]) -> None:
    f, (cur_p, cur_q, tgt_p, tgt_q) = scenario
    pos, quat, _ = f.filter(cur_p, cur_q, tgt_p, tgt_q)
    pos2, quat2, report2 = f.filter(cur_p, cur_q, pos, quat)
    np.testing.assert_allclose(pos2, pos, rtol=0, atol=1e-9)
    np.testing.assert_allclose(quat2, quat, rtol=0, atol=1e-9)
    assert not report2.any, report2


@PROPERTY
@given(scenarios())
def test_report_flags_exactly_what_was_clipped(scenario: tuple[SafetyFilter, tuple]) -> None:
    f, (cur_p, cur_q, tgt_p, tgt_q) = scenario
    lim = f.limits
    pos, quat, report = f.filter(cur_p, cur_q, tgt_p, tgt_q)
    tgt_q = tgt_q / np.linalg.norm(tgt_q)
    clipped = np.clip(tgt_p, lim.workspace_low_m, lim.workspace_high_m)
    assert report.workspace_clipped == bool(np.any(clipped != tgt_p))
    step = np.linalg.norm(clipped - cur_p)
    assume(abs(step - lim.max_step_m) > 1e-9)
    assert report.step_clipped == (step > lim.max_step_m)
    if not (report.workspace_clipped or report.step_clipped):
        np.testing.assert_array_equal(pos, tgt_p)
    assert not report.nonfinite
    tilt, twist = tilt_twist(tgt_q, np.asarray(lim.nominal_quat))
    angle = quat_angle(tgt_q, cur_q)
    margin = 1e-6
    if tilt > lim.max_tilt_rad + margin:
        assert report.tilt_clipped
    if abs(twist) > min(lim.max_yaw_rad, math.pi) + margin:
        assert report.yaw_clipped
    if angle < lim.max_rot_step_rad - margin:
        assert not report.rotation_step_clipped
    inside = tilt < lim.max_tilt_rad - margin and abs(twist) < lim.max_yaw_rad - margin
    if inside and angle > lim.max_rot_step_rad + margin:
        assert report.rotation_step_clipped
    if inside and not report.rotation_step_clipped:
        assert not (report.tilt_clipped or report.yaw_clipped)
        assert same_rotation(quat, tgt_q, atol=1e-12)
    if report.rotation_step_clipped and not (report.tilt_clipped or report.yaw_clipped):
        assert quat_angle(quat, cur_q) == pytest.approx(lim.max_rot_step_rad, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.sampled_from(["pos", "quat"]), st.sampled_from([np.nan, np.inf, -np.inf]))
def test_nonfinite_property(scenario: tuple[SafetyFilter, tuple], where: str, bad: float) -> None:
    f, (cur_p, cur_q, tgt_p, tgt_q) = scenario
    if where == "pos":
        tgt_p = tgt_p.copy()
        tgt_p[1] = bad
    else:
        tgt_q = tgt_q.copy()
        tgt_q[2] = bad
    pos, quat, report = f.filter(cur_p, cur_q, tgt_p, tgt_q)
    np.testing.assert_array_equal(pos, cur_p)
    assert same_rotation(quat, cur_q, atol=1e-12)
    assert report.nonfinite


# ---------------------------------------------------------------- the braking margin


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.floats(0.0, 0.009))
def test_targets_stay_in_the_box_shrunk_by_the_braking_margin(
    scenario: tuple[SafetyFilter, tuple], margin: float
) -> None:
    f, (cur_p, cur_q, tgt_p, tgt_q) = scenario
    limits = SafetyLimits(**{**f.limits.__dict__, "braking_margin_m": margin})
    pos, _, _ = SafetyFilter(limits).filter(cur_p, cur_q, tgt_p, tgt_q)
    assert np.all(pos >= np.array(limits.workspace_low_m) + margin - 1e-12)
    assert np.all(pos <= np.array(limits.workspace_high_m) - margin + 1e-12)
    assert limits.target_low_m == tuple(np.array(limits.workspace_low_m) + margin)


# ---------------------------------------------------------------- the simulated arm's limits


def _reach_error_m(target_m: np.ndarray, restarts: int = 8) -> float:
    """How far the sim arm's tool centre point stays from ``target_m`` with the gripper pointing
    down (damped least-squares inverse kinematics within the joint limits, from home, then from
    random postures)."""
    import mujoco

    from handrail.sim import arm

    model = arm.load_model()
    data = mujoco.MjData(model)
    tcp = model.site(arm.TCP_SITE).id
    low, high = np.array(arm.JOINT_LIMITS_RAD).T
    jac_p, jac_r = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    rng = np.random.default_rng(0)
    best = math.inf
    for attempt in range(restarts + 1):
        q = np.array(arm.HOME_QPOS_RAD) if attempt == 0 else rng.uniform(low, high)
        for _ in range(400):
            data.qpos[:7] = q
            mujoco.mj_kinematics(model, data)
            mujoco.mj_comPos(model, data)
            err_p = target_m - data.site_xpos[tcp]
            now = np.zeros(4)
            mujoco.mju_mat2Quat(now, data.site_xmat[tcp])
            err_r = np.zeros(3)
            mujoco.mju_quat2Vel(err_r, quat_mul(DOWN, quat_conj(now)), 1.0)
            if np.linalg.norm(err_p) < 1e-4 and np.linalg.norm(err_r) < 1e-3:
                break
            mujoco.mj_jacSite(model, data, jac_p, jac_r, tcp)
            jac = np.vstack([jac_p[:, :7], jac_r[:, :7]])
            err = np.concatenate([err_p, err_r])
            q = np.clip(
                q + 0.5 * jac.T @ np.linalg.solve(jac @ jac.T + 1e-3 * np.eye(6), err), low, high
            )
        best = min(best, float(np.linalg.norm(err_p)))
        if best < 1e-3:
            break
    return best


def test_every_corner_of_the_sim_arms_box_is_reachable_with_the_gripper_down() -> None:
    # Issue 36: the box went to (0.75, 0.35, 0.6), 180 mm out of reach with the gripper down;
    # the arm strained towards such corners and left the box by up to 92 mm.
    low, high = SIM_ARM_LIMITS.workspace_low_m, SIM_ARM_LIMITS.workspace_high_m
    corners = [np.array([x, y, z]) for x in (low[0], high[0]) for y in (low[1], high[1])
               for z in (low[2], high[2])]  # fmt: skip
    errors = {tuple(c): _reach_error_m(c) for c in corners}
    assert max(errors.values()) < 0.002, errors


def test_the_sim_arms_target_box_holds_the_homes_and_the_gripper_range_is_the_sim_grippers() -> (
    None
):
    from handrail.control.reset import ResetConfig
    from handrail.sim import arm

    low, high = np.array(SIM_ARM_LIMITS.target_low_m), np.array(SIM_ARM_LIMITS.target_high_m)
    home = np.array(ResetConfig().home_pos_m)
    offset = 0.02  # launch/ros/sim_robot.yaml's home_offset_m
    assert np.all(home - offset >= low) and np.all(home + offset <= high)
    assert SIM_ARM_LIMITS.braking_margin_m > 0
    assert SIM_ARM_LIMITS.gripper_max_m == 2 * arm.FINGER_MAX_M
