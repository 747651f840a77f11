"""Whole-store operations on top of the episode-store API: summary, validation, filter, merge.

Also the per-episode in-RAM form (:class:`Episode`) that the import/export converters use, so a
converter only has to map arrays, never to talk to Zarr.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos import (
    EpisodeData,
    EpisodeWriter,
    FieldMismatchError,
    FieldSpec,
    StoreError,
    create_store,
    open_store,
)
from handrail.demos.format import StoreKind, parse_kind

INTERVENTION_NAMES = {0: "policy", 1: "human", 2: "scripted"}


@dataclass
class Episode:
    """One episode as plain NumPy arrays (time-major, ``T`` steps).

    ``obs[k][t]`` is the observation the action ``action[t]`` was taken in; ``final_obs[k]`` is
    the observation after the last step.
    """

    obs: dict[str, np.ndarray]
    final_obs: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    policy_action: np.ndarray | None = None
    intervention: np.ndarray | None = None
    timestamp: np.ndarray | None = None
    success: bool = False
    seed: int | None = None
    task: str | None = None

    @property
    def num_steps(self) -> int:
        """Number of steps (actions) in the episode."""
        return len(self.action)


@dataclass(frozen=True)
class StoreMeta:
    """What ``create_store`` needs besides the episodes."""

    kind: StoreKind
    task: str
    obs_fields: tuple[FieldSpec, ...]
    action_dim: int
    control_dt_s: float
    robot: str = "sim_panda"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ConversionReport:
    """What an import or export wrote and what it could not carry over."""

    episodes: int = 0
    """Episodes written."""
    steps: int = 0
    """Steps written."""
    dropped: list[str] = field(default_factory=list)
    """Fields the target format cannot express (said once each)."""
    notes: list[str] = field(default_factory=list)
    """Values that were assumed or approximated."""

    def drop(self, what: str) -> None:
        """Records a dropped field once."""
        if what not in self.dropped:
            self.dropped.append(what)

    def note(self, what: str) -> None:
        """Records an assumption once."""
        if what not in self.notes:
            self.notes.append(what)

    def format(self) -> str:
        """Human-readable lines for the command line."""
        lines = [f"wrote {self.episodes} episodes, {self.steps} steps"]
        lines += [f"dropped: {d}" for d in self.dropped]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def require(module: str, purpose: str) -> Any:
    """Imports an optional dependency or raises an ImportError naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs the optional package '{module.split('.')[0]}': "
            "install it with `pip install 'handrail[io]'`"
        ) from exc


def record_value(record: Any, name: str, default: Any = None) -> Any:
    """Reads ``name`` from a per-episode record (attribute or mapping)."""
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def store_meta(reader: Any) -> StoreMeta:
    """The :class:`StoreMeta` of an open store (an ``EpisodeReader``)."""
    attrs = dict(reader.attrs)
    return StoreMeta(
        kind=parse_kind(attrs.get("kind", "demo")),
        task=str(attrs.get("task", "")),
        obs_fields=tuple(reader.obs_fields),
        action_dim=int(attrs.get("action_dim", 0)),
        control_dt_s=float(attrs.get("control_dt_s", 0.0)),
        robot=str(attrs.get("robot", "sim_panda")),
    )


def episodes_from_data(data: EpisodeData) -> list[Episode]:
    """Splits an :class:`EpisodeData` (E episodes concatenated) into one :class:`Episode` each."""
    episodes = []
    for e, (start, length) in enumerate(
        zip(data.episode_starts, data.episode_lengths, strict=True)
    ):
        sl = slice(int(start), int(start) + int(length))
        rec = data.records[e]
        episodes.append(
            Episode(
                obs={k: np.asarray(v[sl]) for k, v in data.obs.items()},
                final_obs={k: np.asarray(v[e]) for k, v in data.final_obs.items()},
                action=np.asarray(data.action[sl]),
                reward=np.asarray(data.reward[sl]),
                terminated=np.asarray(data.terminated[sl], dtype=bool),
                truncated=np.asarray(data.truncated[sl], dtype=bool),
                policy_action=np.asarray(data.policy_action[sl]),
                intervention=np.asarray(data.intervention[sl]),
                timestamp=np.asarray(data.timestamp[sl]),
                success=bool(record_value(rec, "success", False)),
                seed=record_value(rec, "seed"),
                task=record_value(rec, "task"),
            )
        )
    return episodes


def iter_store_episodes(reader: Any, **filters: Any) -> Iterator[tuple[Any, Episode]]:
    """Yields ``(record, Episode)`` one episode at a time (``filters`` go to ``iter_episodes``)."""
    for data in reader.iter_episodes(**filters):
        yield from zip(data.records, episodes_from_data(data), strict=True)


