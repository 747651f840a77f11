"""``handrail bench learning``: does each learner reach the goal, how fast, and does it stay?

Runs ``handrail train`` for every task x learner x seed (sparse reward, the same scripted
demonstrations for every learner, the task's preset budget), each run in its own process pinned
to one CPU, as many at a time as there are CPUs. Then it evaluates each run's final policy on
``final_episodes`` fresh episodes and prints one row per task and learner:

- env steps and minutes to 90% sustained: the first point where 3 consecutive evaluations
  (``eval_episodes`` each) are all at or above 90%, per seed; minutes of training, the
  evaluations' own time left out (it depends on how often one evaluates);
- the lowest evaluation after that point (a collapse shows here) and the final success;
- the training policy's own success after that point, over the evaluations' success there.

Learners: ``handrail`` (the task's preset), ``sb3`` and ``sbx`` (their SAC with handrail's
sizes, rates, UTD and n-step, the demos preloaded in their replay buffer). A Gymnasium id
without a preset (``--tasks HalfCheetah-v5``) is trained without demonstrations, handrail with
its generic preset and the peers with their own defaults, and its row reports the final return
and the wall clock instead. A task of the user's own (``module:EnvId``) whose module offers
``record_demos(path, episodes, seed)`` and ``SUCCESS_KEY`` (as ``handrail.examples.lift_can``
does) is benchmarked as a user would train it: ``--demos`` demonstrations recorded once through
the store API, then ``handrail train --task T --demos STORE --success-key KEY`` with no other
option (the bench adds only its seed, budget, evaluations and run folder). Finished runs are
kept and reused (``--fresh`` reruns them) and a run the bench was stopped in resumes from its
latest checkpoint, so a long bench can be stopped and continued. Plots per task: success (or return) against env steps
and against wall clock, every learner on one plot.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import tyro

LEARNERS = ("handrail", "handrail-hil", "sb3", "sbx")
"""Learners the bench knows: handrail's JAX SAC, the same with the simulated person in the loop
(``--human simulated``, see ``handrail bench hil``), Stable-Baselines3's SAC, SBX's SAC."""
SUSTAIN = (0.9, 3)
"""Success threshold and how many consecutive evaluations must reach it."""
FINAL_SEED = 500_000
"""Seed of the first final-evaluation episode (never seen during training evaluations)."""


@dataclass(frozen=True)
class BenchLearningConfig:
    """Options of ``handrail bench learning``."""

    tasks: tuple[str, ...] = ("pick_cube", "peg_insert", "push")
    """Tasks to train on."""
    learners: tuple[Literal["handrail", "handrail-hil", "sb3", "sbx"], ...] = (
        "handrail",
        "sb3",
        "sbx",
    )
    """Learners to compare."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds per task and learner."""
    demos: int = 20
    """Scripted expert demonstrations given to every learner."""
    steps: int | None = None
    """Env steps per run (default: the task preset's budget)."""
    eval_every: int = 1_000
    """Env steps between evaluations."""
    eval_episodes: int = 50
    """Episodes per evaluation."""
    final_episodes: int = 100
    """Episodes of the final evaluation of each run."""
    jobs: int = 0
    """Runs at a time, each pinned to one CPU (0: one per CPU of this process; start a second
    bench beside it under ``taskset -c`` so that the two do not share a CPU)."""
    out: Path = Path("runs/bench_learning")
    """Folder of the runs, the table (bench.json, bench.md) and the plots."""
    train_args: str = ""
    """More ``handrail train`` options for every handrail run (an ablation), as one string:
    --train-args="--sac.utd 4"; give the ablation its own --out."""
    fresh: bool = False
    """Rerun runs that already finished (default: reuse them)."""
    report_only: bool = False
    """Start no run: tabulate and plot the finished runs of the plan found in --out."""
    quick: bool = False
    """A smoke run under 10 minutes: pick_cube, handrail and sb3, seed 0, 6k steps, 20
    evaluation episodes. It shows the bench works, not whether a goal is met."""


