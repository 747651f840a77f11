"""Thin layer over zarr-python 3: create/open the store's arrays, batched writes, checked reads.

Reads never trust raw array shapes and never let zarr fill a missing chunk with the fill value:
every stored object covering the requested rows must exist, and every chunk carries a Crc32c
checksum, so damage becomes a StoreCorruptError instead of zeros or garbage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfigParams
from zarr.core.sync import sync
from zarr.storage import LocalStore

from handrail.demos.errors import StoreCorruptError
from handrail.demos.format import ArrayDef, storage_rows

_CONFIG: ArrayConfigParams = {
    "write_empty_chunks": True
}  # every chunk exists on disk, so a missing one is damage


def _codecs(adef: ArrayDef) -> dict[str, Any]:
    """Chunking and compression for one array: light zstd for images, blosc-zstd elsewhere."""
    outer, inner = storage_rows(adef)
    shape = adef.spec.shape
    if adef.spec.is_image:
        return {
            "chunks": (inner, *shape),
            "shards": (outer, *shape),
            "compressors": [ZstdCodec(level=1), Crc32cCodec()],
        }
    itemsize = np.dtype(adef.spec.dtype).itemsize
    shuffle: Literal["bitshuffle", "shuffle"] = "bitshuffle" if itemsize == 1 else "shuffle"
    blosc = BloscCodec(cname="zstd", clevel=3, shuffle=shuffle, typesize=itemsize)
    return {"chunks": (inner, *shape), "compressors": [blosc, Crc32cCodec()]}


def create_arrays(root: Path, defs: Sequence[ArrayDef], attributes: dict[str, Any]) -> None:
    """Create the root group (with ``attributes``) and every array with zero rows."""
    group = zarr.open_group(LocalStore(root), mode="a", zarr_format=3, attributes=attributes)
    for adef in defs:
        spec = adef.spec
        group.create_array(
            adef.path,
            shape=(0, *spec.shape),
            dtype=spec.dtype,
            fill_value=adef.fill_value,
            config=_CONFIG,
            attributes={"units": spec.units, "field": spec.to_json()},
            dimension_names=["step" if not adef.per_episode else "episode"]
            + [f"dim_{i}" for i in range(len(spec.shape))],
            **_codecs(adef),
        )


def open_arrays(root: Path, defs: Sequence[ArrayDef], *, writable: bool) -> dict[str, zarr.Array]:
    """Open every array in ``defs`` keyed by path; broken metadata -> StoreCorruptError."""
    store = LocalStore(root, read_only=not writable)
    out = {}
    for adef in defs:
        try:
            arr = zarr.open_array(store, path=adef.path, mode="r+" if writable else "r")
        except Exception as exc:  # zarr raises many types for missing/broken metadata
            raise StoreCorruptError(f"{root}: cannot open array {adef.path!r}: {exc}") from exc
        want = (np.dtype(adef.spec.dtype), adef.spec.shape)
        if (arr.dtype, tuple(arr.shape[1:])) != want:
            raise StoreCorruptError(
                f"{root}/{adef.path}: stored as {arr.dtype}{list(arr.shape[1:])}, the root "
                f"field spec says {adef.spec.dtype}{list(adef.spec.shape)}"
            )
        out[adef.path] = arr.with_config(_CONFIG)  # runtime config is not stored on disk
    return out


def chunk_files(root: Path, adef: ArrayDef, start: int, stop: int) -> list[Path]:
    """Files (chunks or shards) that hold rows [start, stop) of an array."""
    if stop <= start:
        return []
    rows, _ = storage_rows(adef)
    tail = "/".join(["0"] * len(adef.spec.shape))
    base = Path(root) / adef.path / "c"
    return [
        base / (f"{i}/{tail}" if tail else str(i))
        for i in range(start // rows, (stop - 1) // rows + 1)
    ]


def read_rows(root: Path, arr: zarr.Array, adef: ArrayDef, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of ``arr``, after checking every chunk file exists; damage is typed."""
    for path in chunk_files(root, adef, start, stop):
        if not path.is_file():
            raise StoreCorruptError(
                f"{root}: chunk {path.relative_to(root)} of {adef.path} is missing (rows "
                f"{start}..{stop} are committed); the store is damaged"
            )
    if stop > arr.shape[0]:
        raise StoreCorruptError(
            f"{root}/{adef.path}: holds {arr.shape[0]} rows but {stop} are committed"
        )
    try:
        return np.asarray(arr[start:stop])
    except Exception as exc:  # checksum mismatch, truncated chunk, undecodable data
        raise StoreCorruptError(
            f"{root}: cannot read rows {start}..{stop} of {adef.path}: {exc}"
        ) from exc


def write_many(items: Sequence[tuple[zarr.Array, int, np.ndarray]]) -> None:
    """Write ``value`` at rows [start, start + len(value)) of each array, concurrently."""

    async def _all() -> None:
        await asyncio.gather(
            *[a._async_array.setitem(slice(s, s + len(v)), v) for a, s, v in items]
        )

    sync(_all())


def resize_many(items: Sequence[tuple[zarr.Array, int]]) -> None:
    """Set the row count of each array (metadata only; shrinking deletes chunks past the end)."""

    async def _all() -> None:
        await asyncio.gather(
            *[a._async_array.resize((n, *a.shape[1:])) for a, n in items if a.shape[0] != n]
        )

    sync(_all())
