"""EpisodeRecorder: a transition sink that logs every executed Step into an episode store.

Plug it into an actor's sinks and every episode the actor plays becomes one committed episode
of a crash-safe store (see FORMAT.md): the executed action, the policy's proposal, who acted,
reward, flags, timestamps, the reset seed, the final observation and success (true at any step,
the one definition in :class:`~handrail.control.step.EpisodeTally`).

``add`` only checks the step and copies it into the writer's RAM staging block; the writer's
background thread writes and commits, so the control loop never waits for the disk. A bad step
(a missing observation key, a wrong shape or dtype, a wrong action width, a non-finite value)
raises before anything of it is staged, so the store and the episode in progress stay intact.

One actor per recorder: a store keeps one episode open at a time and its steps are contiguous,
so interleaved episodes of several actors cannot stream into one store. A step from a second
``actor_id`` is refused; give each actor its own recorder and store, and merge the stores
afterwards (``handrail demos merge``).

What a crash loses: ``close`` (also on Ctrl-C or an exception inside ``with``) drops only the
unfinished episode and commits every episode that had ended. A killed process (SIGKILL, power
loss) also loses at most one finished episode: the last one, whose commit the background thread
had not finished. At the step that ends an episode, ``add`` first waits until the previous
episode is committed (it does not wait when commits keep up with the episodes, as they do
whenever an episode lasts longer than a commit, tens of milliseconds), so no more than one
finished episode is ever uncommitted (FORMAT.md, commit rule 6). Every committed episode
stays whole and readable. A failed write (a full disk) raises
:class:`~handrail.demos.StoreWriteError` from ``add``; the store keeps the episodes committed
before it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from handrail.control.step import EpisodeTally, Step
from handrail.demos._flush import check_value
from handrail.demos.errors import FieldMismatchError, StoreError
from handrail.demos.format import FieldSpec, StoreKind, check_fields
from handrail.demos.reader import open_store
from handrail.demos.store import EpisodeWriter, create_store, open_writer

_ACTION_DTYPE = np.dtype(np.float32)  # dtype of data/action and data/policy_action


class EpisodeRecorder:
    """Writes every :class:`Step` it is given into an episode store (a ``TransitionSink``).

    An episode begins at the first step after the previous one ended (seeded with
    ``step.episode_seed``) and is handed to the background thread to commit at the step whose
    ``done`` is true (waiting only for the previous episode's commit, see the module doc).
    Build one with :meth:`create` (a new store) or :meth:`append` (an existing one); use it as
    a context manager, or call :meth:`close`. Call ``add`` from one thread.

    Observation keys not in the store's fields are ignored (record a subset, e.g. no images);
    ``Step.extras`` are not stored (the format has no place for them yet).
    """

    def __init__(self, writer: EpisodeWriter, *, task: str | None = None) -> None:
        """Take over an open writer; the recorder closes it.

        Args:
            writer: from ``create_store`` or ``open_writer``, with no episode open.
            task: task name of the recorded episodes; None uses the store's task.
        """
        if task is not None and (not isinstance(task, str) or not task):
            raise ValueError(f"task={task!r} must be a non-empty str or None (the store's task)")
        self._writer = writer
        self._task = task
        self._fields = [(f.name, f.shape, np.dtype(f.dtype)) for f in writer.obs_fields]
        self._action_dim = writer.action_dim
        self._tally = EpisodeTally()
        self._open = False
        self._actor_id: int | None = None
        self._closed = False
        self._last_ended: int | None = None  # id of the last episode handed over to commit

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        obs_fields: Sequence[FieldSpec],
        action_dim: int,
        control_dt_s: float,
        task: str,
        kind: StoreKind = "rollout",
        robot: str = "sim_panda",
        overwrite: bool = False,
    ) -> EpisodeRecorder:
        """Create a new store at ``path`` and record into it.

        Args:
            path: directory of the new store.
            obs_fields: one FieldSpec per observation key to record.
            action_dim: length of the executed action vector.
            control_dt_s: control period in seconds.
            task: task name (every episode's task).
            kind: "rollout" (policy acting, the default), "intervention" (a human correcting
                a policy) or "demo" (demonstrations).
            robot: robot description stored with the data.
            overwrite: replace an existing store at ``path``.
        """
        writer = create_store(
            path,
            kind=kind,
            obs_fields=obs_fields,
            action_dim=action_dim,
            control_dt_s=control_dt_s,
            task=task,
            robot=robot,
            overwrite=overwrite,
        )
        return cls(writer)

    @classmethod
    def append(
        cls,
        path: str | Path,
        *,
        obs_fields: Sequence[FieldSpec],
        action_dim: int | None = None,
        task: str | None = None,
        recover: Literal["drop", "truncate"] = "drop",
    ) -> EpisodeRecorder:
        """Record into an existing store, once its fields are checked against ``obs_fields``.

        The check reads the store only: on a mismatch nothing is written and no lock is taken.
        Opening then cleans up after a crashed writer (see ``open_writer``).

        Args:
            path: directory of the store.
            obs_fields: the FieldSpecs the steps will carry; must equal the store's.
            action_dim: the action width the steps will carry; None skips that check.
            task: task name of the recorded episodes; None uses the store's task.
            recover: what to do with an episode a crashed writer left: "drop" or "truncate".

        Raises:
            FieldMismatchError: the store's observation fields or action width differ.
            StoreLockedError: another writer has the store open.
        """
        reader = open_store(path)
        try:
            check_fields(reader, obs_fields)
        except FieldMismatchError as exc:
            raise FieldMismatchError(
                f"cannot append to {path}: {exc}. Record into a new store with "
                "EpisodeRecorder.create, or pass the store's fields "
                "(open_store(path).obs_fields) if the steps really carry them"
            ) from None
        have = int(reader.attrs["action_dim"])
        if action_dim is not None and action_dim != have:
            raise FieldMismatchError(
                f"cannot append to {path}: it holds actions of width {have}, the steps will "
                f"carry {action_dim}; record into a new store with EpisodeRecorder.create"
            )
        return cls(open_writer(path, recover=recover), task=task)

    # -- the sink ----------------------------------------------------------------------------
    def add(self, step: Step) -> None:
        """Stage one step (RAM only); begins an episode if none is open, commits at ``done``.

        Raises:
            ValueError, TypeError: the step does not fit the store (nothing of it is staged).
            StoreError: the recorder is closed, or the background writer failed.
        """
        if self._closed:
            raise StoreError(f"{self.path}: the recorder is closed; make a new one to record")
        self._check_actor(step.actor_id)
        self._check_step(step)
        writer = self._writer
        if not self._open:
            writer.begin_episode(seed=step.episode_seed, task=self._task)
            self._open = True
            self._tally.reset()
        writer.add_step(
            obs=step.obs,
            action=step.action,
            policy_action=step.proposed,
            intervention=int(step.acted_by),
            reward=float(step.reward),
            terminated=bool(step.terminated),
            truncated=bool(step.truncated),
            timestamp=step.timestamp if step.timestamp > 0 else None,  # 0: not measured
        )
        self._tally.add(step.reward, step.success)
        if step.done:
            if self._last_ended is not None and writer.num_episodes <= self._last_ended:
                writer.flush()  # at most one finished episode waits for its commit
            self._last_ended = writer.end_episode(
                final_obs=step.next_obs, success=bool(self._tally.success), wait=False
            )
            self._open = False

    def _check_actor(self, actor_id: int) -> None:
        if self._actor_id is None:
            self._actor_id = actor_id
        elif actor_id != self._actor_id:
            raise ValueError(
                f"EpisodeRecorder records one actor: it took actor_id={self._actor_id} and got a "
                f"step from actor_id={actor_id}. A store keeps one episode open at a time, so "
                "interleaved episodes cannot stream into it: give each actor its own recorder "
                "and store, then merge the stores (handrail demos merge)"
            )

    def _check_step(self, step: Step) -> None:
        """Raise, naming the problem and the fix, unless every part of ``step`` fits the store."""
        self._check_obs("obs", step.obs)
        if step.done:  # next_obs is stored only as the episode's final observation
            self._check_obs("next_obs", step.next_obs)
        self._check_action("action", step.action)
        if step.policy_action is not None:
            self._check_action("policy_action", step.policy_action)
        if not math.isfinite(float(step.reward)):
            raise ValueError(
                f"EpisodeRecorder.add: Step.reward is {step.reward}; it must be finite"
            )
        seed = step.episode_seed
        valid_seed = seed is None or (isinstance(seed, (int, np.integer)) and 0 <= seed < 2**63)
        if not self._open and not valid_seed:
            raise ValueError(
                f"EpisodeRecorder.add: Step.episode_seed={seed!r} must be None or an int in "
                "[0, 2**63) (the seed the env was reset with)"
            )

    def _check_obs(self, label: str, obs: Mapping[str, Any]) -> None:
        if not isinstance(obs, Mapping):
            raise TypeError(
                f"EpisodeRecorder.add: Step.{label} is a {type(obs).__name__}; it must be a dict "
                "of arrays keyed by field name (wrap a flat observation as {'state': obs})"
            )
        for name, shape, dtype in self._fields:
            if name not in obs:
                raise ValueError(
                    f"EpisodeRecorder.add: Step.{label} is missing field {name!r} (it has "
                    f"{sorted(obs)}); the store records {[f[0] for f in self._fields]}, so "
                    "every step must carry them: build the recorder with the fields the env returns"
                )
            value = np.asarray(obs[name])
            try:
                check_value(f"Step.{label}[{name!r}]", value, shape, dtype)
            except (ValueError, TypeError) as exc:
                raise type(exc)(
                    f"EpisodeRecorder.add: {exc}; fix the observation, or record into a store "
                    f"created with FieldSpec({name!r}, {str(value.dtype)!r}, {value.shape})"
                ) from None
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(f"EpisodeRecorder.add: Step.{label}[{name!r}] is not finite")

    def _check_action(self, label: str, action: Any) -> None:
        value = np.asarray(action)
        try:
            check_value(f"Step.{label}", value, (self._action_dim,), _ACTION_DTYPE)
        except (ValueError, TypeError) as exc:
            raise type(exc)(
                f"EpisodeRecorder.add: {exc}; the store holds actions of width "
                f"{self._action_dim}: pass the executed action as a flat float array of that "
                "length, or record into a store created with the env's action width"
            ) from None
        if not np.isfinite(value).all():
            raise ValueError(f"EpisodeRecorder.add: Step.{label} is not finite: {value}")

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        """Directory of the store."""
        return self._writer.path

    @property
    def num_episodes(self) -> int:
        """Episodes committed so far (durable on disk); ended ones may still be in flight."""
        return self._writer.num_episodes

    @property
    def episode_open(self) -> bool:
        """An episode has begun and not ended yet (``close`` would drop it)."""
        return self._open

    def discard(self) -> None:
        """Throw the open episode away (a person asked to record it again); nothing of it is
        committed. No-op between episodes."""
        if self._open:
            self._writer.abort_episode()
            self._open = False

    def flush(self) -> None:
        """Block until every ended episode is committed (not for the control loop)."""
        self._writer.flush()

    def close(self) -> None:
        """Drop the unfinished episode, commit the ended ones, release the store's lock."""
        if self._closed:
            return
        self._closed = True
        self._open = False
        self._writer.close()

    def __enter__(self) -> EpisodeRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
