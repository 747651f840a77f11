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
