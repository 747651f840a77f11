"""Training a run: everything ``handrail train`` does once its options are parsed.

:func:`train` makes the env (a handrail task, any ``gymnasium.make`` id, or ``module:EnvId``),
checks every input (observation keys, demonstrations, the recording store) before it creates
anything, and trains with handrail's JAX SAC (or SB3's SAC with ``--learner sb3``), writing
everything into one run folder (see :mod:`handrail.learners.runlog`).

A run folder holds one run: a new run creates its own (an existing one is refused), and
``--resume`` changes nothing in it until its latest checkpoint has loaded. That checkpoint
also says how many episodes the ``--record`` store held when it was saved; the store is rolled
back to them, since the steps after the checkpoint are taken again. A run stopped by a second
Ctrl-C or a full disk ends in one line naming the checkpoint it kept.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from handrail.app import pixels, rewards
from handrail.app.config import (
    Settings,
    TrainConfig,
    check_task_options,
    default_run_dir,
    format_env_kwargs,
    preset,
)
from handrail.app.envs import learner_specs, make_env
from handrail.app.runs import (
    exists_message,
    kept_checkpoint,
    load_latest,
    new_run_folder,
    resume_recording,
    save_trainer,
)
from handrail.app.train_demos import load_demos
from handrail.learners.checkpoint import CheckpointError, read_json
from handrail.learners.evaluation import outcomes_text, run_seed

_RESUMABLE = ("resume", "steps", "progress", "stop_at_success")
"""Options that may change when a run is resumed (the rest come from its config.json)."""
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
"""OSErrors that mean the disk (or the user's quota) is full."""
BASE_ALONE = "the base alone"
"""A residual run's baseline: its starting policy, whose correction is exactly zero."""


def resolve_run(config: TrainConfig) -> tuple[TrainConfig, Path]:
    """The config and folder of the run: a new one, or the one ``--resume`` continues.

    Reads only: :func:`train` creates a new run's folder once every input is checked.

    Raises:
        ValueError: ``--run-dir`` exists; the folder to resume is not a run, or its config.json
            is damaged or from a newer handrail; options were given that a resume cannot change.
    """
    if config.resume is None:
        if config.run_dir is None:
            return config, default_run_dir(config)
        if Path(config.run_dir).exists():
            raise ValueError(exists_message(Path(config.run_dir)))
        return config, Path(config.run_dir)
    run_path = Path(config.resume)
    saved_path = run_path / "config.json"
    if not saved_path.is_file():
        raise ValueError(
            f"--resume {run_path}: not a run folder (no config.json in it); start a new run "
            "with --run-dir"
        )
    try:
        saved = TrainConfig.from_json(read_json(saved_path))
    except CheckpointError as exc:  # the file is damaged: there is no config to resume with
        raise ValueError(
            f"--resume {run_path}: {exc}; the run cannot be resumed: start afresh with another "
            "--run-dir (its checkpoints stay usable: handrail eval)"
        ) from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"--resume {run_path}: {saved_path} is not a config this handrail reads ({exc}); "
            "a newer handrail wrote it? Upgrade handrail to resume it, or start afresh with "
            "another --run-dir"
        ) from None
    if saved.learner != "jax":
        raise ValueError(
            f"--resume {run_path}: --resume is supported with --learner jax only, not "
            f"{saved.learner}; start afresh with another --run-dir"
        )
    default = preset(config.task, residual_on=config.residual_on, human=config.human)
    # The same command again: an encoder run saved the encoder's cameras in its env settings,
    # a --pixels run the cameras of its reward classifier.
    given = pixels.with_model_cameras(config, pixels.load(config.encoder, cameras_only=True))
    if config.pixels:
        given = pixels.with_model_cameras(given, rewards.load_reward_classifier(config))
    changed = [f.name for f in dataclasses.fields(config)
               if f.name not in _RESUMABLE and getattr(config, f.name) != getattr(default, f.name)
               and getattr(given, f.name) != getattr(saved, f.name)]  # fmt: skip
    if changed:
        raise ValueError(
            f"--resume reuses the run's own config.json; only {', '.join(_RESUMABLE[1:])} may "
            f"change, but {', '.join(changed)} were given"
        )
    keep = {name: getattr(config, name) for name in _RESUMABLE}
    if config.steps == default.steps:
        keep["steps"] = saved.steps
    return dataclasses.replace(saved, **keep), run_path