@dataclass(frozen=True)
class Run:
    """One training run of the bench."""

    task: str
    learner: str
    seed: int
    steps: int
    folder: Path
    argv: tuple[str, ...] = field(default=())

    @property
    def done(self) -> bool:
        """The run finished and was evaluated."""
        return (self.folder / "final.json").is_file()


def own_task(task: str) -> tuple[Any, str] | None:
    """``(record_demos, success key)`` of a ``module:EnvId`` task whose module offers both,
    else None (see the module docstring)."""
    if ":" not in task:
        return None
    import importlib

    module = importlib.import_module(task.split(":", 1)[0])
    record, key = getattr(module, "record_demos", None), getattr(module, "SUCCESS_KEY", None)
    return (record, key) if callable(record) and isinstance(key, str) else None


def demo_store(cfg: BenchLearningConfig, task: str) -> Path:
    """Where the bench keeps the demonstrations it records for a task of the user's own."""
    return cfg.out / task / f"demos-{cfg.demos}"


def record_own_demos(cfg: BenchLearningConfig) -> None:
    """Record the demonstrations of every task of the user's own that has none yet."""
    for task in cfg.tasks:
        own = own_task(task)
        store = demo_store(cfg, task)
        if own is not None and not store.exists():
            written = own[0](store, episodes=cfg.demos, seed=0)
            print(f"bench learning: {written} demonstrations of {task} recorded into {store}")


