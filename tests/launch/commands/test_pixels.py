"""``handrail train --pixels``: the agent's own encoder learns from the env's cameras end to end;
the replay keeps the frames as uint8, checkpoints carry the encoder, eval runs it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.launch import cli

SIZE = 16
CAMERA = ["--env-kwargs", "cameras=('front',)", f"image_size={SIZE}", "episode_steps=40"]
TINY = ["--sac.hidden-dims", "32", "32", "--sac.batch-size", "32", "--sac.utd", "1",
        "--sac.image-channels", "8", "8", "--sac.image-strides", "2", "2",
        "--sac.image-features", "16", "--loop.warmup-steps", "100", "--no-progress",
        "--eval-episodes", "2", "--no-video"]  # fmt: skip


@pytest.mark.slow
def test_a_pixel_run_stores_frames_once_resumes_and_evaluates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import jax

    from handrail.demos import open_store
    from handrail.demos.ops import validate_store
    from handrail.learners.checkpoint import load_checkpoint, sac_from_checkpoint

    run, rollouts = tmp_path / "run", tmp_path / "rollouts"
    argv = ["train", "--task", "reach", "--pixels", *CAMERA, *TINY, "--expert-demos", "2",
            "--steps", "200", "--eval-every", "200", "--run-dir", str(run),
            "--record", str(rollouts)]  # fmt: skip
    assert cli.main(argv) == 0
    assert cli.main([*argv, "--resume", str(run), "--steps", "280"]) == 0

    latest = run / "checkpoints" / "latest"
    sac = sac_from_checkpoint(latest / "learner")
    assert sac.obs_spec.images == ("front",)
    state, _ = load_checkpoint(latest / "learner", sac)
    assert set(state.critic_params["encoder"]) == {"camera_front"}
    for a, b in zip(jax.tree_util.tree_leaves(state.actor_params["encoder"]),
                    jax.tree_util.tree_leaves(state.critic_params["encoder"]), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    replay = np.load(latest / "replay.npz")
    assert replay["online/front"].dtype == np.uint8
    assert replay["online/front"].shape[1:] == (SIZE, SIZE, 3)
    assert replay["online/obs"].shape[1] == sac.obs_spec.state_spec().dim  # the state alone
    assert replay["demos/front"].dtype == np.uint8 and replay["demos/front"].any()

    got = open_store(rollouts)
    assert {f.name: f.dtype for f in got.obs_fields}["front"] == "uint8"
    assert [r.seed for r in got.episodes] == list(range(7)) and validate_store(rollouts) == []
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--episodes", "2"]) == 0
    assert "2 episodes: success" in capsys.readouterr().out


def test_pixels_size_resizes_the_cameras_for_the_replay_and_for_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", "--task", "reach", "--pixels", "--pixels-size", "8",
                     "--env-kwargs", "cameras=('front',)", f"image_size={SIZE}", *TINY,
                     "--steps", "150", "--eval-every", "150", "--run-dir", str(run)]) == 0  # fmt: skip
    replay = np.load(run / "checkpoints" / "latest" / "replay.npz")
    assert replay["online/front"].shape[1:] == (8, 8, 3)  # the env renders 16x16
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0  # the env's 16x16, resized
    assert "1 episodes: success" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], "--pixels: the observation has no camera key"),
        ([*CAMERA, "--actors", "2"], "--actors 2: not with --pixels"),
        ([*CAMERA, "--learner", "sb3"], "--pixels: not with --learner sb3"),
        ([*CAMERA, "--residual-on", "expert"], "--pixels: not with --residual-on"),
        ([*CAMERA, "--pixels-size", "4"], "--pixels-size 4: needs --pixels, and a size of"),
        (
            [
                "--env-kwargs",
                "cameras=('front',)",
                "--ignore-obs-keys",
                "goal",
                "goal_from_tcp_dm",
                "proprio",
            ],
            "every key is a camera",
        ),
    ],
)
def test_pixel_options_that_cannot_work_are_one_line_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", "--task", "reach", "--pixels", *extra, "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not run.exists()