def train(config: TrainConfig, settings: Settings | None = None) -> int:
    """Train a policy on a task and write a run folder (config, checkpoints, metrics, plot);
    ``settings``: the layer of each setting of ``config`` (``settings.json``), if known."""
    from handrail.app.provenance import run_settings, write_settings
    from handrail.learners.loop import AsyncTrainer
    from handrail.learners.runlog import RunDir

    cfg, run_path = resolve_run(config)
    check_task_options(cfg)
    if cfg.actors > 0:
        from handrail.app.distributed import train_distributed

        return train_distributed(cfg, settings, run_path)
    classifier = rewards.load_reward_classifier(cfg, run_path if cfg.resume else None)
    encoder = pixels.load(cfg.encoder)
    cfg = pixels.with_model_cameras(cfg, encoder)
    if cfg.pixels:  # the learner reads the classifier's cameras: eval must render them too
        cfg = pixels.with_model_cameras(cfg, classifier)
    env_kwargs = rewards.env_kwargs(cfg, classifier)
    env = make_env(cfg.task, **env_kwargs)
    # Where the learner reads features, or no cameras, the store still records the frames.
    camera_tap = None
    if cfg.record is not None and (classifier is not None or encoder is not None):
        env = camera_tap = pixels.CameraTap(env)
    env = rewards.with_classifier(cfg, env, classifier,
                                  keep_cameras=encoder is not None or cfg.pixels)  # fmt: skip
    eval_env = make_env(cfg.task, render_mode="rgb_array" if cfg.video else None, **cfg.env)
    base = None
    if cfg.residual_on is not None:  # the base's action joins every observation; the base
        # sees the env's own observation (its cameras, if any), the residual the features
        env, eval_env, base = with_base(cfg, env, eval_env)
    env, eval_env = pixels.wrap(env, encoder), pixels.wrap(eval_env, encoder)
    demo_cfg = dataclasses.replace(cfg, env_kwargs=format_env_kwargs(env_kwargs))

    def demo_inputs(data: Any) -> Any:
        """The demonstrations as the learner's env gives its steps: the classifier's reward,
        the base's action, the encoder's features."""
        data = relabel_base(rewards.relabel_demos(cfg, data, classifier), base, env)
        return pixels.encode_demos(data, encoder)

    specs = learner_specs(env, cfg)
    demos = load_demos(demo_cfg, env, *specs, transform=demo_inputs)
    recorded_env = env  # what the store records: the task's observations
    if cfg.human != "none":  # after the expert demos: those are the expert's alone
        from handrail.app.human import with_human

        env = with_human(env, cfg.task, cfg.human, cfg.hil, cfg.success_key)
    settings = run_settings(cfg, run_path, settings)
    print(f"handrail train: preset: {settings.preset}", file=sys.stderr)
    if cfg.learner == "jax":
        print(f"handrail train: {_norm_plan(cfg)}", file=sys.stderr)
    trainer = recorder = corrections = None
    ours = run_path if cfg.resume is not None else None  # the run folder, once it is this run's
    try:
        if cfg.learner == "jax":
            trainer = _make_trainer(cfg, env, demos, specs)
        # A resume loads its checkpoint before anything changes (the store, the run folder).
        if trainer is not None:  # what the learned reward did, and its corrections
            corrections = rewards.corrections(cfg, env, trainer, run_path)
            if cfg.resume is not None:
                kept = load_latest(trainer, run_path)
                corrections.restore(run_path / "checkpoints" / "latest")
                _resume_wrappers(env, trainer.env_steps)
                if cfg.record is not None:  # the episodes after the checkpoint are taken again
                    resume_recording(cfg.record, kept, run_seed(cfg.seed) + trainer.episodes,
                                     person=cfg.human != "none")  # fmt: skip
        recorded = recorded_env.observation_space
        if camera_tap is not None:
            recorded = camera_tap.recorded_space(recorded)
        recorder = open_recorder(cfg, recorded_env, recorded)  # before the run folder exists
        if cfg.resume is None:
            run_path = ours = new_run_folder(run_path, numbered=cfg.run_dir is None)
        print(f"handrail train: run folder {run_path.resolve()}", file=sys.stderr)
        with RunDir(run_path) as run:
            run.write_config(cfg.to_json())
            pixels.keep_copy(run_path, encoder)
            write_settings(run_path, settings)  # which layer set each setting
            if trainer is None:
                last = _train_sb3(cfg, env, eval_env, run, demos, specs)
            else:
                last = _train_jax(cfg, trainer, eval_env, run, recorder, camera_tap, corrections)
                if cfg.human != "none":
                    _print_interventions(run, env)
    except KeyboardInterrupt as exc:  # a second Ctrl-C: launch prints this note as one line
        exc.add_note(kept_checkpoint(ours))
        raise
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        raise ValueError(
            f"{exc.strerror} (writing {exc.filename or run_path}): free some space first; "
            f"{kept_checkpoint(ours)}"
        ) from exc
    finally:
        if isinstance(trainer, AsyncTrainer):
            trainer.close()
        if recorder is not None:
            recorder.close()
        rewards.report(env, run_path, corrections)
        env.close()
        eval_env.close()
    if last is not None:
        print(f"handrail train: last eval {json.dumps(_short(last))}", file=sys.stderr)
        if last.get("failed_outcomes"):
            ended = outcomes_text(last["failed_outcomes"])
            print(f"handrail train: how its failed episodes ended: {ended}", file=sys.stderr)
    if trainer is not None and trainer.learner.pretrained and cfg.loop.normalize_obs:
        from handrail.learners.obs_norm import describe

        print(f"handrail train: {describe(trainer.sac.obs_spec, trainer.state.obs_norm)}",
              file=sys.stderr)  # fmt: skip

    print(f"handrail train: run folder {run_path.resolve()}", file=sys.stderr)
    return 0


