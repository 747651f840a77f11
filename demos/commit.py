"""Durable small-file writes and the named points of the commit protocol.

An episode becomes visible only when the root ``zarr.json`` (holding the commit record) is
atomically replaced: temp file, fsync, ``os.replace``, fsync of the directory. Everything the
record points at (data rows, per-episode rows) is written and fsynced before that.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".handrail-tmp"
# Steps of the commit protocol, in order. A fault hook is called with each name just before the
# step runs, so a test can stop the writer exactly there.
COMMIT_POINTS = (
    "write_data",  # staged step rows -> data/ arrays (beyond the committed length)
    "write_meta",  # per-episode rows -> meta/ arrays
    "fsync_data",  # fsync every chunk file written above
    "write_record",  # new root zarr.json -> temp file, fsynced
    "replace_record",  # os.replace(temp, zarr.json): the commit point
    "fsync_dir",  # fsync the store directory so the rename is durable
    "committed",  # after the commit
)
FaultHook = Callable[[str], None]


def fsync_paths(paths: Iterable[Path]) -> None:
    """fsync each existing file in ``paths`` (missing ones are skipped)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync a directory so renames inside it survive a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably: temp file, fsync, rename, fsync of the folder."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write_json(
    path: Path, obj: Any, *, durable: bool = True, hook: FaultHook | None = None
) -> None:
    """Replace ``path`` with ``obj`` as JSON so that readers see the old or the new file, never a mix.

    Args:
        path: destination file.
        obj: JSON-serialisable object.
        durable: fsync the file before the rename and the directory after it.
        hook: fault hook called with "write_record", "replace_record", "fsync_dir".
    """
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    data = json.dumps(obj, indent=2).encode()
    if hook:
        hook("write_record")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    if hook:
        hook("replace_record")
    os.replace(tmp, path)
    if hook:
        hook("fsync_dir")
    if durable:
        fsync_dir(path.parent)


def clean_temp_files(store: Path) -> list[Path]:
    """Delete leftovers of interrupted writes (ours and zarr LocalStore's ``*.partial``)."""
    removed = []
    for dirpath, _dirs, files in os.walk(store):
        for name in files:
            if name.endswith(TMP_SUFFIX) or name.endswith(".partial"):
                p = Path(dirpath) / name
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed
