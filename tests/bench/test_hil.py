"""`handrail bench hil`: the paired plan (with and without the simulated person) and the table
of steps to 90%, speed-up, human cost and the final policy's success without the person."""

from __future__ import annotations

import json
from pathlib import Path

from handrail.bench import hil
from handrail.bench.learning import Run, plan, summarize_run
from handrail.launch.commands.train import parse_args


def test_both_arms_share_everything_but_the_person(tmp_path: Path) -> None:
    cfg = hil.BenchHilConfig(seeds=(0,), out=tmp_path, train_args="--hil.simulated.budget-steps 9")
    runs = plan(hil.learning_config(cfg))
    assert [(r.task, r.learner) for r in runs] == [
        ("pick_cube", "handrail"), ("pick_cube", "handrail-hil"),
        ("peg_insert", "handrail"), ("peg_insert", "handrail-hil")]  # fmt: skip
    alone, helped = list(runs[0].argv), list(runs[1].argv)
    assert helped[helped.index("--human") + 1] == "simulated" and "--human" not in alone
    for argv in (alone, helped):
        assert argv[argv.index("--learner") + 1] == "jax"
        assert argv[-2:] == ["--hil.simulated.budget-steps", "9"]
    helped_rest = [a for a in helped if a not in ("--human", "simulated")]
    assert [a for a in helped_rest if a not in alone] == [str(runs[1].folder)]  # its own folder
    # on peg_insert the person arm gets the task preset's (patient) person, and --train-args
    peg_helped = parse_args(list(runs[3].argv)).hil.simulated
    assert (peg_helped.stall_from, peg_helped.budget_steps) == ("first-gain", 9)
    assert parse_args(list(runs[1].argv)).hil.simulated.stall_from == "start"


def _fake(folder: Path, learner: str, rates: list[float], human: list[int] | None,
          takeovers: dict[str, int] | None = None) -> Run:  # fmt: skip
    folder.mkdir(parents=True)
    lines = []
    for i, rate in enumerate(rates):
        episode = {"kind": "episode", "env_steps": 1000 * i + 500, "length": 50, "success": 1.0}
        if human is not None:
            episode["human_steps"] = human[i]
        lines += [episode, {"kind": "eval", "env_steps": 1000 * (i + 1), "wall_time_s": 1.0,
                            "success_rate": rate, "mean_return": rate}]  # fmt: skip
    if takeovers is not None:  # what train logs at the end of a run with the simulated person
        lines.append({"kind": "takeovers", "env_steps": 1000 * len(rates), "wall_time_s": 2.0,
                      **takeovers})  # fmt: skip
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (folder / "final.json").write_text(json.dumps({"success_rate": rates[-1]}))
    return Run("pick_cube", learner, 0, 1000 * len(rates), folder)


def test_table_pairs_the_seeds_and_counts_the_human_steps_until_the_goal(tmp_path: Path) -> None:
    alone = summarize_run(_fake(tmp_path / "a", "handrail", [0, 0, 0, 0.9, 0.95, 0.92, 1.0, 0.97],
                                None))  # fmt: skip
    helped = summarize_run(_fake(tmp_path / "h", "handrail-hil", [0.2, 0.9, 0.9, 0.91, 1.0, 0.99],
                                 [30, 20, 10, 5, 0, 0]))  # fmt: skip
    assert (alone["steps_to_goal"], helped["steps_to_goal"]) == (6000, 4000)
    assert helped["human_steps_to_goal"] == 30 + 20 + 10 + 5  # episodes up to 4k steps
    assert helped["human"]["human_share"] == (30 + 20 + 10 + 5) / 300
    assert (alone["min_after"], helped["min_after"]) == (0.92, 0.91)  # from the third 90% on
    line = hil.table([alone, helped])[2]
    assert line == (
        "| pick_cube | 0 | 6,000 | 4,000 | 1.50 (1.50x; 1.50x) | 65 | 22% / 22% | 92% / 91% | "
        "97% / 99% |"
    )


def test_the_speed_up_is_the_mean_ratio_and_the_ratio_of_the_mean_steps(tmp_path: Path) -> None:
    def run(name: str, learner: str, seed: int, rates: list[float]) -> dict:
        human = None if learner == "handrail" else [0] * len(rates)
        return {**summarize_run(_fake(tmp_path / name, learner, rates, human)), "seed": seed}

    rows = [run("a0", "handrail", 0, [0] * 6 + [0.9] * 3), run("a1", "handrail", 1, [0] + [0.9] * 3),
            run("h0", "handrail-hil", 0, [0.9] * 3), run("h1", "handrail-hil", 1, [0] + [0.9] * 3)]  # fmt: skip
    assert [r["steps_to_goal"] for r in rows] == [9000, 4000, 3000, 4000]
    line = hil.table(rows)[2]
    # ratios 3 and 1: 2x on their mean; 13,000 against 7,000 steps on the mean steps
    assert "| 9,000, 4,000 | 3,000, 4,000 | 3.00, 1.00 (2.00x; 1.86x) |" in line


def test_the_table_says_what_made_the_person_take_over(tmp_path: Path) -> None:
    alone = summarize_run(_fake(tmp_path / "a", "handrail", [0.9, 0.9, 0.9], None))
    counts = {"off course": 7, "stall": 0, "regress": 3}
    helped = summarize_run(_fake(tmp_path / "h", "handrail-hil", [0.9, 0.9, 0.9], [5, 0, 0],
                                 counts))  # fmt: skip
    assert helped["human"]["takeovers"] == counts
    lines = hil.table([alone, helped])
    assert lines[-3:] == ["| task | seed | takeovers: off course / stall / regress |",
                          "|---|---|---|", "| pick_cube | 0 | 7 / 0 / 3 |"]  # fmt: skip
    assert hil.table([alone, summarize_run(_fake(tmp_path / "o", "handrail-hil", [0.9] * 3,
                                                 [5, 0, 0]))])[-1].startswith("| pick_cube | 0 | 3,000")  # fmt: skip
