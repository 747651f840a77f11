"""``handrail bench vision``: learning what a real arm sees: a learned success reward
(``classifier`` rows) and a policy that sees the cameras, not the object (``pixels`` and
``e2e`` rows).

A robot reports no success. The classifier rows train on a task as a user of one would, with
the success flag replaced by a classifier on camera frames, and check both against the
simulator's own success:

1. ``demos`` scripted demonstrations recorded with the wrist and front cameras, each held at
   the goal after success (``--env-kwargs terminate_on_success=false``) and labelled from its
   per-step sparse reward (``handrail label --from reward``): the frames a person would mark;
2. ``failures`` failed episodes: half of the expert acting with Gaussian noise (near misses),
   half of random actions (the gripper closing on nothing);
3. ``handrail reward train`` on both; ``handrail reward eval`` on as many again, recorded from
   other seeds (held-out episodes): frame precision and recall, episode false positives;
4. per seed, ``handrail train --demos <1> --reward classifier:<3>`` (the task's preset
   otherwise): env steps until the *task's* success holds 90% over 3 evaluations, and what the
   classifier did in training (``reward_classifier.json``: episodes it ended that the task
   says failed, and successes it missed).

The pixel rows learn from the wrist and front cameras and ``proprio`` only (every other state
key, the object's pose among them, left out) through a frozen encoder:

5. ``demos`` scripted demonstrations with the cameras, ending at success as the task does;
6. ``handrail encoder train`` on them and on the failures of 2 (``--encoder.goal-key proprio``:
   the features also predict where each demonstration's arm ends up); its diagnostic: how well
   a linear map of the features (and proprio) gives the object's position on held-out
   demonstrations (R^2; the simulator's pose, never shown to the learner);
7. per seed, ``handrail train --demos <5> --encoder <6> --ignore-obs-keys ...``: env steps to 90%
   sustained by the task's success.

The end-to-end rows (``e2e``) learn from the same cameras and ``proprio`` with the agent's own
encoder, trained through the critics (``handrail train --pixels``: the task's preset under the
``pixels`` layer, and ``--e2e-args``): env steps to 90% sustained by the task's success, per seed.

The ``e2e_classifier`` rows are what a robot gives on both counts: the ``e2e`` runs' cameras
and ``proprio`` in, and the classifier of 3 as the reward, with the demonstrations of 1:
nothing the simulator knows reaches the learner; its success flag only judges.

Everything is kept in ``--out`` and reused, so the bench can be stopped and continued.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
import tyro

from handrail.bench.learning import Run, execute, seed_cells, summarize_run


@dataclass(frozen=True)
class BenchVisionConfig:
    """Options of ``handrail bench vision``."""

    task: str = "pick_cube"
    """A handrail arm task (its scripted expert records the episodes)."""
    rows: tuple[str, ...] = ("classifier", "pixels")
    """Which rows to run: classifier (a learned reward), pixels (cameras into the policy
    through a frozen encoder), e2e (cameras into the policy, its encoder trained end to end),
    e2e_classifier (e2e's input with the classifier's reward)."""
    cameras: str = "front,wrist"
    """Cameras the classifier and the encoder read."""
    image_size: int = 64
    """Camera frames' height and width."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds of the training runs."""
    demos: int = 20
    """Scripted demonstrations: the classifier's success frames and the runs' demo buffer."""
    failures: int = 10
    """Failed episodes labelled for the classifier."""
    corrections: int = 0
    """The classifier rows: false positives the simulated person (the task's success flag)
    marks during each run, at most (``handrail train --corrections.episodes``); with
    ``failures`` they are the labelled failed episodes the classifier learns from."""
    correct_every: int = 1000
    """Env steps between two corrections at least (``--corrections.every``)."""
    failure_noise: float = 0.6
    """Std of the Gaussian noise on the expert's normalised actions that makes failures."""
    steps: int = 10_000
    """Env steps of each classifier-rewarded run."""
    pixel_steps: int = 30_000
    """Env steps of each run that learns from the cameras."""
    encoder_steps: int = 3_000
    """Gradient steps of the encoder."""
    encoder_args: str = "--encoder.goal-key proprio"
    """More ``handrail encoder train`` options for the pixel rows' encoder, one string."""
    e2e_args: str = ""
    """More ``handrail train`` options for the e2e rows, one string given with ``=`` (it starts
    with ``--``): ``--e2e-args="--sac.image-channels 16 16 16 --sac.image-strides 2 2 1"``."""
    eval_every: int = 1_000
    """Env steps between evaluations."""
    eval_episodes: int = 50
    """Episodes per evaluation."""
    final_episodes: int = 100
    """Episodes of each run's final evaluation."""
    jobs: int = 0
    """Runs at a time, each pinned to one CPU (0: one per CPU)."""
    out: Path = Path("runs/bench_vision")
    """Folder of the stores, the classifier, the runs, the table."""
    fresh: bool = False
    """Rerun runs that already finished."""
    report_only: bool = False
    """Start nothing: tabulate what is there."""
    prepare_only: bool = False
    """Record, train the classifier or encoder and score it held out; start no training run."""


