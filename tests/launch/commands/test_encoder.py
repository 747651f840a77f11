"""Cameras into the policy end to end through the CLI: record, ``encoder train``, ``train
--encoder``, ``eval`` of the run; and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.launch import cli

SIZE = 32
SMALL = ["--encoder.image-size", str(SIZE), "--encoder.channels", "8", "16",
         "--encoder.strides", "2", "1", "--encoder.keypoints", "8", "--encoder.target-size",
         "16", "--encoder.steps", "100", "--encoder.eval-every", "50",
         "--encoder.goal-key", "proprio"]  # fmt: skip
PIXELS_ONLY = ["--ignore-obs-keys", "goal", "goal_from_tcp_dm"]
"""reach without the goal's position: only the cameras show where it is."""


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """reach demos with two cameras, and a tiny encoder trained on them."""
    root = tmp_path_factory.mktemp("encoder")
    store, enc = root / "demos", root / "enc"
    assert cli.main(["record", "--task", "reach", "--episodes", "8", "--cameras", "front,wrist",
                     "--image-size", str(SIZE), "--out", str(store)]) == 0  # fmt: skip
    assert cli.main(["encoder", "train", "--demos", str(store), "--out", str(enc),
                     "--no-progress", *SMALL]) == 0  # fmt: skip
    return store, enc


def test_encoder_train_writes_an_encoder_with_its_pictures(
    encoder: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    store, enc = encoder
    meta = json.loads((enc / "encoder.json").read_text())
    assert meta["cameras"] == ["front", "wrist"] and meta["frame_shapes"]["front"] == [32, 32, 3]
    assert meta["features"] == 2 * 8 * 2 and meta["goal_dim"] == 14
    assert len(meta["history"]) == 2 and meta["history"][-1]["val_loss"] > 0
    assert (enc / "loss.png").is_file() and (enc / "keypoints.png").is_file()
    assert cli.main(["encoder", "train", "--demos", str(store), "--out", str(enc)]) == 2
    assert "add --overwrite" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_through_the_encoder_keeps_it_records_its_frames_and_eval_sees_its_cameras(
    encoder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The learner reads the encoder's features; the run's --record store keeps the frames
    themselves, each step's own, and a resume (the same command again) records each episode
    once."""
    from handrail.app.envs import make_env
    from handrail.demos import open_store
    from handrail.demos.ops import validate_store

    store, enc = encoder
    run, rollouts = tmp_path / "run", tmp_path / "rollouts"
    argv = ["train", "--task", "reach", "--demos", str(store), "--encoder", str(enc),
            *PIXELS_ONLY, "--steps", "200", "--eval-every", "200", "--eval-episodes", "2",
            "--run-dir", str(run), "--no-progress", "--loop.warmup-steps", "100",
            "--sac.hidden-dims", "32", "32", "--sac.batch-size", "32",
            "--env-kwargs", "episode_steps=40", "--record", str(rollouts)]  # fmt: skip
    assert cli.main(argv) == 0
    config = json.loads((run / "config.json").read_text())
    assert (
        "cameras=('front', 'wrist')" in config["env_kwargs"]
        and "image_size=32" in config["env_kwargs"]
    )
    assert json.loads((run / "encoder" / "encoder.json").read_text())["cameras"] == [
        "front",
        "wrist",
    ]
    assert cli.main([*argv, "--resume", str(run), "--steps", "280"]) == 0
    got = open_store(rollouts)
    fields = {f.name: f for f in got.obs_fields}
    assert "camera_features" not in fields and "goal" in fields  # what the robot gave
    assert fields["front"].dtype == "uint8" and fields["wrist"].shape == (SIZE, SIZE, 3)
    assert [r.seed for r in got.episodes] == list(range(7)) and validate_store(rollouts) == []
    # Each step's frames are the ones the env gave before its action, not the next step's:
    # episode 6 is the resumed run's.
    env = make_env("reach", episode_steps=40, cameras=("front", "wrist"), image_size=SIZE)
    episode = got.load(episodes=[6])
    obs, _ = env.reset(seed=6)
    assert np.array_equal(obs["front"], episode.obs["front"][0])
    obs, *_ = env.step(episode.action[0])
    assert np.array_equal(obs["wrist"], episode.obs["wrist"][1])
    assert not np.array_equal(episode.obs["wrist"][0], episode.obs["wrist"][1])
    env.close()
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--episodes", "2"]) == 0
    assert "2 episodes: success" in capsys.readouterr().out + capsys.readouterr().err


def test_bc_learns_through_the_encoder_and_evaluates_on_the_cameras(
    encoder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, enc = encoder
    run = tmp_path / "bc"
    assert cli.main(["bc", "--demos", str(store), "--encoder", str(enc), *PIXELS_ONLY,
                     "--bc.steps", "100", "--bc.hidden-dims", "32", "32", "--eval-episodes",
                     "2", "--run-dir", str(run), "--no-progress"]) == 0  # fmt: skip
    assert (run / "encoder" / "encoder.json").is_file()
    config = json.loads((run / "config.json").read_text())
    assert config["encoder"] == str(enc) and "image_size=32" in config["env_kwargs"]
    assert json.loads((run / "eval.json").read_text())["eval"]["episodes"] == 2
    assert "2 episodes: success" in capsys.readouterr().err
    # A residual on it, through the encoder too: the base reads the frames through its run's
    # copy of the encoder, the residual the features; without the cameras, one line.
    residual = ["train", "--task", "reach", "--residual-on", f"bc:{run}", "--steps", "60",
                "--eval-every", "60", "--eval-episodes", "1", "--no-progress",
                "--loop.warmup-steps", "40", "--sac.hidden-dims", "32", "32",
                "--sac.batch-size", "32"]  # fmt: skip
    assert cli.main([*residual, "--run-dir", str(tmp_path / "none")]) == 2
    assert "this policy sees cameras ['front', 'wrist'] through its encoder" in (
        capsys.readouterr().err
    )
    assert cli.main([*residual, "--encoder", str(enc), *PIXELS_ONLY, "--run-dir",
                     str(tmp_path / "res")]) == 0  # fmt: skip
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "res"), "--episodes", "1"]) == 0
    out = capsys.readouterr()
    assert f"base bc:{run} alone: 1 episodes" in out.out + out.err


def test_bad_encoder_inputs_get_one_line(
    encoder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, enc = encoder
    base = ["train", "--steps", "10", "--run-dir", str(tmp_path / "r"), "--no-progress"]
    assert cli.main([*base, "--task", "reach", "--encoder", str(tmp_path)]) == 2
    assert "is not a handrail image encoder" in capsys.readouterr().err
    assert cli.main([*base, "--task", "Pendulum-v1", "--encoder", str(enc)]) == 2
    assert "Dict observation holding the cameras ['front', 'wrist']" in capsys.readouterr().err
    assert cli.main([*base, "--task", "reach", "--encoder", str(enc), "--actors", "2"]) == 2
    assert "--actors 2: not with --encoder; train with --actors 0" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    assert cli.main(["bc", "--demos", str(store), "--encoder", str(tmp_path), "--run-dir",
                     str(tmp_path / "b")]) == 2  # fmt: skip
    assert "is not a handrail image encoder" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    out = ["encoder", "train", "--demos", str(store), "--out", str(tmp_path / "e")]
    assert cli.main([*out, "--encoder.cameras", "top"]) == 2
    assert "has no camera field ['top']" in capsys.readouterr().err
    assert cli.main([*out, "--encoder.goal-key", "joints"]) == 2
    assert "no field 'joints' for --encoder.goal-key" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()
