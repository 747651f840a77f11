"""Typed errors of the episode store: every failure a caller may want to handle has its own class."""

from __future__ import annotations


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


class StoreVersionError(StoreError):
    """The store was written by a newer format version than this code reads."""


class NotAStoreError(StoreError):
    """The path does not hold a handrail episode store."""


class FieldMismatchError(StoreError):
    """The store's field specs differ from the ones the caller expects."""