def with_base(cfg: TrainConfig, env: Any, eval_env: Any) -> tuple[Any, Any, Any]:
    """The training and evaluation envs with the base's action observed (each env gets its own
    base instance: bases may keep episode state), and the training env's base."""
    from handrail.app.bases import make_base
    from handrail.learners.agents.residual import ResidualObservation

    assert cfg.residual_on is not None
    base = make_base(cfg.residual_on, cfg.task, env)
    env = ResidualObservation(env, base, enable_steps=cfg.residual_enable_steps, seed=cfg.seed)
    eval_env = ResidualObservation(eval_env, make_base(cfg.residual_on, cfg.task, eval_env))
    return env, eval_env, base


def relabel_base(demos: Any, base: Any, env: Any) -> Any:
    """The demonstrations with ``base``'s action in every observation (themselves without a
    base)."""
    if base is None:
        return demos
    from handrail.learners.agents.residual import relabel
    from handrail.learners.specs import ActionSpec

    return relabel(demos, base, ActionSpec.from_space(env.action_space))


def open_recorder(cfg: TrainConfig, env: Any, space: Any = None) -> Any:
    """The ``--record`` sink (a new store, or an existing one with the same fields) for
    ``env``'s steps, whose observations it records as ``space`` says (default: ``env``'s)."""
    if cfg.record is None:
        return None
    from handrail.demos.format import fields_from_space
    from handrail.demos.recorder import EpisodeRecorder
    from handrail.learners.evaluation import env_fps

    fields = fields_from_space(env.observation_space if space is None else space)
    if Path(cfg.record).exists():
        return EpisodeRecorder.append(cfg.record, obs_fields=fields)
    return EpisodeRecorder.create(
        cfg.record, obs_fields=fields, action_dim=int(env.action_space.shape[0]),
        control_dt_s=float(getattr(env.unwrapped, "control_dt_s", 0.0)) or 1.0 / env_fps(env),
        task=cfg.task, kind="rollout",
    )  # fmt: skip