def _cameras(cfg: BenchVisionConfig) -> tuple[str, ...]:
    """The camera names of ``--cameras`` (comma-separated)."""
    return tuple(c for c in cfg.cameras.split(",") if c)


def _cli(argv: list[str], what: str) -> None:
    from handrail.launch import cli

    if cli.main(argv) != 0:
        raise RuntimeError(f"bench vision: {what} failed: handrail {' '.join(argv)}")


def record_demos(cfg: BenchVisionConfig, out: Path, seed: int) -> None:
    """Demonstrations held at the goal after success, labelled from their sparse reward."""
    if out.exists():
        return
    _cli(["record", "--task", cfg.task, "--episodes", str(cfg.demos), "--seed", str(seed),
          "--cameras", cfg.cameras, "--image-size", str(cfg.image_size), "--env-kwargs",
          "terminate_on_success=false", "--out", str(out)], "recording demonstrations")  # fmt: skip
    _cli(["label", str(out), "--from", "reward", "--by", "bench-vision"], "labelling")


def record_failures(cfg: BenchVisionConfig, out: Path, seed: int) -> None:
    """``cfg.failures`` failed episodes, half of the noisy expert and half of random actions
    (labelled: every frame failure)."""
    if out.exists():
        return
    from handrail import sim
    from handrail.control.step import ActedBy
    from handrail.demos import open_store
    from handrail.demos.ops import filter_store
    from handrail.demos.recorder import EpisodeRecorder
    from handrail.launch.commands.record import RecordConfig, open_record_writer
    from handrail.learners.actor import Actor
    from handrail.learners.specs import ActionSpec

    env = sim.make(cfg.task, cameras=_cameras(cfg), image_size=cfg.image_size)
    expert, spec = sim.make_expert(cfg.task, env), ActionSpec.from_space(env.action_space)
    rng = np.random.default_rng(seed)

    def noisy(obs: Any) -> np.ndarray:
        action = spec.from_env(expert(obs)) + rng.normal(0.0, cfg.failure_noise, spec.dim)
        return spec.to_env(action)

    def flailing(obs: Any) -> np.ndarray:  # the gripper opens and closes on nothing
        return spec.to_env(rng.uniform(-1.0, 1.0, spec.dim))

    # Half near misses, half random motion: with near misses alone the classifier took a
    # closed gripper for success, and the policy closed it at once (episodes of one step).
    policy = {"on": noisy}

    tries = out.with_name(out.name + "-tries")
    record_cfg = RecordConfig(task=cfg.task, out=str(tries), cameras=cfg.cameras,
                              image_size=cfg.image_size, overwrite=True)  # fmt: skip
    with EpisodeRecorder(open_record_writer(record_cfg, env), task=cfg.task) as recorder:
        actor = Actor(env, lambda obs: policy["on"](obs), seed=seed, sinks=[recorder],
                      acted_by=ActedBy.SCRIPTED)  # fmt: skip
        failed = 0
        for _ in range(10 * cfg.failures):
            policy["on"] = noisy if failed < (cfg.failures + 1) // 2 else flailing
            failed += not actor.run_episodes(1)[0].success
            if failed == cfg.failures:
                break
    env.close()
    ids = open_store(tries).select()
    ids = [e for e in ids if not open_store(tries).episodes[e].success][: cfg.failures]
    filter_store(tries, out, episodes=ids)
    _cli(["label", str(out), "--from", "success", "--by", "bench-vision"], "labelling failures")


def prepare(cfg: BenchVisionConfig) -> dict[str, Any]:
    """The stores and the classifier (made once), and its held-out scores."""
    demos, failures = cfg.out / "demos", cfg.out / "failures"
    held_demos, held_failures = cfg.out / "heldout_demos", cfg.out / "heldout_failures"
    record_demos(cfg, demos, 1_000_000)
    record_failures(cfg, failures, 2_000_000)
    record_demos(cfg, held_demos, 3_000_000)
    record_failures(cfg, held_failures, 4_000_000)
    clf = cfg.out / "classifier"
    if not clf.exists():
        _cli(["reward", "train", "--demos", str(demos), str(failures), "--out", str(clf),
              "--no-progress"], "training the classifier")  # fmt: skip
    report = cfg.out / "classifier_heldout.json"
    if not report.exists():
        import contextlib
        import io

        from handrail.launch.commands.reward import RewardEval, evaluate

        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            evaluate(RewardEval(classifier=clf, demos=(held_demos, held_failures)))
        report.write_text(text.getvalue())
    meta = json.loads((clf / "classifier.json").read_text())
    return {"classifier": str(clf), "demos": str(demos), "validation": meta["validation"],
            "threshold": meta["threshold"], "heldout": json.loads(report.read_text())}  # fmt: skip


def prepare_pixels(cfg: BenchVisionConfig) -> dict[str, Any]:
    """The demonstrations (ending at success), the encoder and its held-out diagnostic."""
    demos, held = cfg.out / "pixel_demos", cfg.out / "heldout_pixel_demos"
    for store, episodes, seed in ((demos, cfg.demos, 5_000_000), (held, 10, 6_000_000)):
        if not store.exists():
            _cli(["record", "--task", cfg.task, "--episodes", str(episodes), "--seed", str(seed),
                  "--cameras", cfg.cameras, "--image-size", str(cfg.image_size), "--out",
                  str(store)], "recording demonstrations")  # fmt: skip
    record_failures(cfg, cfg.out / "failures", 2_000_000)
    enc = cfg.out / "encoder"
    if not enc.exists():
        _cli(["encoder", "train", "--demos", str(demos), str(cfg.out / "failures"), "--out",
              str(enc), "--encoder.steps", str(cfg.encoder_steps), *shlex.split(cfg.encoder_args),
              "--no-progress"], "training the encoder")  # fmt: skip
    return {"demos": str(demos), "encoder": str(enc), "ignored": all_but_proprio(cfg.task),
            "probe": probe(enc, demos, held)}  # fmt: skip


def all_but_proprio(task: str) -> list[str]:
    """The task's state keys but ``proprio``: what a policy on the cameras leaves out."""
    from handrail import sim

    env = sim.make(task)
    space = env.observation_space
    assert isinstance(space, gym.spaces.Dict)  # a handrail task's
    env.close()
    return [k for k in space.spaces if k != "proprio"]


