"""The environments ``handrail train`` and ``handrail eval`` run on.

A task is a handrail task (``reach``, ``pick_cube``, ...), any ``gymnasium.make`` id, or
``module:EnvId`` (the module is imported first so that it can register ``EnvId``).
"""

from __future__ import annotations

import importlib
import os
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
    env_id = task
    if ":" in task:
        module, env_id = task.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(
                f"--task {task!r}: cannot import module {module!r} ({exc}); the module:EnvId "
                "form imports the module (which registers EnvId) before gymnasium.make"
            ) from exc
    try:
        return gym.make(env_id, render_mode=render_mode)
    except gym.error.Error as exc:
        raise ValueError(
            f"--task {task!r} is not a handrail task {HANDRAIL_TASKS} and gymnasium.make "
            f"failed: {exc}. Use a handrail task, a registered gymnasium id, or module:EnvId"
        ) from exc


def check_spaces(env: gym.Env, task: str) -> tuple[Any, Any]:
    """ObsSpec/ActionSpec of an env, with errors that name the task."""
    from handrail.learners.specs import ActionSpec, ObsSpec

    try:
        return ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space)
    except TypeError as exc:
        raise TypeError(f"--task {task!r}: {exc}") from exc
