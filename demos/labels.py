"""Success labels of a store's steps, for a learned reward (a binary success classifier).

``label[t]`` says whether the observation *after* step ``t`` (the next step's observation, or
the episode's final observation for its last step) shows the task achieved: the same convention
as the step's reward. Labels come from the episodes' recorded success
(:func:`labels_from_success`), from a person's takeovers (:func:`labels_from_interventions`) or
from a person looking at the frames (:func:`label_interactively`); :func:`write_labels` merges
them into the store, where :func:`read_labels` finds them.

On disk (FORMAT.md, "Success labels"): two int8 arrays of one row per step in a new folder
``labels/<n>/`` at each write, and the root attribute ``labels`` that names that folder, the
steps it covers and who set the labels. Replacing the root ``zarr.json`` is the commit point, as
for episodes: a write killed at any moment leaves the old labels or the new ones, never a mix,
and never touches the episodes.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from handrail.control.spaces import is_image
from handrail.demos import _zarr
from handrail.demos.commit import StoreLock, atomic_write_json, fsync_paths
from handrail.demos.errors import StoreCorruptError
from handrail.demos.format import ArrayDef, FieldSpec, read_root_document
from handrail.demos.reader import EpisodeReader, EpisodeRecord

UNLABELLED, FAILURE, SUCCESS = -1, 0, 1
"""Values of a success label (int8): not labelled, task not achieved, task achieved."""
LABELS_DIR = "labels"
"""Folder of the store that holds one ``<n>/`` folder per label write (the newest two are kept)."""
_FOLDER_RE = re.compile(rf"{LABELS_DIR}/[0-9]+")
_MAX_SOURCES = int(np.iinfo(np.int8).max)  # a source index is int8


@dataclass(frozen=True)
class Labels:
    """The success labels of every committed step of a store, and who set them."""

    success: np.ndarray
    """(num_steps,) int8: SUCCESS, FAILURE or UNLABELLED per step; ``success[t]`` is about the
    observation after step ``t`` (as the step's reward is)."""
    source: np.ndarray
    """(num_steps,) int8: index into ``sources`` of who set each label; -1 where unlabelled."""
    sources: tuple[dict[str, Any], ...]
    """Who labelled: ``{"by": str, "method": str, "time": ISO 8601 UTC}`` per labelling."""

    def counts(self) -> dict[str, int]:
        """How many steps are labelled success, failure, and not at all."""
        return {
            "success": int(np.count_nonzero(self.success == SUCCESS)),
            "failure": int(np.count_nonzero(self.success == FAILURE)),
            "unlabelled": int(np.count_nonzero(self.success == UNLABELLED)),
        }


def _array_defs(folder: str) -> list[ArrayDef]:
    """The two label arrays of one write, in ``folder`` (one row per step)."""
    return [
        ArrayDef(
            f"{folder}/success",
            FieldSpec("success", "int8", (), "-1 unlabelled, 0 failure, 1 success"),
            fill_value=UNLABELLED,
        ),
        ArrayDef(
            f"{folder}/source",
            FieldSpec("source", "int8", (), "index into labels.sources, -1 unlabelled"),
            fill_value=-1,
        ),
    ]


def _unlabelled(num_steps: int) -> Labels:
    empty = np.full(num_steps, UNLABELLED, np.int8)
    return Labels(empty, empty.copy(), ())


def read_labels(path: str | Path) -> Labels:
    """The success labels of every committed step of the store at ``path``.

    All UNLABELLED (and no sources) when the store has none; steps committed after the labels
    were written read as UNLABELLED. Takes no lock, like every reader.

    Raises:
        NotAStoreError, StoreVersionError: see ``open_store``.
        StoreCorruptError: the labels record or arrays are damaged.
    """
    root = Path(path)
    attrs = read_root_document(root)["attributes"]
    return _labels_of(root, attrs, int(attrs["commit"]["num_steps"]))


def _labels_of(root: Path, attrs: dict[str, Any], num_steps: int) -> Labels:
    """The labels the root attributes ``attrs`` point at, over ``num_steps`` steps."""
    record = attrs.get("labels")
    if record is None:
        return _unlabelled(num_steps)
    try:
        covered, folder = int(record["num_steps"]), str(record["path"])
        sources = tuple(dict(s) for s in record["sources"])
        if not _FOLDER_RE.fullmatch(folder):
            raise ValueError(f"path {folder!r} is not {LABELS_DIR}/<n>")
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptError(f"{root}: the labels record is malformed: {record!r}") from exc
    # Rows past the store's committed steps (a rolled-back store) describe no episode now.
    rows = max(0, min(covered, num_steps))
    defs = _array_defs(folder)
    arrays = _zarr.open_arrays(root, defs, writable=False)
    success, source = (_zarr.read_rows(root, arrays[d.path], d, 0, rows) for d in defs)
    bad_value = ~np.isin(success, (UNLABELLED, FAILURE, SUCCESS))
    bad_source = (source < -1) | (source >= len(sources)) | ((source == -1) != (success == -1))
    if np.any(bad_value | bad_source):
        t = int(np.argmax(bad_value | bad_source))
        raise StoreCorruptError(
            f"{root}/{folder}: step {t} has label {int(success[t])} from source "
            f"{int(source[t])}, which the labels record (sources 0..{len(sources) - 1}) cannot hold"
        )
    out = _unlabelled(num_steps)
    out.success[:rows], out.source[:rows] = success, source
    return Labels(out.success, out.source, sources)


def write_labels(path: str | Path, success: np.ndarray, *, by: str, method: str) -> Labels:
    """Merge ``success`` into the store's labels; returns the labels as now stored.

    Entries other than UNLABELLED override the stored label of their step; the others keep
    what is stored (so a person can correct a few steps of an automatic labelling). Nothing is
    written when every entry is UNLABELLED. Takes the store's writer lock while it runs.

    Args:
        path: the store.
        success: (num_steps,) int8, one entry per committed step of the store now.
        by: who labels (a person, ``user@host``).
        method: how: ``success``, ``interventions``, ``interactive``, or another word.

    Raises:
        StoreLockedError: a writer (a recorder) has the store open; it names the process.
        ValueError: ``success`` has the wrong length, dtype or values; ``by`` or ``method`` is
            empty.
    """
    root = Path(path)
    read_root_document(root)  # clear errors before the lock file is created
    for name, value in (("by", by), ("method", method)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"write_labels: {name}={value!r} must be a non-empty str")
    lock = StoreLock(root)
    lock.acquire()
    try:
        doc = read_root_document(root)  # the record as of the lock: no writer can change it
        attrs = doc["attributes"]
        num_steps = int(attrs["commit"]["num_steps"])
        new = _check_success(success, num_steps)
        old = _labels_of(root, attrs, num_steps)
        if not np.any(new != UNLABELLED):
            return old
        entry = {"by": by, "method": method, "time": datetime.now(UTC).isoformat("T", "seconds")}
        merged = _merge(old, new, entry)
        _commit(root, doc, merged)
    finally:
        lock.release()
    return merged


def _commit(root: Path, doc: dict[str, Any], labels: Labels) -> None:
    """Write ``labels`` (one per committed step) and point the root record at them; the caller
    holds the store's lock and read ``doc`` under it."""
    attrs = doc["attributes"]
    old_folder = (attrs.get("labels") or {}).get("path")
    folder = _new_folder(root)
    _write_arrays(root, folder, labels)
    doc = json.loads(json.dumps(doc))
    doc["attributes"]["labels"] = {
        "num_steps": int(attrs["commit"]["num_steps"]),
        "path": folder,
        "sources": list(labels.sources),
    }
    atomic_write_json(root / "zarr.json", doc)  # the commit point
    # The folder the old record named stays, for a reader that read that record just now.
    _remove_folders(root, keep={folder, str(old_folder)})


def gather_labels(parts: Sequence[tuple[EpisodeReader, Sequence[int]]]) -> Labels:
    """The labels of the episodes ``parts`` names (each source store's reader and its episode
    ids), in that order, as a store copied from them holds its steps (``demos filter`` and
    ``demos merge``); who labelled each step is kept (:func:`put_labels` writes them). Each
    store's labels are read from the reader's own snapshot."""
    success: list[np.ndarray] = []
    source: list[np.ndarray] = []
    sources: list[dict[str, Any]] = []
    for reader, ids in parts:
        labels = _labels_of(reader.path, reader.attrs, reader.num_steps)
        spans = [np.arange(reader.episodes[i].start, reader.episodes[i].start
                           + reader.episodes[i].num_steps) for i in ids]  # fmt: skip
        rows = np.concatenate([np.zeros(0, np.int64), *spans])
        part = labels.source[rows]
        success.append(labels.success[rows])
        source.append(np.where(part >= 0, part + len(sources), -1))
        sources.extend(labels.sources)
    return _renumbered(np.concatenate(success).astype(np.int8), np.concatenate(source), sources)


def put_labels(path: str | Path, labels: Labels) -> None:
    """Give the store at ``path`` these labels, one per committed step (nothing is written
    when no step is labelled).

    Raises:
        ValueError: the store holds another number of steps.
    """
    root = Path(path)
    lock = StoreLock(root)
    lock.acquire()
    try:
        doc = read_root_document(root)
        num_steps = int(doc["attributes"]["commit"]["num_steps"])
        if len(labels.success) != num_steps:
            raise ValueError(f"{path} holds {num_steps} steps, the labels {len(labels.success)}")
        if np.any(labels.success != UNLABELLED):
            _commit(root, doc, labels)
    finally:
        lock.release()


def check_writable(path: str | Path) -> None:
    """Raise now what :func:`write_labels` would raise for the store itself (not a store, a
    writer has it open, no write access): before a person spends time labelling it.

    Raises:
        StoreLockedError: a writer (a recorder) has the store open; it names the process.
        NotAStoreError, StoreVersionError, StoreCorruptError, PermissionError.
    """
    root = Path(path)
    read_root_document(root)
    lock = StoreLock(root)
    lock.acquire()
    lock.release()


def camera_field(reader: EpisodeReader) -> str | None:
    """The camera :func:`label_interactively` shows: the first uint8 ``H, W, 3`` field."""
    return next(
        (f.name for f in reader.obs_fields if is_image(f.shape, f.dtype) and f.shape[2] == 3),
        None,
    )


def _check_success(success: np.ndarray, num_steps: int) -> np.ndarray:
    """``success`` if it is (num_steps,) int8 of UNLABELLED, FAILURE and SUCCESS; else ValueError."""
    arr = np.asarray(success)
    if arr.dtype != np.int8:
        raise ValueError(
            f"success has dtype {arr.dtype}; labels are int8 (-1 unlabelled, 0 failure, 1 "
            "success): pass success.astype(np.int8)"
        )
    if arr.shape != (num_steps,):
        raise ValueError(
            f"success has shape {arr.shape}; the store has {num_steps} committed steps, so "
            f"give ({num_steps},) (UNLABELLED where there is nothing to say)"
        )
    bad = sorted(set(np.unique(arr).tolist()) - {UNLABELLED, FAILURE, SUCCESS})
    if bad:
        raise ValueError(
            f"success holds {bad}; a label is -1 (unlabelled), 0 (failure) or 1 (success)"
        )
    return arr


def _merge(old: Labels, new: np.ndarray, entry: dict[str, Any]) -> Labels:
    """``new`` over ``old`` where it says something; sources no step refers to any more are
    dropped (and the indices renumbered), so the int8 index does not run out."""
    source = np.where(new != UNLABELLED, len(old.sources), old.source)
    success = np.where(new != UNLABELLED, new, old.success).astype(np.int8)
    return _renumbered(success, source, [*old.sources, entry])


def _renumbered(success: np.ndarray, source: np.ndarray, sources: Sequence[Any]) -> Labels:
    """The labels with only the sources some step refers to, renumbered in order."""
    used = np.unique(source[source >= 0])
    if len(used) > _MAX_SOURCES:
        raise ValueError(
            f"the labels would have {len(used)} sources, more than the {_MAX_SOURCES} an int8 "
            "index holds: relabel whole episodes (their old sources are dropped)"
        )
    renumber = np.full(len(sources) + 1, -1, np.int8)  # the last entry maps -1 to -1
    renumber[used] = np.arange(len(used), dtype=np.int8)
    return Labels(success, renumber[source], tuple(sources[i] for i in used))


def _new_folder(root: Path) -> str:
    """``labels/<n>`` with n above every folder there (one a killed write left included)."""
    here = root / LABELS_DIR
    numbers = [int(p.name) for p in here.iterdir() if p.name.isdigit()] if here.is_dir() else []
    return f"{LABELS_DIR}/{max(numbers, default=-1) + 1}"


def _write_arrays(root: Path, folder: str, labels: Labels) -> None:
    """Create the two arrays in ``folder``, write every row, and fsync all of it."""
    defs = _array_defs(folder)
    _zarr.create_arrays(root, defs, attributes={})  # the root group exists: left as it is
    arrays = _zarr.open_arrays(root, defs, writable=True)
    rows = len(labels.success)
    _zarr.resize_many([(arrays[d.path], rows) for d in defs])
    if rows:
        _zarr.write_many(
            [(arrays[defs[0].path], 0, labels.success), (arrays[defs[1].path], 0, labels.source)]
        )
    new = root / folder
    fsync_paths([*new.rglob("*"), new, new.parent / "zarr.json", new.parent, root])


def _remove_folders(root: Path, keep: set[str]) -> None:
    """Delete the label folders no record names (older writes, killed writes)."""
    for child in (root / LABELS_DIR).iterdir():
        if child.is_dir() and f"{LABELS_DIR}/{child.name}" not in keep:
            shutil.rmtree(child, ignore_errors=True)


# ----------------------------------------------------------------------------- labellers


def _episode_ids(reader: EpisodeReader, episodes: Sequence[int] | None) -> list[int]:
    """The episodes to label (all by default); an unknown id is a ValueError naming the range."""
    return reader.select(episodes=None if episodes is None else list(episodes))


def _check_at_least(name: str, value: int, low: int) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}={value!r} must be an int >= {low}")