def write_episode(writer: EpisodeWriter, ep: Episode) -> int:
    """Appends one episode through ``writer`` and commits it; returns its episode id."""
    steps = ep.num_steps
    policy = ep.action if ep.policy_action is None else ep.policy_action
    interv = np.zeros(steps, np.int8) if ep.intervention is None else ep.intervention
    seed = None if ep.seed is None or int(ep.seed) < 0 else int(ep.seed)
    episode_id = writer.begin_episode(seed=seed, task=ep.task)
    for t in range(steps):
        writer.add_step(
            obs={k: v[t] for k, v in ep.obs.items()},
            action=ep.action[t],
            policy_action=policy[t],
            intervention=int(interv[t]),
            reward=float(ep.reward[t]),
            terminated=bool(ep.terminated[t]),
            truncated=bool(ep.truncated[t]),
            timestamp=None if ep.timestamp is None else float(ep.timestamp[t]),
        )
    # wait=False: bulk copies commit in the background; closing the writer commits the rest.
    writer.end_episode(final_obs=ep.final_obs, success=bool(ep.success), wait=False)
    return episode_id


def import_into_store(
    out: str | Path,
    meta: StoreMeta,
    episodes: Iterable[Episode],
    report: ConversionReport,
    *,
    overwrite: bool = False,
) -> ConversionReport:
    """Writes converted ``episodes`` into a new store, counting episodes and steps in ``report``.

    The importers' common tail: ``episodes`` may be a lazy reader, so steps are counted as they
    are written rather than up front.
    """

    def counted() -> Iterator[Episode]:
        for ep in episodes:
            report.steps += ep.num_steps
            yield ep

    report.episodes = write_store(out, meta, counted(), overwrite=overwrite)
    return report


def write_store(
    path: str | Path, meta: StoreMeta, episodes: Iterable[Episode], *, overwrite: bool = False
) -> int:
    """Creates a new store at ``path`` holding ``episodes``; returns how many were written."""
    count = 0
    with create_store(
        path,
        kind=meta.kind,
        obs_fields=list(meta.obs_fields),
        action_dim=meta.action_dim,
        control_dt_s=meta.control_dt_s,
        task=meta.task,
        robot=meta.robot,
        overwrite=overwrite,
    ) as writer:
        for ep in episodes:
            write_episode(writer, ep)
            count += 1
    return count


# ----------------------------------------------------------------------------- summary


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
    """Reads a store's commit record (no array data) and summarises it."""
    reader = open_store(path)
    records = list(reader.episodes)
    return StoreSummary(
        path=str(path),
        meta=store_meta(reader),
        num_episodes=int(reader.num_episodes),
        num_steps=int(reader.num_steps),
        num_successful=sum(bool(record_value(r, "success", False)) for r in records),
        num_intervened_steps=sum(int(record_value(r, "num_intervened", 0)) for r in records),
        size_bytes=disk_size_bytes(path),
    )


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{n} B"
        size /= 1024
    return f"{n} B"


def format_summary(s: StoreSummary) -> str:
    """The summary as a plain-text table."""
    pct = "n/a" if math.isnan(s.success_rate) else f"{100 * s.success_rate:.1f}%"
    share = "n/a" if math.isnan(s.intervention_share) else f"{100 * s.intervention_share:.1f}%"
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
    problems: list[str] = []
    steps = ep.num_steps
    if steps < 1:
        return ["has no steps"]
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
    if record is not None:
        n = record_value(record, "num_steps")
        if n is not None and int(n) != steps:
            problems.append(f"record says {n} steps, data has {steps}")
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
    """Copies the selected episodes of ``src`` into a new store ``out``; returns their count."""
    reader = open_store(src)
    if episodes is not None:
        known = {int(record_value(r, "id")) for r in reader.episodes}
        missing = sorted(set(episodes) - known)
        if missing:
            raise ValueError(
                f"episodes {missing} are not in {src}; it holds ids {sorted(known)[:20]}"
            )
    selected = iter_store_episodes(
        reader,
        successful_only=successful_only,
        interventions_only=interventions_only,
        episodes=None if episodes is None else list(episodes),
    )
    return write_store(out, store_meta(reader), (ep for _, ep in selected), overwrite=overwrite)


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
    """Concatenates the episodes of ``srcs`` (in order) into a new store; returns their count."""
    if len(srcs) < 2:
        raise ValueError(f"merge needs at least two stores, got {len(srcs)}")
    readers = [open_store(s) for s in srcs]
    metas = [store_meta(r) for r in readers]
    check_mergeable(metas, [str(s) for s in srcs])
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

    return write_store(out, meta, all_episodes(), overwrite=overwrite)
