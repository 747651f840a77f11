"""handrail.demos: the crash-safe Zarr episode store (see FORMAT.md).

Write with :func:`create_store` / :func:`open_writer` (one writer per store, staged in RAM,
committed per episode); read with :func:`open_store` (a snapshot of committed episodes).
:class:`EpisodeRecorder` is the transition sink that logs a running actor's Steps into a store.
"""

from handrail.demos.errors import (
    FieldMismatchError,
    NonFiniteError,
    NotAStoreError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreVersionError,
    StoreWriteError,
)
from handrail.demos.format import FORMAT_NAME, FORMAT_VERSION, FieldSpec, check_fields
from handrail.demos.reader import EpisodeData, EpisodeReader, EpisodeRecord, open_store
from handrail.demos.recorder import EpisodeRecorder
from handrail.demos.store import EpisodeWriter, create_store, open_writer

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "EpisodeData",
    "EpisodeReader",
    "EpisodeRecord",
    "EpisodeRecorder",
    "EpisodeWriter",
    "FieldMismatchError",
    "FieldSpec",
    "NonFiniteError",
    "NotAStoreError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreVersionError",
    "StoreWriteError",
    "check_fields",
    "create_store",
    "open_store",
    "open_writer",
]