def probe(enc: Path, train: Path, test: Path) -> dict[str, list[float]]:
    """Held-out R^2 per axis of the object's position from a ridge map of the features (and
    of the features with proprio, and of proprio alone)."""
    from handrail.demos import open_store
    from handrail.learners.agents.encoder import ImageEncoder

    encoder = ImageEncoder(enc)
    a, b = open_store(train).load(), open_store(test).load()

    def r2(x_train: np.ndarray, x_test: np.ndarray) -> list[float]:
        y_train, y_test = a.obs["object"][:, :3], b.obs["object"][:, :3]
        x1 = np.c_[x_train, np.ones(len(x_train))]
        w = np.linalg.solve(x1.T @ x1 + 1e-3 * np.eye(x1.shape[1]), x1.T @ y_train)
        pred = np.c_[x_test, np.ones(len(x_test))] @ w
        score = 1 - ((pred - y_test) ** 2).sum(0) / ((y_test - y_test.mean(0)) ** 2).sum(0)
        return [round(float(v), 3) for v in score]

    fa, fb = encoder.features(a.obs), encoder.features(b.obs)
    return {"features": r2(fa, fb), "features_proprio": r2(np.c_[fa, a.obs["proprio"]],
                                                           np.c_[fb, b.obs["proprio"]]),
            "proprio": r2(a.obs["proprio"], b.obs["proprio"])}  # fmt: skip


def plan(cfg: BenchVisionConfig, prepared: dict[str, Any]) -> list[Run]:
    """One run per seed of each row asked for."""
    runs = []
    pixels: dict[str, Any] = prepared.get("pixels") or {}
    for seed in cfg.seeds if pixels else ():
        folder = cfg.out / f"pixels-s{seed}"
        argv = ("--task", cfg.task, "--seed", str(seed), "--steps", str(cfg.pixel_steps),
                "--demos", pixels["demos"], "--encoder", pixels["encoder"], "--ignore-obs-keys",
                *pixels["ignored"], "--eval-every", str(cfg.eval_every), "--eval-episodes",
                str(cfg.eval_episodes), "--run-dir", str(folder), "--no-progress")  # fmt: skip
        runs.append(Run(cfg.task, "pixels", seed, cfg.pixel_steps, folder, argv))
    clf: dict[str, Any] = prepared.get("classifier") or {}
    ignored = all_but_proprio(cfg.task) if {"e2e", "e2e_classifier"} & set(cfg.rows) else []
    for row in ("e2e", "e2e_classifier"):
        if row not in cfg.rows:
            continue
        reward: tuple[str, ...] = ()
        if row == "e2e_classifier":  # the classifier's demonstrations: they carry its labels
            reward = ("--demos", clf["demos"], "--reward", f"classifier:{clf['classifier']}",
                      *_corrections(cfg))  # fmt: skip
        for seed in cfg.seeds:
            folder = cfg.out / f"{row}-s{seed}"
            argv = ("--task", cfg.task, "--seed", str(seed), "--steps", str(cfg.pixel_steps),
                    "--pixels", "--env-kwargs", f"cameras={_cameras(cfg)!r}",
                    f"image_size={cfg.image_size}", "--ignore-obs-keys", *ignored, *reward,
                    "--eval-every", str(cfg.eval_every), "--eval-episodes",
                    str(cfg.eval_episodes), "--run-dir", str(folder), "--no-progress",
                    *shlex.split(cfg.e2e_args))  # fmt: skip
            runs.append(Run(cfg.task, row, seed, cfg.pixel_steps, folder, argv))
    for seed in cfg.seeds if "classifier" in cfg.rows else ():
        folder = cfg.out / f"classifier-s{seed}"
        argv = ("--task", cfg.task, "--seed", str(seed), "--steps", str(cfg.steps), "--demos",
                clf["demos"], "--reward", f"classifier:{clf['classifier']}", *_corrections(cfg),
                "--eval-every", str(cfg.eval_every), "--eval-episodes", str(cfg.eval_episodes),
                "--run-dir", str(folder), "--no-progress")  # fmt: skip
        runs.append(Run(cfg.task, "classifier", seed, cfg.steps, folder, argv))
    return runs


