"""`handrail train --human simulated` end to end: flags and actions in the replay and the
recording, both buffers filled, the recorded corrections replay, intervention metrics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.app.config import TrainConfig, preset
from handrail.app.human import HumanLoopConfig, with_human
from handrail.launch import cli
from handrail.launch.commands import train as train_cmd


def tiny_human_config(tmp_path: Path, **overrides: object) -> TrainConfig:
    return preset(
        "pick_cube", steps=240, eval_every=240, eval_episodes=1, run_dir=tmp_path / "run",
        expert_demos=2, progress=False, human="simulated", env_kwargs=("episode_steps=30",),
        sac={"hidden_dims": (32, 32), "batch_size": 32, "utd": 1},
        loop={"warmup_steps": 60}, **overrides,
    )  # fmt: skip


@pytest.fixture(scope="module")
def human_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("hil")
    assert train_cmd.train(tiny_human_config(tmp, record=tmp / "store")) == 0
    return tmp


def test_human_steps_are_recorded_with_the_executed_and_the_proposed_action(
    human_run: Path,
) -> None:
    from handrail.demos import open_store

    data = open_store(human_run / "store").load()
    human = data.intervention == 1
    assert data.num_steps >= 240 and 0 < human.sum() < data.num_steps
    assert set(np.unique(data.intervention)) == {0, 1}
    # the person's action ran instead of the proposal; the policy's own steps ran the proposal
    assert np.any(np.abs(data.action[human] - data.policy_action[human]) > 1e-3)
    np.testing.assert_array_equal(data.action[~human], data.policy_action[~human])
    per_episode = [int(r.num_intervened) for r in data.records]
    episodes = [json.loads(x) for x in (human_run / "run/metrics.jsonl").read_text().splitlines()
                if json.loads(x)["kind"] == "episode"]  # fmt: skip
    assert [e["human_steps"] for e in episodes] == per_episode


def test_both_buffers_hold_the_human_steps(human_run: Path) -> None:
    from handrail.demos import open_store
    from handrail.learners.learner import INTERVENTIONS, ONLINE

    with np.load(human_run / "run/checkpoints/latest/replay.npz") as replay:
        names = [name for name, _ in json.loads(str(replay["layout"]))["segments"]]
        sizes = dict(zip(names, replay["size"].tolist(), strict=True))
        online_actions = replay[f"{ONLINE}/action"]
        human_actions = replay[f"{INTERVENTIONS}/action"]
    data = open_store(human_run / "store").load()
    human = data.intervention == 1
    # every step online (+ each episode's final row); every human step also in interventions
    # (+ the final row that ends each run of human steps)
    assert sizes[ONLINE] == data.num_steps + data.num_episodes
    runs = int(np.sum(np.diff(np.concatenate([[0], human.astype(int)])) == 1))
    assert sizes[INTERVENTIONS] == human.sum() + runs
    # the replay holds the executed action (the learner's [-1, 1] units are the env's here)
    gaps = np.abs(data.action[human][:, None, :] - human_actions[None, :, :]).max(axis=-1)
    assert np.all(gaps.min(axis=1) < 1e-5)
    assert len(online_actions) == sizes[ONLINE]


def test_recorded_corrections_replay_within_tolerance(human_run: Path) -> None:
    assert cli.main(["replay", str(human_run / "store")]) == 0


def test_run_folder_has_the_intervention_metrics_and_plot(human_run: Path, capsys) -> None:
    from handrail.learners.monitor import intervention_summary
    from handrail.learners.runlog import RunDir
    from handrail.sim.simulated_human import TRIGGERS

    with RunDir(human_run / "run") as run:
        summary = intervention_summary(run.read_metrics("episode"))
        takeovers = run.read_metrics("takeovers")
    assert 0 < summary["human_share"] < 1 and summary["human_steps"] > 0
    assert summary["episodes_intervened"] >= 1
    # what made the simulated person take over: every takeover counted, at least one per
    # intervened episode
    counts = {k: takeovers[-1][k] for k in TRIGGERS}
    assert sum(counts.values()) >= summary["episodes_intervened"]
    import matplotlib.image

    height = matplotlib.image.imread(human_run / "run/learning_curve.png").shape[0]
    assert height > 3 * 3.25 * 80 * 0.95  # three rows of panels: the interventions row is drawn


def test_devices_and_the_simulated_person_need_an_arm_task(tmp_path: Path, capsys) -> None:
    args = ["train", "--task", "Pendulum-v1", "--human", "simulated", "--run-dir",
            str(tmp_path / "r"), "--steps", "10"]  # fmt: skip
    assert cli.main(args) == 2
    assert "handrail arm task" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_peers_take_no_interventions() -> None:
    with pytest.raises(ValueError, match="--human simulated needs --learner jax"):
        preset("pick_cube", human="simulated", learner="sb3")


def test_no_human_leaves_the_env_as_it_is() -> None:
    env = object()
    assert with_human(env, "pick_cube", "none", HumanLoopConfig(), "success") is env


def test_the_human_settings_round_trip_through_config_json() -> None:
    cfg = preset("pick_cube", human="simulated")
    assert TrainConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
