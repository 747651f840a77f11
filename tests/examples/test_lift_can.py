"""The LiftCan example: a user's own env, its demonstrator and its demo recording."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from handrail.app.envs import make_env
from handrail.demos import open_store
from handrail.examples import lift_can
from handrail.examples.lift_can import (
    OBS_FIELDS,
    SUCCESS_KEY,
    TASK_ID,
    LiftCanDemonstrator,
    LiftCanEnv,
    main,
    record_demos,
)


@pytest.mark.filterwarnings("ignore:.*infinity")
def test_env_passes_the_gymnasium_env_checker() -> None:
    # The checker warns that the Boxes are unbounded. They are on purpose: a can pushed off the
    # table falls, and joints and fingers pass their soft limits slightly under load.
    env = LiftCanEnv()
    check_env(env, skip_render_check=True)
    env.close()


def test_gymnasium_make_imports_the_module_and_limits_episodes_to_80_steps() -> None:
    env = gymnasium.make(TASK_ID)
    assert isinstance(env.unwrapped, LiftCanEnv)
    assert env.spec is not None and env.spec.max_episode_steps == 80
    assert env.action_space.shape == (4,)
    env.reset(seed=0)
    still = np.array([0.0, 0.0, 0.0, -1.0], np.float32)
    outcomes = [env.step(still)[2:4] for _ in range(80)]
    assert outcomes[-1] == (False, True)
    assert not any(terminated or truncated for terminated, truncated in outcomes[:-1])
    env.close()


def test_registering_twice_is_harmless() -> None:
    lift_can._register()
    assert gymnasium.spec(lift_can.ENV_ID).entry_point == "handrail.examples.lift_can:LiftCanEnv"


def test_make_env_builds_it_as_the_user_env() -> None:
    env = make_env(TASK_ID)
    assert isinstance(env.unwrapped, LiftCanEnv)
    env.close()


def test_observation_has_the_users_keys_and_ticks_in_the_hundreds() -> None:
    env = LiftCanEnv()
    obs, _ = env.reset(seed=3)
    assert list(obs) == list(OBS_FIELDS) == list(env.observation_space.keys())
    for key, (size, _) in OBS_FIELDS.items():
        assert obs[key].shape == (size,) and obs[key].dtype == np.float32, key
    assert obs["joint_pos_rad"].shape == (7,)
    assert 700.0 < float(obs["gripper_ticks"][0]) < 810.0  # open: 8 cm is 800 ticks
    assert 0.4 <= obs["can_pos_m"][0] <= 0.6 and -0.15 <= obs["can_pos_m"][1] <= 0.15
    assert obs["can_pos_m"][2] == pytest.approx(0.035, abs=1e-3)
    close = np.array([0.0, 0.0, 0.0, 1.0], np.float32)
    for _ in range(10):
        obs, *_ = env.step(close)  # nothing between the fingers: they shut
    assert float(obs["gripper_ticks"][0]) < 50.0
    env.close()


def test_reset_with_a_seed_is_reproducible() -> None:
    env = LiftCanEnv()
    first, _ = env.reset(seed=11)
    again, _ = env.reset(seed=11)
    other, _ = env.reset(seed=12)
    for key in OBS_FIELDS:
        np.testing.assert_array_equal(first[key], again[key])
    assert not np.array_equal(first["can_pos_m"], other["can_pos_m"])
    env.close()


def test_success_is_reported_only_under_can_lifted() -> None:
    env = LiftCanEnv()
    demonstrator = LiftCanDemonstrator(env.config)
    obs, info = env.reset(seed=0)
    assert info == {SUCCESS_KEY: False}
    rewards, flags = [], []
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(demonstrator(obs))
        assert set(info) == {SUCCESS_KEY} and isinstance(info[SUCCESS_KEY], bool)
        rewards.append(reward)
        flags.append(info[SUCCESS_KEY])
        done = terminated or truncated
    assert terminated and not truncated and flags[-1] and rewards[-1] == 1.0
    assert not any(flags[:-1]) and not any(rewards[:-1])
    assert obs["can_pos_m"][2] >= 0.035 + 0.08 - 1e-4
    env.close()


def test_demonstrator_lifts_the_can_in_at_least_9_of_10_seeded_episodes() -> None:
    env = gymnasium.make(TASK_ID)
    demonstrator = LiftCanDemonstrator()
    successes = 0
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        demonstrator.reset(seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(demonstrator(obs))
            done = terminated or truncated
        successes += info[SUCCESS_KEY]
    assert successes >= 9
    env.close()


def test_the_command_records_a_store_train_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demos"
    assert main(["--out", str(out), "--episodes", "3", "--seed", "5"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed == [f"wrote 3 successful LiftCan episodes to {out}"]
    reader = open_store(out)
    assert reader.num_episodes == 3
    assert reader.attrs["task"] == TASK_ID and reader.attrs["kind"] == "demo"
    assert [f.name for f in reader.obs_fields] == list(OBS_FIELDS)
    assert reader.select(successful_only=True) == [0, 1, 2]  # what `train --demos` learns from
    assert [rec.seed for rec in reader.episodes] == [5, 6, 7]
    data = reader.load()
    assert data.action.shape == (data.num_steps, 4)
    assert set(data.intervention.tolist()) == {2}  # scripted
    ends = data.episode_starts + data.episode_lengths - 1
    assert data.terminated[ends].all() and data.reward[ends].tolist() == [1.0, 1.0, 1.0]
    assert data.reward.sum() == 3.0 and not data.truncated.any()
    for key, column in data.obs.items():  # a constant column would be useless to a learner
        assert (np.ptp(column, axis=0) > 1e-3).all(), key
    assert (data.final_obs["can_pos_m"][:, 2] >= 0.035 + 0.08 - 1e-4).all()


def test_an_existing_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="already exists") as refused:
        record_demos(out, episodes=1)
    assert "\n" not in str(refused.value)
    assert main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_bc_clones_it_and_evaluates_by_its_own_success_key(tmp_path: Path) -> None:
    import json

    from handrail.launch import cli

    store = tmp_path / "demos"
    assert lift_can.record_demos(store, episodes=10, seed=0) == 10
    run = tmp_path / "bc"
    assert cli.main(["bc", "--demos", str(store), "--task", lift_can.TASK_ID, "--success-key",
                     lift_can.SUCCESS_KEY, "--eval-episodes", "10", "--bc.steps", "1000",
                     "--run-dir", str(run), "--no-progress"]) == 0  # fmt: skip
    pairs = json.loads((run / "checkpoints" / "best" / "bc.json").read_text())["pairs"]
    assert len(pairs) >= 2  # the can from the hand, found in the demonstrations
    success = json.loads((run / "eval.json").read_text())["eval"]["success_rate"]
    assert success >= 0.5  # read from info["can_lifted"]: info["success"] is never set
