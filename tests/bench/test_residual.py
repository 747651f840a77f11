"""`handrail bench residual`: both arms share the store and the settings, the residual arm runs
on the BC base, and the table times each arm to its own goal (95% vs 90% sustained)."""

from __future__ import annotations

import json
from pathlib import Path

from handrail.app.config import bc_preset, preset
from handrail.bench import residual as res
from handrail.bench.learning import Run
from handrail.learners.evaluation import EVAL_SEED_OFFSET, EvalResult, run_seed

BASES = {
    "pick_cube": {
        "store": Path("s"),
        "base": "bc:b",
        "base_success": 0.42,
        "base_on_evals": {"0": 0.6},
    }
}


def test_the_arms_differ_only_in_the_base(tmp_path: Path) -> None:
    cfg = res.BenchResidualConfig(tasks=("pick_cube",), seeds=(0,), out=tmp_path,
                                  residual_steps=3000, sac_steps=9000,
                                  train_args="--sac.utd 4")  # fmt: skip
    residual, sac = res.plan(cfg, BASES)
    assert (residual.learner, sac.learner) == (res.RESIDUAL, res.SAC)
    a, b = list(residual.argv), list(sac.argv)
    assert a[a.index("--residual-on") + 1] == "bc:b" and "--residual-on" not in b
    assert a[a.index("--demos") + 1] == b[b.index("--demos") + 1] == "s"
    assert (a[a.index("--steps") + 1], b[b.index("--steps") + 1]) == ("3000", "9000")
    assert a[-2:] == ["--sac.utd", "4"] and "--sac.utd" not in b
    for flag in ("--eval-every", "--eval-episodes", "--seed", "--task"):
        assert a[a.index(flag) + 1] == b[b.index(flag) + 1]


def _fake(folder: Path, arm: str, rates: list[float]) -> Run:
    folder.mkdir(parents=True)
    lines = []
    for i, rate in enumerate(rates):
        lines += [{"kind": "episode", "env_steps": 500 * i + 250, "length": 50,
                   "success": float(rate >= 0.9)},
                  {"kind": "eval", "env_steps": 500 * (i + 1), "wall_time_s": 1.0,
                   "success_rate": rate, "mean_return": rate}]  # fmt: skip
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (folder / "final.json").write_text(json.dumps({"success_rate": rates[-1]}))
    return Run("pick_cube", arm, 0, 500 * len(rates), folder)


def test_each_arm_is_timed_to_its_own_goal(tmp_path: Path) -> None:
    # the residual passes 90% at 1k but 95% only from 2k; SAC sustains 90% from 4.5k
    residual = res.summarize(_fake(tmp_path / "r", res.RESIDUAL, [0.5, 0.92, 0.93, 0.96, 0.97,
                                                                   0.98, 0.99]))  # fmt: skip
    sac = res.summarize(_fake(tmp_path / "s", res.SAC, [0, 0, 0, 0.2, 0.5, 0.6, 0.9, 0.91, 0.95]))
    assert (residual["steps_to_arm_goal"], sac["steps_to_arm_goal"]) == (3000, 4500)
    # failed training episodes until each goal: 1 of the residual's, 6 of SAC's; the residual's
    # lowest evaluation (50%) is 10 points below the base's 60% on the same episodes
    assert (residual["failed_to_arm_goal"], sac["failed_to_arm_goal"]) == (1, 6)
    line = res.table([residual, sac], BASES)[2]
    assert line == (
        "| pick_cube | 42% | 0 | 60% | 50% (-10) | 3,000 | 1 | 99% | 4,500 | 6 | 95% "
        "| 1.50 (1.50x; 1.50x) | 0.17 |"
    )
    # a residual that never sustains 95%: its failed episodes are a lower bound
    stuck = res.summarize(_fake(tmp_path / "x", res.RESIDUAL, [0.5, 0.92, 0.5, 0.96, 0.5]))
    assert stuck["steps_to_arm_goal"] is None and stuck["failed_to_arm_goal"] == 3
    line = res.table([stuck, sac], BASES)[2]
    assert "| 50% (-10) | - | ≥3 | 50% |" in line and line.endswith("| ≥0.50 |")


