"""Quaternion helpers: hand-computed cases, round trips and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from handrail.control.transforms import (
    mat_to_quat,
    quat_angle,
    quat_conj,
    quat_from_yaw,
    quat_mul,
    quat_mul_floats,
    quat_normalize,
    quat_rotate,
    quat_to_mat,
    quat_to_rotvec,
    rotvec_to_quat,
    rotvec_to_quat_floats,
    yaw_between,
    yaw_from_quat,
)

FLOATS = st.floats(-1.0, 1.0, allow_nan=False, width=64)
QUATS = arrays(np.float64, 4, elements=FLOATS).filter(lambda q: np.linalg.norm(q) > 0.1)
VECS = arrays(np.float64, 3, elements=st.floats(-10.0, 10.0, allow_nan=False, width=64))
# Rotation vectors with angle below pi (where the shortest-rotation log is unique).
ROTVECS = arrays(np.float64, 3, elements=FLOATS).map(lambda v: v * 1.8)
ROT_SETTINGS = settings(max_examples=60, deadline=None)


def same_rotation(a: np.ndarray, b: np.ndarray, atol: float = 1e-9) -> bool:
    """q and -q are the same rotation."""
    return bool(np.allclose(a, b, atol=atol) or np.allclose(a, -b, atol=atol))


def test_quat_mul_hand_computed() -> None:
    qx = rotvec_to_quat([math.pi / 2, 0, 0])
    qz = rotvec_to_quat([0, 0, math.pi / 2])
    # 90 deg about x, then 90 deg about z (base frame): x axis -> y axis, z axis -> x axis.
    q = quat_mul(qz, qx)
    np.testing.assert_allclose(quat_rotate(q, [1, 0, 0]), [0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(quat_rotate(q, [0, 0, 1]), [1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(quat_mul([1, 0, 0, 0], [0, 1, 0, 0]), [0, 1, 0, 0])
    np.testing.assert_allclose(quat_mul([0, 1, 0, 0], [0, 0, 1, 0]), [0, 0, 0, 1])  # i*j = k


def test_quat_to_mat_hand_computed() -> None:
    np.testing.assert_allclose(quat_to_mat([0, 1, 0, 0]), np.diag([1.0, -1.0, -1.0]), atol=1e-15)
    c = math.cos(0.3)
    s = math.sin(0.3)
    expected = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    np.testing.assert_allclose(quat_to_mat(quat_from_yaw(0.3)), expected, atol=1e-15)


def test_rotvec_hand_computed_and_small_angles() -> None:
    np.testing.assert_allclose(rotvec_to_quat([0, 0, math.pi]), [0, 0, 0, 1], atol=1e-15)
    np.testing.assert_allclose(rotvec_to_quat([0, 0, 0]), [1, 0, 0, 0])
    tiny = np.array([1e-9, -2e-9, 3e-9])
    np.testing.assert_allclose(quat_to_rotvec(rotvec_to_quat(tiny)), tiny, rtol=1e-12)
    np.testing.assert_allclose(quat_to_rotvec([1, 0, 0, 0]), [0, 0, 0])


def test_quat_to_rotvec_is_shortest() -> None:
    # A 270 deg turn about z is the -90 deg turn.
    q = rotvec_to_quat([0, 0, 1.5 * math.pi])
    np.testing.assert_allclose(quat_to_rotvec(q), [0, 0, -0.5 * math.pi], atol=1e-12)
    np.testing.assert_allclose(quat_to_rotvec(-q), [0, 0, -0.5 * math.pi], atol=1e-12)


@ROT_SETTINGS
@given(ROTVECS)
def test_rotvec_round_trip(v: np.ndarray) -> None:
    q = rotvec_to_quat(v)
    assert abs(np.linalg.norm(q) - 1.0) < 1e-12
    np.testing.assert_allclose(quat_to_rotvec(q), v, atol=1e-9)
    assert 0.0 <= np.linalg.norm(quat_to_rotvec(-q)) <= math.pi + 1e-12


@ROT_SETTINGS
@given(QUATS)
def test_mat_round_trip(q: np.ndarray) -> None:
    q = quat_normalize(q)
    m = quat_to_mat(q)
    np.testing.assert_allclose(m @ m.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(m) == pytest.approx(1.0)
    q2 = mat_to_quat(m)
    assert q2[0] >= 0
    assert same_rotation(q2, q)


def test_mat_to_quat_half_turns() -> None:
    for axis in np.eye(3):
        q = rotvec_to_quat(axis * math.pi)
        assert same_rotation(mat_to_quat(quat_to_mat(q)), q, atol=1e-12)


@ROT_SETTINGS
@given(QUATS, QUATS, VECS)
def test_mul_composes_rotations(a: np.ndarray, b: np.ndarray, v: np.ndarray) -> None:
    a, b = quat_normalize(a), quat_normalize(b)
    np.testing.assert_allclose(
        quat_to_mat(quat_mul(a, b)), quat_to_mat(a) @ quat_to_mat(b), atol=1e-12
    )
    np.testing.assert_allclose(quat_rotate(a, v), quat_to_mat(a) @ v, atol=1e-9)
    np.testing.assert_allclose(quat_mul(a, quat_conj(a)), [1, 0, 0, 0], atol=1e-12)


@ROT_SETTINGS
@given(QUATS, ROTVECS)
def test_body_increment_equals_rotated_base_increment(q: np.ndarray, v: np.ndarray) -> None:
    """The identity decode_action relies on: rotvec_to_quat(R v) * q == q * rotvec_to_quat(v)."""
    q = quat_normalize(q)
    left = quat_mul(rotvec_to_quat(quat_rotate(q, v)), q)
    right = quat_mul(q, rotvec_to_quat(v))
    assert same_rotation(left, right)


@ROT_SETTINGS
@given(QUATS, QUATS)
def test_quat_angle(a: np.ndarray, b: np.ndarray) -> None:
    a, b = quat_normalize(a), quat_normalize(b)
    angle = quat_angle(a, b)
    assert 0.0 <= angle <= math.pi + 1e-12
    assert angle == pytest.approx(quat_angle(b, -a), abs=1e-9)
    rel = quat_to_rotvec(quat_mul(b, quat_conj(a)))
    assert angle == pytest.approx(np.linalg.norm(rel), abs=1e-9)


def test_quat_angle_hand_computed() -> None:
    assert quat_angle(quat_from_yaw(0.1), quat_from_yaw(-0.2)) == pytest.approx(0.3)
    assert quat_angle([1, 0, 0, 0], [0, 1, 0, 0]) == pytest.approx(math.pi)


@pytest.mark.parametrize("yaw", [-3.0, -1.0, 0.0, 0.5, 3.1])
def test_yaw_round_trip_including_gripper_down(yaw: float) -> None:
    assert yaw_from_quat(quat_from_yaw(yaw)) == pytest.approx(yaw)
    down = quat_mul(quat_from_yaw(yaw), [0, 1, 0, 0])  # pointing down, then yawed about base z
    assert yaw_from_quat(down) == pytest.approx(yaw)


@pytest.mark.parametrize(
    ("to_yaw", "from_yaw", "period", "expected"),
    [(0.3, 0.1, 2 * np.pi, 0.2),
     (3.0, -3.0, 2 * np.pi, 6.0 - 2 * np.pi),  # the short way round, not 6 rad
     (1.2, 0.0, np.pi / 2, 1.2 - np.pi / 2),  # a square part: a quarter turn less is the same
     (-0.7, 0.2, np.pi / 2, -0.9 + np.pi / 2),
     (0.1, 0.1 + np.pi / 2, np.pi / 2, 0.0)],
)  # fmt: skip
def test_yaw_between_wraps_into_half_a_period_either_way(
    to_yaw: float, from_yaw: float, period: float, expected: float
) -> None:
    down = np.array([0.0, 1.0, 0.0, 0.0])  # a gripper pointing down, as the peg is held
    to_q, from_q = quat_mul(quat_from_yaw(to_yaw), down), quat_mul(quat_from_yaw(from_yaw), down)
    turn = yaw_between(to_q, from_q, period)
    assert turn == pytest.approx(expected, abs=1e-9)
    assert -period / 2 <= turn < period / 2


def test_single_fast_paths_match_batched_paths() -> None:
    rng = np.random.default_rng(1)
    q = quat_normalize(rng.normal(size=(64, 4)))
    q[:8, 0] = -np.abs(q[:8, 0])  # negative w: the shortest-rotation flip
    v = rng.normal(size=(64, 3)) * rng.choice([1e-9, 0.1, 1.0, 3.1], size=(64, 1))
    batched = {
        "mul": quat_mul(q, q[::-1]),
        "rotate": quat_rotate(q, v),
        "to_quat": rotvec_to_quat(v),
        "to_rotvec": quat_to_rotvec(q),
    }
    for i in range(64):
        np.testing.assert_allclose(quat_mul(q[i], q[63 - i]), batched["mul"][i], atol=1e-15)
        np.testing.assert_allclose(quat_rotate(q[i], v[i]), batched["rotate"][i], atol=1e-14)
        np.testing.assert_allclose(rotvec_to_quat(v[i]), batched["to_quat"][i], atol=1e-15)
        np.testing.assert_allclose(quat_to_rotvec(q[i]), batched["to_rotvec"][i], atol=1e-14)


def test_batches_broadcast() -> None:
    rng = np.random.default_rng(0)
    q = quat_normalize(rng.normal(size=(5, 4)))
    v = rng.normal(size=(5, 3))
    batch = quat_rotate(q, v)
    assert batch.shape == (5, 3)
    np.testing.assert_allclose(batch[2], quat_rotate(q[2], v[2]))
    assert quat_to_mat(q).shape == (5, 3, 3)
    assert same_rotation(mat_to_quat(quat_to_mat(q))[3], q[3])
    np.testing.assert_allclose(quat_to_rotvec(rotvec_to_quat(v * 0.3)), v * 0.3, atol=1e-12)
    assert quat_from_yaw(np.zeros(5)).shape == (5, 4)


def test_bad_input_gets_clear_errors() -> None:
    with pytest.raises(ValueError, match="non-zero norm"):
        quat_normalize([0, 0, 0, 0])
    with pytest.raises(ValueError, match="non-zero quaternion"):
        quat_to_rotvec([0, 0, 0, 0])
    with pytest.raises(ValueError, match="non-zero quaternions"):
        quat_to_rotvec(np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"q must have shape \(\.\.\., 4\)"):
        quat_to_rotvec([1, 0, 0])
    with pytest.raises(ValueError, match=r"m must have shape"):
        mat_to_quat(np.eye(4))


def test_float_helpers_match_the_batched_numpy_path() -> None:
    """The plain-float helpers (used by the safety filter and the sim step) agree with the
    vectorised code path, including the small-angle series."""
    rng = np.random.default_rng(4)
    for scale in (1e-9, 1e-3, 0.3, 3.0):
        v = rng.normal(size=3) * scale
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        ref = quat_mul(rotvec_to_quat(v[None]), q[None])[0]  # (1, ...) takes the batched path
        got = quat_mul_floats(rotvec_to_quat_floats(*v.tolist()), tuple(q.tolist()))
        np.testing.assert_allclose(got, ref, atol=1e-15)
