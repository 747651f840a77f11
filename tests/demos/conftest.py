"""A full disk for the store tests: zarr's file writes fail with ENOSPC while it is on."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import zarr.storage._local as zarr_local


class FullDisk:
    """While ``full``, every file zarr writes (only chunk files when ``chunks_only``) fails with
    ``OSError(ENOSPC)``, as on a disk with no space left; zarr deletes its temp file then."""

    def __init__(self) -> None:
        self.full = False
        """The disk is full now."""
        self.chunks_only = True
        """Only chunk files fail (small metadata files still fit); False: every file."""

    def fails(self, path: Path) -> bool:
        """Whether writing ``path`` fails now."""
        return self.full and (not self.chunks_only or "/c/" in path.as_posix())


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> FullDisk:
    """A :class:`FullDisk`, not full yet, behind zarr's local file writes."""
    disk = FullDisk()
    real_put = zarr_local._put

    def put(path: Path, value: Any, exclusive: bool = False) -> int:
        if disk.fails(Path(path)):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_put(path, value, exclusive)

    monkeypatch.setattr(zarr_local, "_put", put)
    return disk
