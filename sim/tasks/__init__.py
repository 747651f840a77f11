"""Task envs, one file each, discovered automatically.

Every module in this package that defines a module-level ``TASK`` (a
:class:`handrail.sim.base.TaskSpec`) is registered under ``TASK.name``; adding a task means adding
a file, never editing this one.
"""

from __future__ import annotations

import importlib
import pkgutil

from handrail.sim.base import TaskSpec

_REGISTRY: dict[str, TaskSpec] = {}


def discover() -> dict[str, TaskSpec]:
    """Import every task module (once) and return {name: TaskSpec}."""
    if not _REGISTRY:
        for info in pkgutil.iter_modules(__path__):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            spec = getattr(module, "TASK", None)
            if isinstance(spec, TaskSpec):
                _REGISTRY[spec.name] = spec
    return dict(_REGISTRY)
