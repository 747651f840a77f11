"""On-disk format of the episode store: field specs, array layout, codecs and root attributes.

See FORMAT.md next to this file for the human-readable description; this module is the single
place where names, dtypes, chunking and compression of every array are decided.
"""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from handrail.control.spaces import is_image
from handrail.control.step import ActedBy
from handrail.demos.errors import (
    FieldMismatchError,
    NotAStoreError,
    StoreCorruptError,
    StoreVersionError,
)

FORMAT_NAME = "handrail.episodes"
FORMAT_VERSION = 1
StoreKind = Literal["demo", "intervention", "rollout"]
"""What a store holds: demonstrations, human interventions, or policy rollouts."""
KINDS: tuple[StoreKind, ...] = ("demo", "intervention", "rollout")


def parse_kind(value: object) -> StoreKind:
    """``value`` as a :data:`StoreKind`; ValueError naming the valid kinds otherwise."""
    for kind in KINDS:
        if value == kind:
            return kind
    raise ValueError(f"store kind {value!r} is not one of {KINDS}")


SUPPORTED_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
INTERVENTION_SOURCES = {int(who): who.name.lower() for who in ActedBy}
"""Codes of the ``intervention`` field: who acted (0 policy, 1 human, 2 scripted)."""
IMAGE_SHARD_FRAMES = 64
META_CHUNK_ROWS = 1024
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class FieldSpec:
    """Name, dtype, per-step shape and units of one stored field."""

    name: str
    """Field name; letters, digits, ``_``, ``.``, ``-`` (it becomes a Zarr array name)."""
    dtype: str
    """NumPy dtype name, one of SUPPORTED_DTYPES (e.g. ``float32``, ``uint8``)."""
    shape: tuple[int, ...]
    """Shape of one step's value; ``()`` for scalars, ``(H, W, 3)`` for an image."""
    units: str = ""
    """Physical units (``m``, ``rad``, ``s``) or a free-form note; empty when unitless."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"FieldSpec.name={self.name!r} is not a valid field name: use letters, digits, "
                "'_', '.' or '-', not starting with '.' or '-'"
            )
        try:
            dtype = np.dtype(self.dtype).name
        except TypeError as exc:
            raise TypeError(f"FieldSpec({self.name!r}).dtype={self.dtype!r}: {exc}") from exc
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(
                f"FieldSpec({self.name!r}).dtype={dtype!r} is not supported; use one of "
                f"{', '.join(SUPPORTED_DTYPES)}"
            )
        object.__setattr__(self, "dtype", dtype)
        shape = tuple(self.shape)
        if not all(isinstance(s, (int, np.integer)) and s > 0 for s in shape):
            raise ValueError(
                f"FieldSpec({self.name!r}).shape={self.shape!r} must be a tuple of positive ints"
            )
        object.__setattr__(self, "shape", tuple(int(s) for s in shape))
        if not isinstance(self.units, str):
            raise TypeError(f"FieldSpec({self.name!r}).units must be a str, got {self.units!r}")

    @property
    def is_image(self) -> bool:
        """True for images (:func:`handrail.control.spaces.is_image`): one frame per chunk, sharded."""
        return is_image(self.shape, self.dtype)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "units": self.units,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldSpec:
        """Inverse of :meth:`to_json`."""
        return cls(str(data["name"]), str(data["dtype"]), tuple(data["shape"]), str(data["units"]))


@dataclass(frozen=True)
class ArrayDef:
    """One Zarr array of the store: its path, what a row holds, and how it is stored."""

    path: str
    """Path of the array inside the store, e.g. ``data/action``."""
    spec: FieldSpec
    """What one row holds."""
    per_episode: bool = False
    """True for meta/ arrays (one row per episode), False for data/ arrays (one row per step)."""
    fill_value: Any = 0
    """Zarr fill value (never read: readers stop at the committed length)."""

    @property
    def row_bytes(self) -> int:
        """Uncompressed bytes of one row."""
        return int(np.dtype(self.spec.dtype).itemsize * np.prod(self.spec.shape, dtype=np.int64))


def step_fields(obs_fields: Sequence[FieldSpec], action_dim: int) -> list[ArrayDef]:
    """Time-major arrays under ``data/`` (one row per step), observations first."""
    defs = [ArrayDef(f"data/obs/{f.name}", f) for f in obs_fields]
    defs += [
        ArrayDef(
            "data/action", FieldSpec("action", "float32", (action_dim,), "normalized [-1, 1]")
        ),
        ArrayDef(
            "data/policy_action",
            FieldSpec("policy_action", "float32", (action_dim,), "normalized [-1, 1]"),
        ),
        ArrayDef(
            "data/intervention",
            FieldSpec("intervention", "int8", (), "0 policy, 1 human, 2 scripted"),
        ),
        ArrayDef("data/reward", FieldSpec("reward", "float32", ())),
        ArrayDef("data/terminated", FieldSpec("terminated", "bool", ())),
        ArrayDef("data/truncated", FieldSpec("truncated", "bool", ())),
        ArrayDef("data/timestamp", FieldSpec("timestamp", "float64", (), "s (unix time)")),
    ]
    return defs


def episode_fields(obs_fields: Sequence[FieldSpec]) -> list[ArrayDef]:
    """Per-episode arrays under ``meta/`` (one row per episode)."""
    defs = [
        ArrayDef("meta/episode_ends", FieldSpec("episode_ends", "int64", (), "steps (exclusive)")),
        ArrayDef("meta/success", FieldSpec("success", "bool", ())),
        ArrayDef("meta/num_intervened", FieldSpec("num_intervened", "int64", (), "steps")),
        ArrayDef("meta/start_time", FieldSpec("start_time", "float64", (), "s (unix time)")),
        ArrayDef("meta/seed", FieldSpec("seed", "int64", (), "-1 when none"), True, -1),
        ArrayDef("meta/task_index", FieldSpec("task_index", "int32", (), "index into tasks")),
        ArrayDef("meta/recovered", FieldSpec("recovered", "bool", (), "cut short by a crash")),
    ]
    defs = [ArrayDef(d.path, d.spec, True, d.fill_value) for d in defs]
    defs += [ArrayDef(f"meta/final_obs/{f.name}", f, True) for f in obs_fields]
    return defs


def storage_rows(adef: ArrayDef) -> tuple[int, int]:
    """(rows per stored object along time, rows per chunk); they differ only for sharded images."""
    if adef.spec.is_image:
        return IMAGE_SHARD_FRAMES, 1
    if adef.per_episode:
        return META_CHUNK_ROWS, META_CHUNK_ROWS
    rows = 1 << 18  # aim for ~256 KiB uncompressed per chunk, 512..16384 rows
    rows = max(512, min(16384, rows // max(1, adef.row_bytes)))
    rows = 1 << (rows.bit_length() - 1)
    return rows, rows


def validate_obs_fields(obs_fields: Sequence[FieldSpec]) -> list[FieldSpec]:
    """Check obs_fields is a non-empty sequence of FieldSpec with unique names."""
    fields = list(obs_fields)
    if not fields:
        raise ValueError("obs_fields is empty: give at least one FieldSpec for the observation")
    for f in fields:
        if not isinstance(f, FieldSpec):
            raise TypeError(f"obs_fields must hold FieldSpec objects, got {type(f).__name__}")
    names = [f.name for f in fields]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"obs_fields has duplicate names {dupes}: give each field a unique name")
    return fields


def versions() -> dict[str, str]:
    """Versions of the software that wrote a store (recorded in the root attributes)."""
    import zarr

    from handrail import __version__

    return {
        "handrail": str(__version__),
        "zarr": str(zarr.__version__),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def read_root_document(path: Path) -> dict[str, Any]:
    """Read and validate the root ``zarr.json`` of a store (the commit record lives in it).

    Raises:
        NotAStoreError: no Zarr group there, or it is not a handrail store.
        StoreCorruptError: the JSON is unreadable or the commit record is malformed.
        StoreVersionError: written by a newer format version.
    """
    root = Path(path) / "zarr.json"
    if not root.is_file():
        raise NotAStoreError(f"{path} is not a handrail episode store: no {root.name} found")
    try:
        doc = json.loads(root.read_bytes())
    except (OSError, ValueError) as exc:
        raise StoreCorruptError(f"{root}: root metadata is not valid JSON ({exc})") from exc
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    if not isinstance(attrs, dict) or attrs.get("format") != FORMAT_NAME:
        raise NotAStoreError(
            f"{path} is a Zarr node but not a handrail episode store "
            f"(root attribute 'format' should be {FORMAT_NAME!r})"
        )
    version = attrs.get("format_version")
    if not isinstance(version, int):
        raise StoreCorruptError(f"{root}: format_version is missing or not an int: {version!r}")
    if version > FORMAT_VERSION:
        raise StoreVersionError(
            f"{path} has format version {version}, newer than the {FORMAT_VERSION} this handrail "
            "reads: upgrade handrail to read it"
        )
    _check_commit(root, attrs.get("commit"))
    return doc


def _check_commit(root: Path, commit: Any) -> None:
    ok = (
        isinstance(commit, dict)
        and isinstance(commit.get("num_episodes"), int)
        and isinstance(commit.get("num_steps"), int)
        and isinstance(commit.get("tasks"), list)
        and commit["num_episodes"] >= 0
        and commit["num_steps"] >= 0
    )
    if not ok:
        raise StoreCorruptError(f"{root}: the commit record is missing or malformed: {commit!r}")


def check_fields(reader: Any, expected_fields: Sequence[FieldSpec]) -> None:
    """Raise FieldMismatchError unless the store's observation fields match ``expected_fields``.

    Names, dtypes and shapes must match exactly; units are compared where both sides give them.

    Args:
        reader: an EpisodeReader (anything with an ``obs_fields`` list of FieldSpec).
        expected_fields: the fields the caller (a task, a learner) needs.
    """
    have = {f.name: f for f in reader.obs_fields}
    want = {f.name: f for f in expected_fields}
    problems = []
    for name in sorted(set(want) - set(have)):
        problems.append(f"missing field {name!r}")
    for name in sorted(set(have) - set(want)):
        problems.append(f"unexpected field {name!r}")
    for name in sorted(set(have) & set(want)):
        h, w = have[name], want[name]
        if (h.dtype, h.shape) != (w.dtype, w.shape):
            problems.append(
                f"{name!r}: store has {h.dtype}{list(h.shape)}, expected {w.dtype}{list(w.shape)}"
            )
        elif h.units and w.units and h.units != w.units:
            problems.append(f"{name!r}: store units {h.units!r}, expected {w.units!r}")
    if problems:
        raise FieldMismatchError("store fields do not match: " + "; ".join(problems))


def fields_from_space(space: Any) -> list[FieldSpec]:
    """One FieldSpec per key of a gymnasium Dict observation space (a Box is the key "obs")."""
    from handrail.control.step import BOX_KEY

    spaces = getattr(space, "spaces", None)
    items = spaces.items() if isinstance(spaces, dict) else [(BOX_KEY, space)]
    return [
        FieldSpec(name=k, dtype=str(np.dtype(box.dtype)), shape=tuple(box.shape))
        for k, box in items
    ]
