"""Reading episode stores: open_store, EpisodeReader, EpisodeData.

A reader takes no lock and may run while a writer appends: it reads the commit record (root
``zarr.json``) first and only ever reads rows below the committed lengths, so it sees whole,
committed episodes and never the writer's uncommitted tail or spare capacity.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos import _zarr
from handrail.demos.errors import StoreCorruptError
from handrail.demos.format import FieldSpec, episode_fields, read_root_document, step_fields


@dataclass(frozen=True)
class EpisodeRecord:
    """Per-episode record; fields are also readable as ``record["success"]``."""

    id: int
    """Index of the episode in its store."""
    task: str
    """Task the episode was recorded on."""
    success: bool
    """Whether the task was achieved."""
    num_steps: int
    """Number of transitions."""
    num_intervened: int
    """Steps whose action came from a human or a script (intervention != 0)."""
    start_time: float
    """Unix time in seconds when the episode began."""
    seed: int | None
    """Environment seed of the episode's reset, when known."""
    start: int
    """First row of the episode in the store's data/ arrays."""
    recovered: bool = False
    """True when a crash cut the episode short and it was kept as truncated."""

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict copy."""
        return asdict(self)


@dataclass
class EpisodeData:
    """Episodes as RAM arrays, time-major and concatenated (T steps over E episodes)."""

    obs: dict[str, np.ndarray]
    """Observation before each step, per field, (T, ...)."""
    final_obs: dict[str, np.ndarray]
    """Observation after each episode's last step, per field, (E, ...)."""
    action: np.ndarray
    """Executed action (T, A) float32."""
    policy_action: np.ndarray
    """Action the policy proposed (T, A) float32."""
    intervention: np.ndarray
    """(T,) int8: 0 policy, 1 human, 2 scripted."""
    reward: np.ndarray
    """(T,) float32."""
    terminated: np.ndarray
    """(T,) bool."""
    truncated: np.ndarray
    """(T,) bool."""
    timestamp: np.ndarray
    """(T,) float64 unix seconds."""
    episode_starts: np.ndarray
    """(E,) int64: first row of each episode in these arrays."""
    episode_lengths: np.ndarray
    """(E,) int64."""
    records: list[EpisodeRecord]
    """Per-episode records (ids are store ids)."""

    @property
    def num_steps(self) -> int:
        """T."""
        return len(self.reward)

    @property
    def num_episodes(self) -> int:
        """E."""
        return len(self.records)

    def next_obs(self) -> dict[str, np.ndarray]:
        """Observation after each step, (T, ...): obs shifted by one, final_obs at episode ends."""
        ends = self.episode_starts + self.episode_lengths - 1
        out = {}
        for name, o in self.obs.items():
            nxt = np.empty_like(o)
            nxt[:-1] = o[1:]
            nxt[ends] = self.final_obs[name]
            out[name] = nxt
        return out


