"""``handrail train``: local training in one process.

``handrail train --task pick_cube`` resolves the task's preset (overridable field by field), makes
the env (a handrail task, any ``gymnasium.make`` id, or ``module:EnvId``), optionally preloads
demonstrations (a Zarr episode store or ``expert:N`` scripted episodes), and trains with
handrail's JAX SAC (or SB3's SAC with ``--learner sb3``), writing everything into one run folder
(see :mod:`handrail.learners.runlog`).

The pieces live next to it: presets and config in :mod:`handrail.launch.train_config`, env
resolution in :mod:`handrail.launch.envs`, demonstrations in :mod:`handrail.launch.train_demos`,
and ``handrail eval`` in :mod:`handrail.launch.eval_cmd`; their public names are re-exported here.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
import tyro

from handrail.launch.envs import HANDRAIL_TASKS, check_spaces, make_env
from handrail.launch.eval_cmd import EvalConfig, evaluate, locate_checkpoint
from handrail.launch.train_config import (
    GENERIC_PRESET,
    PRESETS,
    ResolvedConfig,
    TaskPreset,
    TrainConfig,
    default_run_dir,
    parse_demos,
    resolve,
)
from handrail.launch.train_demos import expert_episodes, load_demos
from handrail.learners.evaluation import EvalResult

__all__ = [
    "GENERIC_PRESET",
    "HANDRAIL_TASKS",
    "PRESETS",
    "EvalConfig",
    "ResolvedConfig",
    "TaskPreset",
    "TrainConfig",
    "check_spaces",
    "default_run_dir",
    "evaluate",
    "expert_episodes",
    "load_demos",
    "locate_checkpoint",
    "make_env",
    "parse_demos",
    "resolve",
    "train",
]


def train(config: Annotated[TrainConfig, tyro.conf.arg(name="")]) -> int:
    """Train a policy on a task and write a run folder (config, checkpoints, metrics, plot)."""
    from handrail.learners.runlog import RunDir

    if config.resume is not None:
        run_path = Path(config.resume)
        cfg = ResolvedConfig.from_json(RunDir(run_path, tensorboard=False).read_config())
        if config.steps is not None:
            cfg = dataclasses.replace(cfg, steps=config.steps)
    else:
        cfg = resolve(config)
        run_path = Path(config.run_dir) if config.run_dir else default_run_dir(cfg)
    env = make_env(cfg.task, **cfg.env_overrides)
    check_spaces(env, cfg.task)
    eval_env = make_env(cfg.task, render_mode="rgb_array" if cfg.video else None,
                        **cfg.env_overrides)  # fmt: skip
    print(f"handrail train: run folder {run_path.resolve()}", file=sys.stderr)
    with RunDir(run_path) as run:
        run.write_config(cfg.to_json())
        demos = load_demos(cfg, env) if cfg.demos else None
        if cfg.learner == "sb3":
            if config.resume is not None:
                raise ValueError("--resume is supported with --learner jax only")
            last = _train_sb3(cfg, env, eval_env, run, demos, progress=config.progress)
        else:
            last = _train_jax(cfg, env, eval_env, run, demos, resume=config.resume is not None,
                             progress=config.progress)  # fmt: skip
    env.close()
    eval_env.close()
    if last is not None:
        print(f"handrail train: last eval {json.dumps(_short(last))}", file=sys.stderr)
    print(f"handrail train: run folder {run_path.resolve()}", file=sys.stderr)
    return 0


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


def _train_jax(cfg: ResolvedConfig, env: gym.Env, eval_env: gym.Env, run: Any, demos: Any, *,
               resume: bool, progress: bool) -> dict[str, Any] | None:  # fmt: skip
    """Train handrail's JAX SAC/RLPD into ``run``; returns the last evaluation record."""
    from handrail.learners.sac import SAC

    obs_spec, action_spec = check_spaces(env, cfg.task)
    sac = SAC(obs_spec, action_spec, cfg.sac)
    trainer = _make_trainer(cfg, env, sac, demos)
    if resume:
        trainer.load(run.latest_dir)
    boundary = [True]  # Trainer.save works only at an episode boundary

    def save_latest() -> None:
        if boundary[0]:  # else the previous boundary's save stays the latest
            trainer.save(run.latest_dir)

    monitor = _jax_monitor(cfg, eval_env, run, trainer, sac, save_latest, progress=progress)
    try:
        _jax_loop(trainer, monitor, cfg.steps, boundary, save_latest)
    finally:
        monitor.close()
    return monitor.last_eval


