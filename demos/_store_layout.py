"""What ``create_store`` lays down: argument checks, the empty arrays and the root document.

``store.create_store`` calls these in the crash-safety order: the arrays first (fsynced when
durable), then the root document, which it writes atomically: only that write makes the folder
a handrail store.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos import _zarr
from handrail.demos._lock import LOCK_NAME
from handrail.demos.commit import fsync_paths
from handrail.demos.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INTERVENTION_SOURCES,
    KINDS,
    ArrayDef,
    FieldSpec,
    StoreKind,
    episode_fields,
    step_fields,
    validate_obs_fields,
    versions,
)


def validate_create_args(
    kind: StoreKind,
    obs_fields: Sequence[FieldSpec],
    action_dim: int,
    control_dt_s: float,
    task: str,
) -> list[FieldSpec]:
    """Checks ``create_store``'s arguments; returns the validated observation fields."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} must be one of {KINDS}")
    fields = validate_obs_fields(obs_fields)
    if not isinstance(action_dim, (int, np.integer)) or action_dim < 1:
        raise ValueError(f"action_dim={action_dim!r} must be a positive int")
    if not (
        isinstance(control_dt_s, (int, float)) and math.isfinite(control_dt_s) and control_dt_s > 0
    ):
        raise ValueError(f"control_dt_s={control_dt_s!r} must be a positive number of seconds")
    if not isinstance(task, str) or not task:
        raise ValueError(f"task={task!r} must be a non-empty str")
    return fields


def create_empty_arrays(
    root: Path, fields: Sequence[FieldSpec], action_dim: int, durable: bool
) -> list[ArrayDef]:
    """Empties ``root`` (all but the lock) and creates the store's arrays, fsynced if durable."""
    for child in root.iterdir():
        if child.name != LOCK_NAME:
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    defs = step_fields(fields, action_dim) + episode_fields(fields)
    _zarr.create_arrays(root, defs, attributes={})
    if durable:
        fsync_paths(p for p in root.rglob("*") if p.name != LOCK_NAME)
    return defs


def root_document(
    root: Path,
    kind: StoreKind,
    fields: Sequence[FieldSpec],
    defs: Sequence[ArrayDef],
    action_dim: int,
    control_dt_s: float,
    robot: str,
    task: str,
) -> dict[str, Any]:
    """The root ``zarr.json`` with the attributes of a new, empty store (its first commit)."""
    doc = json.loads((root / "zarr.json").read_text())
    doc["attributes"] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "creator": f"handrail {versions()['handrail']}",
        "versions": versions(),
        "created": datetime.now(UTC).isoformat(),
        "control_dt_s": float(control_dt_s),
        "robot": str(robot),
        "task": task,
        "action_dim": int(action_dim),
        "intervention_sources": {str(k): v for k, v in INTERVENTION_SOURCES.items()},
        "obs_fields": [f.to_json() for f in fields],
        "fields": [{"path": d.path, **d.spec.to_json()} for d in defs],
        "commit": {"num_episodes": 0, "num_steps": 0, "tasks": [task], "sequence": 0},
    }
    return doc
