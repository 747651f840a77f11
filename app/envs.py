"""The environments ``handrail train`` and ``handrail eval`` run on.

A task is a handrail task (``reach``, ``pick_cube``, ...), any ``gymnasium.make`` id, or
``module:EnvId`` (the module is imported first so that it can register ``EnvId``).
"""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from handrail.sim import TASKS

HANDRAIL_TASKS: tuple[str, ...] = TASKS
"""Tasks that :func:`make_env` builds with ``handrail.sim.make`` (the rest go to gymnasium).

The same object as :data:`handrail.sim.TASKS`: the task files of ``sim/tasks/``.
"""


def make_env(task: str, *, render_mode: str | None = None, **overrides: Any) -> gym.Env:
    """Makes a handrail task, a gymnasium id, or a ``module:EnvId`` env.

    Raises:
        ValueError: If the task cannot be resolved (naming the handrail tasks and the forms).
    """
    if task in HANDRAIL_TASKS:
        if render_mode is not None and "DISPLAY" not in os.environ:
            os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering for videos
        import handrail.sim

        return handrail.sim.make(task, render_mode=render_mode, **overrides)
    if overrides:
        raise ValueError(f"env overrides {sorted(overrides)} only apply to handrail tasks")
    env_id = _gym_id(task, "--task")
    try:
        return gym.make(env_id, render_mode=render_mode)
    except gym.error.Error as exc:
        raise _unknown_task(task, "--task", f"gymnasium.make failed: {exc}") from exc


def check_tasks(tasks: Sequence[str], *, handrail_only: str = "") -> None:
    """Fails before any work starts, saying how to fix it, for a ``--tasks`` entry that
    :func:`make_env` cannot build (a bench checks them all before launching a run per seed).

    Args:
        handrail_only: if given, only handrail tasks will do, for this reason (e.g. "the
            simulated person is a handrail task's scripted expert").

    Raises:
        ValueError: If a task is unknown, or not a handrail task where one is needed.
    """
    for task in tasks:
        if task in HANDRAIL_TASKS:
            continue
        if handrail_only:
            message = f"--tasks {task!r} is not a handrail task {HANDRAIL_TASKS}: {handrail_only}."
            raise ValueError(f"{message} {_did_you_mean(task)}".rstrip())
        try:
            gym.spec(_gym_id(task, "--tasks"))
        except gym.error.Error as exc:
            raise _unknown_task(task, "--tasks", f"gymnasium does not know it: {exc}") from exc


def _gym_id(task: str, option: str) -> str:
    """The gymnasium id of ``task``, importing the module of a ``module:EnvId`` first."""
    if ":" not in task:
        return task
    module, env_id = task.split(":", 1)
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(
            f"{option} {task!r}: cannot import module {module!r} ({exc}); the module:EnvId "
            "form imports the module (which registers EnvId) before gymnasium.make"
        ) from exc
    return env_id


def _did_you_mean(task: str) -> str:
    close = difflib.get_close_matches(task, HANDRAIL_TASKS, n=1)
    return f"Did you mean {close[0]!r}? " if close else ""


def _unknown_task(task: str, option: str, why: str) -> ValueError:
    return ValueError(
        f"{option} {task!r} is not a handrail task {HANDRAIL_TASKS} and {why.rstrip('.')}. "
        f"{_did_you_mean(task)}Use a handrail task, a registered gymnasium id, or module:EnvId"
    )


def check_spaces(env: gym.Env, task: str) -> tuple[Any, Any]:
    """ObsSpec/ActionSpec of an env, with errors that name the task."""
    from handrail.learners.specs import ActionSpec, ObsSpec

    try:
        return ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space)
    except TypeError as exc:
        raise TypeError(f"--task {task!r}: {exc}") from exc
