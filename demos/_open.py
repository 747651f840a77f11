"""Creating and opening a store for writing: what ``create_store`` lays down (argument checks,
the empty arrays, the root document), the folder it goes in, and the recovery of the episode a
crashed writer left unfinished.

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
from typing import TYPE_CHECKING, Any

import numpy as np

from handrail.demos import _zarr
from handrail.demos._flush import EpisodeInfo, read_pending
from handrail.demos.commit import LOCK_NAME, fsync_paths
from handrail.demos.errors import NotAStoreError, StoreCorruptError, StoreError, not_writable
from handrail.demos.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INTERVENTION_SOURCES,
    KINDS,
    ArrayDef,
    FieldSpec,
    StoreKind,
    episode_fields,
    read_root_document,
    step_fields,
    validate_obs_fields,
    versions,
)

if TYPE_CHECKING:
    from handrail.demos.store import EpisodeWriter


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


def prepare_dir(root: Path, overwrite: bool) -> None:
    """Check ``root`` may hold a new store (empty, or a store to overwrite) and create it."""
    if root.exists() and not root.is_dir():
        raise FileExistsError(f"{root} exists and is not a directory; choose another path")
    if root.is_dir() and any(p.name != LOCK_NAME for p in root.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{root} already exists: pass overwrite=True to replace it, or open_writer(path) "
                "to append to it"
            )
        try:
            read_root_document(root)
        except NotAStoreError:
            raise ValueError(
                f"refusing to overwrite {root}: it is not a handrail episode store"
            ) from None
        except StoreError:
            pass  # a damaged or newer store may be replaced on purpose
    try:
        root.mkdir(parents=True, exist_ok=True)
    except PermissionError as exc:
        raise not_writable(root, exc) from None


def recover_pending(writer: EpisodeWriter, mode: str) -> dict[str, Any]:
    """Drop or keep (as truncated) the episode a crashed writer left half written."""
    fl = writer._flusher
    rec = read_pending(writer.path)
    t0, e0 = fl.num_steps, fl.num_episodes
    if rec is None or rec.get("start_step") != t0 or rec.get("episode") != e0:
        return {"action": "none", "episode": None, "steps": 0}
    n = int(rec.get("rows", 0))
    if mode == "truncate" and n >= 2:
        try:
            rows = {
                d.path: _zarr.read_rows(writer.path, fl.arrays[d.path], d, t0, t0 + n)
                for d in fl.step_defs
            }
        except StoreCorruptError:
            rows = None
        if rows is not None:
            info = EpisodeInfo(e0, str(rec["task"]), rec.get("seed"), float(rec["start_time"]))
            info.num_intervened = int(np.count_nonzero(rows["data/intervention"][: n - 1]))
            info.recovered, info.start, info.end = True, t0, t0 + n - 1
            # The last stored step has no next observation: its obs becomes the final one.
            info.final_obs = {f.name: rows[f"data/obs/{f.name}"][n - 1] for f in writer.obs_fields}
            edit = (fl.arrays["data/truncated"], t0 + n - 2, np.ones(1, dtype=bool))
            fl._written = t0 + n
            fl.commit([info], edits=[edit])
            writer._next_id = fl.num_episodes
            return {"action": "truncated", "episode": e0, "steps": n - 1}
    return {"action": "dropped", "episode": e0, "steps": n}
