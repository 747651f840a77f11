"""`handrail bench learning`: the plan of runs, when 90% is sustained, the per-run summary and
the tables, and one tiny end-to-end run through the pinned child process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from handrail.bench import learning as bench
from handrail.bench.learning import BenchLearningConfig, Run


def test_plan_gives_every_learner_the_same_demos_and_budget(tmp_path: Path) -> None:
    cfg = BenchLearningConfig(tasks=("pick_cube", "Pendulum-v1"), learners=("handrail", "sb3"),
                              seeds=(0, 1), steps=3000, out=tmp_path,
                              train_args="--sac.utd 4 --loop.offline-ratio 0.25")  # fmt: skip
    runs = bench.plan(cfg)
    assert [(r.task, r.learner, r.seed) for r in runs][:4] == [
        ("pick_cube", "handrail", 0), ("pick_cube", "handrail", 1),
        ("pick_cube", "sb3", 0), ("pick_cube", "sb3", 1)]  # fmt: skip
    arm_hr, arm_sb3 = runs[0].argv, runs[2].argv
    assert (
        arm_hr[arm_hr.index("--expert-demos") + 1]
        == "20"
        == arm_sb3[arm_sb3.index("--expert-demos") + 1]
    )
    assert arm_hr[-4:] == ("--sac.utd", "4", "--loop.offline-ratio", "0.25")  # the ablation
    assert "--sac.utd" not in arm_sb3 and arm_sb3[arm_sb3.index("--learner") + 1] == "sb3"
    generic_sb3 = runs[-1].argv
    assert generic_sb3[generic_sb3.index("--expert-demos") + 1] == "0"
    assert "--peer-defaults" in generic_sb3  # SB3 with its own defaults on a plain Gymnasium id
    assert runs[0].folder == tmp_path / "pick_cube" / "handrail-s0" and not runs[0].done


@pytest.mark.parametrize(("rates", "index"), [
    ([0.2, 0.95, 0.9, 0.92, 0.5], 3), ([0.95, 0.9, 0.5, 0.9, 0.91, 0.99], 5),
    ([0.95, 0.95, 0.89, 1.0], None), ([], None)])  # fmt: skip
def test_sustained_means_three_evaluations_in_a_row(rates: list[float], index: int | None) -> None:
    assert bench.sustained_at([{"success_rate": r} for r in rates]) == index


def _fake_run(folder: Path, rates: list[float], train_success: list[float]) -> Run:
    folder.mkdir(parents=True)
    lines = []
    for i, rate in enumerate(rates):
        steps = 1000 * (i + 1)
        lines.append({"kind": "episode", "env_steps": steps - 500, "success": train_success[i]})
        lines.append({"kind": "eval", "env_steps": steps, "wall_time_s": 60.0 * (i + 1),
                      "train_time_s": 30.0 * (i + 1), "success_rate": rate, "mean_return": rate})  # fmt: skip
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (folder / "final.json").write_text(json.dumps({"success_rate": rates[-1], "mean_return": 1.0}))
    return Run("pick_cube", "handrail", 0, 1000 * len(rates), folder)


def test_speed_up_reads_the_mean_ratio_and_the_ratio_of_the_mean_steps() -> None:
    """One lucky seed (9k against 1k) carries the mean of the ratios, not the mean steps; a seed
    that missed either goal leaves the summary out but keeps the others' ratios."""
    assert bench.speed_up([9000, 3000, 3000], [1000, 3000, 3000]) == ([9.0, 1.0, 1.0],
                                                                      "3.67x; 2.14x")  # fmt: skip
    assert bench.speed_up([4000, None], [2000, 1000]) == ([2.0], "-")
    assert bench.speed_up([None], [None]) == ([], "-")
    assert bench.seed_cells([1234, None, 5], ",") == "1,234, -, 5"


def test_run_summary_and_table_lines(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "r", [0.1, 0.9, 1.0, 0.96, 0.8, 1.0], [0, 0.5, 1, 1, 0.6, 1])
    row = bench.summarize_run(run)
    # sustained at the 4th evaluation (4k steps); evaluations' own time left out: 2 minutes
    assert (row["steps_to_goal"], row["minutes_to_goal"], row["min_after"]) == (4000, 2.0, 0.8)
    assert row["eval_after"] == pytest.approx((0.96 + 0.8 + 1.0) / 3)
    assert row["train_after"] == pytest.approx((0.6 + 1) / 2)  # episodes after 4k steps
    line = bench.table([row])[2]
    ratio = row["train_after"] / row["eval_after"]
    assert line == f"| pick_cube | handrail | 0 | 4,000 | 2.0 | 80% | 100% | {ratio:.2f} |"
    never = bench.summarize_run(_fake_run(tmp_path / "n", [0.5, 0.95, 0.5], [0, 0, 0]))
    assert "steps_to_goal" not in never
    assert bench.table([never])[2] == "| pick_cube | handrail | 0 | - | - | - | 50% | - |"


