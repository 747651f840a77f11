"""RunMonitor: evaluations at episode ends, best checkpoints only on improvement, early stop,
evaluation time kept apart from training time, eval videos at the env's rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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


def test_a_baseline_is_the_first_best_and_only_a_match_replaces_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A residual's base alone: evaluated once before the first step and saved as ``best``;
    an evaluation below it never replaces it, one that matches it does; one more than 10
    points below it is reported; a resumed run keeps the record and evaluates nothing."""
    rates = iter([0.8, 0.6, 0.75, 0.8, 0.9])
    saves: list[str] = []

    def monitor(run: RunDir, start_steps: int = 0) -> RunMonitor:
        return RunMonitor(run, total_steps=400, eval_every=100, start_steps=start_steps,
                          evaluate=lambda _: result(next(rates)),
                          save_latest=lambda: saves.append("latest"),
                          save_best=lambda: saves.append("best"), video_fps=10.0,
                          progress=False, baseline="the base alone", tag="handrail train")  # fmt: skip

    with RunDir(tmp_path, tensorboard=False) as run:
        first = monitor(run)
        base = first.start(0)
        assert base is not None and base["success_rate"] == 0.8
        assert base["policy"] == "the base alone" and saves == ["best"]
        assert first.start(0) is base  # once per run
        for steps in (100, 200):
            first.evaluate_now(steps)
        assert saves == ["best", "latest", "latest"]  # 0.6 and 0.75: below the base
        said = capsys.readouterr().err.splitlines()
        assert len(said) == 1 and said[0].startswith("handrail train: evaluation at 100 env")
        assert "60%, 20 points below the base alone's 80% on the same episodes" in said[0]
        assert first.below_baseline({"success_rate": 0.75}) == pytest.approx(0.05)
        first.evaluate_now(300)  # 0.8 matches the base: the residual's policy is kept
        assert saves[-2:] == ["latest", "best"] and first.best_record["env_steps"] == 300

        resumed = monitor(run, start_steps=300)
        assert resumed.start(300) == base and resumed.best_record["env_steps"] == 300
        assert resumed.eval_seconds == pytest.approx(first.eval_seconds)
        assert [r["kind"] for r in run.read_metrics() if r["kind"] != "eval"] == ["baseline"]


def test_a_run_resumed_without_a_baseline_does_not_take_its_policy_for_one(tmp_path: Path) -> None:
    """A run started before baselines existed: its policy at step 300 is no baseline."""
    with RunDir(tmp_path, tensorboard=False) as run:
        late = RunMonitor(run, total_steps=400, eval_every=100, start_steps=300,
                          evaluate=lambda _: pytest.fail("evaluated"), save_latest=lambda: None,
                          save_best=lambda: pytest.fail("saved"), video_fps=10.0, progress=False,
                          baseline="the base alone")  # fmt: skip
        assert late.start(300) is None and run.read_metrics("baseline") == []


def test_the_plot_draws_the_baseline_as_a_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same evaluations at the same clock with and without a baseline record draw
    different plots."""
    monkeypatch.setattr(RunDir, "wall_time_s", lambda self: 60.0)
    plots = []
    for name, baseline in (("plain", None), ("residual", "the base alone")):
        with RunDir(tmp_path / name, tensorboard=False) as run:
            monitor = RunMonitor(run, total_steps=200, eval_every=100,
                                 evaluate=lambda _: result(0.5), save_latest=lambda: None,
                                 save_best=lambda: None, video_fps=10.0, progress=False,
                                 baseline=baseline)  # fmt: skip
            monitor.start(0)
            monitor.evaluate_now(100)
            plots.append((tmp_path / name / "learning_curve.png").read_bytes())
    assert plots[0] != plots[1]


def test_an_evaluation_record_says_how_its_failed_episodes_ended(tmp_path: Path) -> None:
    """``failed_outcomes`` in metrics.jsonl, where the env names outcomes; absent otherwise."""
    said = EvalResult(success_rate=0.25, ci_low=0.0, ci_high=1.0, mean_return=0.25,
                      mean_length=4.0, episodes=4, successes=(False, True, False, False),
                      outcomes=("far", "success", "short", "far"))  # fmt: skip
    results = iter([said, result(0.5)])
    with RunDir(tmp_path, tensorboard=False) as run:
        monitor = RunMonitor(run, total_steps=100, eval_every=50,
                             evaluate=lambda _: next(results), save_latest=lambda: None,
                             save_best=lambda: None, video_fps=10.0, progress=False)  # fmt: skip
        monitor.evaluate_now(50)
        monitor.evaluate_now(100)
        evals = run.read_metrics("eval")
    assert evals[0]["failed_outcomes"] == {"far": 2, "short": 1}
    assert "failed_outcomes" not in evals[1]  # an env that names none