def plan(cfg: BenchLearningConfig) -> list[Run]:
    """Every run of the bench, with its ``handrail train`` arguments (unknown tasks fail here,
    before any run starts)."""
    from handrail.app.config import preset
    from handrail.app.envs import HANDRAIL_TASKS, check_tasks

    if cfg.quick:
        cfg = BenchLearningConfig(tasks=("pick_cube",), learners=("handrail", "sb3"), seeds=(0,),
                                  steps=6_000, eval_episodes=20, final_episodes=20,
                                  jobs=cfg.jobs, out=cfg.out, fresh=cfg.fresh,
                                  report_only=cfg.report_only)  # fmt: skip
    check_tasks(cfg.tasks)
    runs = []
    for task in cfg.tasks:
        own = own_task(task)
        given = ["--demos", str(demo_store(cfg, task)), "--success-key", own[1]] if own else []
        steps = cfg.steps or (preset(task, demos=demo_store(cfg, task), success_key=own[1]).steps
                              if own else preset(task).steps)  # fmt: skip
        for learner in cfg.learners:
            for seed in cfg.seeds:
                folder = cfg.out / task / f"{learner}-s{seed}"
                arm = task in HANDRAIL_TASKS or own is not None
                argv = ["--task", task, "--seed", str(seed), "--steps", str(steps), *given,
                        *(["--expert-demos", str(cfg.demos if arm else 0)] if not own else []),
                        "--eval-every", str(cfg.eval_every if arm else steps // 5),
                        "--eval-episodes", str(cfg.eval_episodes if arm else 5),
                        "--run-dir", str(folder), "--no-progress",
                        "--learner", learner if learner in ("sb3", "sbx") else "jax",
                        *(["--human", "simulated"] if learner == "handrail-hil" else []),
                        *(shlex.split(cfg.train_args) if learner.startswith("handrail") else
                          ["--peer-defaults"] if not arm else [])]  # fmt: skip
                runs.append(Run(task, learner, seed, steps, folder, tuple(argv)))
    return runs


def _child(spec: dict[str, Any]) -> None:
    """Inside the pinned process: train (or resume a run a stopped bench left with a
    checkpoint), then evaluate the final policy."""
    os.sched_setaffinity(0, {spec["cpu"]})
    from handrail.launch.commands.train import parse_args, train

    folder = Path(spec["folder"])
    if (folder / "checkpoints" / "latest").exists() and (folder / "config.json").is_file():
        # hours of a pixel run are not thrown away because the bench was stopped
        argv = list(spec["argv"])
        task = argv[argv.index("--task") + 1]
        print(f"resuming {folder} from its latest checkpoint", flush=True)
        train(parse_args(["--resume", str(folder), "--task", task, "--no-progress"]))
    else:
        if folder.exists():
            import shutil

            shutil.rmtree(folder)
        train(parse_args(spec["argv"]))
    if stopped_short(folder, spec.get("steps")):  # a Ctrl-C: the next bench goes on with it
        print(f"{folder} stopped before its {spec['steps']} env steps: no final evaluation; "
              "the same bench command resumes it", flush=True)  # fmt: skip
        return
    result = _final_eval(folder, spec["final_episodes"])
    (folder / "final.json").write_text(json.dumps(result))


def stopped_short(folder: Path, steps: int | None) -> bool:
    """Whether a handrail run's latest checkpoint holds fewer env steps than it was to train
    (stopped by Ctrl-C); a peer's run (no such checkpoint) never is."""
    counters = folder / "checkpoints" / "latest" / "trainer.json"
    if steps is None or not counters.is_file():
        return False
    return int(json.loads(counters.read_text())["actor"]["env_steps"]) < steps


def _final_eval(folder: Path, episodes: int) -> dict[str, Any]:
    """Success of the run's last policy on fresh episodes (and how its failures ended)."""
    from handrail.app.runs import run_env
    from handrail.learners.evaluation import evaluate
    from handrail.learners.policies import load_run_policy

    run = load_run_policy(folder, "latest")
    env = run_env(run)
    result = evaluate(env, run.policy, episodes, FINAL_SEED, success_key=run.success_key)
    env.close()
    return result.as_record()


def execute(
    runs: Sequence[Run], jobs: int, final_episodes: int, fresh: bool, name: str = "bench learning"
) -> None:
    """Run every unfinished run, ``jobs`` at a time, each pinned to its own CPU of this
    process's (a second bench beside it under ``taskset -c`` gets other CPUs); ``name`` labels
    the progress bar and messages."""
    import time

    from tqdm.auto import tqdm

    cpus = sorted(os.sched_getaffinity(0))
    slots = cpus[: min(jobs or len(cpus), len(cpus))]
    todo = [r for r in runs if fresh or not r.done]
    running: dict[int, tuple[subprocess.Popen[bytes], Run]] = {}
    with tqdm(total=len(todo), desc=name, unit="run") as bar:
        while todo or running:
            for cpu, (proc, run) in list(running.items()):
                if proc.poll() is not None:
                    del running[cpu]
                    bar.update(1)
                    if not run.done:
                        bar.write(f"{name}: {run.folder} failed; see {run.folder}.log")
            for cpu in [c for c in slots if c not in running][: len(todo)]:
                nxt = todo.pop(0)
                running[cpu] = (_start(nxt, cpu, final_episodes), nxt)
            time.sleep(1.0)


def _start(run: Run, cpu: int, final_episodes: int) -> subprocess.Popen[bytes]:
    """One run in a child process pinned to ``cpu``; its output goes to ``<run>.log``."""
    run.folder.parent.mkdir(parents=True, exist_ok=True)
    spec = {"cpu": cpu, "folder": str(run.folder), "argv": list(run.argv),
            "final_episodes": final_episodes, "steps": run.steps}  # fmt: skip
    with open(run.folder.parent / f"{run.folder.name}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "handrail.bench.learning", json.dumps(spec)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )  # fmt: skip


def sustained_at(evals: Sequence[dict[str, Any]], threshold: float = SUSTAIN[0]) -> int | None:
    """Index of the evaluation at which success has been >= ``threshold`` (90%) for 3
    evaluations in a row."""
    count = SUSTAIN[1]
    streak = 0
    for i, record in enumerate(evals):
        streak = streak + 1 if (record.get("success_rate") or 0.0) >= threshold else 0
        if streak == count:
            return i
    return None


def _train_s(record: dict[str, Any]) -> float:
    """Training seconds at an evaluation (wall clock for runs logged before evaluations were
    timed)."""
    return float(record.get("train_time_s", record["wall_time_s"]))


def summarize_run(run: Run) -> dict[str, Any]:
    """One run's numbers: when it sustained 90%, the worst eval after, training success."""
    records = [json.loads(line) for line in (run.folder / "metrics.jsonl").read_text().splitlines()
               if line.strip()]  # fmt: skip
    evals = [r for r in records if r["kind"] == "eval"]
    episodes = [r for r in records if r["kind"] == "episode"]
    out: dict[str, Any] = {"task": run.task, "learner": run.learner, "seed": run.seed,
                           "final": json.loads((run.folder / "final.json").read_text())}  # fmt: skip
    at = sustained_at(evals)
    out["minutes"] = _train_s(evals[-1]) / 60.0 if evals else None
    out["curve"] = [(r["env_steps"], _train_s(r), r.get("success_rate")
                     if r.get("success_rate") is not None else r["mean_return"]) for r in evals]  # fmt: skip
    if any("human_steps" in e for e in episodes):
        from handrail.learners.monitor import intervention_summary

        out["human"] = intervention_summary(episodes)
        takeovers = [r for r in records if r["kind"] == "takeovers"]
        if takeovers:  # what made the simulated person take over (the last session's count)
            out["human"]["takeovers"] = {k: v for k, v in takeovers[-1].items()
                                         if k not in ("kind", "env_steps", "wall_time_s")}  # fmt: skip
    if at is None:
        return out
    since = evals[at]["env_steps"]
    out["human_steps_to_goal"] = sum(int(e.get("human_steps", 0)) for e in episodes
                                     if e["env_steps"] <= since)  # fmt: skip
    later = [r["success_rate"] for r in evals[at:]]
    train = [e.get("success", 0.0) for e in episodes if e["env_steps"] > since]
    out.update(steps_to_goal=since, minutes_to_goal=_train_s(evals[at]) / 60.0,
               min_after=min(later), eval_after=float(np.mean(later)),
               train_after=float(np.mean(train)) if train else None)  # fmt: skip
    return out


def seed_cells(values: Sequence[Any], fmt: str) -> str:
    """One table cell: each seed's value, "-" where it has none."""
    return ", ".join("-" if v is None else format(v, fmt) for v in values)


def speed_up(slow: Sequence[float | None], fast: Sequence[float | None]) -> tuple[list[float], str]:
    """Per seed, the env steps ``slow`` over ``fast`` to a goal, and their summary: the mean of
    the seeds' ratios, then the ratio of the mean steps, which one lucky seed sways less ("-"
    unless every seed reached both goals)."""
    pairs = [(s, f) for s, f in zip(slow, fast, strict=True) if s and f]
    ratios = [s / f for s, f in pairs]
    if not ratios or len(ratios) != len(slow):
        return ratios, "-"
    mean_slow, mean_fast = (float(np.mean(side)) for side in zip(*pairs, strict=True))
    return ratios, f"{np.mean(ratios):.2f}x; {mean_slow / mean_fast:.2f}x"


def _cells(group: Sequence[dict[str, Any]], key: str, fmt: str) -> str:
    """One column of a table line: each seed's ``key``, "-" where it has none."""
    return seed_cells([r.get(key) for r in group], fmt)


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The Markdown tables: one line per task and learner, seeds side by side."""
    success = [r for r in rows if r["final"].get("success_rate") is not None]
    returns = [r for r in rows if r["final"].get("success_rate") is None]
    return (_success_table(success) if success else []) + (
        _return_table(returns) if returns else []
    )


def _groups(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(task, learner, rows by seed) in task, then learner order."""
    keys = sorted({(r["task"], r["learner"]) for r in rows},
                  key=lambda k: (k[0], LEARNERS.index(k[1])))  # fmt: skip
    return [(t, lr, sorted((r for r in rows if (r["task"], r["learner"]) == (t, lr)),
                           key=lambda r: r["seed"])) for t, lr in keys]  # fmt: skip


def _return_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Tasks without a success flag: final return and wall clock, handrail's speed over each."""
    lines = ["", "| task | learner | seeds | final return (mean) | minutes | handrail's wall clock "
             "advantage |", "|---|---|---|---|---|---|"]  # fmt: skip
    minutes = {(t, lr): float(np.mean([r["minutes"] for r in g])) for t, lr, g in _groups(rows)}
    for task, learner, group in _groups(rows):
        finals = [{"ret": r["final"]["mean_return"]} for r in group]
        mean = float(np.mean([f["ret"] for f in finals]))
        ours = minutes.get((task, "handrail"))
        speed = (
            ""
            if learner == "handrail" or ours is None
            else f"{minutes[(task, learner)] / ours:.2f}x"
        )
        lines.append(f"| {task} | {learner} | {_cells(group, 'seed', 'd')} | "
                     f"{_cells(finals, 'ret', '.0f')} ({mean:.0f}) | "
                     f"{_cells(group, 'minutes', '.1f')} | {speed} |")  # fmt: skip
    return lines


def _success_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Tasks with a success flag: when 90% was sustained, and whether it stayed."""
    lines = ["| task | learner | seeds | env steps to 90% sustained | minutes to 90% | lowest "
             "eval after | final success | training / eval success after |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for task, learner, group in _groups(rows):
        ratios = [{**r, "ratio": r["train_after"] / max(r["eval_after"], 1e-9)}
                  if r.get("train_after") is not None else r for r in group]  # fmt: skip
        finals = [{"final_rate": r["final"]["success_rate"]} for r in group]
        lines.append(
            f"| {task} | {learner} | {_cells(group, 'seed', 'd')} | "
            f"{_cells(group, 'steps_to_goal', ',')} | {_cells(group, 'minutes_to_goal', '.1f')} | "
            f"{_cells(group, 'min_after', '.0%')} | {_cells(finals, 'final_rate', '.0%')} | "
            f"{_cells(ratios, 'ratio', '.2f')} |"
        )
    return lines


def _success_tasks(rows: Sequence[dict[str, Any]]) -> set[str]:
    return {r["task"] for r in rows if r["final"].get("success_rate") is not None}


def plot(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """Per task: success vs env steps and vs wall clock, every learner (seeds thin, mean bold)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    paths = []
    for task in sorted({r["task"] for r in rows}):
        fig = Figure(figsize=(10, 3.6), layout="constrained")
        axes = fig.subplots(1, 2, sharey=True)
        for color, learner in zip(("C0", "C3", "C1", "C2"), LEARNERS, strict=True):
            group = [r for r in rows if (r["task"], r["learner"]) == (task, learner)]
            for col, scale in ((0, 1e-3), (1, 1 / 60)):
                for i, r in enumerate(group):
                    x = [p[col] * scale for p in r["curve"]]
                    y = [p[2] for p in r["curve"]]
                    axes[col].plot(x, y, color=color, lw=1, alpha=0.7,
                                   label=learner if i == 0 else None)  # fmt: skip
        axes[0].set_xlabel("env steps (thousands)")
        axes[1].set_xlabel("training minutes (one CPU per run, evaluations excluded)")
        axes[0].set_ylabel("eval success" if task in _success_tasks(rows) else "eval return")
        for ax in axes:
            if task in _success_tasks(rows):
                ax.axhline(SUSTAIN[0], color="grey", lw=0.8, ls="--")
            ax.grid(alpha=0.3)
        axes[0].legend(loc="lower right", fontsize=8)
        fig.suptitle(f"{task}: every seed" + (", sparse reward, scripted demos"
                                                if task in _success_tasks(rows) else ""))  # fmt: skip
        path = out / f"{task}.png"
        fig.savefig(path, dpi=80)
        paths.append(path)
    return paths


def bench_learning(cfg: Annotated[BenchLearningConfig, tyro.conf.arg(name="")]) -> int:
    """Learning speed and reliability of handrail, SB3 and SBX on the sparse-reward tasks."""
    runs = plan(cfg)
    if not cfg.report_only:
        record_own_demos(cfg)
        execute(runs, cfg.jobs, 20 if cfg.quick else cfg.final_episodes, cfg.fresh)
    rows = [summarize_run(r) for r in runs if r.done]
    failed = [] if cfg.report_only else [str(r.folder) for r in runs if not r.done]
    lines = table(rows)
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "bench.json").write_text(json.dumps({"config": asdict(cfg), "rows": rows},
                                                   default=str, indent=1))  # fmt: skip
    (cfg.out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for path in plot(rows, cfg.out):
        print(f"plot: {path}")
    if failed:
        print(f"failed runs (see their .log): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
