"""Whole-store operations on top of the episode-store API: summary, validation, filter, merge.

They work one :class:`~handrail.demos.episodes.Episode` at a time; that in-RAM form and the
helpers that read and write it live in :mod:`handrail.demos.episodes` and are re-exported here.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from handrail.control.step import ActedBy
from handrail.demos import FieldMismatchError, FieldSpec, StoreError, open_store
from handrail.demos.episodes import (
    ConversionReport,
    Episode,
    StoreMeta,
    episodes_from_data,
    import_into_store,
    iter_store_episodes,
    record_value,
    require,
    store_meta,
    write_episode,
    write_store,
)
from handrail.demos.finite import require_finite
from handrail.demos.format import INTERVENTION_SOURCES
from handrail.demos.labels import gather_labels

__all__ = [
    "INTERVENTION_NAMES",
    "ConversionReport",
    "Episode",
    "EpisodeInterventions",
    "StoreMeta",
    "StoreSummary",
    "check_episode",
    "check_mergeable",
    "disk_size_bytes",
    "episodes_from_data",
    "filter_store",
    "format_episode_table",
    "format_summary",
    "import_into_store",
    "iter_store_episodes",
    "merge_stores",
    "record_value",
    "require",
    "store_meta",
    "summarize",
    "validate_store",
    "write_episode",
    "write_store",
]

INTERVENTION_NAMES = INTERVENTION_SOURCES
"""Who acted, by intervention code (0 policy, 1 human, 2 scripted)."""


# ----------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class EpisodeInterventions:
    """Who acted in one episode: a row of the per-episode table of ``handrail demos info``."""

    episode: int
    """Episode id in the store."""
    num_steps: int
    """Steps (actions) in the episode."""
    num_human: int
    """Steps whose action a human chose."""
    num_scripted: int
    """Steps whose action a script (e.g. a scripted expert) chose."""
    success: bool
    """Whether the episode is marked successful."""

    @property
    def human_share(self) -> float:
        """Share of the episode's steps a human acted in (nan for an episode of no steps)."""
        return self.num_human / self.num_steps if self.num_steps else math.nan


@dataclass(frozen=True)
class StoreSummary:
    """What ``handrail demos info`` prints."""

    path: str
    meta: StoreMeta
    num_episodes: int
    num_steps: int
    num_successful: int
    num_intervened_steps: int
    size_bytes: int
    episodes: tuple[EpisodeInterventions, ...] = ()
    """Who acted, per episode, in store order."""

    @property
    def num_human_steps(self) -> int:
        """Steps whose action a human chose, over all episodes."""
        return sum(e.num_human for e in self.episodes)

    @property
    def human_share(self) -> float:
        """Share of steps a human acted in (nan for an empty store)."""
        return self.num_human_steps / self.num_steps if self.num_steps else math.nan

    @property
    def success_rate(self) -> float:
        """Share of episodes marked successful (nan for an empty store)."""
        return self.num_successful / self.num_episodes if self.num_episodes else math.nan

    @property
    def intervention_share(self) -> float:
        """Share of steps not chosen by the policy (nan for an empty store)."""
        return self.num_intervened_steps / self.num_steps if self.num_steps else math.nan


