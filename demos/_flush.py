"""The staging blocks steps go into, and the background thread that commits them as episodes.

The control loop only checks a step's values and copies them into in-RAM staging blocks
(``check_value``, ``copy_row``) and puts messages on a queue; this thread
is the only one that touches the Zarr arrays while a writer is open. It takes every message that
is waiting, writes the rows in one batched write per array, then commits all episodes that ended
with one atomic replacement of the root ``zarr.json`` (see _commit.py for the protocol).
"""

from __future__ import annotations

import errno
import json
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from handrail.demos import _zarr
from handrail.demos.commit import (
    TMP_SUFFIX,
    FaultHook,
    atomic_write_json,
    clean_temp_files,
    fsync_dir,
    fsync_paths,
)
from handrail.demos.format import ArrayDef, read_root_document

PENDING_NAME = "handrail.pending.json"


@dataclass
class StagingBlock:
    """Preallocated rows for every data/ array; filled by add_step, written by the flusher."""

    arrays: dict[str, np.ndarray]
    n: int = 0

    @classmethod
    def allocate(cls, defs: list[ArrayDef], rows: int) -> StagingBlock:
        """Empty block with room for ``rows`` steps."""
        return cls({d.path: np.empty((rows, *d.spec.shape), d.spec.dtype) for d in defs})


@dataclass
class EpisodeInfo:
    """What begin_episode and end_episode tell the flusher about one episode."""

    episode: int
    task: str
    seed: int | None
    start_time: float
    success: bool = False
    num_intervened: int = 0
    recovered: bool = False
    final_obs: dict[str, np.ndarray] = field(default_factory=dict)
    start: int = 0  # first row, set by the flusher
    end: int = 0  # exclusive last row, set by the flusher


