"""``handrail bench hil``: do interventions make learning faster, and is the policy better for it?

HIL-SERL's central result, measured in simulation: for each task and seed, one run without a
human and one with the simulated person in the loop (``handrail train --human simulated``: the
task's scripted expert takes over when the policy goes off course, with a reaction delay, a
budget per episode and a hand-back rule; see :mod:`handrail.sim.simulated_human`). Everything
else is the task's preset (sparse reward, 20 scripted demos, and the simulated person's
settings: peg_insert's is a patient one). The runs are those of ``handrail
bench learning`` (learners ``handrail`` and ``handrail-hil``), so an existing bench folder is
reused: point ``--out`` at it and only the missing runs are trained.

The table: env steps to 90% sustained (3 evaluations of 50 episodes in a row) without and with
the person, their ratio, the human steps spent until then (and the human share of all steps),
and the final policy's success on 100 fresh episodes, always run WITHOUT the person.
Goal: at least 2x fewer env steps with the person, and a final policy at least as successful.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Final

import tyro

from handrail.bench.learning import (
    BenchLearningConfig,
    execute,
    plan,
    plot,
    seed_cells,
    speed_up,
    summarize_run,
)

ALONE: Final = "handrail"
HELPED: Final = "handrail-hil"


@dataclass(frozen=True)
class BenchHilConfig:
    """Options of ``handrail bench hil``."""

    tasks: tuple[str, ...] = ("pick_cube", "peg_insert")
    """Tasks to train on (handrail arm tasks: the simulated person is their scripted expert)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds per task, with and without the person."""
    steps: int | None = None
    """Env steps per run (default: the task preset's budget)."""
    eval_every: int = 1_000
    """Env steps between evaluations."""
    eval_episodes: int = 50
    """Episodes per evaluation (always without the person)."""
    final_episodes: int = 100
    """Episodes of each run's final evaluation (without the person)."""
    jobs: int = 0
    """Runs at a time, each pinned to one CPU (0: one per CPU of this process; start a second
    bench beside it under ``taskset -c`` so that the two do not share a CPU)."""
    out: Path = Path("runs/bench_hil")
    """Folder of the runs, table and plots (a ``bench learning`` folder is reused)."""
    train_args: str = ""
    """More ``handrail train`` options for both arms of the comparison, e.g.
    --train-args="--hil.simulated.budget-steps 20"."""
    fresh: bool = False
    """Rerun runs that already finished."""
    report_only: bool = False
    """Start no run: tabulate the finished ones."""
    quick: bool = False
    """A smoke run under 10 minutes: pick_cube, seed 0, 3k steps, 10 evaluation episodes."""


def learning_config(cfg: BenchHilConfig) -> BenchLearningConfig:
    """The ``bench learning`` plan behind this bench."""
    if cfg.quick:
        return BenchLearningConfig(tasks=("pick_cube",), learners=(ALONE, HELPED), seeds=(0,),
                                   steps=3_000, eval_episodes=10, jobs=cfg.jobs, out=cfg.out,
                                   train_args=cfg.train_args, fresh=cfg.fresh,
                                   report_only=cfg.report_only)  # fmt: skip
    return BenchLearningConfig(
        tasks=cfg.tasks, learners=(ALONE, HELPED), seeds=cfg.seeds, steps=cfg.steps,
        eval_every=cfg.eval_every, eval_episodes=cfg.eval_episodes,
        final_episodes=cfg.final_episodes, jobs=cfg.jobs, out=cfg.out,
        train_args=cfg.train_args, fresh=cfg.fresh, report_only=cfg.report_only,
    )  # fmt: skip


def _pairs(values: list[tuple[Any, Any]], sep: str) -> str:
    """Per seed, two percentages joined by ``sep`` ("-" where a run has none)."""
    return ", ".join(sep.join("-" if v is None else f"{v:.0%}" for v in pair) for pair in values)


def table(rows: list[dict[str, Any]]) -> list[str]:
    """One line per task: steps to 90% without and with the person, human cost, whether the
    policy held what it learned (its lowest evaluation from 90% sustained on), final success."""
    lines = ["| task | seeds | env steps to 90%, no human | with the simulated human | "
             "speed-up (mean; on mean steps) | human steps to 90% | human share: all steps / "
             "last 100 episodes | lowest eval after 90%, no human / with | final success (policy "
             "alone), no human / with |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for task in sorted({r["task"] for r in rows}):
        by = {lr: {r["seed"]: r for r in rows if (r["task"], r["learner"]) == (task, lr)}
              for lr in (ALONE, HELPED)}  # fmt: skip
        seeds = sorted(set(by[ALONE]) & set(by[HELPED]))
        if not seeds:
            continue
        alone = [by[ALONE][s].get("steps_to_goal") for s in seeds]
        helped = [by[HELPED][s].get("steps_to_goal") for s in seeds]
        ratios, speed = speed_up(alone, helped)
        human = [by[HELPED][s].get("human_steps_to_goal") for s in seeds]
        person = [by[HELPED][s].get("human", {}) for s in seeds]
        share = [(p.get("human_share"), p.get("human_share_last_100")) for p in person]
        lowest = [(by[ALONE][s].get("min_after"), by[HELPED][s].get("min_after")) for s in seeds]
        finals = [(by[ALONE][s]["final"]["success_rate"], by[HELPED][s]["final"]["success_rate"])
                  for s in seeds]  # fmt: skip
        cells = [seed_cells(seeds, "d"), seed_cells(alone, ","), seed_cells(helped, ","),
                 f"{seed_cells(ratios, '.2f')} ({speed})", seed_cells(human, ","),
                 _pairs(share, " / "), _pairs(lowest, " / "), _pairs(finals, " / ")]  # fmt: skip
        lines.append(f"| {task} | {' | '.join(cells)} |")
    return lines + _trigger_lines(rows)


def _trigger_lines(rows: list[dict[str, Any]]) -> list[str]:
    """What made the simulated person take over, per run with the person (if it was counted)."""
    counted = [r for r in rows if r["learner"] == HELPED and r.get("human", {}).get("takeovers")]
    if not counted:
        return []
    names = list(counted[0]["human"]["takeovers"])
    lines = ["", f"| task | seed | takeovers: {' / '.join(names)} |", "|---|---|---|"]
    for r in sorted(counted, key=lambda r: (r["task"], r["seed"])):
        counts = r["human"]["takeovers"]
        lines.append(
            f"| {r['task']} | {r['seed']} | {' / '.join(str(counts.get(n, 0)) for n in names)} |"
        )
    return lines


def bench_hil(cfg: Annotated[BenchHilConfig, tyro.conf.arg(name="")]) -> int:
    """Env steps to 90% with and without the simulated person in the loop (HIL-SERL's effect)."""
    from handrail.app.envs import check_tasks

    check_tasks(
        cfg.tasks, handrail_only="the simulated person is a handrail task's scripted expert"
    )
    learning = learning_config(cfg)
    runs = plan(learning)
    if not cfg.report_only:
        execute(runs, cfg.jobs, 20 if cfg.quick else cfg.final_episodes, cfg.fresh, "bench hil")
    rows = [summarize_run(r) for r in runs if r.done]
    lines = table(rows)
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "bench_hil.json").write_text(json.dumps({"config": asdict(cfg), "rows": rows},
                                                       default=str, indent=1))  # fmt: skip
    (cfg.out / "bench_hil.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for path in plot(rows, cfg.out):
        print(f"plot: {path}")
    failed = [] if cfg.report_only else [str(r.folder) for r in runs if not r.done]
    if failed:
        print(f"failed runs (see their .log): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
