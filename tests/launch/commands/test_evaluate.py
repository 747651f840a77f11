"""`handrail eval`: finding the checkpoint and the run config, option validation, videos.

The end-to-end eval of a freshly trained run is in test_train_cmd.py, next to the tiny run it
evaluates.
"""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v2 as imageio
import pytest

from handrail.app.config import preset
from handrail.launch.commands.evaluate import EvalConfig, ckpt_label, evaluate, video_dir
from handrail.launch.commands.train import train


def test_bad_episodes_names_the_field() -> None:
    with pytest.raises(ValueError, match="episodes"):
        EvalConfig(path=Path("x"), episodes=0)


def test_video_goes_into_the_run_videos_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints" / "latest" / "learner").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"task": "reach"}))
    for ckpt, label in [
        (run / "checkpoints" / "best", "best"),
        (run / "checkpoints" / "latest" / "learner", "latest"),
    ]:
        assert video_dir(ckpt) == run / "videos" and ckpt_label(ckpt) == label
    loose = tmp_path / "exported_ckpt"  # a checkpoint outside any run folder
    assert video_dir(loose) == loose and ckpt_label(loose) == "exported_ckpt"


def test_eval_video_of_a_trained_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    config = preset(
        "reach", steps=40, loop={"warmup_steps": 20}, eval_every=40, eval_episodes=1,
        env_kwargs=("episode_steps=20",), sac={"hidden_dims": (32, 32), "batch_size": 32},
        run_dir=run, progress=False, video=True,
    )  # fmt: skip
    assert train(config) == 0
    assert evaluate(EvalConfig(path=run, episodes=1, video=True, seed=7)) == 0
    video = run / "videos" / "eval_best_seed7.mp4"
    assert f"video: {video}" in capsys.readouterr().out
    assert not list(run.glob("checkpoints/**/*.mp4"))
    # reach steps at 10 Hz: the training-time and the command's eval videos play at real speed
    for path in (run / "videos" / "eval_00000040.mp4", video):
        with imageio.get_reader(path) as mp4:
            assert mp4.get_meta_data()["fps"] == 10.0, path.name


def _run_folder(tmp_path: Path, config: dict[str, object], which: str = "best") -> Path:
    """A run folder with an untrained SAC checkpoint (``which``) and ``config`` as config.json."""
    import gymnasium as gym
    import jax
    import numpy as np

    from handrail.learners.agents.sac import SAC, SACConfig
    from handrail.learners.checkpoint import save_checkpoint, write_checkpoint_dir
    from handrail.learners.specs import ActionSpec, ObsSpec

    obs, act = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32)
    sac = SAC(ObsSpec.from_space(obs), ActionSpec.from_space(act),
              SACConfig(hidden_dims=(8, 8), num_critics=2, batch_size=4))  # fmt: skip
    state = sac.init(jax.random.PRNGKey(0))
    run = tmp_path / "run"
    write_checkpoint_dir(run / "checkpoints" / which, lambda p: save_checkpoint(
        p, state, sac.config, sac.obs_spec, sac.action_spec))  # fmt: skip
    (run / "config.json").write_text(json.dumps(config))
    return run


def _one_line(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    from handrail.launch import cli

    assert cli.main(args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_run_of_an_unknown_task_says_so_and_how_to_give_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_folder(tmp_path, {"task": "gone_task", "env_kwargs": ["episode_steps=20"]})
    line = _one_line(capsys, ["eval", str(run)])
    assert "the run trained on 'gone_task', a task unknown here" in line
    assert "give the task with --task" in line and "module:EnvId" in line
    assert "env overrides" not in line and "--env-kwargs" not in line


def test_a_damaged_or_half_written_checkpoint_is_one_line_saying_what_to_try(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_folder(tmp_path, {"task": "reach"})
    state = run / "checkpoints" / "best" / "state.msgpack"
    state.write_bytes(state.read_bytes()[:100])
    line = _one_line(capsys, ["eval", str(run)])
    assert f"{state} is damaged or incomplete" in line and "--checkpoint latest" in line
    # a save in progress: the trainer's folder, its learner files not all written yet
    half = run / "checkpoints" / ".latest.000002" / "learner"
    half.mkdir(parents=True)
    (half / "state.msgpack").write_bytes(b"")
    line = _one_line(capsys, ["eval", str(half.parent)])
    assert f"{half} is not a handrail checkpoint" in line
    (run / "config.json").write_text('{"task": "rea')
    line = _one_line(capsys, ["eval", str(run / "checkpoints" / "best")])
    assert f"{run / 'config.json'} is damaged: not valid JSON" in line and "restore it" in line


def test_a_run_without_its_best_checkpoint_points_at_latest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_folder(tmp_path, {"task": "reach"}, which="latest")
    line = _one_line(capsys, ["eval", str(run)])
    assert "no checkpoint at" in line and "--checkpoint latest evaluates its latest" in line