def test_the_residuals_failed_episodes_are_counted_by_phase(tmp_path: Path) -> None:
    # episodes end every 250 env steps and succeed where the next evaluation reads >= 90%
    run = _fake(tmp_path / "r", res.RESIDUAL, [0.5, 0.5, 0.92, 0.5, 0.96, 0.97, 0.98, 0.99])
    assert res.summarize(run).get("phases") is None  # no config.json: no phases
    assert res.phase_table([res.summarize(run)]) == []
    (run.folder / "config.json").write_text("{}")  # not a train run's config: no phases either
    assert res.summarize(run)["phases"] is None
    (run.folder / "config.json").write_text(json.dumps(
        {"loop": {"warmup_steps": 500}, "sac": {"actor_delay_blocks": 1000}}))  # fmt: skip
    row = res.summarize(run)
    # to 95% sustained at 3.5k: episodes ending at 250 (warm-up), 750, 1250 (critics only: the
    # 1000 blocks after the warm-up end at 1.5k), 1750, ..., 3250 (actor on)
    assert row["steps_to_arm_goal"] == 3500
    assert row["phases"] == [[1, 1], [1, 2], [1, 4]]
    assert sum(failed for failed, _ in row["phases"]) == row["failed_to_arm_goal"]
    assert res.phase_table([row])[2] == "| pick_cube | 0 | 1/1 | 1/2 | 1/4 | 95% at 3,500 |"
    sac = res.summarize(_fake(tmp_path / "s", res.SAC, [0.5, 0.95, 0.95, 0.95]))
    assert "phases" not in sac and len(res.phase_table([row, sac])) == 3  # residual rows only


def test_a_third_table_says_how_each_policys_final_failures_ended(tmp_path: Path) -> None:
    """The final evaluation's failed episodes by how they ended: the base alone's, then each
    arm's seeds; a run that failed none and one from before outcomes were counted say so."""
    residual = res.summarize(_fake(tmp_path / "r", res.RESIDUAL, [0.5, 0.96]))
    residual["final"] = {"success_rate": 0.96, "failed_outcomes": {"far": 3, "rim": 1}}
    sac = res.summarize(_fake(tmp_path / "s", res.SAC, [0.5, 1.0]))  # final 100%
    old = {**res.summarize(_fake(tmp_path / "o", res.SAC, [0.5, 0.9])), "seed": 1}
    bases = {"pick_cube": {**BASES["pick_cube"], "base_failed_outcomes": {"far": 50, "rim": 8}}}
    assert res.failure_table([old, sac, residual], bases) == [
        "| task | policy | seed | final success | how its failed episodes ended |",
        "|---|---|---|---|---|",
        "| pick_cube | the base alone | | 42% | far 50, rim 8 |",
        "| pick_cube | residual | 0 | 96% | far 3, rim 1 |",  # the arms in order, then seeds
        "| pick_cube | sac | 0 | 100% | none failed |",
        "| pick_cube | sac | 1 | 90% | not counted |",
    ]
    assert res.failure_table([old, sac], BASES) == []  # nothing counted: no table


def test_the_base_is_measured_on_each_seeds_evaluation_episodes(
    tmp_path: Path, monkeypatch
) -> None:
    folder = tmp_path / "pick_cube"
    (folder / "demos").mkdir(parents=True)
    (folder / "bc" / "checkpoints" / "best").mkdir(parents=True)
    calls = []

    def fake(task: str, spec: str, episodes: int, seed: int) -> EvalResult:
        calls.append((episodes, seed))
        return EvalResult(0.5, 0.0, 1.0, 0.5, 10.0, 2, successes=(True, False),
                          outcomes=("success", "far"))  # fmt: skip

    monkeypatch.setattr(res, "base_evaluation", fake)
    cfg = res.BenchResidualConfig(tasks=("pick_cube",), seeds=(0, 2), out=tmp_path)
    info = res.prepare_base(cfg, "pick_cube")
    # the final evaluation's episodes, then each seed's: handrail train evaluates seed s from
    # run_seed(s, 10,000) on (seed 0: 10,000; seed 2: its own stream, far from seed 0's)
    two = run_seed(2, EVAL_SEED_OFFSET)
    assert calls == [(100, res.FINAL_SEED), (50, 10_000), (50, two)] and two > 10_000 + 50
    assert info["base_on_evals"] == {"0": 0.5, "2": 0.5}  # by seed, for the table
    assert info["base_failed_outcomes"] == {"far": 1}  # how the base failed, for the third
    res.prepare_base(cfg, "pick_cube")  # kept in base.json: not measured again
    assert len(calls) == 3
    # base.json keeps the number per first episode seed and episode count: other evaluations
    # (or a table measured on other streams) are measured anew
    saved = json.loads((folder / "base.json").read_text())["base_on_evals"]
    assert saved == {"from 10000/50": 0.5, f"from {two}/50": 0.5}
    res.prepare_base(res.BenchResidualConfig(tasks=("pick_cube",), seeds=(0,), out=tmp_path,
                                             eval_episodes=20), "pick_cube")  # fmt: skip
    assert calls[3:] == [(20, 10_000)]


