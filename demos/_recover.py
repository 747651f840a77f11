"""Opening helpers: preparing a directory for a new store, recovering a crashed writer's episode."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from handrail.demos import _zarr
from handrail.demos._flush import EpisodeInfo, read_pending
from handrail.demos._lock import LOCK_NAME
from handrail.demos.errors import NotAStoreError, StoreCorruptError, StoreError
from handrail.demos.format import read_root_document

if TYPE_CHECKING:
    from handrail.demos.store import EpisodeWriter


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
    root.mkdir(parents=True, exist_ok=True)


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
