"""Single-writer lock: an advisory ``fcntl.flock`` on a file inside the store."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from handrail.demos.errors import StoreLockedError, not_writable

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
