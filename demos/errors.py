"""Typed errors of the episode store: every failure a caller may want to handle has its own class."""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """Base class of every error raised by the episode store."""


class StoreLockedError(StoreError):
    """Another writer holds the store's single-writer lock."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        """Process id of the lock holder, when it could be read."""


class StoreCorruptError(StoreError):
    """Stored data or metadata is damaged (checksum mismatch, missing chunk, broken JSON)."""


class NonFiniteError(StoreError):
    """The store holds nan or inf where learners and replay need numbers (see ``demos.finite``)."""


class StoreWriteError(StoreError):
    """Writing failed (a full disk, an I/O error); the episodes committed before it are intact."""

    def __init__(self, message: str, *, committed: int, reason: str, cut: bool = True) -> None:
        super().__init__(message)
        self.committed = committed
        """Episodes the store holds (committed before the failure)."""
        self.reason = reason
        """What failed, in words (e.g. ``the disk is full (No space left on device)``)."""
        self.cut = cut
        """False when even cutting the arrays back to the committed length failed (a disk
        with no byte left): readers still see only the committed episodes, and the next
        ``open_writer`` cuts them."""


class StoreVersionError(StoreError):
    """The store was written by a newer format version than this code reads."""


class NotAStoreError(StoreError):
    """The path does not hold a handrail episode store."""


class FieldMismatchError(StoreError):
    """The store's field specs differ from the ones the caller expects."""


def not_writable(path: Path, exc: OSError) -> PermissionError:
    """The PermissionError to raise when ``path`` (a store, or the folder for a new output)
    cannot be written: it names the path and the fix (reading a store needs no write access)."""
    return PermissionError(
        f"cannot write {path}: {exc.strerror}; use a folder you can write to, or get write "
        "access to it"
    )