def labels_from_success(
    reader: EpisodeReader, last: int = 1, episodes: Sequence[int] | None = None
) -> np.ndarray:
    """Labels from the episodes' recorded success.

    A successful episode's last ``last`` steps are SUCCESS and its earlier steps FAILURE; a
    failed episode's steps are all FAILURE; an episode a crash cut short (``recovered``: its
    success is unknown) and the episodes not listed stay UNLABELLED.

    Args:
        reader: the store.
        last: steps at the end of a successful episode whose next observation shows success.
        episodes: episode ids to label; None labels all.

    Returns:
        (num_steps,) int8 over the whole store, for :func:`write_labels`.
    """
    _check_at_least("last", last, 1)
    out = np.full(reader.num_steps, UNLABELLED, np.int8)
    for e in _episode_ids(reader, episodes):
        rec = reader.episodes[e]
        if rec.recovered:
            continue
        end = rec.start + rec.num_steps
        out[rec.start : end] = FAILURE
        if rec.success:
            out[max(rec.start, end - last) : end] = SUCCESS
    return out


def labels_from_reward(reader: EpisodeReader, episodes: Sequence[int] | None = None) -> np.ndarray:
    """Labels from a sparse reward recorded per step (1 where the task holds after the step,
    as the simulator's ``reward=sparse`` gives): SUCCESS where the reward is positive, FAILURE
    elsewhere. Unlike :func:`labels_from_success` it labels every frame of a demonstration that
    holds the goal for a while (recorded with ``terminate_on_success=false``). Crash-cut and
    unlisted episodes stay UNLABELLED.
    """
    reward = reader.step_column("reward")
    out = np.full(reader.num_steps, UNLABELLED, np.int8)
    for e in _episode_ids(reader, episodes):
        rec = reader.episodes[e]
        if rec.recovered:
            continue
        span = slice(rec.start, rec.start + rec.num_steps)
        out[span] = np.where(reward[span] > 0, SUCCESS, FAILURE)
    return out