def _make_trainer(cfg: ResolvedConfig, env: gym.Env, sac: Any, demos: Any) -> Any:
    """The Trainer of ``sac`` on ``env``, with the demos (if any) as an n-step replay buffer."""
    from handrail.learners.loop import Trainer

    demo_buffer = None
    if demos is not None:
        from handrail.learners.demo_data import to_replay_buffer

        demo_buffer = to_replay_buffer(demos, sac.obs_spec, sac.action_spec, n_step=cfg.sac.n_step,
                                       gamma=cfg.sac.gamma)  # fmt: skip
    return Trainer(env, sac, seed=cfg.seed, warmup_steps=cfg.warmup_steps,
                   buffer_capacity=cfg.buffer_capacity, demos=demo_buffer,
                   success_key=cfg.success_key)  # fmt: skip


def _jax_monitor(cfg: ResolvedConfig, eval_env: gym.Env, run: Any, trainer: Any, sac: Any,
                 save_latest: Callable[[], None], *, progress: bool) -> Any:  # fmt: skip
    """The RunMonitor that evaluates the trainer's deterministic policy and saves checkpoints."""
    import jax

    from handrail.learners.checkpoint import save_checkpoint
    from handrail.learners.evaluation import env_fps, evaluate
    from handrail.learners.runlog import RunMonitor

    obs_spec, action_spec = sac.obs_spec, sac.action_spec
    key = jax.random.key(cfg.seed)

    def policy(obs: Any) -> np.ndarray:
        flat = obs_spec.flatten(obs)
        return action_spec.to_env(sac.act(trainer.state, flat, key, deterministic=True))

    def run_eval(_: int) -> EvalResult:
        return evaluate(eval_env, policy, cfg.eval_episodes, cfg.seed + 10_000, video=cfg.video,
                        success_key=cfg.success_key)  # fmt: skip

    def save_best() -> None:
        save_checkpoint(run.best_dir, trainer.state, cfg.sac, obs_spec, action_spec,
                        extra={"env_steps": trainer.env_steps, "task": cfg.task})  # fmt: skip

    return RunMonitor(run, total_steps=cfg.steps, eval_every=cfg.eval_every,
                      evaluate=run_eval, save_latest=save_latest,
                      save_best=save_best, start_steps=trainer.env_steps, progress=progress,
                      stop_at_success=cfg.stop_at_success, video_fps=env_fps(eval_env))  # fmt: skip


def _jax_loop(trainer: Any, monitor: Any, steps: int, boundary: list[bool],
              save_latest: Callable[[], None]) -> None:  # fmt: skip
    """Step until ``steps``, an early stop or Ctrl-C; then a final evaluation or a latest save."""
    with _graceful_interrupt() as interrupted:
        while trainer.env_steps < steps:
            finished = trainer.step()
            boundary[0] = bool(finished)
            episodes = [(e.return_, e.length, e.success) for e in finished]
            stop = monitor.on_step(trainer.env_steps, trainer.updates, episodes,
                                   lambda: trainer.last_metrics)  # fmt: skip
            if stop or (interrupted[0] and finished):
                break
        if not interrupted[0] and (
            monitor.last_eval is None or monitor.last_eval["env_steps"] < trainer.env_steps
        ):
            monitor.evaluate_now(trainer.env_steps)  # fmt: skip
        else:
            save_latest()


def _train_sb3(cfg: ResolvedConfig, env: gym.Env, eval_env: gym.Env, run: Any, demos: Any, *,
               progress: bool) -> dict[str, Any] | None:  # fmt: skip
    from handrail.learners.sb3_backend import train_sb3

    obs_spec, action_spec = check_spaces(env, cfg.task)
    transitions = None
    if demos is not None:
        from handrail.learners.demo_data import to_transitions

        transitions = to_transitions(demos, obs_spec, action_spec)
    return train_sb3(env, eval_env, run, sac=cfg.sac, steps=cfg.steps, seed=cfg.seed,
                     warmup_steps=cfg.warmup_steps, buffer_capacity=cfg.buffer_capacity,
                     eval_every=cfg.eval_every, eval_episodes=cfg.eval_episodes,
                     demos=transitions, success_key=cfg.success_key, video=cfg.video,
                     progress=progress, stop_at_success=cfg.stop_at_success)  # fmt: skip
