"""A learned reward end to end through the CLI: record, label, ``reward train``, ``reward
eval``, ``train --reward classifier:PATH``; and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.launch import cli

SMALL = ["--classifier.image-size", "16", "--classifier.channels", "8", "8",
         "--classifier.strides", "2", "2", "--classifier.features", "8",
         "--classifier.steps", "100", "--classifier.eval-every", "50"]  # fmt: skip


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """reach demos held at the goal, labelled from their reward, and a tiny classifier."""
    root = tmp_path_factory.mktemp("reward")
    store, clf = root / "demos", root / "clf"
    assert cli.main(["record", "--task", "reach", "--episodes", "6", "--cameras", "front",
                     "--image-size", "16", "--env-kwargs", "terminate_on_success=false",
                     "episode_steps=30", "--out", str(store)]) == 0  # fmt: skip
    assert cli.main(["label", str(store), "--from", "reward"]) == 0
    assert cli.main(["reward", "train", "--demos", str(store), "--out", str(clf),
                     "--no-progress", *SMALL]) == 0  # fmt: skip
    return store, clf


def test_reward_train_writes_a_classifier_with_its_validation(
    classifier: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    store, clf = classifier
    meta = json.loads((clf / "classifier.json").read_text())
    assert meta["cameras"] == ["front"] and meta["frame_shapes"]["front"] == [16, 16, 3]
    assert meta["counts"]["val_episodes"] >= 1 and 0.0 < meta["threshold"] < 1.0
    assert (clf / "loss.png").is_file() and "labels by" in meta["sources"][0]
    assert cli.main(["reward", "eval", str(clf), "--demos", str(store)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["episodes"]["episodes"] == 6 and report["frames"]["true_positives"] > 0
    assert cli.main(["reward", "train", "--demos", str(store), "--out", str(clf)]) == 2
    assert "add --overwrite" in capsys.readouterr().err


@pytest.mark.slow
def test_training_on_the_classifier_reports_it_against_the_task(
    classifier: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, clf = classifier
    run = tmp_path / "run"
    argv = ["train", "--task", "reach", "--demos", str(store), "--reward", f"classifier:{clf}",
            "--steps", "200", "--eval-every", "200", "--eval-episodes", "2", "--run-dir",
            str(run), "--no-progress", "--env-kwargs", "episode_steps=30",
            "--loop.warmup-steps", "100", "--sac.hidden-dims", "32", "32", "--sac.batch-size",
            "32", "--record", str(tmp_path / "rollouts")]  # fmt: skip
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "reward: the classifier fired on" in err and "of 6 episodes recorded" in err
    assert "reward: the classifier ended" in err and "false positives" in err
    stats = json.loads((run / "reward_classifier.json").read_text())
    assert stats["episodes"] >= 200 // 30 and stats["judged"] == stats["episodes"]
    assert stats["classifier"] == str(clf)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if r["kind"] == "reward_classifier"]
    assert logged and logged[-1]["episodes"] <= stats["episodes"]
    # The learner reads no camera; the --record store keeps the frames the classifier judged.
    from handrail.app.envs import make_env
    from handrail.demos import open_store

    rollouts = open_store(tmp_path / "rollouts")
    front = {f.name: f for f in rollouts.obs_fields}["front"]
    assert front.dtype == "uint8" and front.shape == (16, 16, 3)
    assert rollouts.num_episodes == stats["episodes"]
    env = make_env("reach", episode_steps=30, cameras=("front",), image_size=16)
    obs, _ = env.reset(seed=rollouts.episodes[0].seed)
    assert np.array_equal(obs["front"], rollouts.load(episodes=[0]).obs["front"][0])
    env.close()


def test_pixels_learn_end_to_end_from_the_cameras_the_classifier_judges(
    classifier: tuple[Path, Path], tmp_path: Path
) -> None:
    from handrail.learners.checkpoint import sac_from_checkpoint

    store, clf = classifier
    run = tmp_path / "run"
    argv = ["train", "--task", "reach", "--demos", str(store), "--pixels",
            "--reward", f"classifier:{clf}", "--steps", "150", "--eval-every", "150",
            "--eval-episodes", "1", "--run-dir", str(run), "--no-progress",
            "--env-kwargs", "episode_steps=30", "--loop.warmup-steps", "100",
            "--sac.hidden-dims", "32", "32", "--sac.batch-size", "32",
            "--sac.utd", "1", "--sac.image-channels", "8", "--sac.image-strides", "2",
            "--sac.image-kernels", "3",
            "--sac.image-features", "8"]  # fmt: skip
    assert cli.main(argv) == 0
    assert json.loads((run / "reward_classifier.json").read_text())["episodes"] >= 150 // 30
    # Evaluating and resuming (the same command again) render the classifier's cameras: they
    # are the run's own env settings.
    config = json.loads((run / "config.json").read_text())
    assert "cameras=('front',)" in config["env_kwargs"]
    assert cli.main([*argv, "--resume", str(run), "--steps", "200"]) == 0
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0
    # The classifier keeps its cameras in the observation, and the learner reads them.
    assert sac_from_checkpoint(run / "checkpoints" / "latest" / "learner").obs_spec.images == (
        "front",
    )


def test_bad_reward_inputs_get_one_line(
    classifier: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, clf = classifier
    base = ["train", "--steps", "10", "--run-dir", str(tmp_path / "r"), "--no-progress"]
    assert cli.main([*base, "--task", "reach", "--reward", f"classifier:{tmp_path}"]) == 2
    assert "not a handrail success classifier" in capsys.readouterr().err
    assert cli.main([*base, "--task", "Pendulum-v1", "--reward", f"classifier:{clf}"]) == 2
    assert "Dict observation holding the cameras ['front']" in capsys.readouterr().err
    assert cli.main([*base, "--task", "reach", "--reward", "sparse"]) == 2
    assert "give task, or classifier:PATH" in capsys.readouterr().err
    assert cli.main([*base, "--task", "reach", "--reward", f"classifier:{clf}", "--actors",
                     "2"]) == 2  # fmt: skip
    assert f"--actors 2: not with --reward classifier:{clf}" in capsys.readouterr().err
    no_camera = tmp_path / "nocam"
    assert cli.main(["record", "--task", "reach", "--episodes", "1", "--out",
                     str(no_camera)]) == 0  # fmt: skip
    assert cli.main(["reward", "train", "--demos", str(no_camera), "--out",
                     str(tmp_path / "c")]) == 2  # fmt: skip
    assert "has no camera field" in capsys.readouterr().err


@pytest.mark.slow
def test_corrections_retrain_the_classifier_relabel_the_replay_and_survive_a_resume(
    classifier: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A classifier that fires on every frame: each episode is a false positive by the task's
    success (the simulated person), two are corrected, every stored reward is relabelled."""
    import shutil

    from handrail.learners.agents.classifier import SuccessClassifier

    store, trained = classifier
    clf = tmp_path / "eager"
    shutil.copytree(trained, clf)
    meta = json.loads((clf / "classifier.json").read_text())
    (clf / "classifier.json").write_text(json.dumps({**meta, "threshold": 1e-9}))
    run = tmp_path / "run"
    argv = ["train", "--task", "reach", "--demos", str(store), "--pixels",
            "--reward", f"classifier:{clf}", "--steps", "120", "--eval-every", "120",
            "--eval-episodes", "1", "--run-dir", str(run), "--no-progress",
            "--env-kwargs", "episode_steps=30", "--loop.warmup-steps", "100",
            "--sac.hidden-dims", "32", "32", "--sac.batch-size", "32", "--sac.utd", "1",
            "--sac.image-channels", "8", "--sac.image-strides", "2", "--sac.image-kernels", "3",
            "--sac.image-features", "8", "--corrections.episodes", "2",
            "--corrections.every", "40"]  # fmt: skip
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "correction 1 of 2 at 1 env steps" in err and "correction 2 of 2 at 4" in err
    stats = json.loads((run / "reward_classifier.json").read_text())
    made = stats["corrections"]
    assert [c["corrections"] for c in made] == [1, 2] and made[1]["env_steps"] - 1 >= 40
    assert made[0]["relabelled"] > 0  # every stored transition had fired before
    corrected = SuccessClassifier(run / "reward_classifier")
    assert corrected.threshold == stats["threshold"] > 1e-3
    assert corrected.meta["extra"]["corrected_from"] == str(clf)
    assert corrected.meta["counts"]["train_episodes"] == meta["counts"]["train_episodes"] + 2
    saved = run / "checkpoints" / "latest" / "reward_classifier"
    assert {p.name for p in saved.iterdir()} >= {"corrections.npz", "classifier.json"}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in records if r["kind"] == "reward_correction"]) == 2
    # The budget is spent: a resume continues the counts with the corrected classifier.
    assert cli.main([*argv, "--resume", str(run), "--steps", "200"]) == 0
    err = capsys.readouterr().err
    assert "correction 3" not in err and "the classifier fired on" in err
    resumed = json.loads((run / "reward_classifier.json").read_text())
    assert resumed["episodes"] > stats["episodes"] and len(resumed["corrections"]) == 2
    assert resumed["threshold"] == stats["threshold"]


