"""Episodes as plain NumPy arrays, read from and written to stores one at a time.

:class:`Episode` is the per-episode in-RAM form that the import/export converters and the
whole-store operations (:mod:`handrail.demos.ops`) share, so a converter only has to map arrays,
never to talk to Zarr; :class:`StoreMeta` is what a new store needs besides its episodes, and
:class:`ConversionReport` what a conversion wrote and could not carry over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from handrail.control.step import EpisodeTally, Step
from handrail.demos import EpisodeData, EpisodeWriter, FieldSpec, create_store, open_store
from handrail.demos.commit import check_replaceable_store, staged_output
from handrail.demos.errors import StoreWriteError
from handrail.demos.finite import require_finite_episode
from handrail.demos.format import StoreKind, parse_kind
from handrail.demos.reader import EpisodeRecord


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


def require(module: str, purpose: str, extra: str = "io") -> Any:
    """Imports an optional dependency or raises an ImportError naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs the optional package '{module.split('.')[0]}': "
            f"install it with `pip install 'handrail[{extra}]'`"
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


def export_store(
    writer: Callable[..., ConversionReport],
    store: str | Path,
    out: str | Path,
    *,
    overwrite: bool = False,
    folder_marker: str | None = None,
) -> ConversionReport:
    """The exporters' common head: streams a store's episodes into ``writer(out, meta, eps)``.

    The export is written beside ``out`` and moved there only when complete, so a failure
    leaves ``out`` as it was.

    Args:
        writer: the format's writer.
        store: the store to export.
        out: destination file, or folder when ``folder_marker`` is given.
        overwrite: replace an existing ``out``.
        folder_marker: the output is a folder; an existing folder is replaced only if it
            holds this file (an earlier export) or nothing. None: the output is one file.
    """
    reader = open_store(store)
    eps = (ep for _, ep in iter_store_episodes(reader))

    def check_old(old: Path) -> None:
        if folder_marker is None and old.is_dir():
            raise ValueError(f"{old} is a folder; this export writes one file: name a file")
        if folder_marker is not None and not old.is_dir():
            raise ValueError(f"{old} is a file; this export writes a folder: name a folder")
        if folder_marker is not None and any(old.iterdir()) and not (old / folder_marker).exists():
            raise ValueError(
                f"refusing to replace {old}: it holds other files than an export (no "
                f"{folder_marker}); name a new folder"
            )

    with staged_output(out, overwrite=overwrite, check_old=check_old) as target:
        return writer(target, store_meta(reader), eps, overwrite=False)


def write_store(
    path: str | Path, meta: StoreMeta, episodes: Iterable[Episode], *, overwrite: bool = False,
    labels: Any = None,
) -> int:  # fmt: skip
    """Creates a new store at ``path`` holding ``episodes``; returns how many were written.

    The store is built beside ``path`` and moved there only when complete: a failure (a full
    disk, a bad episode, Ctrl-C) leaves ``path`` as it was, and ``episodes`` may be read from
    the store being replaced. ``labels`` (:class:`~handrail.demos.labels.Labels`, one per step
    of ``episodes``) go in with them.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false.
        ValueError: ``overwrite`` and ``path`` is not a handrail store.
        StoreLockedError: another process writes the store at ``path``.
        NonFiniteError: an episode holds nan or inf.
    """
    count = 0
    try:
        with staged_output(
            path, overwrite=overwrite, check_old=check_replaceable_store, store=True
        ) as out:
            with create_store(
                out,
                kind=meta.kind,
                obs_fields=list(meta.obs_fields),
                action_dim=meta.action_dim,
                control_dt_s=meta.control_dt_s,
                task=meta.task,
                robot=meta.robot,
                durable=False,  # staged_output fsyncs the whole store once, before the move
            ) as writer:
                for ep in episodes:
                    require_finite_episode(
                        count, ep.obs, ep.final_obs, ep.action, ep.policy_action, ep.reward
                    )
                    write_episode(writer, ep)
                    count += 1
            if labels is not None:
                from handrail.demos.labels import put_labels

                put_labels(out, labels)
    except StoreWriteError as exc:  # it named the hidden folder, now gone: name the path
        raise StoreWriteError(
            f"cannot write {path}: {exc.reason}; nothing was written ({path} is as before)",
            committed=0,
            reason=exc.reason,
        ) from exc
    return count