def _print_interventions(run: Any, env: Any) -> None:
    """The run's intervention summary (the plot of the run folder shows it over time); a
    simulated person's takeovers by trigger also go into the run's metrics (``takeovers``)."""
    from handrail.learners.monitor import intervention_summary

    episodes = run.read_metrics("episode")
    summary: dict[str, Any] = dict(intervention_summary(episodes))
    takeovers = getattr(getattr(env, "human", None), "takeovers", None)
    if takeovers is not None:
        run.log("takeovers", int(episodes[-1]["env_steps"]) if episodes else 0, takeovers)
        summary["takeovers"] = takeovers
    text = {k: round(v, 3) if isinstance(v, float) else v for k, v in summary.items()}
    print(f"handrail train: interventions {json.dumps(text)}", file=sys.stderr)


def _short(record: dict[str, Any]) -> dict[str, Any]:
    keep = ("env_steps", "success_rate", "ci_low", "ci_high", "mean_return", "mean_length")
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in record.items() if k in keep}


@contextmanager
def _graceful_interrupt() -> Iterator[list[bool]]:
    """First Ctrl-C sets a flag (the loop saves at the next episode end); a second one aborts."""
    flag = [False]

    def handler(signum: int, frame: Any) -> None:
        if flag[0]:
            raise KeyboardInterrupt
        flag[0] = True
        print("\nCtrl-C: saving a checkpoint at the end of this episode "
              "(Ctrl-C again to abort without saving)", file=sys.stderr)  # fmt: skip

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def _norm_plan(cfg: TrainConfig) -> str:
    """One line: whether and from what the learner normalises its observations."""
    if not cfg.loop.normalize_obs:
        return "observations: raw, not normalised (--loop.no-normalize-obs)"
    demos = "the demonstrations and " if cfg.demos is not None or cfg.expert_demos else ""
    return (f"observations: centred and scaled per key, fitted on {demos}the first "
            f"{max(cfg.loop.warmup_steps, cfg.sac.n_step + 1)} env steps, then frozen "
            "(--loop.no-normalize-obs: raw)")  # fmt: skip


def _make_trainer(cfg: TrainConfig, env: Any, demos: Any, specs: tuple[Any, Any]) -> Any:
    """The trainer of handrail's JAX SAC/RLPD (fused or asynchronous, as ``cfg.loop`` says)."""
    from handrail.learners.agents.sac import SAC
    from handrail.learners.demo_data import to_rows
    from handrail.learners.loop import AsyncTrainer, Trainer
    from handrail.learners.obs_norm import demo_pairs, pair_names

    rows = None if demos is None else to_rows(demos, *specs)
    pairs = demo_pairs(specs[0], rows, cfg.loop.relative_inputs)
    if rows is not None and cfg.loop.relative_inputs:
        names = ", ".join(pair_names(specs[0], pairs)) or "none"
        print(f"handrail train: inputs: + {len(pairs)} differences of columns the "
              f"demonstrations bring together, centred and scaled like a key ({names}; "
              "--loop.no-relative-inputs: none)", file=sys.stderr)  # fmt: skip
    sac = SAC(*specs, cfg.sac, pairs=pairs)
    kind = AsyncTrainer if cfg.loop.mode == "async" else Trainer
    return kind(env, sac, cfg.loop, seed=cfg.seed, demos=rows, success_key=cfg.success_key)


