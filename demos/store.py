"""Writing episode stores: create_store, open_writer and EpisodeWriter.

The control loop calls add_step, which only copies the step into a preallocated RAM block; a
background thread (``_flush.Flusher``) writes blocks and commits episodes. One writer per store
is enforced with an OS file lock. Reading lives in ``reader.py``.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from handrail.demos import _zarr
from handrail.demos._flush import (
    PENDING_NAME,
    EpisodeInfo,
    Flusher,
    StagingBlock,
    check_value,
    copy_row,
    failure_words,
)
from handrail.demos._open import (
    create_empty_arrays,
    prepare_dir,
    recover_pending,
    root_document,
    validate_create_args,
)
from handrail.demos.commit import FaultHook, StoreLock, atomic_write_json, clean_temp_files
from handrail.demos.errors import StoreError, StoreWriteError
from handrail.demos.format import (
    INTERVENTION_SOURCES,
    FieldSpec,
    StoreKind,
    episode_fields,
    read_root_document,
    step_fields,
)

_STAGING_BYTES = 8 << 20  # one staging block holds about this much step data


class EpisodeWriter:
    """Appends episodes to a store; the only process allowed to write it while open.

    Use as a context manager. ``add_step`` never touches the disk; ``end_episode`` is the
    commit point (by default it waits until the episode is durable; ``wait=False`` returns at
    once and the background thread commits it). ``recovery`` says what opening did with an
    episode a crashed writer left unfinished.
    """

    def __init__(self, root: Path, lock: StoreLock, *, durable: bool = True) -> None:
        doc = read_root_document(root)
        attrs = doc["attributes"]
        self.path = root
        self.obs_fields: list[FieldSpec] = [FieldSpec.from_json(f) for f in attrs["obs_fields"]]
        self.action_dim: int = int(attrs["action_dim"])
        self.task: str = str(attrs["task"])
        self.recovery: dict[str, Any] = {"action": "none", "episode": None, "steps": 0}
        step_defs = step_fields(self.obs_fields, self.action_dim)
        ep_defs = episode_fields(self.obs_fields)
        arrays = _zarr.open_arrays(root, step_defs + ep_defs, writable=True)
        self._flusher = Flusher(root, doc, arrays, step_defs, ep_defs, durable)
        self._lock = lock
        self._step_defs = step_defs
        self._obs = [
            (f.name, f"data/obs/{f.name}", f.shape, np.dtype(f.dtype)) for f in self.obs_fields
        ]
        row_bytes = sum(
            int(np.prod(d.spec.shape)) * np.dtype(d.spec.dtype).itemsize for d in step_defs
        )
        self._block_rows = int(min(256, max(16, _STAGING_BYTES // max(1, row_bytes))))
        self._block: StagingBlock | None = None
        self._episode: EpisodeInfo | None = None
        self._ep_steps = 0
        self._next_id = self._flusher.num_episodes
        self._closed = False
        self._failure_raised = False  # close() does not raise a write failure twice

    # -- lifecycle ---------------------------------------------------------------------------
    def _start(self) -> None:
        self._flusher.start()

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def num_episodes(self) -> int:
        """Episodes committed so far (durable on disk)."""
        return self._flusher.num_episodes

    @property
    def fault_hook(self) -> FaultHook | None:
        """Test hook called with each commit-protocol point name (see ``_commit.COMMIT_POINTS``)."""
        return self._flusher.fault_hook

    @fault_hook.setter
    def fault_hook(self, hook: FaultHook | None) -> None:
        self._flusher.fault_hook = hook

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: the writer is closed; open_writer(path) to append")
        if self._flusher.error is not None:
            self._failure_raised = True
            then = "; close this writer (it cuts the store back to them), then open_writer(path)"
            raise self._write_error(then) from self._flusher.error

    def _write_error(self, then: str, *, cut: bool = True) -> StoreWriteError:
        """The background writer's failure, with what the store keeps, then ``then``."""
        fl = self._flusher
        reason = failure_words(fl.error) if fl.error is not None else "writing failed"
        return StoreWriteError(
            f"{self.path}: {reason}; the store keeps the {fl.num_episodes} episodes committed "
            f"before it{then}",
            committed=fl.num_episodes,
            reason=reason,
            cut=cut,
        )

    # -- episodes ----------------------------------------------------------------------------
    def begin_episode(self, *, seed: int | None = None, task: str | None = None) -> int:
        """Start an episode and return its id (its index in the store)."""
        self._check()
        if self._episode is not None:
            raise ValueError("an episode is already open: call end_episode or abort_episode first")
        if seed is not None and not (isinstance(seed, (int, np.integer)) and 0 <= seed < 2**63):
            raise ValueError(f"seed={seed!r} must be None or an int in [0, 2**63)")
        if task is not None and (not isinstance(task, str) or not task):
            raise ValueError(f"task={task!r} must be a non-empty str or None (the store's task)")
        info = EpisodeInfo(
            self._next_id, task or self.task, None if seed is None else int(seed), time.time()
        )
        self._episode, self._ep_steps = info, 0
        self._flusher.queue.put(("begin", info))
        return info.episode

    def add_step(
        self,
        *,
        obs: Mapping[str, np.ndarray],
        action: np.ndarray,
        policy_action: np.ndarray | None = None,
        intervention: int = 0,
        reward: float,
        terminated: bool,
        truncated: bool,
        timestamp: float | None = None,
    ) -> None:
        """Stage one step in RAM (never blocks on disk).

        Args:
            obs: observation before the action, one array per obs field (extra keys ignored).
            action: executed action (after intervention and safety), shape (action_dim,).
            policy_action: what the policy proposed; None stores a copy of ``action``.
            intervention: who chose the action: 0 policy, 1 human, 2 scripted.
            reward: reward of the transition.
            terminated: the episode ended in a terminal state at this step.
            truncated: the episode was cut (time limit) at this step.
            timestamp: unix time in seconds; None uses the current time.
        """
        episode = self._staging_episode(intervention)
        block = self._current_block()
        i, arrays = block.n, block.arrays
        self._stage_obs(arrays, i, obs)
        self._stage_actions(arrays, i, action, policy_action)
        arrays["data/intervention"][i] = intervention
        arrays["data/reward"][i] = reward
        arrays["data/terminated"][i] = terminated
        arrays["data/truncated"][i] = truncated
        arrays["data/timestamp"][i] = time.time() if timestamp is None else timestamp
        block.n = i + 1
        self._ep_steps += 1
        episode.num_intervened += intervention != 0
        if block.n == len(arrays["data/reward"]):
            self._flusher.queue.put(("data", block))
            self._block = None

    def _staging_episode(self, intervention: int) -> EpisodeInfo:
        """The open episode, once checked that a step with ``intervention`` may be staged."""
        if self._episode is None:
            self._check()
            raise ValueError("add_step outside an episode: call begin_episode first")
        if self._flusher.error is not None:
            self._check()
        if intervention not in INTERVENTION_SOURCES:
            raise ValueError(
                f"intervention={intervention!r} must be 0 (policy), 1 (human) or 2 (scripted)"
            )
        return self._episode

    def _current_block(self) -> StagingBlock:
        """The staging block being filled, taking a new one if there is none."""
        block = self._block
        if block is None:
            block = self._block = self._new_block()
        return block

    def _stage_obs(self, arrays: dict[str, np.ndarray], i: int, obs: Mapping[str, Any]) -> None:
        """Checks each obs field and copies it into row ``i`` of the staging arrays."""
        for name, path, shape, dtype in self._obs:
            try:
                value = np.asarray(obs[name])
            except KeyError:
                raise ValueError(f"obs is missing field {name!r}; it has {sorted(obs)}") from None
            check_value(f"obs[{name!r}]", value, shape, dtype)
            copy_row(arrays[path], i, value)

    def _stage_actions(
        self, arrays: dict[str, np.ndarray], i: int, action: Any, policy_action: Any
    ) -> None:
        """Checks and stages the executed and proposed actions (``action`` when none proposed)."""
        act = np.asarray(action)
        check_value("action", act, (self.action_dim,), arrays["data/action"].dtype)
        arrays["data/action"][i] = act
        if policy_action is not None:
            act = np.asarray(policy_action)
            check_value("policy_action", act, (self.action_dim,), np.dtype(np.float32))
        arrays["data/policy_action"][i] = act

    def end_episode(
        self, *, final_obs: Mapping[str, np.ndarray], success: bool, wait: bool = True
    ) -> int:
        """Commit the open episode; returns its id.

        Args:
            final_obs: the observation after the last step (one array per obs field).
            success: whether the task was achieved.
            wait: block until the commit is durable (True), or let the background thread
                commit it (False: for loops that cannot afford the few ms; call flush later).
        """
        self._check()
        info = self._episode
        if info is None:
            raise ValueError("end_episode without an open episode: call begin_episode first")
        if self._ep_steps == 0:
            raise ValueError("the episode has no steps: add_step at least once or abort_episode")
        final = {}
        for name, _path, shape, dtype in self._obs:
            if name not in final_obs:
                raise ValueError(f"final_obs is missing field {name!r}; it has {sorted(final_obs)}")
            value = np.asarray(final_obs[name])
            check_value(f"final_obs[{name!r}]", value, shape, dtype)
            final[name] = value.astype(dtype, copy=True)
        info.final_obs, info.success = final, bool(success)
        tail = None
        if self._block is not None and self._block.n:
            tail, self._block = self._block, None
        # one item: the writer stages the last rows and ends the episode in the same drain, so
        # what is on disk when a commit fails does not depend on the writer thread's timing
        self._flusher.queue.put(("end", info, tail))
        self._episode = None
        self._next_id += 1
        if wait:
            self.flush()
        return info.episode

    def abort_episode(self) -> None:
        """Discard the open episode (nothing of it becomes visible)."""
        if self._episode is None:
            return
        if self._block is not None:
            self._block.n = 0
        self._episode = None
        self._flusher.queue.put(("abort",))

    def flush(self) -> None:
        """Block until every ended episode is committed and staged rows are written."""
        self._check()
        done = threading.Event()
        self._flusher.queue.put(("sync", done))
        done.wait()
        self._check()

    def close(self) -> None:
        """Abort an open episode, commit the rest, trim spare capacity, release the lock.

        After a failed write (a full disk) the arrays are cut back to the episodes committed
        before it, so the closed store is exactly those; the failure is raised here unless an
        earlier call already raised it.
        """
        if self._closed:
            return
        fl = self._flusher
        cut_error: BaseException | None = None
        try:
            self.abort_episode()
            if fl.is_alive():
                done = threading.Event()
                fl.queue.put(("stop", done))
                done.wait()
                fl.join()
            if fl.error is None:
                fl.trim()
            else:
                cut_error = fl.cut_back()
            (self.path / PENDING_NAME).unlink(missing_ok=True)
        finally:
            self._lock.release()
            self._closed = True
        if fl.error is not None and (cut_error is not None or not self._failure_raised):
            then = f"; cutting its arrays back failed ({cut_error}): open_writer(path) does it"
            raise self._write_error(then if cut_error else "", cut=cut_error is None) from fl.error

    def _crash(self) -> None:
        """Test helper: stop as a killed process would (no flush, no trim), release the lock."""
        fl = self._flusher
        if fl.error is None:
            fl.error = RuntimeError("simulated crash")
        if fl.is_alive():
            fl.queue.put(("stop", None))
            fl.join()
        self._lock.release()
        self._closed = True

    def _new_block(self) -> StagingBlock:
        try:
            return self._flusher.pool.pop()
        except IndexError:
            return StagingBlock.allocate(self._step_defs, self._block_rows)


