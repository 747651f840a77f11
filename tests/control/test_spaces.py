"""Action space: layout, decode/encode round trips, frames and rotation-vector composition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from handrail.control.spaces import (
    ActionConfig,
    EeCommand,
    decode_action,
    encode_action,
    is_image,
)
from handrail.control.transforms import (
    quat_from_yaw,
    quat_mul,
    quat_normalize,
    quat_rotate,
    rotvec_to_quat,
)

CONFIGS = [
    ActionConfig(frame=frame, rotation=rotation, gripper=gripper)
    for frame in ("base", "ee")
    for rotation in ("none", "yaw", "full")
    for gripper in (True, False)
]
QUATS = arrays(np.float64, 4, elements=st.floats(-1, 1, allow_nan=False, width=64)).filter(
    lambda q: np.linalg.norm(q) > 0.1
)
UNIT = st.floats(-1.0, 1.0, allow_nan=False, width=32)
DOWN = np.array([0.0, 1.0, 0.0, 0.0])  # gripper pointing down


def same_rotation(a: np.ndarray, b: np.ndarray, atol: float = 1e-9) -> bool:
    return bool(np.allclose(a, b, atol=atol) or np.allclose(a, -b, atol=atol))


def test_dims_and_names() -> None:
    assert ActionConfig().names == ("dx", "dy", "dz", "gripper")
    assert ActionConfig(rotation="yaw").names == ("dx", "dy", "dz", "dyaw", "gripper")
    full = ActionConfig(rotation="full", gripper=False)
    assert full.names == ("dx", "dy", "dz", "drx", "dry", "drz")
    for cfg in CONFIGS:
        assert cfg.dim == len(cfg.names)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("frame", "world", "frame must be one of"),
        ("rotation", "euler", "rotation must be one of"),
        ("max_step_m", 0.0, "max_step_m must be a positive finite"),
        ("max_rot_step_rad", float("nan"), "max_rot_step_rad must be a positive finite"),
    ],
)
def test_config_validation_names_the_field(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ActionConfig(**{field: value})


def test_config_coerces_numpy_scalars_and_rejects_non_numbers() -> None:
    cfg = ActionConfig(max_step_m=np.float32(0.5), max_rot_step_rad=1)
    assert type(cfg.max_step_m) is float and cfg.max_step_m == 0.5
    with pytest.raises(TypeError, match="max_step_m must be a number"):
        ActionConfig(max_step_m="0.03")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gripper must be a bool"):
        ActionConfig(gripper=1)  # type: ignore[arg-type]


def test_decode_base_frame_hand_computed() -> None:
    cfg = ActionConfig(rotation="yaw", max_step_m=0.02, max_rot_step_rad=0.1)
    cmd = decode_action([0.5, -1.0, 3.0, -0.5, 0.7], cfg, DOWN)
    np.testing.assert_allclose(cmd.delta_pos_m, [0.01, -0.02, 0.02])  # 3.0 is clipped to 1
    np.testing.assert_allclose(cmd.delta_rotvec_rad, [0, 0, -0.05])
    assert cmd.gripper == pytest.approx(0.7)


def test_decode_ee_frame_gripper_down_flips_y_and_z() -> None:
    # Tool frame of a downward gripper: x_tool = x_base, y_tool = -y_base, z_tool = -z_base.
    cfg = ActionConfig(frame="ee", rotation="yaw", gripper=False)
    cmd = decode_action([1.0, 1.0, 1.0, 1.0], cfg, DOWN)
    np.testing.assert_allclose(cmd.delta_pos_m, [0.03, -0.03, -0.03], atol=1e-15)
    # Yaw is about the tool z axis, which points down: a negative turn about base z.
    np.testing.assert_allclose(cmd.delta_rotvec_rad, [0, 0, -0.2], atol=1e-15)
    assert cmd.gripper == 0.0


def test_full_rotation_norm_is_clipped_not_each_axis() -> None:
    cfg = ActionConfig(rotation="full", gripper=False, max_rot_step_rad=0.2)
    cmd = decode_action([0, 0, 0, 1.0, 1.0, 0.0], cfg, None)
    np.testing.assert_allclose(cmd.delta_rotvec_rad, [0.2 / math.sqrt(2), 0.2 / math.sqrt(2), 0])


def test_rotations_compose_as_rotation_vectors_not_euler() -> None:
    """Applying the decoded rotvec equals one rotation about the combined axis (not r-p-y)."""
    cfg = ActionConfig(rotation="full", gripper=False, max_rot_step_rad=1.0)
    cmd = decode_action([0, 0, 0, 0.6, 0.6, 0.0], cfg, None)
    q = quat_mul(rotvec_to_quat(cmd.delta_rotvec_rad), [1.0, 0, 0, 0])
    axis = np.array([1.0, 1.0, 0.0]) / math.sqrt(2)
    # A rotation about (1, 1, 0) leaves that axis fixed; an x-then-y Euler composition does not.
    np.testing.assert_allclose(quat_rotate(q, axis), axis, atol=1e-12)
    euler = quat_mul(rotvec_to_quat([0, 0.6, 0]), rotvec_to_quat([0.6, 0, 0]))
    assert not np.allclose(quat_rotate(euler, axis), axis, atol=1e-3)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CONFIGS), QUATS, st.lists(UNIT, min_size=7, max_size=7))
def test_ee_frame_increment_is_body_increment(
    cfg: ActionConfig, q: np.ndarray, values: list[float]
) -> None:
    """Left-applying the decoded base rotvec equals right-applying the ee-frame rotation."""
    q = quat_normalize(q)
    action = np.asarray(values[: cfg.dim])
    cmd = decode_action(action, cfg, q)
    base = quat_mul(rotvec_to_quat(cmd.delta_rotvec_rad), q)
    ee_rot = decode_action(action, ActionConfig(**{**cfg.__dict__, "frame": "base"}), None)
    if cfg.frame == "ee":
        body = quat_mul(q, rotvec_to_quat(ee_rot.delta_rotvec_rad))
        np.testing.assert_allclose(cmd.delta_pos_m, quat_rotate(q, ee_rot.delta_pos_m), atol=1e-12)
    else:
        body = quat_mul(rotvec_to_quat(ee_rot.delta_rotvec_rad), q)
    assert same_rotation(base, body)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CONFIGS), QUATS, st.lists(st.floats(-50, 50), min_size=7, max_size=7))
def test_decoded_steps_are_bounded(cfg: ActionConfig, q: np.ndarray, values: list[float]) -> None:
    cmd = decode_action(np.asarray(values[: cfg.dim]), cfg, q)
    # Per axis of the action frame; the base-frame length is the same rotation away.
    assert np.linalg.norm(cmd.delta_pos_m) <= math.sqrt(3) * cfg.max_step_m * (1 + 1e-12)
    assert np.linalg.norm(cmd.delta_rotvec_rad) <= cfg.max_rot_step_rad * (1 + 1e-12)
    assert -1.0 <= cmd.gripper <= 1.0
    if cfg.rotation == "none":
        assert not np.any(cmd.delta_rotvec_rad)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(CONFIGS), QUATS, st.lists(UNIT, min_size=7, max_size=7))
def test_encode_inverts_decode(cfg: ActionConfig, q: np.ndarray, values: list[float]) -> None:
    action = np.asarray(values[: cfg.dim], dtype=np.float32)
    if cfg.rotation == "full":  # decode clips the rotation norm: only norm <= 1 is representable
        rot = action[3:6].astype(np.float64)
        norm = np.linalg.norm(rot)
        action[3:6] = rot / norm * 0.999 if norm > 0.999 else rot
    cmd = decode_action(action, cfg, q)
    encoded = encode_action(cmd, cfg, q)
    assert encoded.dtype == np.float32
    assert encoded.shape == (cfg.dim,)
    np.testing.assert_allclose(encoded, action, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(CONFIGS),
    QUATS,
    arrays(np.float64, 3, elements=st.floats(-1, 1, width=64)),
    arrays(np.float64, 3, elements=st.floats(-3, 3, width=64)),
    st.floats(-5, 5),
)
def test_encode_clips_into_range(
    cfg: ActionConfig, q: np.ndarray, dp: np.ndarray, rv: np.ndarray, grip: float
) -> None:
    encoded = encode_action(EeCommand(dp, rv, grip), cfg, q)
    assert np.all(np.abs(encoded) <= 1.0)
    if cfg.rotation == "full":
        assert np.linalg.norm(encoded[3:6]) <= 1.0 + 1e-6


def test_encode_large_rotation_keeps_axis_and_yaw_keeps_only_z() -> None:
    full = ActionConfig(rotation="full", gripper=False, max_rot_step_rad=0.1)
    enc = encode_action(EeCommand(np.zeros(3), np.array([0.0, 3.0, 4.0])), full, None)
    np.testing.assert_allclose(enc[3:], [0.0, 0.6, 0.8], atol=1e-7)
    yaw = ActionConfig(frame="ee", rotation="yaw", gripper=True, max_rot_step_rad=0.2)
    cmd = EeCommand(np.zeros(3), np.array([0.3, 0.2, -0.1]), gripper=-2.0)
    # Base -z is tool +z for a downward gripper.
    np.testing.assert_allclose(encode_action(cmd, yaw, DOWN), [0, 0, 0, 0.5, -1.0], atol=1e-7)


def test_teleop_mapping_through_ee_frame() -> None:
    """A human pushing +x in the base frame maps to the ee-frame action that reproduces it."""
    cfg = ActionConfig(frame="ee", rotation="yaw", gripper=False)
    q = quat_mul(quat_from_yaw(math.pi / 2), DOWN)  # tool x along base +y
    cmd = EeCommand(np.array([0.015, 0.0, 0.0]), np.zeros(3))
    action = encode_action(cmd, cfg, q)
    np.testing.assert_allclose(action, [0.0, 0.5, 0.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(
        decode_action(action, cfg, q).delta_pos_m, cmd.delta_pos_m, atol=1e-9
    )


def test_bad_shapes_get_clear_errors() -> None:
    cfg = ActionConfig(rotation="yaw")
    with pytest.raises(ValueError, match=r"action must have shape \(5,\)"):
        decode_action(np.zeros(4), cfg, DOWN)
    with pytest.raises(ValueError, match="ee_quat"):
        decode_action(np.zeros(5), ActionConfig(frame="ee", rotation="yaw"), None)
    with pytest.raises(ValueError, match="delta_pos_m must have shape"):
        EeCommand(np.zeros(2), np.zeros(3))
    with pytest.raises(TypeError, match="EeCommand"):
        encode_action(np.zeros(5), cfg, DOWN)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_action_entries_become_nan_not_full_scale(bad: float) -> None:
    """An infinite policy output is a fault: it must reach the safety filter as NaN (hold),
    never as a clipped full-scale step."""
    cfg = ActionConfig(rotation="yaw")
    action = np.zeros(cfg.dim)
    action[0] = bad
    cmd = decode_action(action, cfg, None)
    assert np.isnan(cmd.delta_pos_m[0])
    assert np.all(np.isfinite(cmd.delta_pos_m[1:]))


@pytest.mark.parametrize(
    ("shape", "dtype", "expected"),
    [
        ((84, 84, 3), np.uint8, True),
        ((84, 84, 1), "uint8", True),  # grey; dtype given by name, as the store keeps it
        ((84, 84, 4), np.dtype(np.uint8), True),  # RGBA
        ((84, 84, 2), np.uint8, False),  # no image has 2 channels
        ((84, 84, 9), np.uint8, False),  # e.g. 3 stacked RGB frames: not one image
        ((84, 84, 3), np.float32, False),
        ((84, 3), np.uint8, False),
        ((5, 84, 84, 3), np.uint8, False),  # a stack of images is not one observation
        ((7,), np.uint8, False),
    ],
)
def test_is_image(shape: tuple[int, ...], dtype: object, expected: bool) -> None:
    assert is_image(shape, dtype) is expected