def test_bad_correction_inputs_get_one_line(
    classifier: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    _, trained = classifier
    base = ["train", "--task", "reach", "--steps", "10", "--run-dir", str(tmp_path / "r"),
            "--no-progress", "--corrections.episodes", "2"]  # fmt: skip
    assert cli.main(base) == 2
    assert "corrects a learned reward: give --reward classifier:PATH" in capsys.readouterr().err
    assert cli.main([*base, "--reward", f"classifier:{trained}", "--learner", "sb3"]) == 2
    assert "needs --learner jax" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # checked while tyro parses: the same line
        cli.main([*base, "--reward", f"classifier:{trained}", "--corrections.every", "0"])
    assert exit_.value.code == 2 and "--corrections.every >= 1" in capsys.readouterr().err
    moved = tmp_path / "moved"  # its training stores are named; one is gone
    shutil.copytree(trained, moved)
    meta = json.loads((moved / "classifier.json").read_text())
    meta["extra"]["demos"] = [str(tmp_path / "gone")]
    (moved / "classifier.json").write_text(json.dumps(meta))
    assert cli.main([*base, "--reward", f"classifier:{moved}"]) == 2
    err = capsys.readouterr().err
    assert "the stores" in err and "a correction retrains on them" in err
    assert not (tmp_path / "r").exists()  # checked before the run folder is made
