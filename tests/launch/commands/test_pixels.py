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
        "--sac.image-kernels", "3", "3",
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
    # As a residual's base on an env without its camera: one line, before anything runs.
    from handrail.app.bases import make_base
    from handrail.app.envs import make_env

    with pytest.raises(ValueError, match=r"this policy sees cameras \['front'\], but its obs"):
        make_base(f"run:{run}", "reach", make_env("reach"))


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
        ([*CAMERA, "--learner", "sb3"], "--pixels: not with --learner sb3"),
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


@pytest.mark.slow
def test_a_pixel_run_killed_and_resumed_keeps_each_frame_once_as_an_unbroken_run(
    tmp_path: Path,
) -> None:
    """A ``--pixels --record`` run SIGKILLed twice (once soon after a checkpoint, once at a
    random moment) and resumed ends with the replay and the store an unbroken run of the same
    command ends with: the same frames, states and actions, none lost and none twice."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from handrail.demos import open_store
    from handrail.demos.ops import validate_store

    def argv(run: Path, store: Path) -> list[str]:
        return ["train", "--task", "reach", "--pixels", *CAMERA, *TINY, "--expert-demos", "1",
                "--steps", "200", "--eval-every", "40", "--eval-episodes", "1",
                "--run-dir", str(run), "--record", str(store)]  # fmt: skip

    ref, ref_store = tmp_path / "ref", tmp_path / "ref_store"
    assert cli.main(argv(ref, ref_store)) == 0

    run, store = tmp_path / "run", tmp_path / "store"
    child = "import sys; from handrail.launch import cli; sys.exit(cli.main(sys.argv[1:]))"
    rng = np.random.default_rng(0)

    def saved_steps() -> int:
        """The env steps of the latest checkpoint (0 while there is none, or while a new one
        replaces the folder being read)."""
        try:
            text = (run / "checkpoints" / "latest" / "trainer.json").read_text()
            return int(json.loads(text)["actor"]["env_steps"])
        except (OSError, ValueError):
            return 0

    for kill, resume in enumerate(([], ["--resume", str(run)])):
        done = saved_steps()
        log = tmp_path / f"kill{kill}.log"
        with log.open("wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", child, *argv(run, store), *resume],
                                    stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if saved_steps() > done:  # a checkpoint of this process is written: kill after it
                time.sleep(float(rng.uniform(0.0, 1.5)) if kill else 0.0)
                break
            time.sleep(0.05)
        assert proc.poll() is None, log.read_text()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert cli.main([*argv(run, store), "--resume", str(run)]) == 0

    want = np.load(ref / "checkpoints" / "latest" / "replay.npz")
    got = np.load(run / "checkpoints" / "latest" / "replay.npz")
    assert sorted(got.files) == sorted(want.files)
    for name in want.files:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert got["online/front"].shape[0] >= 200 and got["online/front"].any()

    theirs, mine = open_store(ref_store), open_store(store)
    seeds = [r.seed for r in mine.episodes]
    assert seeds == [r.seed for r in theirs.episodes] == list(range(len(seeds)))
    a, b = mine.load(), theirs.load()
    np.testing.assert_array_equal(a.action, b.action)
    np.testing.assert_array_equal(a.obs["front"], b.obs["front"])
    assert validate_store(store) == []


BC_TINY = ["--bc.steps", "60", "--bc.eval-every", "30", "--bc.hidden-dims", "32", "32",
           "--bc.batch-size", "32", "--bc.image-channels", "8", "8", "--bc.image-strides", "2",
           "2", "--bc.image-features", "16", "--no-progress"]  # fmt: skip


@pytest.fixture(scope="module")
def camera_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """reach demos with a 16x16 front camera."""
    store = tmp_path_factory.mktemp("pixels") / "demos"
    assert cli.main(["record", "--task", "reach", "--episodes", "4", "--cameras", "front",
                     "--image-size", str(SIZE), "--out", str(store)]) == 0  # fmt: skip
    return store


@pytest.mark.slow
def test_bc_pixels_clones_through_its_own_encoder_and_a_pixel_residual_runs_on_it(
    camera_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``handrail bc --pixels --pixels-size 8`` on 16x16 frames: the checkpoint reads the camera
    at 8x8 through an encoder of its own; the evaluation and a ``--pixels`` residual on it
    render the camera (16x16), which the base resizes; without the camera, the residual stops
    in one line."""
    import json

    run = tmp_path / "bc"
    assert cli.main(["bc", "--demos", str(camera_demos), "--pixels", "--pixels-size", "8",
                     *BC_TINY, "--eval-episodes", "2", "--run-dir", str(run)]) == 0  # fmt: skip
    meta = json.loads((run / "checkpoints" / "best" / "bc.json").read_text())
    assert meta["obs_spec"]["images"] == ["front"]
    assert meta["obs_spec"]["shapes"][meta["obs_spec"]["keys"].index("front")] == [8, 8, 3]
    config = json.loads((run / "config.json").read_text())
    assert config["pixels"] and f"image_size={SIZE}" in config["env_kwargs"]
    assert json.loads((run / "eval.json").read_text())["eval"]["episodes"] == 2

    residual = ["train", "--task", "reach", "--residual-on", f"bc:{run}", "--steps", "60",
                "--eval-every", "60", "--eval-episodes", "1", "--no-progress",
                "--loop.warmup-steps", "40", "--sac.hidden-dims", "32", "32",
                "--sac.batch-size", "32"]  # fmt: skip
    capsys.readouterr()
    assert cli.main([*residual, "--run-dir", str(tmp_path / "blind")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and "sees cameras ['front'], but its observation has" in err[0], err
    assert not (tmp_path / "blind").exists()  # refused before the run folder
    # A residual that reads the camera too (--pixels), its base the bc policy on it.
    assert cli.main([*residual, "--pixels", "--env-kwargs", "cameras=('front',)",
                     f"image_size={SIZE}", "--sac.image-channels", "8", "8",
                     "--sac.image-strides", "2", "2", "--sac.image-kernels", "3", "3",
                     "--sac.image-features", "16",
                     "--run-dir", str(tmp_path / "res")]) == 0  # fmt: skip
    replay = np.load(tmp_path / "res" / "checkpoints" / "latest" / "replay.npz")
    assert replay["online/front"].dtype == np.uint8 and replay["online/front"].any()
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "res"), "--episodes", "1"]) == 0
    out = capsys.readouterr()
    assert f"base bc:{run} alone: 1 episodes" in out.out + out.err


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--pixels-size", "8"], "--pixels-size 8: needs --pixels"),
        (["--pixels", "--encoder", "enc"], "--pixels: not with --encoder"),
        (["--pixels", "--ignore-obs-keys", "front"], "--pixels: the store has no camera field"),
        (["--pixels", "--ignore-obs-keys", "goal", "goal_from_tcp_dm", "proprio"],
         "every key is a camera"),
    ],
)  # fmt: skip
def test_bc_pixel_options_that_cannot_work_are_one_line_and_create_nothing(
    camera_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
    expected: str,
) -> None:  # fmt: skip
    run = tmp_path / "run"
    try:
        code = cli.main(["bc", "--demos", str(camera_demos), *extra, "--run-dir", str(run)])
    except SystemExit as exit_:  # option checks fail while tyro parses: same code and line
        code = exit_.code  # type: ignore[assignment]
    assert code == 2
    assert expected in " ".join(capsys.readouterr().err.split())
    assert not run.exists()