def _corrections(cfg: BenchVisionConfig) -> tuple[str, ...]:
    """``handrail train``'s corrections options of the classifier rows (none without)."""
    if not cfg.corrections:
        return ()
    return ("--corrections.episodes", str(cfg.corrections), "--corrections.every",
            str(cfg.correct_every))  # fmt: skip


ROWS = ("classifier", "pixels", "e2e", "e2e_classifier")
"""The rows the bench knows (``--rows``)."""
CLASSIFIER_ROWS = ("classifier", "e2e_classifier")
"""The rows whose reward is the classifier's."""


def summarize(run: Run, cfg: BenchVisionConfig) -> dict[str, Any]:
    """``bench learning``'s summary, the classifier's record of the run, and when it fires on
    the final policy's episodes against the task's success (``timing.json``)."""
    row = summarize_run(run)
    if run.learner not in CLASSIFIER_ROWS:
        return row
    stats = run.folder / "reward_classifier.json"
    row["classifier"] = json.loads(stats.read_text()) if stats.is_file() else None
    timing = run.folder / "timing.json"
    if not timing.is_file():
        timing.write_text(json.dumps(fire_timing(cfg, run.folder, 30)))
    row["timing"] = json.loads(timing.read_text())
    return row


def fire_timing(cfg: BenchVisionConfig, folder: Path, episodes: int) -> dict[str, Any]:
    """On the run's last policy, episodes that neither the task nor the classifier end: the
    step the classifier first fires minus the step the task first succeeds, per episode, and
    the episodes whose first fire came before any movable task object had moved 1 cm from
    where it started (none on a task without one): a policy that found frames the classifier
    takes for success with the cube still on the table, against one that fires a few steps
    early while the cube rises. The classifier is the run's last (corrected) one, if it made
    corrections."""
    from handrail.app.envs import make_env, parse_env_kwargs
    from handrail.learners.agents.classifier import SuccessClassifier
    from handrail.learners.agents.corrections import CHECKPOINT_DIR
    from handrail.learners.policies import load_run_policy

    corrected = folder / CHECKPOINT_DIR
    clf = SuccessClassifier(corrected if corrected.exists() else cfg.out / "classifier")
    run = load_run_policy(folder, "latest")
    kwargs = parse_env_kwargs(run.env_kwargs, cfg.task)
    env = make_env(cfg.task, **{**kwargs, "cameras": clf.cameras, "image_size": cfg.image_size,
                                "terminate_on_success": False})  # fmt: skip
    gaps, never, untouched = [], {"classifier": 0, "task": 0}, 0
    for episode in range(episodes):
        obs, _ = env.reset(seed=900_000 + episode)
        start = _object_positions(env)
        fired = succeeded = None
        for t in range(int(kwargs.get("episode_steps", 100))):
            # the whole observation: a policy reads its own keys (the cameras, for e2e_classifier)
            obs, _, _, truncated, info = env.step(run.policy(obs))
            if fired is None and clf.detect(obs):
                fired = t
                moved = np.abs(_object_positions(env) - start)
                untouched += bool(start.size) and bool(np.all(moved < 0.01))
            succeeded = t if succeeded is None and info["success"] else succeeded
            if (fired is not None and succeeded is not None) or truncated:
                break
        never["classifier"] += fired is None
        never["task"] += succeeded is None
        if fired is not None and succeeded is not None:
            gaps.append(fired - succeeded)
    env.close()
    values, counts = np.unique(gaps, return_counts=True)
    return {"episodes": episodes, "never": never, "fired_untouched": untouched,
            "gap_steps": {int(v): int(c) for v, c in zip(values, counts, strict=True)}}  # fmt: skip


