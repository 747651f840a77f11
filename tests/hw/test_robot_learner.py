"""The on-robot learner takes its settings from a ``handrail train`` run's config.json, the
observation keys its learner left out included (no ROS needed: any env with the task's spaces)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from handrail import sim
from handrail.app.config import preset
from handrail.hw.robot_learner import RobotLearner, load_train_config
from handrail.learners.agents.sac import SACConfig
from handrail.learners.learner import LoopConfig


def _config(path: Path, **extra: object) -> Path:
    sac = SACConfig(hidden_dims=(32, 32), batch_size=32, utd=1)
    loop = LoopConfig(warmup_steps=10, buffer_capacity=1000, intervention_capacity=100)
    path.write_text(json.dumps({"sac": sac.to_json(), "loop": dataclasses.asdict(loop), **extra}))
    return path


def test_a_train_runs_config_brings_the_observation_keys_its_learner_left_out(
    tmp_path: Path,
) -> None:
    run_config = tmp_path / "config.json"
    run_config.write_text(json.dumps(preset("peg_insert").to_json()))
    sac, loop, ignored = load_train_config(tmp_path)  # a run folder works as well
    assert ignored == ("proprio", "peg", "hole") and loop.mode == "async"
    assert sac == preset("peg_insert").sac
    assert load_train_config(_config(tmp_path / "old.json"))[2] == ()  # written before the key


def test_the_robot_learner_leaves_out_the_configs_keys_and_the_given_ones(tmp_path: Path) -> None:
    # pick_cube's preset leaves out the cube's absolute pose: on the arm it must as well, or
    # the policy trained there would not be the one the preset measured.
    env = sim.make("pick_cube")
    config = _config(tmp_path / "config.json", ignore_obs_keys=["object"])
    learner = RobotLearner(env, str(config), str(tmp_path / "run"), seed=0,
                           ignore_obs_keys=("object", "cube_from_tcp_dm"))  # fmt: skip
    assert learner.sac.obs_spec.keys == ("proprio",)
    learner.close()
    with pytest.raises(ValueError, match=r"cannot ignore \['camera'\]"):
        RobotLearner(env, str(_config(tmp_path / "c.json", ignore_obs_keys=["camera"])),
                     str(tmp_path / "run2"), seed=0)  # fmt: skip
    env.close()


def test_a_demo_store_holding_nan_is_named_before_learning(nan_demo_store: Path) -> None:
    from handrail.demos.errors import NonFiniteError
    from handrail.hw.robot_learner import _demo_rows

    with pytest.raises(NonFiniteError, match="episode 1: action is nan at step 2"):
        _demo_rows(str(nan_demo_store), None, None)  # type: ignore[arg-type]
