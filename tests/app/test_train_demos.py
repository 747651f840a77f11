"""`--demos expert:N`: scripted expert episodes in the same form a store loads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.app import train_demos
from handrail.app.envs import make_env


def test_expert_demos_load_like_a_store() -> None:
    """`--demos expert:N` yields the same EpisodeData a store loads, so one converter serves both."""
    from handrail.demos import EpisodeData
    from handrail.learners.demo_data import to_transitions
    from handrail.learners.specs import ActionSpec, ObsSpec

    data = train_demos.expert_episodes("reach", 3, seed=5)
    assert isinstance(data, EpisodeData)
    assert data.num_episodes == 3 and np.all(data.intervention == 2)  # 2: scripted
    assert [r.start for r in data.records] == data.episode_starts.tolist()
    assert [r.num_steps for r in data.records] == data.episode_lengths.tolist()
    assert all(r.success for r in data.records) and data.records[0].seed == 5
    env = make_env("reach")
    transitions = to_transitions(
        data, ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space)
    )
    assert len(transitions.reward) == data.num_steps


def test_runs_of_other_seeds_share_no_demonstration() -> None:
    """Seed s's scripted demos start at its own demo seeds: seed 1's were once seed 0's
    shifted by one episode (19 of 20 shared)."""
    from handrail.app.config import TrainConfig
    from handrail.learners.evaluation import DEMO_SEED_OFFSET, run_seed

    seeds = {}
    for seed in (0, 1):
        cfg = TrainConfig(task="reach", expert_demos=2, seed=seed)
        data = train_demos.load_demos(cfg, make_env("reach"), None, None)
        seeds[seed] = [r.seed for r in data.records]
    assert seeds[0] == [1_000_000, 1_000_001]  # seed 0's, as before
    assert seeds[1] == [run_seed(1, DEMO_SEED_OFFSET), run_seed(1, DEMO_SEED_OFFSET) + 1]
    assert not set(seeds[0]) & set(seeds[1])


def test_a_demo_store_holding_nan_stops_train_before_the_run_folder(
    tmp_path: Path, nan_demo_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It once trained ~35 s and failed blaming the env; now one line names the store's nan."""
    from handrail.launch import cli

    store, run = nan_demo_store, tmp_path / "run"
    argv = ["train", "--task", "reach", "--demos", str(store), "--run-dir", str(run)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{store}: 1 episode(s) hold nan or inf" in err
    assert "episode 1: action is nan at step 2" in err and "--episodes 0" in err
    assert not run.exists()