def _object_positions(env: Any) -> np.ndarray:
    """Positions (m) of the task's movable objects (bodies on a joint: pick_cube's cube, not
    reach's goal or peg_insert's hole), (objects, 3): none for a task without any."""
    base = env.unwrapped

    def movable(name: str) -> bool:
        try:
            return int(base.model.body(name).jntnum[0]) > 0
        except KeyError:  # a pose that is no body of the model (a site, a computed point)
            return False

    poses = [p for name, (p, _) in base.object_poses().items() if movable(name)]
    return np.array(poses, np.float64).reshape(-1, 3)


def _runs_table(runs: list[dict[str, Any]], label: str) -> list[str]:
    """A row's runs as one line of a table under its header (seed by seed in each cell),
    then a blank line."""
    return [
        "| seeds | input | env steps to 90% sustained | lowest eval after | final success "
        "(100 episodes) | training minutes |",
        "|---|---|---|---|---|---|",
        f"| {seed_cells([r['seed'] for r in runs], 'd')} | {label} | "
        f"{seed_cells([r.get('steps_to_goal') for r in runs], ',')} | "
        f"{seed_cells([r.get('min_after') for r in runs], '.0%')} | "
        f"{seed_cells([r['final']['success_rate'] for r in runs], '.0%')} | "
        f"{seed_cells([r['minutes'] for r in runs], '.1f')} |",
        "",
    ]


def table(rows: list[dict[str, Any]], prepared: dict[str, Any]) -> list[str]:
    """Each row's table: the pixel runs, then the classifier's scores and its runs."""
    lines: list[str] = []
    pixels = [r for r in rows if r["learner"] == "pixels"]
    e2e = [r for r in rows if r["learner"] == "e2e"]
    if e2e:
        lines += _runs_table(e2e, "cameras (encoder trained end to end, --pixels) + proprio")
    if "pixels" in prepared:
        p = prepared["pixels"]["probe"]
        lines += [
            *_runs_table(pixels, "cameras (frozen encoder) + proprio"),
            "The encoder's features against the object's position on held-out demonstrations "
            f"(R^2 of x, y, z): features {p['features']}, features and proprio "
            f"{p['features_proprio']}, proprio alone {p['proprio']}.",
            "",
        ]  # fmt: skip
    if "classifier" not in prepared:
        return lines
    return lines + _classifier_table(rows, prepared["classifier"])


_LABELS = {"classifier": "state", "e2e_classifier": "cameras (end to end) + proprio"}
"""The classifier rows' inputs, as their table lines name them."""