def disk_size_bytes(path: str | Path) -> int:
    """Total size of the files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


def summarize(path: str | Path) -> StoreSummary:
    """Summarises a store from its commit record and its int8 intervention column.

    Nothing else of the step data is read; a store without interventions (all policy, as the
    importers write when the source has no such column) gets zero human steps everywhere.
    """
    reader = open_store(path)
    records = list(reader.episodes)
    who = reader.step_column("intervention")
    rows = []
    for r in records:
        ep = who[r.start : r.start + r.num_steps]
        human = int(np.count_nonzero(ep == ActedBy.HUMAN))
        scripted = int(np.count_nonzero(ep == ActedBy.SCRIPTED))
        rows.append(EpisodeInterventions(r.id, r.num_steps, human, scripted, r.success))
    return StoreSummary(
        path=str(path),
        meta=store_meta(reader),
        num_episodes=int(reader.num_episodes),
        num_steps=int(reader.num_steps),
        num_successful=sum(bool(record_value(r, "success", False)) for r in records),
        num_intervened_steps=sum(int(record_value(r, "num_intervened", 0)) for r in records),
        size_bytes=disk_size_bytes(path),
        episodes=tuple(rows),
    )


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{n} B"
        size /= 1024
    return f"{n} B"


def _percent(share: float) -> str:
    return "n/a" if math.isnan(share) else f"{100 * share:.1f}%"


def format_episode_table(rows: Sequence[EpisodeInterventions]) -> str:
    """Who acted, one line per episode: steps, human and scripted steps, human share, success."""
    lines = [f"{'episode':>7} {'steps':>6} {'human':>6} {'scripted':>8} {'human %':>8}  success"]
    for e in rows:
        lines.append(
            f"{e.episode:>7} {e.num_steps:>6} {e.num_human:>6} {e.num_scripted:>8} "
            f"{_percent(e.human_share):>8}  {'yes' if e.success else 'no'}"
        )
    return "\n".join(lines)


def format_summary(s: StoreSummary) -> str:
    """The summary as a plain-text table."""
    pct = _percent(s.success_rate)
    share = _percent(s.intervention_share)
    rows = [
        ("store", s.path),
        ("kind", s.meta.kind),
        ("task", s.meta.task),
        ("robot", s.meta.robot),
        ("control period", f"{s.meta.control_dt_s * 1000:.1f} ms"),
        ("episodes", str(s.num_episodes)),
        ("steps", str(s.num_steps)),
        ("success rate", f"{pct} ({s.num_successful}/{s.num_episodes})"),
        ("intervention share", f"{share} ({s.num_intervened_steps} steps by human or script)"),
        ("human share", f"{_percent(s.human_share)} ({s.num_human_steps} steps by a human)"),
        ("size on disk", _human_bytes(s.size_bytes)),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["", f"{'field':<16} {'dtype':<8} {'shape':<14} units"]
    for f in s.meta.obs_fields:
        lines.append(f"{f.name:<16} {f.dtype:<8} {tuple(f.shape)!s:<14} {f.units}")
    lines.append(f"{'action':<16} {'float32':<8} {(s.meta.action_dim,)!s:<14}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- validation


def check_episode(ep: Episode, meta: StoreMeta, record: Any = None) -> list[str]:
    """Consistency problems of one episode against the store's field spec and its record."""
    if ep.num_steps < 1:
        return ["has no steps"]
    problems = _obs_problems(ep, meta)
    problems += _step_problems(ep, meta)
    if record is not None:
        problems += _record_problems(ep, record)
    return problems


def _obs_problems(ep: Episode, meta: StoreMeta) -> list[str]:
    """Problems of the observations and final observations against the field spec."""
    problems: list[str] = []
    steps = ep.num_steps
    specs = {f.name: f for f in meta.obs_fields}
    if set(ep.obs) != set(specs):
        problems.append(f"observation keys {sorted(ep.obs)} differ from the spec {sorted(specs)}")
    for name, spec in specs.items():
        for label, arr, shape in (
            ("obs", ep.obs.get(name), (steps, *spec.shape)),
            ("final_obs", ep.final_obs.get(name), tuple(spec.shape)),
        ):
            if arr is None:
                problems.append(f"{label} '{name}' is missing")
                continue
            if tuple(arr.shape) != shape or np.dtype(arr.dtype) != np.dtype(spec.dtype):
                problems.append(
                    f"{label} '{name}' is {arr.dtype}{tuple(arr.shape)}, spec says "
                    f"{spec.dtype}{shape}"
                )
            elif arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                problems.append(f"{label} '{name}' has non-finite values")
    return problems


def _step_problems(ep: Episode, meta: StoreMeta) -> list[str]:
    """Problems of the per-step arrays: actions, rewards, flags, interventions, timestamps."""
    problems: list[str] = []
    steps = ep.num_steps
    for label, arr in (("action", ep.action), ("policy_action", ep.policy_action)):
        if arr is not None and tuple(arr.shape) != (steps, meta.action_dim):
            problems.append(f"{label} has shape {arr.shape}, expected {(steps, meta.action_dim)}")
        elif arr is not None and not np.all(np.isfinite(arr)):
            problems.append(f"{label} has non-finite values")
    if not np.all(np.isfinite(ep.reward)):
        problems.append("reward has non-finite values")
    if np.any(ep.terminated[:-1]):
        problems.append(f"terminated before the last step (step {int(np.argmax(ep.terminated))})")
    if ep.intervention is not None:
        bad = set(np.unique(ep.intervention).tolist()) - set(INTERVENTION_NAMES)
        if bad:
            problems.append(f"intervention has unknown sources {sorted(bad)} (0, 1, 2 are valid)")
    if ep.timestamp is not None and steps > 1 and np.any(np.diff(ep.timestamp) < 0):
        problems.append("timestamps go backwards")
    return problems


def _record_problems(ep: Episode, record: Any) -> list[str]:
    """Disagreements between the episode's data and its commit record."""
    problems: list[str] = []
    n = record_value(record, "num_steps")
    if n is not None and int(n) != ep.num_steps:
        problems.append(f"record says {n} steps, data has {ep.num_steps}")
    k = record_value(record, "num_intervened")
    if k is not None and ep.intervention is not None:
        counts = {int(np.sum(ep.intervention != 0)), int(np.sum(ep.intervention == 1))}
        if int(k) not in counts:
            problems.append(f"record says {k} intervened steps, data has {sorted(counts)}")
    return problems


