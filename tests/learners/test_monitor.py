"""RunMonitor: evaluations at episode ends, best checkpoints only on improvement, early stop,
evaluation time kept apart from training time, eval videos at the env's rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from handrail.learners.evaluation import EvalResult
from handrail.learners.monitor import RunMonitor
from handrail.learners.runlog import RunDir


def result(rate: float, frames: list | None = None) -> EvalResult:
    return EvalResult(success_rate=rate, ci_low=0.0, ci_high=1.0, mean_return=rate,
                      mean_length=4.0, episodes=1, frames=frames or [])  # fmt: skip


def test_evaluations_best_saves_and_early_stop(tmp_path: Path) -> None:
    rates = iter([0.5, 0.3, 0.95])
    saves: list[str] = []
    with RunDir(tmp_path, tensorboard=False) as run:
        monitor = RunMonitor(run, total_steps=400, eval_every=100,
                             evaluate=lambda _: result(next(rates)),
                             save_latest=lambda: saves.append("latest"),
                             save_best=lambda: saves.append("best"), video_fps=10.0,
                             progress=False, stop_at_success=0.9)  # fmt: skip
        stops = []
        for step in range(1, 301):
            ended = [(1.0, 10, step % 20 == 0)] if step % 10 == 0 else []
            stops.append(monitor.on_step(step, 8 * step, ended, {"critic/loss": 0.5}))
        evals = run.read_metrics("eval")
    assert [r["env_steps"] for r in evals] == [100, 200, 300]  # at the first episode end
    assert saves == ["latest", "best", "latest", "latest", "best"]  # 0.3 is no improvement
    assert stops.index(True) == 299 and monitor.should_stop
    assert all(r["eval_s"] >= 0 and r["train_time_s"] <= r["wall_time_s"] for r in evals)
    episodes = RunDir(tmp_path, tensorboard=False).read_metrics("episode")
    assert len(episodes) == 30 and sum(r["success"] for r in episodes) == 15


def video_fps_and_frames(path: Path) -> tuple[float, int]:
    """Frame rate and frame count of an mp4, read back from the file."""
    import imageio.v2 as imageio

    with imageio.get_reader(path) as reader:
        return reader.get_meta_data()["fps"], reader.count_frames()


def test_monitor_writes_eval_videos_at_the_env_rate(tmp_path: Path) -> None:
    """A 10 Hz env's evaluation video plays at 10 fps (it used to be written at 20)."""
    frames = [np.full((16, 16, 3), i, np.uint8) for i in range(5)]
    with RunDir(tmp_path, tensorboard=False) as run:
        monitor = RunMonitor(run, total_steps=100, eval_every=50,
                             evaluate=lambda _: result(1.0, frames), save_latest=lambda: None,
                             save_best=lambda: None, video_fps=10.0, progress=False)  # fmt: skip
        monitor.evaluate_now(50)
    assert video_fps_and_frames(tmp_path / "videos" / "eval_00000050.mp4") == (10.0, 5)


def test_intervention_summary_says_whether_the_person_still_acts_at_the_end() -> None:
    from handrail.learners.monitor import intervention_summary

    early = [{"length": 50, "human_steps": 10, "success": 1.0}] * 50  # the person teaches
    late = [{"length": 50, "human_steps": 0, "success": 1.0}] * 90  # then leaves it alone
    last = [{"length": 50, "human_steps": 5, "success": 1.0}] * 10
    summary = intervention_summary(early + late + last)
    assert summary["human_share"] == (50 * 10 + 10 * 5) / (150 * 50)
    assert summary["human_share_last_100"] == (10 * 5) / (100 * 50)
    assert intervention_summary([])["human_share_last_100"] is None
