"""Durable writes: the one-writer lock, small files, the commit protocol's named points, new outputs.

An episode becomes visible only when the root ``zarr.json`` (holding the commit record) is
atomically replaced: temp file, fsync, ``os.replace``, fsync of the directory. Everything the
record points at (data rows, per-episode rows) is written and fsynced before that.

A new output (a store written by ``demos filter|merge|import``, an export) is written the same
way at a larger scale, by :func:`staged_output`: in a hidden folder next to ``out``
(``.NAME.XXXX.handrail-partial``), renamed to ``out`` once whole and fsynced. A failure, Ctrl-C
or a full disk removes the partial output and leaves ``out`` as it was (absent, or the old output
when replacing one); a killed process leaves only the hidden folder, which the next write to the
same ``out`` deletes. Reading the source while writing ``out`` is safe even when they are the
same path (``filter S --out S --overwrite``).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from handrail.demos.errors import NotAStoreError, StoreError, StoreLockedError, not_writable
from handrail.demos.format import read_root_document

LOCK_NAME = "handrail.lock"


class StoreLock:
    """Exclusive, non-blocking writer lock; the holder's pid is written into the lock file.

    The OS drops the lock when the process dies (even by SIGKILL), so a crashed writer never
    leaves a stale lock behind.
    """

    def __init__(self, store_path: Path) -> None:
        self.path = Path(store_path) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise StoreLockedError naming the holder's pid when known."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError as exc:  # a read-only store: readers need no lock, writers do
            raise not_writable(self.path.parent, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            holder = f"process {pid}" if pid is not None else "another process"
            raise StoreLockedError(
                f"{self.path.parent} is open for writing by {holder}; close that writer first "
                "(a store has exactly one writer; readers need no lock)",
                pid=pid,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)  # closing the descriptor drops the flock

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


TMP_SUFFIX = ".handrail-tmp"
PARTIAL_SUFFIX = ".handrail-partial"
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
    """fsync each existing file or folder in ``paths`` (missing ones are skipped), concurrently.

    Concurrent fsyncs share journal commits (ext4, xfs): a commit's twenty-odd chunk files and
    folders take about one fsync's time instead of twenty.
    """
    todo = list(paths)
    if len(todo) < 2:
        for path in todo:
            _fsync_one(path)
        return
    with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
        list(pool.map(_fsync_one, todo))  # list(): re-raises the first error


def _fsync_one(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
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


@contextlib.contextmanager
def staged_output(
    out: str | Path,
    *,
    overwrite: bool,
    check_old: Callable[[Path], None] | None = None,
    store: bool = False,
) -> Iterator[Path]:
    """Yields the path to write the new output to; moves it to ``out`` when the block succeeds.

    Args:
        out: destination file or folder.
        overwrite: replace an existing ``out`` (kept until the new output is whole); an
            empty folder is replaced without it.
        check_old: called with an existing ``out`` before anything is written; raises if it
            must not be replaced (e.g. a folder that is not a store).
        store: ``out`` is an episode store: an existing one is held with its writer lock
            until it is replaced, so no writer can be appending to it meanwhile.

    Raises:
        FileExistsError: ``out`` exists and ``overwrite`` is false.
        PermissionError: the folder of ``out`` cannot be written.
        StoreLockedError: ``store`` and another process writes the store at ``out``.
    """
    out = Path(out)
    exists = out.exists() or out.is_symlink()
    if exists and not overwrite and not is_empty_dir(out):
        raise FileExistsError(
            f"{out} already exists: pass overwrite=True (--overwrite) to replace it"
        )
    if exists and check_old is not None:
        check_old(out)
    with contextlib.ExitStack() as stack:
        if exists and store and out.is_dir():
            lock = StoreLock(out)
            lock.acquire()
            stack.callback(lock.release)
        stage = _make_stage(out)
        stack.callback(shutil.rmtree, stage, ignore_errors=True)
        fd = os.open(stage, os.O_RDONLY)
        stack.callback(os.close, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)  # live: a concurrent cleanup leaves it alone
        target = stage / out.name
        yield target
        fsync_paths([*target.rglob("*"), target] if target.is_dir() else [target])
        if exists:
            os.rename(out, stage / (out.name + ".old"))
        try:
            os.rename(target, out)
        except BaseException:
            if exists:
                os.rename(stage / (out.name + ".old"), out)
            raise
        fsync_dir(out.parent)


def check_replaceable_store(path: Path) -> None:
    """Raise unless ``path`` holds a handrail store (damaged or newer ones may be replaced) or
    is an empty folder: ``check_old`` for outputs that are stores."""
    if is_empty_dir(path):
        return
    try:
        read_root_document(path)
    except NotAStoreError:
        raise ValueError(
            f"refusing to replace {path}: it is not a handrail episode store"
        ) from None
    except StoreError:
        pass


def is_empty_dir(path: Path) -> bool:
    """``path`` is a folder with nothing in it (a new output may take its place unasked)."""
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _make_stage(out: Path) -> Path:
    """A new hidden folder beside ``out``, after deleting stale ones of earlier killed runs."""
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for old in parent.glob(f".{glob.escape(out.name)}.*{PARTIAL_SUFFIX}"):
            _remove_if_stale(old)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=PARTIAL_SUFFIX, dir=parent))
    except PermissionError as exc:
        raise not_writable(parent, exc) from None


def _remove_if_stale(stage: Path) -> None:
    """Delete a partial output whose writer is gone (its folder lock is free)."""
    try:
        fd = os.open(stage, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another process is writing it right now
    finally:
        os.close(fd)
    shutil.rmtree(stage, ignore_errors=True)