def _classifier_table(rows: list[dict[str, Any]], prepared: dict[str, Any]) -> list[str]:
    """The classifier's scores, then one line for each row's runs."""
    v, held = prepared["validation"], prepared["heldout"]
    f, e = held["frames"], held["episodes"]
    lines = [
        "| classifier | precision | recall | episodes it fired on that failed | successful "
        "episodes it missed |",
        "|---|---|---|---|---|",
        f"| validation episodes (threshold {prepared['threshold']:.3f}) | {v['precision']:.3f} | "
        f"{v['recall']:.3f} | - | - |",
        f"| held-out episodes ({e['episodes']}) | {f['precision']:.3f} | {f['recall']:.3f} | "
        f"{e['false_positives']} | {e['false_negatives']} |",
        "",
        "| seeds | input | env steps to 90% sustained (task's success) | lowest eval after | "
        "final success (100 episodes) | training minutes | classifier in training: episodes "
        "ended, false positives, false negatives |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    rows = [r for r in rows if r["learner"] in CLASSIFIER_ROWS]
    for kind, label in _LABELS.items():
        group = [r for r in rows if r["learner"] == kind]
        if not group:
            continue
        clf = [r["classifier"] or {} for r in group]
        lines.append(
            f"| {seed_cells([r['seed'] for r in group], 'd')} | {label} | "
            f"{seed_cells([r.get('steps_to_goal') for r in group], ',')} | "
            f"{seed_cells([r.get('min_after') for r in group], '.0%')} | "
            f"{seed_cells([r['final']['success_rate'] for r in group], '.0%')} | "
            f"{seed_cells([r['minutes'] for r in group], '.1f')} | "
            + ", ".join(f"{c.get('ended', '-')}/{c.get('episodes', '-')} ended, "
                        f"{c.get('false_positives', '-')} FP, {c.get('false_negatives', '-')} FN"
                        + (f", {len(c['corrections'])} corrected at "
                           + "/".join(str(k["env_steps"]) for k in c["corrections"])
                           if c.get("corrections") else "")
                        for c in clf) + " |"
        )  # fmt: skip
    gaps: dict[int, int] = {}
    for r in rows:
        for gap, count in r["timing"]["gap_steps"].items():
            gaps[int(gap)] = gaps.get(int(gap), 0) + count
    lines += ["", "When the classifier first fires on the final policies' episodes, in steps after "
              "the task's first success (episodes): " + ", ".join(
                  f"{g:+d}: {gaps[g]}" for g in sorted(gaps))]  # fmt: skip
    if all("fired_untouched" in r["timing"] for r in rows):
        lines += ["", "Episodes whose first fire came before the task's movable objects had "
                  "moved 1 cm (per run): " + ", ".join(
                      f"seed {r['seed']} ({_LABELS[r['learner']]}): "
                      f"{r['timing']['fired_untouched']} of {r['timing']['episodes']}"
                      for r in rows)]  # fmt: skip
    return lines


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Success by the task's flag against env steps, every run (one colour per row)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.6), layout="constrained")
    ax = fig.subplots()
    labels = {"pixels": "cameras (frozen encoder) + proprio, task reward",
              "e2e": "cameras (end to end) + proprio, task reward",
              "classifier": "state, classifier reward",
              "e2e_classifier": "cameras (end to end) + proprio, classifier reward"}  # fmt: skip
    for color, kind in zip(("C0", "C2", "C3", "C1"), labels, strict=True):
        group = [r for r in rows if r["learner"] == kind]
        for i, r in enumerate(group):
            ax.plot([p[0] / 1e3 for p in r["curve"]], [p[2] for p in r["curve"]], color=color,
                    lw=1, alpha=0.8, label=labels[kind] if i == 0 else None)  # fmt: skip
    ax.axhline(0.9, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("env steps (thousands)")
    ax.set_ylabel("eval success (task's flag, 50 episodes)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("handrail bench vision: every seed")
    fig.savefig(path, dpi=80)


def bench_vision(cfg: Annotated[BenchVisionConfig, tyro.conf.arg(name="")]) -> int:
    """A learned success classifier in place of the task's reward, judged by the task."""
    if set(cfg.rows) - set(ROWS) or not cfg.rows:
        raise ValueError(f"--rows {' '.join(cfg.rows)}: give {', '.join(ROWS)} or several")
    cfg.out.mkdir(parents=True, exist_ok=True)
    prepared: dict[str, Any] = {}
    if "pixels" in cfg.rows:
        prepared["pixels"] = prepare_pixels(cfg)
    if set(CLASSIFIER_ROWS) & set(cfg.rows):
        prepared["classifier"] = prepare(cfg)
    runs = [] if cfg.prepare_only else plan(cfg, prepared)
    if not cfg.report_only:
        execute(runs, cfg.jobs, cfg.final_episodes, cfg.fresh, "bench vision")
    rows = [summarize(r, cfg) for r in runs if r.done]
    lines = table(rows, prepared)
    (cfg.out / "bench_vision.json").write_text(json.dumps(
        {"config": asdict(cfg), "prepared": prepared, "rows": rows}, default=str, indent=1))  # fmt: skip
    (cfg.out / "bench_vision.md").write_text("\n".join(lines) + "\n")
    if rows:
        plot(rows, cfg.out / "bench_vision.png")
    print("\n".join(lines))
    failed = [] if cfg.report_only else [str(r.folder) for r in runs if not r.done]
    if failed:
        print(f"failed runs (see their .log): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