def episode_from_steps(steps: Sequence[Step], task: str | None = None) -> Episode:
    """One :class:`Episode` from the steps of an episode (in order; the last one ends it)."""
    if not steps:
        raise ValueError("episode_from_steps: no steps")
    tally = EpisodeTally()
    for step in steps:
        tally.add(step.reward, step.success)
    keys = list(steps[0].obs)
    return Episode(
        obs={k: np.stack([np.asarray(s.obs[k]) for s in steps]) for k in keys},
        final_obs={k: np.asarray(steps[-1].next_obs[k]) for k in keys},
        action=np.stack([np.asarray(s.action, np.float32) for s in steps]),
        reward=np.array([s.reward for s in steps], np.float32),
        terminated=np.array([s.terminated for s in steps], bool),
        truncated=np.array([s.truncated for s in steps], bool),
        policy_action=np.stack([np.asarray(s.proposed, np.float32) for s in steps]),
        intervention=np.array([int(s.acted_by) for s in steps], np.int8),
        timestamp=np.array([s.timestamp for s in steps], np.float64),
        success=bool(tally.success),
        seed=steps[0].episode_seed,
        task=task,
    )


class EpisodeCollector:
    """A transition sink that keeps finished episodes in RAM as :class:`Episode` objects.

    Args:
        task: stamped on every episode.
        successful_only: keep only episodes whose success flag was true at any step.
    """

    def __init__(self, task: str | None = None, *, successful_only: bool = False) -> None:
        self.task, self.successful_only = task, successful_only
        self.episodes: list[Episode] = []
        self._current: list[Step] = []

    def add(self, step: Step) -> None:
        """Take one step; an episode is kept when its last step arrives."""
        self._current.append(step)
        if step.done:
            episode = episode_from_steps(self._current, self.task)
            self._current = []
            if episode.success or not self.successful_only:
                self.episodes.append(episode)


def data_from_episodes(episodes: Sequence[Episode]) -> EpisodeData:
    """Concatenates episodes into an :class:`EpisodeData` (the inverse of
    :func:`episodes_from_data`; record ids number the episodes from 0)."""
    if not episodes:
        raise ValueError("data_from_episodes: no episodes")
    lengths = np.array([ep.num_steps for ep in episodes], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)

    def cat(name: str, dtype: Any, default: Callable[[Episode], np.ndarray]) -> np.ndarray:
        parts = [getattr(ep, name) for ep in episodes]
        return np.concatenate(
            [
                np.asarray(default(ep) if p is None else p, dtype)
                for ep, p in zip(episodes, parts, strict=True)
            ]
        )

    zeros = lambda ep: np.zeros(ep.num_steps)  # noqa: E731
    interventions = cat("intervention", np.int8, zeros)
    return EpisodeData(
        obs={k: np.concatenate([ep.obs[k] for ep in episodes]) for k in episodes[0].obs},
        final_obs={k: np.stack([ep.final_obs[k] for ep in episodes]) for k in episodes[0].obs},
        action=cat("action", np.float32, zeros),
        policy_action=cat("policy_action", np.float32, lambda ep: ep.action),
        intervention=interventions,
        reward=cat("reward", np.float32, zeros),
        terminated=cat("terminated", bool, zeros),
        truncated=cat("truncated", bool, zeros),
        timestamp=cat("timestamp", np.float64, zeros),
        episode_starts=starts,
        episode_lengths=lengths,
        records=[
            EpisodeRecord(
                id=i,
                task=ep.task or "",
                success=ep.success,
                num_steps=ep.num_steps,
                num_intervened=int(np.count_nonzero(interventions[start : start + ep.num_steps])),
                start_time=0.0,
                seed=ep.seed,
                start=int(start),
            )
            for i, (ep, start) in enumerate(zip(episodes, starts, strict=True))
        ],
    )
