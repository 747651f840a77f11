"""Training past one process: ``handrail train --actors N``, ``handrail learner``, ``handrail actor``.

One learner (a Ray actor that owns the replay, the updates and the checkpoints) and any number
of env actors (Ray actors making the task's env, or ``handrail actor`` / ``actor_node
learner:=ray`` processes beside a robot) meet through :mod:`handrail.learners.distributed`.
This module starts or joins the Ray runtime, checks every input before any work starts, and
drives the run: progress bar, episode log, evaluations in an actor of their own (they never
pause data collection), restarts of actors that died, and the run folder (``events.jsonl``
says what happened and when).

Security: a Ray runtime that handrail starts listens on loopback only and requires Ray's token
(``RAY_AUTH_MODE=token``, Ray >= 2.52): the token is in ``~/.ray/auth_token``. Anyone who can
reach a Ray cluster's ports with its token can run code on it: see docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from handrail.app.config import Settings, TrainConfig
from handrail.learners.distributed import ray_link
from handrail.learners.distributed.ray_link import LEARNER_NAME
from handrail.learners.evaluation import EVAL_SEED_OFFSET, actor_seed_offset, run_seed


@contextmanager
def ray_runtime(address: str | None, *, cpus: int) -> Iterator[str]:
    """Start a local Ray runtime (loopback, token required) or join ``address``; yields the
    address actors join with. A runtime this started is shut down at the end."""
    if address is None:  # Ray's single-machine mode: every server binds loopback only
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray = ray_link.import_ray()
        ray.init(num_cpus=cpus, include_dashboard=False, namespace=ray_link.NAMESPACE,
                 configure_logging=False)  # fmt: skip
        token = Path.home() / ".ray" / "auth_token"  # Ray writes it readable by everyone
        if token.is_file():
            token.chmod(0o600)
    else:
        ray = ray_link.join_cluster(address)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def check_distributed(cfg: TrainConfig) -> None:
    """Options ``--actors`` cannot take, in one line."""
    bad = []
    if cfg.learner != "jax":
        bad.append(f"--learner {cfg.learner} (peers have no remote learner)")
    if cfg.human != "none":
        bad.append(f"--human {cfg.human} (a person acts through actor_node learner:=ray)")
    if cfg.residual_on is not None:
        bad.append("--residual-on")
    if cfg.record is not None:
        bad.append("--record")
    if cfg.encoder is not None:
        bad.append("--encoder")
    if cfg.reward != "task":
        bad.append(f"--reward {cfg.reward}")
    if cfg.loop.takeover_penalty > 0:
        bad.append("--loop.takeover-penalty")
    if bad:
        raise ValueError(f"--actors {cfg.actors}: not with {', '.join(bad)}; train with "
                         "--actors 0 (one process) for these")  # fmt: skip


def train_distributed(cfg: TrainConfig, settings: Settings | None, run_path: Path) -> int:
    """``handrail train --actors N`` (N sim env actors) and ``handrail learner`` (N = 0: the
    actors join from elsewhere)."""
    from handrail.app.envs import learner_specs, make_env
    from handrail.app.provenance import run_settings, write_settings
    from handrail.app.runs import new_run_folder
    from handrail.app.train_demos import load_demos
    from handrail.learners.distributed.protocol import env_signature
    from handrail.learners.runlog import RunDir

    check_distributed(cfg)
    env = make_env(cfg.task, **cfg.env)
    specs = learner_specs(env, cfg)
    demos = load_demos(cfg, env, *specs)
    sac, rows = _agent(cfg, specs, demos)
    settings = run_settings(cfg, run_path, settings)
    print(f"handrail train: preset: {settings.preset}", file=sys.stderr)
    with ray_runtime(cfg.ray_address, cpus=max(2, cfg.actors + 1)) as address:
        import ray

        if cfg.resume is None:
            run_path = new_run_folder(run_path, numbered=cfg.run_dir is None)
        print(f"handrail train: run folder {run_path.resolve()}", file=sys.stderr)
        with RunDir(run_path) as run:
            run.write_config(cfg.to_json())
            write_settings(run_path, settings)
            learner = ray_link.start_learner(LEARNER_NAME, sac, cfg.loop, cfg.dist, seed=cfg.seed,
                                             demos=rows, folder=run_path.resolve(),
                                             signature=env_signature(env))  # fmt: skip
            ray.get(learner.stats.remote())  # built (or restored) before any actor starts
            print(f"handrail train: learner on Ray at {address}; more actors join with: "
                  f"handrail actor --task {cfg.task} --ray-address {address}",
                  file=sys.stderr)  # fmt: skip
            make = functools.partial(make_env, cfg.task, **cfg.env)
            actors = {
                f"actor-{i}": ray_link.start_env_actor(
                    f"actor-{i}", make, sac, cfg.dist, LEARNER_NAME,
                    seed=run_seed(cfg.seed, actor_seed_offset(i)), success_key=cfg.success_key,
                    warmup_steps=cfg.loop.warmup_steps // max(cfg.actors, 1),
                    resume_steps=cfg.steps)
                for i in range(cfg.actors)
            }  # fmt: skip
            evaler = ray_link.start_eval_actor(
                functools.partial(make_env, cfg.task, render_mode="rgb_array" if cfg.video else None,
                                  **cfg.env),
                sac, seed=run_seed(cfg.seed, EVAL_SEED_OFFSET), success_key=cfg.success_key)  # fmt: skip
            last = _drive(cfg, run, learner, actors, evaler)
            ray.get(learner.close.remote())  # its update thread stops before its process
            for handle in [*actors.values(), evaler, learner]:
                ray.kill(handle, no_restart=True)
    if last is not None:
        keep = ("env_steps", "success_rate", "mean_return")
        print(f"handrail train: last eval {json.dumps({k: last.get(k) for k in keep})}",
              file=sys.stderr)  # fmt: skip
    print(f"handrail train: run folder {run_path.resolve()}", file=sys.stderr)
    return 0


def _agent(cfg: TrainConfig, specs: tuple[Any, Any], demos: Any) -> tuple[Any, Any]:
    """The SAC agent and the demonstration rows (with the relative inputs they imply)."""
    from handrail.learners.agents.sac import SAC
    from handrail.learners.demo_data import to_rows
    from handrail.learners.obs_norm import demo_pairs

    rows = None if demos is None else to_rows(demos, *specs)
    pairs = demo_pairs(specs[0], rows, cfg.loop.relative_inputs)
    return SAC(*specs, cfg.sac, pairs=pairs), rows


def _event(run: Any, text: str) -> None:
    from handrail.learners.distributed.protocol import log_event

    log_event(run.path, text)
    print(f"handrail train: {text}", file=sys.stderr)


def _drive(cfg: TrainConfig, run: Any, learner: Any, actors: dict[str, Any],
           evaler: Any) -> dict[str, Any] | None:  # fmt: skip
    """Run until the learner holds ``cfg.steps`` steps: restart actors that die, log episodes,
    evaluate every ``eval_every`` steps in the eval actor; a final evaluation at the end."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    from handrail.learners.monitor import RunMonitor

    pending: dict[str, Any] = {}  # the eval result the monitor logs next
    saves: list[Any] = []  # waited for before the learner stops
    monitor = RunMonitor(
        run, total_steps=cfg.steps, eval_every=10**12, evaluate=lambda _: pending.pop("result"),
        save_latest=lambda: saves.append(learner.save.remote()), video_fps=20.0,
        save_best=lambda: saves.append(
            learner.save_best.remote({"env_steps": steps, "task": cfg.task})),
        progress=cfg.progress, stop_at_success=cfg.stop_at_success,
    )  # fmt: skip
    runs = {actor.run.remote(cfg.steps): name for name, actor in actors.items()}
    next_eval, evaluating, eval_at = cfg.eval_every, None, 0
    steps: int = 0
    updates: int = 0
    learner_down = False
    died: dict[str, float] = {}  # when each actor last failed
    where: dict[str, str] = {}  # the process each actor last registered from

    def restarted(name: str) -> None:  # said once per death, whichever way the driver sees it
        if time.monotonic() - died.get(name, -60.0) > 30.0:
            _event(run, f"{name} died; Ray restarted it, and it goes on")
        died[name] = time.monotonic()

    try:
        caught_up = False  # the learner ran every update block its steps are owed
        while not (steps >= cfg.steps and caught_up) and not monitor.should_stop:
            done, _ = ray.wait(list(runs), timeout=0.25) if runs else ([], [])
            for future in done:
                name = runs.pop(future)
                try:
                    ray.get(future)
                except RayActorError:  # each call fails until Ray has restarted it
                    restarted(name)
                    runs[actors[name].run.remote(cfg.steps)] = name
            if not runs and not actors:
                time.sleep(0.25)  # handrail learner: the actors run elsewhere
            try:
                stats = ray.get(learner.stats.remote(), timeout=30)
                episodes = ray.get(learner.take_episodes.remote(), timeout=30)
            except (RayActorError, GetTimeoutError):
                if not learner_down:
                    _event(run, "the learner is unavailable; Ray restarts it from its latest "
                                "checkpoint and the actors reconnect")  # fmt: skip
                learner_down = True
                continue
            if learner_down:
                _event(run, f"the learner is back at {stats['steps']} steps")
                learner_down = False
            steps, updates, caught_up = stats["steps"], stats["updates"], stats["caught_up"]
            # A restarted actor registers anew and steps by itself: the run call its old
            # process served may never report the death.
            for record in stats["actors"].values():
                seen = where.get(record["name"])
                if record["name"] in actors and seen and record["where"] not in ("", seen):
                    restarted(record["name"])
                where[record["name"]] = record["where"] or seen or ""
            finished = [(e["return"], e["length"], e["success"]) for e in episodes]
            monitor.on_step(steps, updates, finished, stats["metrics"])
            if evaluating is None and steps >= next_eval:
                next_eval = (steps // cfg.eval_every + 1) * cfg.eval_every
                _, params, _ = ray.get(learner.latest.remote())
                evaluating, eval_at = evaler.evaluate.remote(params, cfg.eval_episodes,
                                                             cfg.video), steps  # fmt: skip
            if evaluating is not None and ray.wait([evaluating], timeout=0)[0]:
                pending["result"] = ray.get(evaluating)
                evaluating = None
                monitor.evaluate_now(eval_at)
        _, params, _ = ray.get(learner.latest.remote())
        pending["result"] = ray.get(evaler.evaluate.remote(params, cfg.eval_episodes, cfg.video))
        record = monitor.evaluate_now(steps)
        for save in saves:
            with contextlib.suppress(RayActorError):  # one a learner that died did not make
                ray.get(save)
        return record
    finally:
        monitor.close()
        with contextlib.suppress(RayActorError, GetTimeoutError):  # the learner's counts
            stats = ray.get(learner.stats.remote(), timeout=30)
            run.log("distributed", stats["steps"], {
                "updates": stats["updates"], "dropped": stats["dropped"],
                "actors": {r["name"]: r["acked"] for r in stats["actors"].values()}})  # fmt: skip


def run_actor(task: str, address: str, *, env_kwargs: dict[str, Any], name: str, seed: int,
              success_key: str, steps: int) -> int:  # fmt: skip
    """``handrail actor``: one env actor in this process, feeding the learner at ``address``
    (the agent and its settings come from the learner; the env is made here)."""
    from handrail.app.envs import make_env

    env = make_env(task, **env_kwargs)
    handle, sac, dist, warmup = ray_link.join_learner(address)
    import ray  # joined: Ray was imported asking for token authentication

    try:
        service = ray_link.actor_service(env, handle, sac, dist, seed=seed, name=name,
                                         success_key=success_key, warmup_steps=warmup)  # fmt: skip
        print(f"handrail actor: {name} feeds the learner at {address} (actor id "
              f"{service.actor_id})", file=sys.stderr)  # fmt: skip
        stats = service.run(steps)
    finally:
        ray.shutdown()
    print(f"handrail actor: {stats.taken} steps taken, {stats.dropped} dropped, {stats.resent} "
          f"sent again after {stats.reconnects} reconnects", file=sys.stderr)  # fmt: skip
    env.close()
    return 0
