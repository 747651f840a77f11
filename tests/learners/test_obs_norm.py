"""Observation normalisation and the differences the demonstrations bring together: fitted once,
frozen, saved bit for bit, used wherever the policy runs, and bad statistics named in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from handrail.control.base_policy import BASE_ACTION_KEY
from handrail.control.step import Step
from handrail.learners import obs_norm
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_policy,
    save_checkpoint,
)
from handrail.learners.learner import Learner, LoopConfig
from handrail.learners.specs import ActionSpec, ObsSpec

SPEC = ObsSpec(("joints", "gripper_ticks"), ((2,), (1,)))
CONFIG = SACConfig(hidden_dims=(16,), num_critics=2, utd=2, batch_size=16)


def rows(n: int = 200, seed: int = 0) -> np.ndarray:
    """Joints in radians beside a gripper encoder in the hundreds."""
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.normal(0.1, 0.05, n), rng.normal(-1.0, 0.3, n),
                            rng.uniform(300, 800, n)]).astype(np.float32)  # fmt: skip


def test_fit_centres_every_column_and_gives_every_key_the_same_weight() -> None:
    data = rows()
    norm = obs_norm.fit(SPEC, data)
    out = np.asarray(obs_norm.apply(norm, data))
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-4)
    joints, ticks = out[:, :2], out[:, 2]
    share = 1.5  # each key's variance: the mean number of columns per key
    assert np.sum(joints.var(axis=0)) == pytest.approx(share, rel=1e-3)
    assert ticks.var() == pytest.approx(share, rel=1e-3)  # the encoder in hundreds, too
    ratio = data[:, 1].std() / data[:, 0].std()  # inside a key the proportions stay
    assert joints[:, 1].std() / joints[:, 0].std() == pytest.approx(ratio, rel=1e-3)
    outlier = np.array([[0.1, -1.0, 1e9]], np.float32)  # a glitching encoder
    clipped = float(np.asarray(obs_norm.apply(norm, outlier))[0, 2])
    assert clipped == pytest.approx(obs_norm.BOUND * np.sqrt(share))  # 10 of its spreads


def test_a_column_that_barely_moves_is_not_blown_up() -> None:
    data = rows()
    data[:, 0] = 0.1 + 1e-7 * np.arange(len(data))  # a resting object's height
    out = np.asarray(obs_norm.apply(obs_norm.fit(SPEC, data), data))
    assert out[:, 0].std() < 1e-4 and out[:, 1].var() == pytest.approx(1.5, rel=1e-3)


def test_a_residuals_base_action_is_left_as_it_is() -> None:
    spec = ObsSpec(("x", BASE_ACTION_KEY), ((1,), (2,)))
    data = np.random.default_rng(0).uniform(-1, 1, (50, 3)).astype(np.float32) * [100, 1, 1]
    norm = obs_norm.fit(spec, data)
    out = np.asarray(obs_norm.apply(norm, data))
    np.testing.assert_array_equal(out[:, 1:], data[:, 1:])
    assert abs(float(out[:, 0].std()) - 1.0) < 1e-3


def test_a_nan_column_is_named_in_one_line() -> None:
    data = rows()
    data[7, 2] = np.nan
    with pytest.raises(obs_norm.ObsNormError) as err:
        obs_norm.fit(SPEC, data)
    message = str(err.value)
    assert "'gripper_ticks'" in message and "column 0" in message and "200 rows" in message
    assert "--ignore-obs-keys gripper_ticks" in message and "\n" not in message


def test_a_constant_key_is_named_with_what_to_do() -> None:
    data = rows()
    data[:, 2] = 512.0  # an encoder that never moved
    with pytest.raises(obs_norm.ObsNormError) as err:
        obs_norm.fit(SPEC, data)
    message = str(err.value)
    assert "'gripper_ticks' is constant" in message
    assert "--ignore-obs-keys gripper_ticks" in message and "--loop.no-normalize-obs" in message


def demos(episodes: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Episodes in which a hand (columns 0, 1) goes to an object (columns 2, 3) placed at random;
    column 4 is a speed that always ends at 0 and column 5 a joint that never moves."""
    rng = np.random.default_rng(seed)
    obs, first, final = [], [], []
    for _ in range(episodes):
        target = rng.uniform(0.3, 0.7, 2)
        hand = np.array([0.0, 0.0])
        for t in range(11):
            frac = t / 10
            pos = hand + frac * (target - hand)
            speed = 0.0 if t == 10 else rng.uniform(0.5, 1.0)
            obs.append([*pos, *target, speed, 0.25])
            first.append(t == 0)
            final.append(t == 10)
    return np.asarray(obs, np.float32), np.asarray(first), np.asarray(final)


def test_the_columns_the_demonstrations_bring_together_are_found() -> None:
    spec = ObsSpec(("hand_m", "object_m", "speed", "joint"), ((2,), (2,), (1,), (1,)))
    data, first, final = demos()
    pairs = obs_norm.meeting_pairs(spec, data, first, final)
    assert pairs == ((0, 2), (1, 3))
    assert obs_norm.pair_names(spec, pairs) == ["hand_m[0]-object_m[0]", "hand_m[1]-object_m[1]"]
    extended = obs_norm.extend(data, pairs)
    np.testing.assert_array_equal(extended[:, 6:], data[:, [0, 1]] - data[:, [2, 3]])
    assert obs_norm.input_spec(spec, pairs).keys[-1] == obs_norm.RELATIVE_KEY


def test_columns_that_meet_in_the_same_place_every_time_are_not_a_pair() -> None:
    spec = ObsSpec(("hand_m", "object_m", "speed", "joint"), ((2,), (2,), (1,), (1,)))
    data, first, final = demos()
    data[:, 2:4] = 0.5  # the object is always in the same place
    assert obs_norm.meeting_pairs(spec, data, first, final) == ()


