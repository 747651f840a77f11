"""The frozen image encoder: keypoints, training, its file, and the env and episodes it encodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from handrail.demos import FieldSpec, create_store, open_store
from handrail.learners.agents.encoder import (
    FEATURES_KEY,
    CameraFeatures,
    EncoderConfig,
    ImageEncoder,
    KeypointEncoder,
    SpatialSoftmax,
    encode_episodes,
    encoded_policy,
    frames_and_actions,
    save_encoder,
    train_encoder,
)

SIZE = 24
TINY = EncoderConfig(image_size=SIZE, channels=(8, 8), strides=(2, 1), keypoints=4,
                     target_size=12, steps=400, eval_every=100, batch_size=32, lr=3e-3)  # fmt: skip


def frame(pos: np.ndarray, rng: np.random.Generator, size: int = SIZE) -> np.ndarray:
    """A dim noisy background with a bright square whose top-left corner is ``pos``."""
    img = rng.integers(0, 40, (size, size, 3), dtype=np.uint8)
    r, c = int(pos[0]), int(pos[1])
    img[r : r + 4, c : c + 4] = (250, 40, 40)
    return img


def write_store(path: Path, episodes: int, seed: int, size: int = SIZE) -> Path:
    """Episodes of 8 steps in which the square moves; the action is the square's next move
    and the state its position (what the test probes the features for)."""
    rng = np.random.default_rng(seed)
    fields = [FieldSpec("front", "uint8", (size, size, 3)), FieldSpec("pos", "float32", (2,))]
    with create_store(path, kind="demo", obs_fields=fields, action_dim=2, control_dt_s=0.1,
                      task="toy", durable=False) as w:  # fmt: skip
        for e in range(episodes):
            w.begin_episode(seed=e)
            pos = rng.integers(0, size - 4, 2).astype(np.float32)
            for t in range(8):
                move = rng.integers(-2, 3, 2).astype(np.float32)
                obs = {"front": frame(pos, rng, size), "pos": pos.copy()}
                w.add_step(obs=obs, action=move, reward=0.0, terminated=False, truncated=t == 7)
                pos = np.clip(pos + move, 0, size - 4)
            w.end_episode(final_obs={"front": frame(pos, rng, size), "pos": pos.copy()},
                          success=True)  # fmt: skip
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An encoder trained once for the module (its folder) and held-out episodes."""
    root = tmp_path_factory.mktemp("encoder")
    data = frames_and_actions([open_store(write_store(root / "train", 40, seed=0))], TINY)
    result = train_encoder(data, TINY)
    folder = save_encoder(root / "enc", result, TINY, data)
    return folder, write_store(root / "heldout", 10, seed=1)


