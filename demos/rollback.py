"""Rolling a store back to an earlier commit: every episode after the first N is dropped.

A run that records its training episodes (``handrail train --record``) and resumes from a
checkpoint takes the episodes after that checkpoint again. It first rolls the store back to the
episodes it held when the checkpoint was saved, so that no episode is stored twice.

The commit record is the truth (FORMAT.md): the rollback's commit point is the atomic
replacement of the root ``zarr.json`` with a record that counts N episodes. The rows past them
are removed afterwards; a crash in between leaves them uncommitted, and the next writer trims
them as it trims any crashed writer's rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from handrail.demos import _zarr
from handrail.demos._flush import PENDING_NAME
from handrail.demos.commit import StoreLock, atomic_write_json, clean_temp_files, fsync_paths
from handrail.demos.errors import StoreError
from handrail.demos.format import FieldSpec, episode_fields, read_root_document, step_fields


def roll_back(path: str | Path, num_episodes: int) -> int:
    """Keep the first ``num_episodes`` episodes of the store at ``path``; drop the rest.

    Takes the single-writer lock for the time it runs and cleans up after a crashed writer
    (temp files; the episode it left unfinished is dropped).

    Returns:
        How many episodes were dropped.

    Raises:
        StoreError: the store holds fewer than ``num_episodes`` episodes (it was changed since
            they were counted), or it is locked, damaged or not a store.
    """
    root = Path(path)
    read_root_document(root)  # clear errors before the lock file is created
    lock = StoreLock(root)
    lock.acquire()
    try:
        doc = read_root_document(root)  # the record as of the lock
        commit = doc["attributes"]["commit"]
        have = int(commit["num_episodes"])
        if not 0 <= num_episodes <= have:
            raise StoreError(
                f"{root} holds {have} episodes, fewer than the {num_episodes} to keep: it was "
                "changed after they were counted (filtered, or replaced by another store)"
            )
        clean_temp_files(root)
        (root / PENDING_NAME).unlink(missing_ok=True)
        if num_episodes == have:
            return 0
        attrs = doc["attributes"]
        fields = [FieldSpec.from_json(f) for f in attrs["obs_fields"]]
        step_defs = step_fields(fields, int(attrs["action_dim"]))
        ep_defs = episode_fields(fields)
        arrays = _zarr.open_arrays(root, step_defs + ep_defs, writable=True)
        ends = next(d for d in ep_defs if d.path == "meta/episode_ends")
        num_steps = 0
        if num_episodes > 0:
            last = _zarr.read_rows(root, arrays[ends.path], ends, num_episodes - 1, num_episodes)
            num_steps = int(last[0])
        doc = json.loads(json.dumps(doc))
        doc["attributes"]["commit"] = {
            **commit,
            "num_episodes": num_episodes,
            "num_steps": num_steps,
            "sequence": int(commit.get("sequence", 0)) + 1,
        }
        labels = doc["attributes"].get("labels")
        if isinstance(labels, dict) and int(labels.get("num_steps", 0)) > num_steps:
            labels["num_steps"] = num_steps  # the dropped steps' labels go with them
        atomic_write_json(root / "zarr.json", doc)  # the commit point
        _zarr.resize_many(
            [(arrays[d.path], num_steps) for d in step_defs]
            + [(arrays[d.path], num_episodes) for d in ep_defs]
        )
        fsync_paths(root / d.path / "zarr.json" for d in step_defs + ep_defs)
    finally:
        lock.release()
    return have - num_episodes
