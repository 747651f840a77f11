"""ObsSpec / ActionSpec: spaces they accept, flattening, scaling and JSON round trips."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from handrail.learners.specs import ActionSpec, ObsSpec


def _dict_space() -> gym.spaces.Dict:
    return gym.spaces.Dict(
        {
            "proprio": gym.spaces.Box(-1, 1, (3,), np.float32),
            "object": gym.spaces.Box(-1, 1, (2, 2), np.float32),
            "front": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
        }
    )


def test_an_image_key_is_an_error_naming_it_unless_ignored() -> None:
    with pytest.raises(
        TypeError, match=r"'front' is a uint8 camera image.*--ignore-obs-keys front"
    ):
        ObsSpec.from_space(_dict_space())
    with pytest.raises(ValueError, match=r"cannot ignore \['wrist'\]"):
        ObsSpec.from_space(_dict_space(), ignore=("wrist",))


def test_dict_space_flattens_in_key_order() -> None:
    spec = ObsSpec.from_space(_dict_space(), ignore=("front",))
    assert "front" not in spec.keys
    assert spec.dim == 7
    obs = {"proprio": np.array([1, 2, 3]), "object": np.array([[4, 5], [6, 7]]), "front": None}
    flat = spec.flatten({k: v for k, v in obs.items() if k != "front"})
    expected = np.concatenate([obs[k].reshape(-1) for k in spec.keys]).astype(np.float32)
    np.testing.assert_array_equal(flat, expected)
    assert flat.dtype == np.float32


def test_grey_and_rgba_images_are_errors_but_other_uint8_arrays_are_state() -> None:
    space = gym.spaces.Dict(
        {
            "grey": gym.spaces.Box(0, 255, (8, 8, 1), np.uint8),
            "rgba": gym.spaces.Box(0, 255, (8, 8, 4), np.uint8),
            "counts": gym.spaces.Box(0, 255, (2, 2, 2), np.uint8),
        }
    )
    with pytest.raises(TypeError, match="'grey' is a uint8 camera image"):
        ObsSpec.from_space(space)
    spec = ObsSpec.from_space(space, ignore=("grey", "rgba"))
    assert spec.keys == ("counts",) and spec.dim == 8


def test_flatten_batch_keeps_leading_dims() -> None:
    spec = ObsSpec.from_space(_dict_space(), ignore=("front",))
    batch = {"proprio": np.zeros((4, 5, 3)), "object": np.ones((4, 5, 2, 2))}
    flat = spec.flatten(batch)
    assert flat.shape == (4, 5, 7)
    start = 0 if spec.keys[0] == "object" else 3
    np.testing.assert_array_equal(flat[..., start : start + 4], 1.0)
    assert flat.sum() == 4 * 5 * 4


def test_box_space_and_array_input() -> None:
    spec = ObsSpec.from_space(gym.spaces.Box(-np.inf, np.inf, (4,), np.float64))
    assert spec.keys == ("obs",) and spec.dim == 4
    assert spec.flatten(np.arange(4)).shape == (4,)
    assert spec.flatten(np.zeros((3, 4))).shape == (3, 4)
    with pytest.raises(ValueError, match="does not match"):
        spec.flatten(np.zeros(5))


def test_missing_key_is_a_clear_error() -> None:
    spec = ObsSpec.from_space(_dict_space(), ignore=("front",))
    with pytest.raises(ValueError, match="object"):
        spec.flatten({"proprio": np.zeros(3)})


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Discrete(3),
        gym.spaces.Dict({"a": gym.spaces.Discrete(2)}),
        gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
        gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,)),)),
    ],
)
def test_unsupported_observation_spaces_raise_type_error(space: gym.Space) -> None:
    with pytest.raises(TypeError, match=r"supported|image|cannot use"):
        ObsSpec.from_space(space)


def test_discrete_action_space_is_rejected_with_a_clear_message() -> None:
    with pytest.raises(TypeError, match="SAC needs a continuous Box action space; got Discrete"):
        ActionSpec.from_space(gym.spaces.Discrete(3))


def test_unbounded_action_box_is_rejected() -> None:
    with pytest.raises(ValueError, match="finite"):
        ActionSpec.from_space(gym.spaces.Box(-np.inf, np.inf, (2,)))


def test_action_scaling_round_trip() -> None:
    spec = ActionSpec.from_space(gym.spaces.Box(np.array([-2.0, 0.0]), np.array([2.0, 10.0])))
    np.testing.assert_allclose(spec.to_env(np.array([-1.0, 1.0])), [-2.0, 10.0])
    np.testing.assert_allclose(spec.to_env(np.array([0.0, 0.0])), [0.0, 5.0])
    np.testing.assert_allclose(spec.to_env(np.array([5.0, -5.0])), [2.0, 0.0])  # clipped
    a = np.array([[0.3, -0.7], [1.0, -1.0]], np.float32)
    np.testing.assert_allclose(spec.from_env(spec.to_env(a)), a, atol=1e-6)


def test_json_round_trip() -> None:
    obs = ObsSpec.from_space(_dict_space(), ignore=("front",))
    act = ActionSpec((-1.0, -2.0), (1.0, 2.0))
    assert ObsSpec.from_json(obs.to_json()) == obs
    assert ActionSpec.from_json(act.to_json()) == act
    assert ObsSpec.from_json(json.dumps(obs.to_json())) == obs