def _r2(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> float:
    """Held-out R^2 of a ridge regression, averaged over the targets."""
    a = np.c_[x_train, np.ones(len(x_train))]
    w = np.linalg.solve(a.T @ a + 1e-3 * np.eye(a.shape[1]), a.T @ y_train)
    pred = np.c_[x_test, np.ones(len(x_test))] @ w
    return float(
        np.mean(1 - ((pred - y_test) ** 2).sum(0) / ((y_test - y_test.mean(0)) ** 2).sum(0))
    )


def test_spatial_softmax_finds_a_peak() -> None:
    maps = np.zeros((1, 9, 9, 2), np.float32)
    maps[0, 0, 8, 0] = 50.0  # top right: x = 1, y = -1
    maps[0, 4, 4, 1] = 50.0  # centre
    soft = SpatialSoftmax()
    params = soft.init(jax.random.PRNGKey(0), jnp.asarray(maps))
    out = np.asarray(soft.apply(params, jnp.asarray(maps)))
    np.testing.assert_allclose(out[0], [1.0, 0.0, -1.0, 0.0], atol=1e-3)  # (x0, x1, y0, y1)


def test_keypoints_are_bounded_and_shaped() -> None:
    net = KeypointEncoder((8,), (2,), keypoints=5)
    frames = jnp.asarray(np.random.default_rng(0).integers(0, 255, (3, 2, 16, 16, 3), np.uint8))
    params = net.init(jax.random.PRNGKey(0), frames)
    out = np.asarray(net.apply(params, frames))
    assert out.shape == (3, 2, 10)
    assert np.all(np.abs(out) <= 1.0)


def test_the_trained_keypoints_say_where_the_square_is(trained: tuple[Path, Path]) -> None:
    folder, heldout = trained
    encoder = ImageEncoder(folder)
    train = open_store(folder.parent / "train").load()
    test = open_store(heldout).load()
    r2 = _r2(encoder.features(train.obs), train.obs["pos"], encoder.features(test.obs),
             test.obs["pos"])  # fmt: skip
    assert r2 > 0.8, r2
    history = encoder.meta["history"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]


def test_features_of_a_batch_equal_those_of_each_frame_and_any_size_of_the_aspect_works(
    trained: tuple[Path, Path],
) -> None:
    folder, heldout = trained
    encoder = ImageEncoder(folder)
    obs = open_store(heldout).load().obs
    batch = encoder.features(obs)
    assert batch.shape == (len(obs["front"]), 8) and batch.dtype == np.float32
    np.testing.assert_allclose(encoder.features({"front": obs["front"][3]}), batch[3], atol=1e-5)
    bigger = np.repeat(np.repeat(obs["front"][:4], 2, axis=1), 2, axis=2)  # 48x48: resized once
    np.testing.assert_allclose(encoder.features({"front": bigger}), batch[:4], atol=1e-5)


def test_bad_inputs_get_one_line(trained: tuple[Path, Path], tmp_path: Path) -> None:
    folder, _ = trained
    encoder = ImageEncoder(folder)
    with pytest.raises(
        ValueError, match=r"reads cameras \['front'\] but the env lacks \['front'\]"
    ):
        encoder.check_keys({"wrist": (24, 24, 3)}, "the env")
    with pytest.raises(ValueError, match=r"gives \(24, 32, 3\) frames.*trained on \(24, 24, 3\)"):
        encoder.check_keys({"front": (24, 32, 3)}, "the env")
    with pytest.raises(ValueError, match=r"gives \(24, 24, 1\) frames"):
        encoder.check_keys({"front": (24, 24, 1)}, "the env")
    with pytest.raises(ValueError, match="frames must be uint8"):
        encoder.features({"front": np.zeros((24, 24, 3), np.float32)})
    with pytest.raises(ValueError, match="is not a handrail image encoder"):
        ImageEncoder(tmp_path)
    fields = [FieldSpec("pos", "float32", (2,))]
    with create_store(tmp_path / "nocam", kind="demo", obs_fields=fields, action_dim=2,
                      control_dt_s=0.1, task="toy", durable=False):  # fmt: skip
        pass
    with pytest.raises(ValueError, match="has no camera field"):
        frames_and_actions([open_store(tmp_path / "nocam")], TINY)
    with pytest.raises(ValueError, match=r"--encoder\.keypoints 0"):
        EncoderConfig(keypoints=0)


class Camera(gym.Env):
    """A toy env: a camera and a state key."""

    def __init__(self, size: int = SIZE) -> None:
        self.observation_space = gym.spaces.Dict({
            "front": gym.spaces.Box(0, 255, (size, size, 3), np.uint8),
            "pos": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        })  # fmt: skip
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.size = size

    def _obs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.t)
        return {"front": frame(np.array([self.t, 3]), rng, self.size),
                "pos": np.array([self.t, 3], np.float32)}  # fmt: skip

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        self.t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple:
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 5, {}


def test_the_env_and_the_episodes_get_the_same_features(trained: tuple[Path, Path]) -> None:
    folder, heldout = trained
    encoder = ImageEncoder(folder)
    env = CameraFeatures(Camera(), encoder)
    assert set(env.observation_space.spaces) == {"pos", FEATURES_KEY}
    assert env.observation_space[FEATURES_KEY].shape == (8,)
    obs, _ = env.reset()
    raw, _ = Camera().reset()
    np.testing.assert_allclose(obs[FEATURES_KEY], encoder.features(raw), atol=1e-6)
    assert env.observation_space.contains(obs)
    data = open_store(heldout).load()
    coded = encode_episodes(data, encoder)
    assert "front" not in coded.obs and "front" not in coded.final_obs
    np.testing.assert_allclose(coded.obs[FEATURES_KEY], encoder.features(data.obs), atol=1e-6)
    assert coded.final_obs[FEATURES_KEY].shape == (data.num_episodes, 8)
    seen = []
    act = encoded_policy(lambda o: seen.append(sorted(o)) or 0, encoder)
    act(raw)
    assert seen == [sorted(["pos", FEATURES_KEY])]
    with pytest.raises(ValueError, match=r"sees cameras \['front'\].*has \['pos'\]: render"):
        act({"pos": raw["pos"]})
    stripped = dataclasses.replace(data, obs={"pos": data.obs["pos"]})
    with pytest.raises(ValueError, match=r"the demonstrations lacks \['front'\]"):
        encode_episodes(stripped, encoder)