class Flusher(threading.Thread):
    """Writes staged blocks and commits episodes; the single owner of the arrays while open."""

    def __init__(
        self,
        root: Path,
        doc: dict[str, Any],
        arrays: dict[str, zarr.Array],
        step_defs: list[ArrayDef],
        ep_defs: list[ArrayDef],
        durable: bool,
    ) -> None:
        super().__init__(name=f"handrail-store-flusher:{root.name}", daemon=True)
        self.root, self.doc, self.arrays = root, doc, arrays
        self.step_defs, self.ep_defs, self.durable = step_defs, ep_defs, durable
        commit = doc["attributes"]["commit"]
        self.num_episodes: int = commit["num_episodes"]
        self.num_steps: int = commit["num_steps"]
        self.tasks: list[str] = list(commit["tasks"])
        self.sequence: int = int(commit.get("sequence", 0))
        self.queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.pool: deque[StagingBlock] = deque()
        self.error: BaseException | None = None
        self.fault_hook: FaultHook | None = None
        self._written = self.num_steps  # rows [num_steps, _written) are on disk, uncommitted
        self._next = self.num_steps  # row the next staged step will take
        self._blocks: list[StagingBlock] = []
        self._ends: list[EpisodeInfo] = []
        self._open: EpisodeInfo | None = None
        self._step_cap = min(a.shape[0] for a in (arrays[d.path] for d in step_defs))
        self._ep_cap = min(a.shape[0] for a in (arrays[d.path] for d in ep_defs))
        self._dirty: set[Path] = set()

    # -- thread body -------------------------------------------------------------------------
    def run(self) -> None:
        """Process messages until a "stop" message; after an error only wake up waiters."""
        stop = False
        while not stop:
            items = [self.queue.get()]
            while True:
                try:
                    items.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            for item in items:
                stop = stop or item[0] == "stop"
                if self.error is None:
                    try:
                        self._handle(item)
                    except BaseException as exc:  # kept and re-raised in the caller's thread
                        self.error = exc
                if item[0] in ("sync", "stop") and item[1] is not None:
                    item[1].set()
            if self.error is None and not stop:
                try:
                    self._drain()
                except BaseException as exc:
                    self.error = exc

    def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "begin":
            self._open = item[1]
            self._open.start = self._next
        elif kind == "data":
            self._blocks.append(item[1])
            self._next += item[1].n
        elif kind == "end":
            if item[2] is not None:  # the episode's last rows, sent with its end
                self._handle(("data", item[2]))
            info: EpisodeInfo = item[1]
            info.start, info.end = self._open.start if self._open else self._next, self._next
            self._ends.append(info)
            self._open = None
        elif kind == "abort":
            self._drain()
            self._open = None
            self._next = self._written = self.num_steps
            (self.root / PENDING_NAME).unlink(missing_ok=True)
        elif kind in ("sync", "stop"):
            self._drain()

    def _hook(self, point: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(point)

    # -- the commit protocol -----------------------------------------------------------------
    def _drain(self) -> None:
        """Write staged rows, then commit every ended episode with one record replacement."""
        if self._blocks:
            self._hook("write_data")
            self._write_data()
        if self._ends:
            ends, self._ends = self._ends, []
            self.commit(ends)
        self._write_pending()

    def _write_data(self) -> None:
        blocks, self._blocks = self._blocks, []
        total = sum(b.n for b in blocks)
        start = self._written
        self._grow_steps(start + total)
        items = []
        for d in self.step_defs:
            parts = [b.arrays[d.path][: b.n] for b in blocks]
            value = parts[0] if len(parts) == 1 else np.concatenate(parts)
            items.append((self.arrays[d.path], start, value))
        _zarr.write_many(items)
        self._written = start + total
        for b in blocks:
            b.n = 0
            self.pool.append(b)

    def commit(self, ends: list[EpisodeInfo], edits: list[Any] | None = None) -> None:
        """Write the per-episode rows of ``ends`` and make them visible atomically."""
        self._hook("write_meta")
        e0, e1 = self.num_episodes, self.num_episodes + len(ends)
        self._grow_episodes(e1)
        columns = self._meta_columns(ends)
        _zarr.write_many(
            [(self.arrays[d.path], e0, columns[d.path]) for d in self.ep_defs] + (edits or [])
        )
        new_steps = ends[-1].end
        self._hook("fsync_data")
        if self.durable:
            self._fsync_written(self.num_steps, new_steps, e0, e1)
        self.sequence += 1
        commit = {
            "num_episodes": e1,
            "num_steps": new_steps,
            "tasks": list(self.tasks),
            "sequence": self.sequence,
        }
        doc = json.loads(json.dumps(self.doc))
        doc["attributes"]["commit"] = commit
        atomic_write_json(self.root / "zarr.json", doc, durable=self.durable, hook=self._hook)
        self.doc = doc
        self.num_episodes, self.num_steps = e1, new_steps
        self._hook("committed")

    def _meta_columns(self, ends: list[EpisodeInfo]) -> dict[str, np.ndarray]:
        for info in ends:
            if info.task not in self.tasks:
                self.tasks.append(info.task)
        cols: dict[str, Any] = {
            "meta/episode_ends": [i.end for i in ends],
            "meta/success": [i.success for i in ends],
            "meta/num_intervened": [i.num_intervened for i in ends],
            "meta/start_time": [i.start_time for i in ends],
            "meta/seed": [-1 if i.seed is None else i.seed for i in ends],
            "meta/task_index": [self.tasks.index(i.task) for i in ends],
            "meta/recovered": [i.recovered for i in ends],
        }
        out = {}
        for d in self.ep_defs:
            if d.path.startswith("meta/final_obs/"):
                name = d.path.rsplit("/", 1)[1]
                out[d.path] = np.stack([i.final_obs[name] for i in ends]).astype(d.spec.dtype)
            else:
                out[d.path] = np.asarray(cols[d.path], dtype=d.spec.dtype)
        return out

    def _fsync_written(self, s0: int, s1: int, e0: int, e1: int) -> None:
        files: set[Path] = set(self._dirty)
        for d in self.step_defs:
            files.update(_zarr.chunk_files(self.root, d, s0, s1))
        for d in self.ep_defs:
            files.update(_zarr.chunk_files(self.root, d, e0, e1))
        files.update({p.parent for p in files})
        fsync_paths(sorted(files))
        self._dirty.clear()

    def _grow_steps(self, rows: int) -> None:
        if rows > self._step_cap:
            self._step_cap = max(rows, 2 * self._step_cap, 1024)
            self._resize(self.step_defs, self._step_cap)

    def _grow_episodes(self, rows: int) -> None:
        if rows > self._ep_cap:
            self._ep_cap = max(rows, 2 * self._ep_cap, 64)
            self._resize(self.ep_defs, self._ep_cap)

    def _resize(self, defs: list[ArrayDef], rows: int) -> None:
        _zarr.resize_many([(self.arrays[d.path], rows) for d in defs])
        self._dirty.update(self.root / d.path / "zarr.json" for d in defs)

    def trim(self) -> None:
        """Shrink every array to the committed length (no capacity left past the commit)."""
        _zarr.resize_many([(self.arrays[d.path], self.num_steps) for d in self.step_defs])
        _zarr.resize_many([(self.arrays[d.path], self.num_episodes) for d in self.ep_defs])
        self._step_cap, self._ep_cap = self.num_steps, self.num_episodes
        self._written = self._next = self.num_steps
        if self.durable:
            fsync_paths(self.root / d.path / "zarr.json" for d in self.step_defs + self.ep_defs)

    def cut_back(self) -> BaseException | None:
        """After a failed write: cut the arrays back to the commit record on disk (the truth: a
        commit that failed after its ``os.replace`` is on disk although this object did not
        count it), deleting the chunks past it first; returns the error if even that failed
        (a disk with no byte left; the next ``open_writer`` cuts them then)."""
        try:
            commit = read_root_document(self.root)["attributes"]["commit"]
            self.num_episodes = int(commit["num_episodes"])
            self.num_steps = int(commit["num_steps"])
            clean_temp_files(self.root)
            self.trim()  # zarr deletes the chunks past the end, then writes the shorter shapes
        except Exception as exc:
            return exc
        return None

    def _write_pending(self) -> None:
        """Record the open episode's rows already on disk, so a crash can keep them (truncate)."""
        path = self.root / PENDING_NAME
        info = self._open
        if info is None or self._written <= info.start:
            path.unlink(missing_ok=True)
            return
        record = {
            "episode": self.num_episodes,
            "start_step": info.start,
            "rows": self._written - info.start,
            "task": info.task,
            "seed": info.seed,
            "start_time": info.start_time,
        }
        tmp = path.with_name(path.name + TMP_SUFFIX)
        tmp.write_text(json.dumps(record))
        tmp.replace(path)


def copy_row(dst: np.ndarray, i: int, value: np.ndarray) -> None:
    """dst[i] = value; big rows go through memoryview so the GIL is never released.

    numpy drops the GIL while copying large arrays, and getting it back from the flusher thread
    can take a whole switch interval (5 ms): an image copy must not give it away.
    """
    if dst[i].nbytes < 4096 or value.dtype != dst.dtype or not value.flags.c_contiguous:
        dst[i] = value
        return
    n = dst[i].nbytes
    dst.data.cast("B")[i * n : (i + 1) * n] = value.data.cast("B")


def check_value(what: str, value: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Raise naming ``what`` unless ``value`` has ``shape`` and a dtype that casts to ``dtype``."""
    if value.shape != shape:
        raise ValueError(f"{what} has shape {value.shape}, the store expects {shape}")
    if value.dtype != dtype and not np.can_cast(value.dtype, dtype, "same_kind"):
        raise TypeError(f"{what} has dtype {value.dtype}, which does not cast to {dtype}")


def failure_words(err: BaseException) -> str:
    """What went wrong in the flusher, in words (a full disk says so)."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return f"the disk is full ({err.strerror})"
    return f"writing failed ({err!r})"


def read_pending(root: Path) -> dict[str, Any] | None:
    """The pending-episode record left by a crashed writer, or None (unreadable counts as none)."""
    try:
        rec = json.loads((root / PENDING_NAME).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


__all__ = [
    "PENDING_NAME",
    "EpisodeInfo",
    "Flusher",
    "StagingBlock",
    "check_value",
    "copy_row",
    "failure_words",
    "fsync_dir",
    "read_pending",
]
