"""Non-finite values (nan, inf) in episodes: found field by field, named by episode and step.

Learners, BC and replay need finite observations, actions and rewards; a single nan spreads
through a learner's losses and surfaces minutes later as an error that blames something else.
The commands that read a store for those (``train --demos``, ``replay``, ``demos filter``,
``demos merge``) call :func:`require_finite` before they start, and every bulk copy into a
store (:func:`handrail.demos.episodes.write_store`, e.g. ``demos import``) refuses such an
episode, so they stop at once with one message that names the store, the episodes and the
fields, and how to leave them out. ``handrail demos validate`` reports them too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from handrail.demos.errors import NonFiniteError
from handrail.demos.reader import EpisodeReader, id_runs

_BLOCK_BYTES = 64 << 20
"""Rows are read in blocks of about this many bytes, so a scan never holds a whole column."""
_LISTED = 5
"""Episodes named one by one in the error message; the rest are counted."""


@dataclass(frozen=True)
class NonFinite:
    """The first nan or inf of one field in one episode."""

    episode: int
    """Episode id in the store."""
    field: str
    """Where: ``obs 'state'``, ``final_obs 'state'``, ``action``, ``policy_action``, ``reward``."""
    step: int | None
    """Step of the episode it first occurs at; None for the final observation."""
    value: float
    """The value found there: nan, inf or -inf."""

    def describe(self) -> str:
        """E.g. ``episode 3: obs 'state' is nan at step 12``."""
        at = "" if self.step is None else f" at step {self.step}"
        return f"episode {self.episode}: {self.field} is {self.value}{at}"


def first_non_finite(values: np.ndarray) -> tuple[int, float] | None:
    """``(row, value)`` of the first nan or inf of a ``(rows, ...)`` array; None when it has
    none (integer and bool arrays never have any)."""
    arr = np.asarray(values)
    if arr.dtype.kind != "f" or arr.size == 0:
        return None
    flat = arr.reshape(len(arr), -1)
    bad = ~np.isfinite(flat)
    rows = np.flatnonzero(bad.any(axis=1))
    if not len(rows):
        return None
    row = int(rows[0])
    return row, float(flat[row][bad[row]][0])


def require_finite_episode(
    index: int,
    obs: Mapping[str, np.ndarray],
    final_obs: Mapping[str, np.ndarray],
    action: np.ndarray,
    policy_action: np.ndarray | None,
    reward: np.ndarray,
) -> None:
    """Raise :class:`NonFiniteError` naming the first nan or inf of one episode in RAM, the
    ``index``-th (from 0) of an input being copied into a store."""
    columns: list[tuple[str, np.ndarray, bool]] = [
        *((f"obs {k!r}", v, True) for k, v in obs.items()),
        *((f"final_obs {k!r}", np.asarray(v)[None], False) for k, v in final_obs.items()),
        ("action", action, True),
        ("reward", reward, True),
    ]
    if policy_action is not None:
        columns.insert(-1, ("policy_action", policy_action, True))
    for name, values, per_step in columns:
        hit = first_non_finite(values)
        if hit is not None:
            at = f" at step {hit[0]}" if per_step else ""
            raise NonFiniteError(
                f"episode {index} of the input: {name} is {hit[1]}{at}; a store keeps finite "
                "numbers only: fix the source or leave that episode out"
            )


def find_non_finite(
    reader: EpisodeReader, episodes: Sequence[int] | None = None
) -> list[NonFinite]:
    """The first nan or inf of each field of each selected episode, in episode order.

    Reads only the float arrays (never images), a block of rows at a time.

    Args:
        reader: the store.
        episodes: episode ids to check; None checks all.
    """
    ids = reader.select(episodes=episodes)
    records = reader.episodes
    starts = np.array([r.start for r in records], np.int64)
    ends = starts + np.array([r.num_steps for r in records], np.int64)
    runs = id_runs(sorted(ids))
    arrays = _float_arrays(reader)
    found: dict[tuple[int, str], NonFinite] = {}
    for field, path, per_step, row_bytes in arrays:
        block = max(1, _BLOCK_BYTES // row_bytes)
        for a, b in runs:
            lo, hi = (int(starts[a]), int(ends[b - 1])) if per_step else (a, b)
            for s in range(lo, hi, block):
                values = reader.rows(path, s, min(hi, s + block))
                flat = values.reshape(len(values), -1)
                bad = ~np.isfinite(flat)
                rows = np.flatnonzero(bad.any(axis=1))
                eps = np.searchsorted(ends, s + rows, side="right") if per_step else s + rows
                for ep, i in zip(*np.unique(eps, return_index=True), strict=True):
                    row = int(rows[i])
                    step = s + row - int(starts[ep]) if per_step else None
                    value = float(flat[row][bad[row]][0])
                    found.setdefault((int(ep), field), NonFinite(int(ep), field, step, value))
    order = {arr[0]: k for k, arr in enumerate(arrays)}
    return sorted(found.values(), key=lambda f: (f.episode, order[f.field]))


def require_finite(reader: EpisodeReader, episodes: Sequence[int] | None = None) -> None:
    """Raise :class:`NonFiniteError` if a selected episode holds nan or inf.

    The message names the store, each such episode (its first bad field and step) and a
    ``handrail demos filter`` command that copies the store without them.
    """
    found = find_non_finite(reader, episodes)
    if not found:
        return
    first: dict[int, NonFinite] = {}
    for f in found:
        first.setdefault(f.episode, f)
    bad = sorted(first)
    listed = "; ".join(first[e].describe() for e in bad[:_LISTED])
    more = f"; and {len(bad) - _LISTED} more episodes" if len(bad) > _LISTED else ""
    keep = [e for e in range(reader.num_episodes) if e not in first]
    fix = (
        f"leave them out with: handrail demos filter {reader.path} --out "
        f"{reader.path}-finite --episodes {format_ids(keep)}"
        if keep
        else "every episode holds them: fix the source they were recorded or imported from"
    )
    raise NonFiniteError(
        f"{reader.path}: {len(bad)} episode(s) hold nan or inf, which learners and replay "
        f"cannot use ({listed}{more}); {fix}"
    )


def format_ids(ids: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"`` (what ``--episodes`` reads)."""
    return ",".join(f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in id_runs(sorted(ids)))


def _float_arrays(reader: EpisodeReader) -> list[tuple[str, str, bool, int]]:
    """``(field, path, per_step, row_bytes)`` of the arrays that must hold finite numbers."""
    out = []
    for f in reader.obs_fields:
        dtype = np.dtype(f.dtype)
        if dtype.kind == "f":
            size = int(np.prod(f.shape, dtype=np.int64)) * dtype.itemsize
            out += [(f"obs {f.name!r}", f"data/obs/{f.name}", True, size)]
            out += [(f"final_obs {f.name!r}", f"meta/final_obs/{f.name}", False, size)]
    action_bytes = 4 * int(reader.attrs["action_dim"])
    out += [("action", "data/action", True, action_bytes)]
    out += [
        ("policy_action", "data/policy_action", True, action_bytes),
        ("reward", "data/reward", True, 4),
    ]
    return out