def _train_jax(cfg: TrainConfig, trainer: Any, eval_env: Any, run: Any, recorder: Any,
               camera_tap: Any = None, corrections: Any = None) -> dict[str, Any] | None:  # fmt: skip
    """Train handrail's JAX SAC/RLPD into ``run``; returns the last evaluation record
    (``camera_tap``: the frames the ``recorder`` keeps where the learner reads none;
    ``corrections``: the learned reward's record and corrections, saved with each checkpoint).

    A new run saves a checkpoint before its first step, so that it can be resumed (and its
    ``--record`` store rolled back) whenever it stops.
    """
    from handrail.learners.checkpoint import write_checkpoint_dir

    if recorder is not None:
        sink = recorder
        if cfg.human != "none":
            from handrail.app.human import KeepOrDiscard

            sink = KeepOrDiscard(recorder, trainer.actor.env)  # "record again" drops it
        if camera_tap is not None:
            sink = pixels.RecordFrames(sink, camera_tap)
        trainer.actor.sinks.append(sink)
    if cfg.resume is not None:
        run.rewind(trainer.env_steps)  # the steps after the checkpoint are taken again

    also = None if corrections is None else corrections.save_into

    def save_latest() -> None:
        write_checkpoint_dir(run.latest_dir,
                             functools.partial(save_trainer, trainer, recorder, also=also))  # fmt: skip

    if cfg.resume is None:
        save_latest()
    monitor = _jax_monitor(cfg, eval_env, run, trainer, trainer.sac, save_latest)
    try:
        base = monitor.start(trainer.env_steps)  # a residual's: its untrained correction is 0
        if base is not None and base.get("success_rate") is not None:
            monitor.report(f"{BASE_ALONE}: {base['success_rate']:.0%} on the "
                           f"{base['episodes']} evaluation episodes; checkpoints/best holds it "
                           "until the residual matches it there")  # fmt: skip
        after = None if corrections is None else functools.partial(corrections.after_episode,
                                                                    log=run.log)  # fmt: skip
        _jax_loop(trainer, monitor, cfg.steps, save_latest, human=cfg.human != "none",
                  after_episode=after)  # fmt: skip
    finally:
        monitor.close()
    if monitor.baseline is not None:
        print(f"handrail train: {versus_baseline(monitor, run.read_metrics('eval'))}",
              file=sys.stderr)  # fmt: skip
    return monitor.last_eval


def versus_baseline(monitor: Any, evals: list[dict[str, Any]]) -> str:
    """A residual run's evaluations against its base alone on the same episodes: the last,
    the lowest, and what ``checkpoints/best`` holds (the best evaluation that matched the base,
    or the base itself)."""
    baseline, base = monitor.baseline, monitor.baseline.get("success_rate")
    rated = [r for r in evals if r.get("success_rate") is not None]
    if base is None or not rated:
        return f"{BASE_ALONE}: no success rates to compare"

    def rate(record: dict[str, Any]) -> str:
        delta = -round(monitor.below_baseline(record) * 100)
        return f"{record['success_rate']:.0%} ({delta:+d}) at {record['env_steps']:,} env steps"

    lowest = min(rated, key=lambda r: r["success_rate"])
    kept = (f"{BASE_ALONE} itself (no evaluation matched it)" if monitor.best_record is baseline
            else f"the residual's {rate(monitor.best_record)}")  # fmt: skip
    return (
        f"against {BASE_ALONE}'s {base:.0%} on the same {baseline['episodes']} episodes: "
        f"last {rate(rated[-1])}, lowest {rate(lowest)}; checkpoints/best holds {kept}"
    )


def _resume_wrappers(env: Any, env_steps: int) -> None:
    """Env wrappers that count steps (the residual's progressive enabling) resume the count."""
    from handrail.learners.agents.residual import ResidualObservation

    while env is not None:
        if isinstance(env, ResidualObservation):
            env.steps = env_steps
        env = getattr(env, "env", None)