def test_per_task_options_reach_both_arms_and_the_base(tmp_path: Path) -> None:
    """The residual arm starts from its task's residual preset (the bench adds no options of its
    own, so `handrail train --residual-on` is what the bench measures); --train-args add to it on
    every task. Both arms train with the task's preset observation keys and the base gets the
    same ones (a fair comparison)."""
    bases = {**BASES, "peg_insert": {"store": Path("p"), "base": "bc:pb", "base_success": 0.8}}
    cfg = res.BenchResidualConfig(tasks=("pick_cube", "peg_insert"), seeds=(0,), out=tmp_path)
    runs = {(r.task, r.learner): " ".join(r.argv) for r in res.plan(cfg, bases)}
    assert not any("--ignore-obs-keys" in argv for argv in runs.values())  # the preset's keys
    assert preset("peg_insert").ignore_obs_keys == ("proprio", "peg", "hole")
    assert preset("pick_cube").ignore_obs_keys == ("object",)
    for task in ("pick_cube", "peg_insert"):  # the base: `handrail bc`'s preset, the same keys
        assert bc_preset(task)[1] == preset(task).ignore_obs_keys
    assert not any("--sac." in argv for argv in runs.values())
    assert all(runs[task, res.RESIDUAL].endswith(f"--residual-on {bases[task]['base']}")
               for task in ("pick_cube", "peg_insert"))  # fmt: skip
    mine = res.BenchResidualConfig(tasks=("peg_insert",), seeds=(0,), out=tmp_path,
                                   train_args="--sac.utd 4")  # fmt: skip
    (residual, _) = res.plan(mine, bases)
    assert residual.argv[-2:] == ("--sac.utd", "4")


def test_sac_without_demos_is_an_arm_with_a_lower_bound_where_it_never_learns(
    tmp_path: Path,
) -> None:
    cfg = res.BenchResidualConfig(tasks=("pick_cube",), seeds=(0,), out=tmp_path,
                                  arms=(res.NO_DEMOS,), nodemos_steps=4000)  # fmt: skip
    (run,) = res.plan(cfg, BASES)
    argv = list(run.argv)
    assert argv[argv.index("--expert-demos") + 1] == "0" and "--demos" not in argv
    assert argv[argv.index("--steps") + 1] == "4000" and "--residual-on" not in argv
    residual = res.summarize(_fake(tmp_path / "r", res.RESIDUAL, [0.96, 0.97, 0.98]))
    sac = res.summarize(_fake(tmp_path / "s", res.SAC, [0, 0.9, 0.91, 0.95]))
    never = res.summarize(_fake(tmp_path / "n", res.NO_DEMOS, [0.0] * 8))
    header, _, line = res.table([residual, sac, never], BASES)
    assert header.endswith("| SAC without demos: env steps to 90% sustained (final success) | "
                           "residual's speed-up over it |")  # fmt: skip
    assert line.endswith("| 1.33 (1.33x; 1.33x) | 0.00 | not in 4,000 (0%) | ≥2.67 |")
    learns = res.summarize(_fake(tmp_path / "l", res.NO_DEMOS, [0, 0, 0.9, 0.9, 0.92, 0.5]))
    assert res.table([residual, sac, learns], BASES)[2].endswith("| 2,500 (50%) | 1.67 |")