def labels_from_interventions(
    reader: EpisodeReader,
    before: int = 10,
    last: int = 1,
    episodes: Sequence[int] | None = None,
) -> np.ndarray:
    """Labels from a person's takeovers: a person took over because the policy was failing.

    A takeover is a step a human acted in (``intervention == 1``) whose previous step in the
    episode was not; the ``before`` steps before it are FAILURE. A successful episode's last
    ``last`` steps are SUCCESS (where both apply, SUCCESS: the episode's end is known). Every
    other step, and the episodes not listed, stay UNLABELLED.

    Args:
        reader: the store.
        before: steps before each takeover labelled FAILURE (0: none).
        last: steps at the end of a successful episode labelled SUCCESS.
        episodes: episode ids to label; None labels all.

    Returns:
        (num_steps,) int8 over the whole store, for :func:`write_labels`.
    """
    _check_at_least("before", before, 0)
    _check_at_least("last", last, 1)
    ids = _episode_ids(reader, episodes)
    out = np.full(reader.num_steps, UNLABELLED, np.int8)
    human = reader.step_column("intervention") == 1
    for e in ids:
        rec = reader.episodes[e]
        end = rec.start + rec.num_steps
        ep = human[rec.start : end]
        takeovers = np.flatnonzero(ep[1:] & ~ep[:-1]) + 1  # a human at step 0 took over nothing
        for k in takeovers.tolist():
            out[rec.start + max(0, k - before) : rec.start + k] = FAILURE
        if rec.success:
            out[max(rec.start, end - last) : end] = SUCCESS
    return out