def _jax_monitor(cfg: TrainConfig, eval_env: Any, run: Any, trainer: Any, sac: Any,
                 save_latest: Callable[[], None]) -> Any:  # fmt: skip
    """The RunMonitor that evaluates the deterministic policy and saves checkpoints."""
    from handrail.learners.actor import LearnedPolicy
    from handrail.learners.checkpoint import save_checkpoint, write_checkpoint_dir
    from handrail.learners.evaluation import EVAL_SEED_OFFSET, env_fps, evaluate, run_seed
    from handrail.learners.monitor import RunMonitor

    make = functools.partial(sac.make_policy, deterministic=True)
    policy = LearnedPolicy(make, trainer.learner, sac.obs_spec, sac.action_spec, seed=cfg.seed)

    def run_eval(_: int) -> Any:
        rewards.log_stats(trainer.actor.env, run, trainer.env_steps)
        return evaluate(eval_env, policy, cfg.eval_episodes,
                        run_seed(cfg.seed, EVAL_SEED_OFFSET),
                        video=cfg.video, success_key=cfg.success_key)  # fmt: skip

    def save_best() -> None:
        extra = {"env_steps": trainer.env_steps, "task": cfg.task}
        write_checkpoint_dir(run.best_dir, lambda path: save_checkpoint(
            path, trainer.state, cfg.sac, sac.obs_spec, sac.action_spec, extra=extra,
            pairs=sac.pairs))  # fmt: skip

    return RunMonitor(run, total_steps=cfg.steps, eval_every=cfg.eval_every, evaluate=run_eval,
                      save_latest=save_latest, save_best=save_best, start_steps=trainer.env_steps,
                      progress=cfg.progress, stop_at_success=cfg.stop_at_success,
                      video_fps=env_fps(eval_env),
                      status=getattr(trainer.actor.env, "status", None),
                      baseline=BASE_ALONE if cfg.residual_on is not None else None,
                      tag="handrail train")  # fmt: skip


def _jax_loop(trainer: Any, monitor: Any, steps: int, save_latest: Callable[[], None], *,
              human: bool = False,
              after_episode: Callable[[int], None] | None = None) -> None:  # fmt: skip
    """Step until ``steps``, an early stop or Ctrl-C; then a final evaluation or a latest save.

    With a ``human`` in the loop, each episode's record carries the steps the person acted;
    ``after_episode(env_steps)`` runs after each step that ended one (before the monitor).

    Checkpoints are written only between episodes, so the loop runs on to the end of the
    episode in which ``steps`` is reached (at most one episode more) or Ctrl-C is pressed:
    every run ends with a checkpoint, and one that was not stopped with a final evaluation.
    """
    with _graceful_interrupt() as interrupted:
        while trainer.env_steps < steps or not trainer.actor.at_episode_start:
            finished = trainer.step()
            if finished and after_episode is not None:
                after_episode(trainer.env_steps)
            episodes = [(e.return_, e.length, e.success, *([e.human_steps] if human else []))
                        for e in finished]  # fmt: skip
            stop = monitor.on_step(trainer.env_steps, trainer.updates, episodes,
                                   lambda: trainer.last_metrics)  # fmt: skip
            if stop or (interrupted[0] and finished):
                break
        # Every way out of the loop is at an episode boundary, where saving is allowed.
        if not interrupted[0] and (
            monitor.last_eval is None or monitor.last_eval["env_steps"] < trainer.env_steps
        ):
            monitor.evaluate_now(trainer.env_steps)
        else:
            save_latest()


def _train_sb3(cfg: TrainConfig, env: Any, eval_env: Any, run: Any, demos: Any,
               specs: tuple[Any, Any]) -> dict[str, Any] | None:  # fmt: skip
    """Train SB3's or SBX's SAC (``--learner sb3|sbx``) into ``run``."""
    from handrail.learners.sb3_backend import PeerRun, peer_differences, train_sb3

    differences = peer_differences(cfg.sac, cfg.loop, library=cfg.learner,
                                   library_defaults=cfg.peer_defaults,
                                   demos=demos is not None)  # fmt: skip
    if differences:
        print(f"handrail train: --learner {cfg.learner} cannot follow every setting; its SAC "
              f"runs with {'; '.join(differences)}", file=sys.stderr)  # fmt: skip
    transitions = None
    if demos is not None:
        from handrail.learners.demo_data import to_transitions

        transitions = to_transitions(demos, *specs)
    settings = PeerRun(
        sac=cfg.sac, steps=cfg.steps, seed=cfg.seed, warmup_steps=cfg.loop.warmup_steps,
        buffer_capacity=cfg.loop.buffer_capacity, eval_every=cfg.eval_every,
        eval_episodes=cfg.eval_episodes, library="sbx" if cfg.learner == "sbx" else "sb3",
        library_defaults=cfg.peer_defaults, success_key=cfg.success_key, video=cfg.video,
        progress=cfg.progress, stop_at_success=cfg.stop_at_success,
    )  # fmt: skip
    return train_sb3(env, eval_env, run, settings, specs[0], transitions)
