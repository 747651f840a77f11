"""``handrail bench residual``: does a learned correction lift an imperfect base, and how fast?

For each task, a deliberately imperfect base: ``handrail bc`` trained on ``demos`` (10) scripted
expert demonstrations, measured alone on ``final_episodes`` fresh episodes. Then, per seed, two
runs on the same demonstrations (sparse reward, the task's presets otherwise):

- ``residual``: ``handrail train --residual-on bc:<the BC run> --demos <the store>``;
- ``sac``: ``handrail train --demos <the store>``, SAC from scratch;
- ``sac-nodemos`` (with ``--arms``): ``handrail train --expert-demos 0``, SAC from scratch
  without the demonstrations, the usual baseline of residual RL papers.

The table: the base's success, alone on fresh episodes and on each seed's evaluation episodes
(a run evaluates on the same ``eval_episodes`` every time); env steps until the residual
sustains 95% (3 evaluations of ``eval_episodes`` in a row), its final success, and its harm:
how far its lowest evaluation fell below the base on the same episodes; env steps until SAC
sustains 90%; their ratio (and the same for SAC without demonstrations, where a run that never
sustains 90% gives a lower bound: its budget over the residual's steps). Beside the env steps,
what a robot pays: the failed training episodes until each arm's threshold ("≥N" where the run
never reached it: all its failed episodes). Goals: no evaluation more than 10 points below the
base, and the residual's failed episodes to 95% at most a third of SAC's to 90%. A second table
says where the residual's failed episodes are: in its warm-up, in its critic-only blocks (the
base acting alone) or once its actor may act, by the env step each episode ended at. A third
says how each policy's failed episodes of the final evaluation ended (the task's own words,
``handrail eval``'s count), the base alone's beside them. Runs,
demonstrations and the base are kept in ``--out`` and reused, so the bench can be stopped and
continued (``--fresh`` redoes the runs).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import tyro

from handrail.bench.learning import (
    FINAL_SEED,
    Run,
    execute,
    seed_cells,
    speed_up,
    summarize_run,
    sustained_at,
)
from handrail.learners.evaluation import EVAL_SEED_OFFSET, EvalResult, outcomes_text, run_seed
from handrail.learners.runlog import CONFIG_FILE, METRICS_FILE

RESIDUAL: Final = "residual"
SAC: Final = "sac"
NO_DEMOS: Final = "sac-nodemos"
GOALS = {RESIDUAL: 0.95, SAC: 0.9, NO_DEMOS: 0.9}
"""Sustained success each arm is timed to (its keys, in order: the arms)."""
# The base is `handrail bc` on the task's preset (app/config.py): its BC settings and
# the observation keys both arms train with. On peg_insert those are only where to go next
# (``entry_from_tip_dm``, ``hole_yaw_from_peg_rad``): from the absolute poses of 10 demos every
# BC variant tried stayed at 0-10%, and every residual variant tried on them drifted the base
# down to 0-36% within 600 env steps of its actor starting.


@dataclass(frozen=True)
class BenchResidualConfig:
    """Options of ``handrail bench residual``."""

    tasks: tuple[str, ...] = ("pick_cube", "peg_insert")
    """Handrail arm tasks (the demonstrations come from their scripted experts)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds of the residual and SAC runs (the base is trained once per task)."""
    demos: int = 10
    """Scripted demonstrations: the base's training data and both arms' demo buffer."""
    residual_steps: int = 10_000
    """Env steps of each residual run."""
    sac_steps: int | None = None
    """Env steps of each SAC run (default: the task preset's budget)."""
    nodemos_steps: int | None = None
    """Env steps of each SAC run without demonstrations (default: the task preset's budget)."""
    eval_every: int = 500
    """Env steps between evaluations (both arms)."""
    eval_episodes: int = 50
    """Episodes per evaluation."""
    final_episodes: int = 100
    """Episodes of the base's and each run's final evaluation."""
    bc_args: str = ""
    """More ``handrail bc`` options for the base on every task, as one string:
    --bc-args="--bc.steps 4000" (they start from the task's BC preset, ``handrail bc``'s
    defaults)."""
    train_args: str = ""
    """More ``handrail train`` options for the residual runs on every task, as one string:
    --train-args="--sac.residual-scale 0.2" (they start from the task's residual preset,
    ``--residual-on``'s defaults)."""
    arms: tuple[Literal["residual", "sac", "sac-nodemos"], ...] = (RESIDUAL, SAC)
    """Which arms to run (the table pairs them where both exist); ``sac-nodemos`` adds SAC
    without the demonstrations."""
    jobs: int = 0
    """Runs at a time, each pinned to one CPU (0: one per CPU of this process; start a second
    bench beside it under ``taskset -c`` so that the two do not share a CPU)."""
    out: Path = Path("runs/bench_residual")
    """Folder of the store, the base, the runs, the table and the plots."""
    fresh: bool = False
    """Rerun runs that already finished."""
    report_only: bool = False
    """Start nothing: tabulate what is there."""
    quick: bool = False
    """A smoke run under 10 minutes: pick_cube, seed 0, 1.5k residual and 1.5k SAC steps,
    10 evaluation episodes, a short BC."""


def _quick(cfg: BenchResidualConfig) -> BenchResidualConfig:
    return BenchResidualConfig(
        tasks=("pick_cube",), seeds=(0,), demos=cfg.demos, residual_steps=1_500, sac_steps=1_500,
        eval_every=500, eval_episodes=10, final_episodes=20,
        nodemos_steps=1_500, bc_args=cfg.bc_args or "--bc.steps 500",
        train_args=cfg.train_args, arms=cfg.arms, jobs=cfg.jobs, out=cfg.out, fresh=cfg.fresh,
        report_only=cfg.report_only,
    )  # fmt: skip


def prepare_base(cfg: BenchResidualConfig, task: str) -> dict[str, Any]:
    """The task's demo store and BC base (made once), and the base's own success."""
    import shlex

    from handrail.launch import cli

    folder = cfg.out / task
    store, bc_run = folder / "demos", folder / "bc"
    if not store.exists():
        argv = ["record", "--task", task, "--episodes", str(cfg.demos), "--seed", "1000000",
                "--out", str(store)]  # fmt: skip
        if cli.main(argv) != 0:
            raise RuntimeError(
                f"bench residual: recording {cfg.demos} expert demos of {task} failed"
            )
    if not (bc_run / "checkpoints" / "best").exists():
        argv = ["bc", "--demos", str(store), "--task", task, "--run-dir", str(bc_run),
                "--eval-episodes", "10", "--no-progress", *shlex.split(cfg.bc_args)]  # fmt: skip
        if cli.main(argv) != 0:
            raise RuntimeError(f"bench residual: handrail bc on {store} failed")
    base_file = folder / "base.json"
    spec = f"bc:{bc_run}"
    info = json.loads(base_file.read_text()) if base_file.is_file() else {}
    if "base_failed_outcomes" not in info:  # new, or kept from before outcomes were counted
        final = base_evaluation(task, spec, cfg.final_episodes, FINAL_SEED)
        info.update(base_success=final.success_rate, base_episodes=cfg.final_episodes,
                    base_failed_outcomes=dict(final.failure_outcomes()))  # fmt: skip
        base_file.write_text(json.dumps(info))
    # "first seed/episodes" -> the base on those evaluation episodes (a run of seed s evaluates
    # from run_seed(s, EVAL_SEED_OFFSET); keyed by it, a table measured on other streams is
    # never reused)
    on_evals = info.setdefault("base_on_evals", {})

    def key(seed: int) -> str:
        return f"from {run_seed(seed, EVAL_SEED_OFFSET)}/{cfg.eval_episodes}"

    missing = [s for s in cfg.seeds if key(s) not in on_evals]
    for seed in missing:
        on_evals[key(seed)] = base_evaluation(task, spec, cfg.eval_episodes,
                                              run_seed(seed, EVAL_SEED_OFFSET)).success_rate  # fmt: skip
    if missing:
        base_file.write_text(json.dumps(info))
    this = {str(s): on_evals[key(s)] for s in cfg.seeds}
    return {"store": store, "base": spec, **info, "base_on_evals": this}


def base_evaluation(task: str, spec: str, episodes: int, seed: int) -> EvalResult:
    """The base alone on ``episodes`` episodes from ``seed`` on (its success rate is set)."""
    from handrail.app.bases import make_base
    from handrail.app.config import preset
    from handrail.app.envs import make_env
    from handrail.learners.agents.residual import ResidualObservation, base_only
    from handrail.learners.evaluation import evaluate
    from handrail.learners.specs import ActionSpec

    env = make_env(task, **preset(task).env)
    env = ResidualObservation(env, make_base(spec, task, env))
    result = evaluate(env, base_only(ActionSpec.from_space(env.action_space)), episodes, seed)
    env.close()
    if result.success_rate is None:  # a handrail task reports success on every episode
        raise RuntimeError(f"bench residual: {task} reported no success flag")
    return result


def plan(cfg: BenchResidualConfig, bases: dict[str, dict[str, Any]]) -> list[Run]:
    """Every run: each arm per task and seed."""
    import shlex

    from handrail.app.config import preset

    runs = []
    for task in cfg.tasks:
        info = bases[task]
        for arm in cfg.arms:
            steps = {RESIDUAL: cfg.residual_steps, SAC: cfg.sac_steps,
                     NO_DEMOS: cfg.nodemos_steps}[arm] or preset(task).steps  # fmt: skip
            demos = ["--expert-demos", "0"] if arm == NO_DEMOS else ["--demos", str(info["store"])]
            for seed in cfg.seeds:
                folder = cfg.out / task / f"{arm}-s{seed}"
                argv = ["--task", task, "--seed", str(seed), "--steps", str(steps), *demos,
                        "--eval-every", str(cfg.eval_every), "--eval-episodes",
                        str(cfg.eval_episodes), "--run-dir", str(folder), "--no-progress"]  # fmt: skip
                if arm == RESIDUAL:
                    argv += ["--residual-on", info["base"], *shlex.split(cfg.train_args)]
                runs.append(Run(task, arm, seed, steps, folder, tuple(argv)))
    return runs


def summarize(run: Run) -> dict[str, Any]:
    """``bench learning``'s summary, timed to this arm's goal."""
    row = summarize_run(run)
    records = _records(run)
    evals = [r for r in records if r["kind"] == "eval"]
    at = sustained_at(evals, GOALS[run.learner])
    row["goal"] = GOALS[run.learner]
    row["steps_to_arm_goal"] = None if at is None else evals[at]["env_steps"]
    row["trained_steps"] = evals[-1]["env_steps"] if evals else 0
    row["lowest_eval"] = min((r["success_rate"] for r in evals), default=None)
    until = row["steps_to_arm_goal"] or row["trained_steps"]
    row["failed_to_arm_goal"] = sum(1 for r in records if r["kind"] == "episode"
                                    and r["env_steps"] <= until and not r.get("success"))  # fmt: skip
    if run.learner == RESIDUAL:
        row["phases"] = _phases(run, records, until)
    return row


def _phases(run: Run, records: list[dict[str, Any]], until: int) -> list[list[int]] | None:
    """A residual run's [failed, episodes] in its warm-up, its critic-only blocks (one per env
    step after the warm-up) and with its actor on, up to ``until`` env steps; None without the
    run's config.json or its loop settings."""
    config = run.folder / CONFIG_FILE
    if not config.is_file():
        return None
    settings = json.loads(config.read_text())
    loop, sac = settings.get("loop") or {}, settings.get("sac") or {}
    if "warmup_steps" not in loop:  # not a handrail train run's config
        return None
    warmup = int(loop["warmup_steps"])
    actor = warmup + int(sac.get("actor_delay_blocks", 0))  # runs before it: no critic-only blocks
    phases = [[0, 0], [0, 0], [0, 0]]
    for r in records:
        if r["kind"] == "episode" and r["env_steps"] <= until:
            phase = phases[0 if r["env_steps"] <= warmup else 1 if r["env_steps"] <= actor else 2]
            phase[0] += not r.get("success")
            phase[1] += 1
    return phases


def phase_table(rows: list[dict[str, Any]]) -> list[str]:
    """Where each residual run's failed training episodes until 95% sustained (or until its
    last evaluation) are: failed of ended episodes per phase."""
    lines = ["| task | seed | warm-up | critics only (the actor untrained) | actor on | until |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for row in sorted(rows, key=lambda r: (r["task"], r["seed"])):
        if row["learner"] != RESIDUAL or not row.get("phases"):
            continue
        cells = " | ".join(f"{failed}/{episodes}" for failed, episodes in row["phases"])
        until = row["steps_to_arm_goal"]
        end = f"95% at {until:,}" if until else f"{row['trained_steps']:,} (no 95%)"
        lines.append(f"| {row['task']} | {row['seed']} | {cells} | {end} |")
    return lines if len(lines) > 2 else []


def failure_table(rows: list[dict[str, Any]], bases: dict[str, dict[str, Any]]) -> list[str]:
    """How each policy's failed episodes of the final evaluation ended (the base alone's and
    every run's last policy's, on the same fresh episodes), where the task says."""
    lines = ["| task | policy | seed | final success | how its failed episodes ended |",
             "|---|---|---|---|---|"]  # fmt: skip
    said = False
    for task in sorted(bases):
        base = bases[task]
        said |= bool(base.get("base_failed_outcomes"))
        lines.append(f"| {task} | the base alone | | {base['base_success']:.0%} | "
                     f"{_ended(base['base_success'], base.get('base_failed_outcomes'))} |")  # fmt: skip
        for row in sorted((r for r in rows if r["task"] == task),
                          key=lambda r: (list(GOALS).index(r["learner"]), r["seed"])):  # fmt: skip
            final = row["final"]
            said |= bool(final.get("failed_outcomes"))
            lines.append(f"| {task} | {row['learner']} | {row['seed']} | "
                         f"{final['success_rate']:.0%} | "
                         f"{_ended(final['success_rate'], final.get('failed_outcomes'))} |")  # fmt: skip
    return lines if said else []


def _ended(rate: float, outcomes: dict[str, int] | None) -> str:
    """One cell: ``outcome n, ...``; none failed; or not counted (a run from before)."""
    if rate >= 1.0:
        return "none failed"
    if not outcomes:
        return "not counted"
    return outcomes_text(outcomes)


def _records(run: Run) -> list[dict[str, Any]]:
    text = (run.folder / METRICS_FILE).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def table(rows: list[dict[str, Any]], bases: dict[str, dict[str, Any]]) -> list[str]:
    """One line per task (see the module docstring)."""
    lines = ["| task | base alone | seeds | base on each seed's evaluations | residual: lowest "
             "evaluation (below the base) | residual: env steps to 95% sustained | residual: "
             "failed training episodes until then | residual final success | SAC: env steps to "
             "90% sustained | SAC: failed training episodes until then | SAC final success | "
             "speed-up (mean; on mean steps) | failed episodes, residual over SAC |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    nodemos = any(r["learner"] == NO_DEMOS for r in rows)
    if nodemos:
        lines[0] += (" SAC without demos: env steps to 90% sustained (final success) | residual's "
                     "speed-up over it |")  # fmt: skip
        lines[1] += "---|---|"
    for task in sorted(bases):
        by = {arm: {r["seed"]: r for r in rows if (r["task"], r["learner"]) == (task, arm)}
              for arm in (RESIDUAL, SAC)}  # fmt: skip
        seeds = sorted(set(by[RESIDUAL]) | set(by[SAC]))
        res = [by[RESIDUAL].get(s, {}).get("steps_to_arm_goal") for s in seeds]
        sac = [by[SAC].get(s, {}).get("steps_to_arm_goal") for s in seeds]
        res_final = [by[RESIDUAL][s]["final"]["success_rate"] if s in by[RESIDUAL] else None
                     for s in seeds]  # fmt: skip
        sac_final = [by[SAC][s]["final"]["success_rate"] if s in by[SAC] else None for s in seeds]
        ratios, speed = speed_up(sac, res)
        evals = bases[task].get("base_on_evals", {})  # by seed, on this bench's episodes
        base_evals = [evals.get(str(s)) for s in seeds]
        lowest = [_lowest_cell(by[RESIDUAL].get(s), b) for s, b in zip(seeds, base_evals,
                                                                         strict=True)]  # fmt: skip
        res_failed = [_failed_cell(by[RESIDUAL].get(s)) for s in seeds]
        sac_failed = [_failed_cell(by[SAC].get(s)) for s in seeds]
        failed_ratio = [_failed_ratio(by[RESIDUAL].get(s), by[SAC].get(s)) for s in seeds]
        lines.append(
            f"| {task} | {bases[task]['base_success']:.0%} | {seed_cells(seeds, 'd')} | "
            f"{seed_cells(base_evals, '.0%')} | {', '.join(lowest)} | {seed_cells(res, ',')} | "
            f"{', '.join(res_failed)} | {seed_cells(res_final, '.0%')} | {seed_cells(sac, ',')} | "
            f"{', '.join(sac_failed)} | {seed_cells(sac_final, '.0%')} | "
            f"{seed_cells(ratios, '.2f')} ({speed}) | {', '.join(failed_ratio)} |"
        )
        if nodemos:
            lines[-1] += _nodemos_cells(
                [r for r in rows if (r["task"], r["learner"]) == (task, NO_DEMOS)], res, seeds
            )
    return lines


def _lowest_cell(row: dict[str, Any] | None, base: float | None) -> str:
    """A residual run's lowest evaluation, and how many points it fell below the base's own on
    the same episodes."""
    if row is None or row.get("lowest_eval") is None:
        return "-"
    low = row["lowest_eval"]
    return f"{low:.0%}" if base is None else f"{low:.0%} ({100 * (low - base):+.0f})"


def _failed_cell(row: dict[str, Any] | None) -> str:
    """Failed training episodes until the arm's threshold ("≥N": it never got there)."""
    if row is None or "failed_to_arm_goal" not in row:
        return "-"
    return f"{'' if row['steps_to_arm_goal'] else '≥'}{row['failed_to_arm_goal']}"


def _failed_ratio(res: dict[str, Any] | None, sac: dict[str, Any] | None) -> str:
    """The residual's failed episodes until 95% over SAC's until 90% (a bound where one of
    them never got there; "-" where that bound says nothing)."""
    if not res or not sac or "failed_to_arm_goal" not in res or "failed_to_arm_goal" not in sac:
        return "-"
    mine, theirs = res["failed_to_arm_goal"], sac["failed_to_arm_goal"]
    if not res["steps_to_arm_goal"] and sac["steps_to_arm_goal"]:
        return f"≥{mine / max(theirs, 1):.2f}"
    if res["steps_to_arm_goal"] and not sac["steps_to_arm_goal"]:
        return f"≤{mine / max(theirs, 1):.2f}"
    return f"{mine / max(theirs, 1):.2f}" if res["steps_to_arm_goal"] else "-"


def _nodemos_cells(group: list[dict[str, Any]], res: list[Any], seeds: list[int]) -> str:
    """The two cells of SAC without demonstrations: its steps to 90% (or "not in N") with its
    final success, and the residual's speed-up over it, a lower bound ("≥") where SAC never
    sustained 90% in its N env steps."""
    by = {r["seed"]: r for r in group}
    steps, ratios = [], []
    for seed, fast in zip(seeds, res, strict=True):
        row = by.get(seed)
        if row is None:
            steps.append("-")
            ratios.append("-")
            continue
        at, final = row["steps_to_arm_goal"], row["final"]["success_rate"]
        steps.append(f"{at:,} ({final:.0%})" if at else f"not in {row['trained_steps']:,} "
                     f"({final:.0%})")  # fmt: skip
        ratios.append("-" if not fast else f"{at / fast:.2f}" if at else
                      f"≥{row['trained_steps'] / fast:.2f}")  # fmt: skip
    return f" {', '.join(steps)} | {', '.join(ratios)} |"


def plot(rows: list[dict[str, Any]], bases: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    """Per task: evaluation success against env steps, residual and SAC seeds, the base alone."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    paths = []
    for task in sorted(bases):
        fig = Figure(figsize=(7, 3.6), layout="constrained")
        ax = fig.subplots()
        for color, arm, label in (("C2", RESIDUAL, "residual on the BC base"),
                                  ("C0", SAC, "SAC from scratch"),
                                  ("C7", NO_DEMOS, "SAC without the demos")):  # fmt: skip
            group = [r for r in rows if (r["task"], r["learner"]) == (task, arm)]
            for i, r in enumerate(group):
                ax.plot([p[0] / 1e3 for p in r["curve"]], [p[2] for p in r["curve"]], color=color,
                        lw=1, alpha=0.8, label=label if i == 0 else None)  # fmt: skip
        ax.axhline(bases[task]["base_success"], color="C1", lw=1.5, ls=":",
                   label="BC base alone")  # fmt: skip
        for i, value in enumerate(bases[task].get("base_on_evals", {}).values()):
            ax.axhline(value, color="C1", lw=0.8, ls="-", alpha=0.5,
                       label="the base on a seed's evaluations" if i == 0 else None)  # fmt: skip
        ax.axhline(0.95, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("env steps (thousands)")
        ax.set_ylabel("eval success")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.suptitle(f"{task}: residual RL on a BC base vs SAC, same demos, every seed")
        path = out / f"residual_{task}.png"
        fig.savefig(path, dpi=80)
        paths.append(path)
    return paths


def bench_residual(cfg: Annotated[BenchResidualConfig, tyro.conf.arg(name="")]) -> int:
    """Residual RL on a BC base against SAC from scratch, same demonstrations."""
    from handrail.app.envs import check_tasks

    if cfg.quick:
        cfg = _quick(cfg)
    check_tasks(cfg.tasks, handrail_only="the base is cloned from a handrail task's expert demos")
    cfg.out.mkdir(parents=True, exist_ok=True)
    bases = {task: prepare_base(cfg, task) for task in cfg.tasks}
    runs = plan(cfg, bases)
    if not cfg.report_only:
        execute(runs, cfg.jobs, cfg.final_episodes, cfg.fresh, "bench residual")
    rows = [summarize(r) for r in runs if r.done]
    lines = table(rows, bases)
    phases = phase_table(rows)
    if phases:
        lines += ["", "The residual's failed training episodes by phase (failed/ended):", "",
                  *phases]  # fmt: skip
    ended = failure_table(rows, bases)
    if ended:
        lines += ["", f"How the final evaluation's failed episodes ended ({cfg.final_episodes} "
                  "fresh episodes, the same for every policy):", "", *ended]  # fmt: skip
    (cfg.out / "bench_residual.json").write_text(json.dumps(
        {"config": asdict(cfg), "bases": bases, "rows": rows}, default=str, indent=1))  # fmt: skip
    (cfg.out / "bench_residual.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for path in plot(rows, bases, cfg.out):
        print(f"plot: {path}")
    failed = [] if cfg.report_only else [str(r.folder) for r in runs if not r.done]
    if failed:
        print(f"failed runs (see their .log): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