class EpisodeReader:
    """Read-only view of the committed part of a store (a snapshot; ``refresh`` re-reads)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.refresh()

    def __enter__(self) -> EpisodeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release cached arrays (a reader holds no lock or file handles)."""
        self._arrays: dict[str, Any] = {}

    def refresh(self) -> None:
        """Re-read the commit record to see episodes committed since opening."""
        doc = read_root_document(self.path)
        self._attrs = doc["attributes"]
        commit = self._attrs["commit"]
        try:
            self.obs_fields: list[FieldSpec] = [
                FieldSpec.from_json(f) for f in self._attrs["obs_fields"]
            ]
            action_dim = int(self._attrs["action_dim"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCorruptError(
                f"{self.path}: bad field specs in root attributes: {exc}"
            ) from exc
        self._step_defs = step_fields(self.obs_fields, action_dim)
        self._ep_defs = episode_fields(self.obs_fields)
        self._arrays = _zarr.open_arrays(self.path, self._step_defs + self._ep_defs, writable=False)
        self._num_steps = int(commit["num_steps"])
        self.episodes = self._read_records(int(commit["num_episodes"]), list(commit["tasks"]))

    def _read_records(self, n: int, tasks: list[str]) -> list[EpisodeRecord]:
        cols = {
            d.path.rsplit("/", 1)[1]: self.rows(d.path, 0, n)
            for d in self._ep_defs
            if not d.path.startswith("meta/final_obs/")
        }
        ends = cols["episode_ends"].astype(np.int64)
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        bad = n and (np.any(ends <= starts) or ends[-1] != self._num_steps)
        if bad or (n == 0 and self._num_steps != 0):
            raise StoreCorruptError(
                f"{self.path}: episode boundaries do not add up to the {self._num_steps} committed steps"
            )
        if n and (cols["task_index"].min() < 0 or cols["task_index"].max() >= len(tasks)):
            raise StoreCorruptError(f"{self.path}: meta/task_index points outside the task list")
        return [
            EpisodeRecord(
                id=i,
                task=tasks[int(cols["task_index"][i])],
                success=bool(cols["success"][i]),
                num_steps=int(ends[i] - starts[i]),
                num_intervened=int(cols["num_intervened"][i]),
                start_time=float(cols["start_time"][i]),
                seed=None if int(cols["seed"][i]) < 0 else int(cols["seed"][i]),
                start=int(starts[i]),
                recovered=bool(cols["recovered"][i]),
            )
            for i in range(n)
        ]

    def rows(self, path: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of one stored array, e.g. ``"data/action"`` (step rows) or
        ``"meta/final_obs/state"`` (episode rows); every chunk is checked (damage is a
        StoreCorruptError). Callers keep to committed rows (``EpisodeRecord.start`` and
        ``num_steps``; episode ids)."""
        adef = next((d for d in self._step_defs + self._ep_defs if d.path == path), None)
        if adef is None:
            paths = [d.path for d in self._step_defs + self._ep_defs]
            raise ValueError(f"{self.path}: no array {path!r}; it has {paths}")
        return _zarr.read_rows(self.path, self._arrays[path], adef, start, stop)

    @property
    def num_episodes(self) -> int:
        """Committed episodes."""
        return len(self.episodes)

    @property
    def num_steps(self) -> int:
        """Committed steps over all episodes."""
        return self._num_steps

    def step_column(self, name: str) -> np.ndarray:
        """One per-step array over every committed step, e.g. ``"intervention"``, (T, ...).

        Reads only that array, so per-step statistics need not load the observations.
        """
        path = f"data/{name}"
        if not any(d.path == path for d in self._step_defs):
            names = [d.path.removeprefix("data/") for d in self._step_defs]
            raise ValueError(f"{self.path}: no per-step array {name!r}; it has {names}")
        return self.rows(path, 0, self._num_steps)

    @property
    def attrs(self) -> dict[str, Any]:
        """Root attributes (format, kind, creator, versions, control_dt_s, fields, commit...)."""
        return copy.deepcopy(self._attrs)

    def select(
        self,
        *,
        successful_only: bool = False,
        interventions_only: bool = False,
        episodes: Sequence[int] | None = None,
    ) -> list[int]:
        """Episode ids passing every filter (``episodes`` keeps its order)."""
        if episodes is None:
            ids = list(range(self.num_episodes))
        else:
            ids = [int(e) for e in episodes]
            for e in ids:
                if not 0 <= e < self.num_episodes:
                    raise ValueError(
                        f"episodes: id {e} is out of range; this store has ids 0..{self.num_episodes - 1}"
                    )
            if len(set(ids)) != len(ids):
                raise ValueError(f"episodes lists an id twice: {ids}")
        recs = self.episodes
        if successful_only:
            ids = [e for e in ids if recs[e].success]
        if interventions_only:
            ids = [e for e in ids if recs[e].num_intervened > 0]
        return ids

    def load(
        self,
        *,
        successful_only: bool = False,
        interventions_only: bool = False,
        episodes: Sequence[int] | None = None,
    ) -> EpisodeData:
        """Load the selected episodes into RAM arrays (all of them by default).

        Args:
            successful_only: keep episodes with ``success``.
            interventions_only: keep episodes with at least one intervened step.
            episodes: explicit episode ids (combined with the filters above).
        """
        ids = self.select(
            successful_only=successful_only,
            interventions_only=interventions_only,
            episodes=episodes,
        )
        return self._load_ids(ids)

    def iter_episodes(
        self,
        *,
        successful_only: bool = False,
        interventions_only: bool = False,
        episodes: Sequence[int] | None = None,
    ) -> Iterator[EpisodeData]:
        """Yield the selected episodes one at a time (for replay and export)."""
        ids = self.select(
            successful_only=successful_only,
            interventions_only=interventions_only,
            episodes=episodes,
        )
        for e in ids:
            yield self._load_ids([e])

    def _load_ids(self, ids: list[int]) -> EpisodeData:
        runs = id_runs(ids)
        recs = [self.episodes[e] for e in ids]
        steps: dict[str, np.ndarray] = {}
        for d in self._step_defs:
            parts = [
                self.rows(d.path, self.episodes[a].start, _end(self.episodes[b - 1]))
                for a, b in runs
            ]
            steps[d.path] = _concat(parts, d.spec)
        finals = {}
        for f in self.obs_fields:
            path = f"meta/final_obs/{f.name}"
            finals[f.name] = _concat([self.rows(path, a, b) for a, b in runs], f)
        lengths = np.array([r.num_steps for r in recs], dtype=np.int64)
        return EpisodeData(
            obs={f.name: steps[f"data/obs/{f.name}"] for f in self.obs_fields},
            final_obs=finals,
            action=steps["data/action"],
            policy_action=steps["data/policy_action"],
            intervention=steps["data/intervention"],
            reward=steps["data/reward"],
            terminated=steps["data/terminated"],
            truncated=steps["data/truncated"],
            timestamp=steps["data/timestamp"],
            episode_starts=np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            if len(lengths)
            else np.zeros(0, np.int64),
            episode_lengths=lengths,
            records=recs,
        )


def _end(rec: EpisodeRecord) -> int:
    return rec.start + rec.num_steps


def id_runs(ids: Sequence[int]) -> list[tuple[int, int]]:
    """Group ids into [a, b) runs of consecutive increasing ids (one read per run)."""
    runs: list[tuple[int, int]] = []
    for e in ids:
        if runs and runs[-1][1] == e:
            runs[-1] = (runs[-1][0], e + 1)
        else:
            runs.append((e, e + 1))
    return runs


def _concat(parts: list[np.ndarray], spec: FieldSpec) -> np.ndarray:
    if not parts:
        return np.zeros((0, *spec.shape), dtype=spec.dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def open_store(path: str | Path) -> EpisodeReader:
    """Open a store for reading (no lock; safe while a writer appends).

    Raises:
        NotAStoreError: nothing there, or not a handrail store.
        StoreVersionError: written by a newer format version.
        StoreCorruptError: damaged metadata or data.
    """
    return EpisodeReader(path)