@pytest.mark.slow
def test_a_tiny_bench_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = BenchLearningConfig(tasks=("gymnasium.envs.classic_control:Pendulum-v1",),
                              learners=("handrail",), seeds=(0,), steps=300, final_episodes=2,
                              jobs=1, out=tmp_path)  # fmt: skip
    assert bench.bench_learning(cfg) == 0
    out = capsys.readouterr().out
    assert "| gymnasium.envs.classic_control:Pendulum-v1 | handrail | 0 |" in out
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["rows"][0]["final"]["episodes"] == 2
    assert (tmp_path / "gymnasium.envs.classic_control:Pendulum-v1.png").is_file()
    assert bench.bench_learning(cfg) == 0  # finished runs are reused, not rerun


def test_a_run_a_stopped_bench_left_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    # A bench stopped mid-run (its terminal closed) restarted that run from nothing: 25 minutes
    # of each pixel run lost. It continues from the run's latest checkpoint now.
    from handrail.launch.commands.train import parse_args, train

    folder = tmp_path / "run"
    argv = ("--task", "gymnasium.envs.classic_control:Pendulum-v1", "--steps", "600",
            "--eval-every", "200", "--eval-episodes", "1", "--run-dir", str(folder),
            "--no-progress")  # fmt: skip
    # A run stopped after its first evaluation (one episode, a checkpoint): one of 200 steps,
    # told it had 600.
    first = [("200" if x == "600" else x) for x in argv]
    assert train(parse_args(first)) == 0
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "steps": 600}))

    def evals() -> list[int]:
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        return [json.loads(x)["env_steps"] for x in lines if '"eval"' in x]

    assert evals() == [200]
    before = (folder / "metrics.jsonl").read_text()
    run = Run("gymnasium.envs.classic_control:Pendulum-v1", "handrail", 0, 600, folder, argv)
    bench.execute([run], jobs=1, final_episodes=1, fresh=False)
    assert run.done and evals() == [200, 400, 600]  # the first evaluation kept, once
    assert (folder / "metrics.jsonl").read_text().startswith(before)  # not a fresh run's
    assert "resuming" in (tmp_path / "run.log").read_text()


def test_a_run_stopped_short_by_ctrl_c_is_not_finished_so_the_bench_resumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bench stopped with Ctrl-C let each run save a checkpoint and then evaluated it as if
    # it had finished: final.json written, the next bench skipped it, the run never resumed.
    from handrail.launch.commands import train as train_cmd
    from handrail.launch.commands.train import parse_args, train

    folder = tmp_path / "run"
    argv = ["--task", "gymnasium.envs.classic_control:Pendulum-v1", "--steps", "200",
            "--eval-every", "200", "--eval-episodes", "1", "--run-dir", str(folder),
            "--no-progress"]  # fmt: skip
    assert train(parse_args(argv)) == 0  # 200 env steps in its latest checkpoint
    assert bench.stopped_short(folder, 600) and not bench.stopped_short(folder, 200)
    assert not bench.stopped_short(tmp_path / "peer", 600)  # no handrail checkpoint
    monkeypatch.setattr(train_cmd, "train", lambda cfg: 0)  # the resume, stopped at once
    cpus = os.sched_getaffinity(0)
    spec = {"cpu": min(cpus), "folder": str(folder), "argv": argv, "final_episodes": 1,
            "steps": 600}  # fmt: skip
    try:  # the child pins its process to one CPU: this one's is given back after
        bench._child(spec)
        assert not (folder / "final.json").exists()
        assert "stopped before its 600 env steps" in capsys.readouterr().out
        bench._child({**spec, "steps": 200})  # finished: evaluated
        assert (folder / "final.json").is_file()
    finally:
        os.sched_setaffinity(0, cpus)


def test_a_failed_run_is_named_under_the_bench_that_ran_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench hil and bench residual run their arms through this executor: a run that fails
    is reported under their name (not bench learning's), with its log, and the rest go on."""
    bad = Run("pick_cube", "handrail", 0, 10, tmp_path / "bad", ("--no-such-option",))
    bench.execute([bad], jobs=1, final_episodes=1, fresh=False, name="bench hil")
    captured = capsys.readouterr()
    assert f"bench hil: {bad.folder} failed; see {bad.folder}.log" in captured.out
    assert "bench learning" not in captured.out + captured.err
    assert "--no-such-option" in (tmp_path / "bad.log").read_text()
