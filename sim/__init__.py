"""handrail.sim: MuJoCo arm tasks as Gymnasium envs, and their scripted experts.

>>> from handrail import sim
>>> env = sim.make("reach", episode_steps=50)
>>> expert = sim.make_expert("reach", env)

Envs are also registered with Gymnasium as ``handrail/<task>-v0`` when this package is imported.
Task modules live in ``sim/tasks/``, one file per task; those files are the list of tasks
(:data:`TASKS`, see :mod:`handrail.sim.tasks`; how to write one: :mod:`handrail.sim.base`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium
import numpy as np

from handrail.sim.tasks import task_names

if TYPE_CHECKING:  # the module imports MuJoCo; importing handrail.sim does not
    from handrail.sim.base import ArmEnv


def _headless_rendering_default() -> None:
    """Without a display, MuJoCo renders through EGL unless ``MUJOCO_GL`` says otherwise.

    MuJoCo picks its GL backend from ``MUJOCO_GL`` when it is first imported, and every task
    module imports it through this package: its own default (GLFW) needs a display, so a camera
    run on a headless machine failed at its first frame ("an OpenGL platform library has not
    been loaded"). Set ``MUJOCO_GL`` (egl, osmesa, glfw) to choose another.
    """
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")


_headless_rendering_default()

TASKS: tuple[str, ...] = task_names()
"""Every task: the module files of ``sim/tasks/``, alphabetical (listing them imports no MuJoCo)."""

__all__ = ["TASKS", "Expert", "available_tasks", "make", "make_expert"]


class Expert(Protocol):
    """A scripted policy over the env's action space that reads only the observation."""

    def reset(self, seed: int | None = None) -> None:
        """Start a new episode."""

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """float32 action in [-1, 1]."""


def _spec(task: str) -> Any:
    from handrail.sim.tasks import discover

    found = discover()
    if task not in found:
        raise ValueError(f"unknown task {task!r}; valid tasks: {list(found)}")
    return found[task]


def available_tasks() -> tuple[str, ...]:
    """The task names, after importing every task module (and so MuJoCo); equal to TASKS."""
    from handrail.sim.tasks import discover

    return tuple(discover())


def make(task: str, *, render_mode: str | None = None, **overrides: Any) -> ArmEnv:
    """Build a task env; ``overrides`` replace fields of the task's config dataclass.

    Raises:
        ValueError: unknown task or config field (the message lists the valid names).
    """
    spec = _spec(task)
    return spec.env_cls(spec.make_config(**overrides), render_mode=render_mode)


def make_expert(task: str, env: gymnasium.Env | None = None) -> Expert:
    """The task's scripted expert, for ``env``'s config (default config when env is None).

    Given ``env``, an expert that steers the env's end-effector target through a
    :class:`~handrail.sim.tasks._tracking.TargetTracker` (its ``tracker``: peg_insert, push)
    follows that env's target, so it acts right also when it takes over from a policy (the
    simulated person, an expert residual base). Run it on that env only.
    """
    from handrail.sim.base import ArmEnv
    from handrail.sim.tasks._tracking import TargetTracker

    spec = _spec(task)
    arm = None if env is None else env.unwrapped
    if arm is not None and not isinstance(arm, ArmEnv):
        raise TypeError(
            f"make_expert({task!r}, env): env must be a handrail.sim env (or wrap one), "
            f"got {type(arm).__name__}; build it with handrail.sim.make({task!r})"
        )
    expert = spec.expert_cls(spec.config_cls() if arm is None else arm.config)
    tracker = getattr(expert, "tracker", None)
    if arm is not None and isinstance(tracker, TargetTracker):
        tracker.follow(arm.target_pose)
    return expert


def _register() -> None:
    for task in TASKS:
        env_id = f"handrail/{task}-v0"
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point="handrail.sim:make", kwargs={"task": task})


_register()