def scaled_step(t: int, done: bool = False) -> Step:
    x = np.array([0.01 * t, 100.0 + 50.0 * np.sin(t)], np.float32)
    return Step(obs={"x": x}, action=np.array([np.sin(t)], np.float32), reward=float(t % 2),
                next_obs={"x": x + 0.01}, terminated=False, truncated=done)  # fmt: skip


SAC_X = SAC(ObsSpec(("x",), ((2,),)), ActionSpec((-1.0,), (1.0,)), CONFIG)


def test_the_learner_fits_at_its_first_update_and_then_keeps_it_frozen() -> None:
    learner = Learner(SAC_X, LoopConfig(warmup_steps=20, buffer_capacity=256), seed=0)
    assert obs_norm.is_identity(jax.device_get(learner.state.obs_norm))
    for t in range(20):
        learner.add(scaled_step(t, done=t % 10 == 9))
    learner.update()
    fitted = jax.device_get(learner.state.obs_norm)
    assert not obs_norm.is_identity(fitted)
    assert 20 < float(fitted["scale"][1]) < 50  # the column in the hundreds, on its own scale
    for t in range(20, 60):
        learner.add(scaled_step(t, done=t % 10 == 9))
        learner.update()
    later = jax.device_get(learner.state.obs_norm)
    for name in ("shift", "scale", "bound"):
        np.testing.assert_array_equal(later[name], fitted[name])


def test_without_normalisation_the_learner_reads_raw_values() -> None:
    loop = LoopConfig(warmup_steps=20, buffer_capacity=256, normalize_obs=False)
    learner = Learner(SAC_X, loop, seed=0)
    for t in range(30):
        learner.add(scaled_step(t, done=t % 10 == 9))
        learner.update()
    assert learner.version > 0 and obs_norm.is_identity(jax.device_get(learner.state.obs_norm))


@pytest.fixture(scope="module")
def fitted_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[SAC, object, Path]:
    spec = ObsSpec(("hand_m", "object_m", "speed", "joint"), ((2,), (2,), (1,), (1,)))
    data, first, final = demos()
    data[:, 5] += np.linspace(0, 0.1, len(data))  # every key moves (a constant one is an error)
    pairs = obs_norm.meeting_pairs(spec, data, first, final)
    sac = SAC(spec, ActionSpec((-1.0, -1.0), (1.0, 1.0)), CONFIG, pairs=pairs)
    state = sac.init(jax.random.PRNGKey(0))
    norm = obs_norm.fit(sac.input_spec, obs_norm.extend(data, pairs))
    state = state.replace(obs_norm=jax.tree_util.tree_map(jax.numpy.asarray, norm))
    path = save_checkpoint(tmp_path_factory.mktemp("norm") / "c", state, CONFIG, spec,
                           sac.action_spec, pairs=pairs)  # fmt: skip
    return sac, state, path


def test_normalisation_and_pairs_are_saved_and_restored_bit_for_bit(fitted_checkpoint) -> None:
    sac, state, path = fitted_checkpoint
    loaded, _ = load_checkpoint(path, sac)
    for name in ("shift", "scale", "bound"):
        saved, restored = np.asarray(state.obs_norm[name]), np.asarray(loaded.obs_norm[name])
        assert saved.tobytes() == restored.tobytes()
    meta = json.loads((path / "config.json").read_text())
    assert meta["pairs"] == [[0, 2], [1, 3]] and set(meta["obs_norm"]) == {
        "hand_m", "object_m", "speed", "joint", obs_norm.RELATIVE_KEY}  # fmt: skip


def test_a_loaded_policy_acts_on_normalised_inputs(fitted_checkpoint) -> None:
    sac, state, path = fitted_checkpoint
    obs = {"hand_m": np.array([0.2, 0.3], np.float32), "object_m": np.array([0.5, 0.6], np.float32),
           "speed": np.array([0.7], np.float32), "joint": np.array([0.3], np.float32)}  # fmt: skip
    policy = load_policy(path)
    expected = sac.action_spec.to_env(
        sac.act(state, sac.obs_spec.flatten(obs), jax.random.PRNGKey(0), True)
    )
    np.testing.assert_array_equal(policy(obs), expected)
    raw = sac.action_spec.to_env(np.asarray(sac.mode_fn(state.actor_params, obs_norm.extend(
        sac.obs_spec.flatten(obs)[None], sac.pairs)))[0])  # fmt: skip
    assert not np.allclose(policy(obs), raw)  # the raw inputs would give another action


def test_a_checkpoint_whose_normalisation_does_not_match_its_keys_is_refused(
    fitted_checkpoint, tmp_path: Path
) -> None:
    sac, _, path = fitted_checkpoint
    copy = tmp_path / "c"
    shutil.copytree(path, copy)
    meta = json.loads((copy / "config.json").read_text())
    meta["obs_norm"]["camera_depth"] = meta["obs_norm"].pop("speed")
    (copy / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="does not match its observation keys"):
        load_checkpoint(copy, sac)


def test_a_checkpoint_from_before_normalisation_loads_as_raw(tmp_path: Path) -> None:
    import flax.serialization

    sac = SAC_X
    state = sac.init(jax.random.PRNGKey(1))
    path = save_checkpoint(tmp_path / "old", state, CONFIG, sac.obs_spec, sac.action_spec)
    raw = flax.serialization.to_state_dict(jax.device_get(state))
    del raw["obs_norm"]  # what an older handrail wrote
    (path / "state.msgpack").write_bytes(flax.serialization.msgpack_serialize(raw))
    loaded, _ = load_checkpoint(path, sac)
    assert obs_norm.is_identity(jax.device_get(loaded.obs_norm))