Ask = Callable[[EpisodeRecord, np.ndarray | None], str]
"""Shows a person one episode (its record and camera frames) and returns their answer."""


def label_interactively(
    reader: EpisodeReader, ask: Ask, episodes: Sequence[int] | None = None
) -> np.ndarray:
    """Labels from a person who looks at each episode's frames.

    For each episode, ``ask(record, frames)`` shows the person the episode and returns their
    answer. ``frames`` is (T, H, W, 3) uint8: the first camera field (uint8 ``H, W, 3``) after
    each of the episode's T steps, so ``frames[t]`` is what ``label[t]`` is about; None when the
    store has no camera field. Answers (case and surrounding spaces ignored):

    - ``""`` or ``k``: keep (the episode stays UNLABELLED, so stored labels stay);
    - ``n``: the task was never achieved (all FAILURE);
    - an integer ``i`` in ``0..T-1``: achieved from step ``i`` on (steps ``>= i`` SUCCESS,
      steps ``< i`` FAILURE);
    - ``q``: stop (this and the remaining episodes stay UNLABELLED).

    Anything else (a step out of range) asks again: ``ask`` is called with the same episode.

    Args:
        reader: the store.
        ask: the person.
        episodes: episode ids to show, in this order; None shows all.

    Returns:
        (num_steps,) int8 over the whole store, for :func:`write_labels`.
    """
    ids = _episode_ids(reader, episodes)
    camera = camera_field(reader)
    out = np.full(reader.num_steps, UNLABELLED, np.int8)
    for e in ids:
        rec = reader.episodes[e]
        frames = None if camera is None else _frames_after_steps(reader, rec, camera)
        while True:
            answer = ask(rec, frames).strip().lower()
            if answer == "q":
                return out
            labels = _answer_labels(answer, rec.num_steps)
            if labels is not None:
                out[rec.start : rec.start + rec.num_steps] = labels
                break
    return out


def _frames_after_steps(reader: EpisodeReader, rec: EpisodeRecord, field: str) -> np.ndarray:
    """(T, ...) the observation ``field`` after each step: the next step's, then the final one."""
    start, end = rec.start, rec.start + rec.num_steps
    following = reader.rows(f"data/obs/{field}", start + 1, end)
    final = reader.rows(f"meta/final_obs/{field}", rec.id, rec.id + 1)
    return np.concatenate([following, final])


def _answer_labels(answer: str, num_steps: int) -> np.ndarray | None:
    """One episode's labels for a person's answer (see ``label_interactively``); None: ask again."""
    if answer in ("", "k"):
        return np.full(num_steps, UNLABELLED, np.int8)
    if answer == "n":
        return np.full(num_steps, FAILURE, np.int8)
    try:
        first = int(answer)
    except ValueError:
        return None
    if not 0 <= first < num_steps:
        return None
    return np.where(np.arange(num_steps) >= first, SUCCESS, FAILURE).astype(np.int8)