def validate_store(path: str | Path) -> list[str]:
    """Full validation: opens the store and reads every chunk, episode by episode.

    Returns:
        A list of problems, each naming the episode it is about; empty for a valid store.
    """
    try:
        reader = open_store(path)
        meta = store_meta(reader)
        records = list(reader.episodes)
    except (StoreError, OSError, ValueError) as exc:
        return [f"cannot open: {type(exc).__name__}: {exc}"]
    problems: list[str] = []
    total = 0
    for rec in records:
        eid = int(record_value(rec, "id"))
        try:
            data = reader.load(episodes=[eid])
            (ep,) = episodes_from_data(data)
        except Exception as exc:  # any decode failure is a finding, not a crash
            problems.append(f"episode {eid}: cannot read: {type(exc).__name__}: {exc}")
            continue
        total += ep.num_steps
        problems += [f"episode {eid}: {p}" for p in check_episode(ep, meta, rec)]
    if int(reader.num_episodes) != len(records):
        problems.append(f"store says {reader.num_episodes} episodes, has {len(records)} records")
    unreadable = any("cannot read" in p for p in problems)
    if not unreadable and total != int(reader.num_steps):
        problems.append(f"store says {reader.num_steps} steps, episodes hold {total}")
    return problems


# ----------------------------------------------------------------------------- filter / merge


def filter_store(
    src: str | Path,
    out: str | Path,
    *,
    successful_only: bool = False,
    interventions_only: bool = False,
    episodes: Sequence[int] | None = None,
    overwrite: bool = False,
) -> int:
    """Copies the selected episodes of ``src`` into a new store ``out``; returns their count.

    Raises NonFiniteError, before anything is written, if a selected episode holds nan or inf.
    """
    reader = open_store(src)
    if episodes is not None:
        known = {int(record_value(r, "id")) for r in reader.episodes}
        missing = sorted(set(episodes) - known)
        if missing:
            raise ValueError(
                f"episodes {missing} are not in {src}; it holds ids {sorted(known)[:20]}"
            )
    ids = reader.select(
        successful_only=successful_only,
        interventions_only=interventions_only,
        episodes=None if episodes is None else list(episodes),
    )
    require_finite(reader, ids)
    selected = iter_store_episodes(reader, episodes=ids)
    labels = gather_labels([(reader, ids)])  # read before the store is replaced: out may be src
    return write_store(out, store_meta(reader), (ep for _, ep in selected), overwrite=overwrite,
                       labels=labels)  # fmt: skip


def _spec_key(f: FieldSpec) -> tuple[str, str, tuple[int, ...], str]:
    return (f.name, str(np.dtype(f.dtype)), tuple(f.shape), f.units)


def check_mergeable(metas: Sequence[StoreMeta], names: Sequence[str]) -> None:
    """Raises :class:`FieldMismatchError` naming what differs between stores."""
    first = metas[0]
    for meta, name in zip(metas[1:], names[1:], strict=True):
        a = {_spec_key(f) for f in first.obs_fields}
        b = {_spec_key(f) for f in meta.obs_fields}
        if a != b:
            raise FieldMismatchError(
                f"field specs of {names[0]} and {name} differ: only in {names[0]}: "
                f"{sorted(a - b)}; only in {name}: {sorted(b - a)}. Merge only stores "
                "recorded with the same observation fields."
            )
        for attr in ("action_dim", "control_dt_s", "kind"):
            if getattr(meta, attr) != getattr(first, attr):
                raise FieldMismatchError(
                    f"{attr} differs: {getattr(first, attr)!r} in {names[0]} vs "
                    f"{getattr(meta, attr)!r} in {name}"
                )


def merge_stores(srcs: Sequence[str | Path], out: str | Path, *, overwrite: bool = False) -> int:
    """Concatenates the episodes of ``srcs`` (in order) into a new store; returns their count.

    Raises NonFiniteError, before anything is written, if an episode holds nan or inf.
    """
    if len(srcs) < 2:
        raise ValueError(f"merge needs at least two stores, got {len(srcs)}")
    readers = [open_store(s) for s in srcs]
    metas = [store_meta(r) for r in readers]
    check_mergeable(metas, [str(s) for s in srcs])
    for reader in readers:
        require_finite(reader)
    tasks = list(dict.fromkeys(m.task for m in metas))
    meta = StoreMeta(
        kind=metas[0].kind,
        task=tasks[0] if len(tasks) == 1 else "+".join(tasks),
        obs_fields=metas[0].obs_fields,
        action_dim=metas[0].action_dim,
        control_dt_s=metas[0].control_dt_s,
        robot=metas[0].robot,
    )

    def all_episodes() -> Iterator[Episode]:
        for reader, m in zip(readers, metas, strict=True):
            for _, ep in iter_store_episodes(reader):
                ep.task = ep.task or m.task
                yield ep

    labels = gather_labels([(reader, reader.select()) for reader in readers])
    return write_store(out, meta, all_episodes(), overwrite=overwrite, labels=labels)
