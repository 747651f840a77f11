"""Task envs, one file each: the module files of this folder are the one list of tasks.

Every public module here (a name not starting with ``_``; those are shared helpers) is a task and
defines a module-level ``TASK`` (a :class:`handrail.sim.base.TaskSpec`) whose ``name`` is the
module's name. Adding a task means adding a file, never editing a list: :func:`task_names` reads
the folder (without importing anything, so the command line stays free of MuJoCo) and
:func:`discover` imports the modules when an env is actually built.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from handrail.sim.base import TaskSpec

_REGISTRY: dict[str, TaskSpec] = {}


def task_names() -> tuple[str, ...]:
    """Names of the task modules in this folder, alphabetical; imports none of them."""
    names = (info.name for info in pkgutil.iter_modules(__path__))
    return tuple(sorted(name for name in names if not name.startswith("_")))


def discover() -> dict[str, TaskSpec]:
    """Import every task module (once) and return {name: TaskSpec}, in :func:`task_names` order.

    Raises:
        TypeError: A task module defines no ``TASK`` TaskSpec.
        ValueError: A module's ``TASK.name`` differs from the module's name.
    """
    from handrail.sim.base import TaskSpec

    if not _REGISTRY:
        for name in task_names():
            module = importlib.import_module(f"{__name__}.{name}")
            spec = getattr(module, "TASK", None)
            if not isinstance(spec, TaskSpec):
                raise TypeError(
                    f"{module.__name__} defines no TASK = TaskSpec(...); every module in "
                    "sim/tasks/ not starting with '_' is a task"
                )
            if spec.name != name:
                raise ValueError(
                    f"{module.__name__}: TASK.name is {spec.name!r}, but a task is named after "
                    f"its file; rename one of them to {name!r}"
                )
            _REGISTRY[name] = spec
    return dict(_REGISTRY)