def create_store(
    path: str | Path,
    *,
    kind: StoreKind,
    obs_fields: Sequence[FieldSpec],
    action_dim: int,
    control_dt_s: float,
    task: str,
    robot: str = "sim_panda",
    overwrite: bool = False,
    durable: bool = True,
) -> EpisodeWriter:
    """Create a new, empty store and return its writer (holding the writer lock).

    Args:
        path: directory of the store (created).
        kind: what the episodes are: "demo", "intervention" or "rollout".
        obs_fields: one FieldSpec per observation key.
        action_dim: length of the action vector.
        control_dt_s: control period in seconds.
        task: task name (default task of every episode).
        robot: robot description.
        overwrite: replace an existing handrail store at ``path``.
        durable: fsync data and metadata at every commit (turn off only for scratch stores).
    """
    fields = validate_create_args(kind, obs_fields, action_dim, control_dt_s, task)
    root = Path(path)
    existed = root.exists()
    prepare_dir(root, overwrite)
    lock = StoreLock(root)
    lock.acquire()
    try:
        defs = create_empty_arrays(root, fields, int(action_dim), durable)
        doc = root_document(root, kind, fields, defs, action_dim, control_dt_s, robot, task)
        atomic_write_json(root / "zarr.json", doc, durable=durable)  # now it is a handrail store
        writer = EpisodeWriter(root, lock, durable=durable)
    except BaseException:
        lock.release()
        # half made (a full disk): leave no folder that is neither empty nor a store
        shutil.rmtree(root, ignore_errors=True)
        if existed:
            root.mkdir(exist_ok=True)
        raise
    writer._start()
    return writer


def open_writer(
    path: str | Path,
    *,
    recover: Literal["drop", "truncate"] = "drop",
    durable: bool = True,
) -> EpisodeWriter:
    """Open an existing store for appending (takes the single-writer lock).

    Leftovers of a crashed writer are cleaned first: temp files are deleted and arrays are cut
    back to the committed length. An episode that was being recorded is dropped, or with
    ``recover="truncate"`` kept up to its last stored step and marked truncated and recovered.

    Raises:
        StoreLockedError: another writer has the store open.
        NotAStoreError, StoreCorruptError, StoreVersionError: see ``open_store``.
    """
    if recover not in ("drop", "truncate"):
        raise ValueError(f"recover={recover!r} must be 'drop' or 'truncate'")
    root = Path(path)
    read_root_document(root)  # clear errors before touching anything
    lock = StoreLock(root)
    lock.acquire()
    try:
        clean_temp_files(root)
        writer = EpisodeWriter(root, lock, durable=durable)
        writer.recovery = recover_pending(writer, recover)
        writer._flusher.trim()
        (root / PENDING_NAME).unlink(missing_ok=True)
    except BaseException:
        lock.release()
        raise
    writer._start()
    return writer
