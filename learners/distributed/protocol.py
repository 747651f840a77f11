"""Actors and one learner in several processes or on several machines, with Ray as transport.

The two seams of the core carry over unchanged: an env actor's steps go to a
:class:`StepSender` (a :class:`~handrail.control.step.TransitionSink`) and its params come from
a :class:`RemoteParams` (a :class:`~handrail.control.step.ParameterSource`). On the other side,
a :class:`LearnerService` wraps the in-process :class:`~handrail.learners.learner.Learner`:

- **Data.** An actor registers (its observation and action spaces are checked against the
  learner's, and it gets an id of its own) and sends its steps in small batches, each with the
  index of its first step. The learner accepts each index once, so a batch sent twice (after
  a reconnect) is never counted twice; a gap (steps the actor had to drop) starts a new chain.
- **Updates.** A thread runs update blocks at the target UTD over all actors' steps together
  (one block per received step after warm-up, as ``--loop.mode async``): when it is ahead it
  waits for data rather than train a stale buffer more.
- **Params.** Every ``broadcast_blocks`` blocks the learner puts its policy params into Ray's
  object store once (``put``); replies carry the reference, and an actor fetches it every
  ``params_every`` of its env steps, so N actors cost one serialisation per broadcast.
- **Faults.** An actor never waits for the learner: at most ``max_in_flight`` batches are in
  flight, the rest wait in a bounded buffer (``buffer_steps``), and a full buffer drops its
  oldest steps, counted and reported to the learner. Sent steps stay in that buffer until a
  learner checkpoint holds them, so a learner that restarts from its checkpoint is sent them
  again. The learner checkpoints itself (replay included) every ``checkpoint_every`` steps;
  a restarted one loads it and the actors, finding the learner back, reconnect by themselves.

Nothing here imports Ray at module level: the default local path does not pay for it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from handrail.control.step import Step
from handrail.learners import replay_io
from handrail.learners.actor import Actor, EpisodeStats, LearnedPolicy
from handrail.learners.agents.sac import SAC
from handrail.learners.checkpoint import (
    load_checkpoint,
    read_json,
    save_checkpoint,
    write_checkpoint_dir,
)
from handrail.learners.learner import REPLAY_FILE, Learner, LoopConfig
from handrail.learners.replay import Rows

LEARNER_FILE = "distributed.json"
"""The learner's counters and per-actor acknowledgements, beside ``learner/`` and the replay."""
EVENTS_FILE = "events.jsonl"
"""The run folder's event log: one JSON line per start, restart, registration, fault."""


@dataclass(frozen=True)
class DistConfig:
    """How env actors and the learner talk (``--dist.*``)."""

    send_every: int = 16
    """Env steps per batch an actor sends (and at every episode end)."""
    params_every: int = 50
    """Env steps between an actor's fetches of the newest params."""
    broadcast_blocks: int = 20
    """Update blocks between two puts of the learner's params into the object store."""
    max_in_flight: int = 4
    """Batches an actor has sent and not yet had acknowledged; beyond, it keeps them."""
    buffer_steps: int = 50_000
    """Steps an actor keeps (unsent, or sent and not yet in a learner checkpoint); beyond, it
    drops the oldest and reports them."""
    checkpoint_every: int = 5_000
    """Env steps (over all actors) between the learner's checkpoints (replay included)."""
    max_lead: int = 200
    """Sim actors pause while the learner is this many update blocks behind the steps it holds
    (backpressure: the data never runs far ahead of the policy that collects it). A robot's
    actor never pauses: it keeps its control rate and the learner catches up."""

    def __post_init__(self) -> None:
        bad = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
               if getattr(self, f.name) < 1]  # fmt: skip
        if bad:
            raise ValueError(f"DistConfig: {', '.join(bad)}: each must be >= 1")


@dataclass(frozen=True)
class Reply:
    """The learner's answer to a batch (or a hello)."""

    acked: int
    """Steps of this actor the learner holds (the index its next step must have)."""
    saved: int
    """Of those, steps in the learner's latest checkpoint (the actor may forget them)."""
    version: int
    """Version of the newest broadcast params (fetched with ``latest()`` when due)."""
    steps: int
    """Steps the learner holds over all actors."""
    lead: int
    """Update blocks the learner is behind those steps."""


@dataclass(frozen=True)
class _Break:
    """Inbox marker: the actor's next step starts a new chain (its steps in between are
    lost, or it restarted mid-episode)."""

    actor_id: int


@dataclass
class _ActorRecord:
    name: str
    acked: int = 0
    saved: int = 0
    dropped: int = 0
    episodes: int = 0
    where: str = ""  # the process that registered last ("" when restored from a checkpoint)


class LearnerService:
    """A :class:`Learner` that takes batches from registered actors (see the module doc).

    Args:
        sac: the agent.
        loop: loop settings (warm-up, replay, offline share...).
        dist: batching, broadcast and checkpoint settings.
        seed: the learner's seed.
        demos: demonstration rows.
        folder: where checkpoints (``checkpoints/latest``) and events go; a folder that holds a
            checkpoint is resumed from it. None: nothing is saved.
        put: stores params for the actors (``ray.put``; in one process: the identity).
        signature: the env's observation and action spaces (checked at registration).
    """

    def __init__(
        self,
        sac: SAC,
        loop: LoopConfig,
        dist: DistConfig,
        *,
        seed: int,
        demos: Rows | None = None,
        folder: Path | None = None,
        put: Callable[[Any], Any] = lambda x: x,
        signature: str = "",
    ) -> None:
        self.sac, self.loop, self.dist, self.seed = sac, loop, dist, seed
        self.folder, self.put, self.signature = folder, put, signature
        self.learner = Learner(sac, loop, seed=seed, demos=demos)
        self.actors: dict[int, _ActorRecord] = {}
        self._parked: dict[int, dict[int, tuple[Any, ...]]] = {}  # batches ahead of their turn
        self.episodes: list[dict[str, Any]] = []  # finished episodes, taken by the driver
        self.blocks_done = 0
        self.next_checkpoint = dist.checkpoint_every
        self.saved_steps = 0
        self._lock = threading.Lock()  # actors' records and the inbox order
        self._inbox: queue.SimpleQueue[Step | _Break] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        restored = self._restore()
        self._broadcast()
        self.event(("learner started" if not restored else
                    f"learner restored from its checkpoint at {self.learner.steps} steps")
                   + f" ({_where()})")  # fmt: skip
        if folder is not None and not restored:
            self.save()  # a learner that dies before its first checkpoint restarts from here
        self.learner.compile()  # before any data: the first block does not stall the actors
        self._thread = threading.Thread(target=self._learn, name="handrail-learner", daemon=True)
        self._thread.start()

    # -- actors -------------------------------------------------------------------------------
    def register(self, name: str, signature: str, where: str = "") -> tuple[int, int]:
        """``(actor id, index of its next step)`` for an actor starting; an actor that comes
        back under its name (restarted) keeps its id, and its unfinished episode is dropped
        (never sampled). Raises if its env differs from the learner's."""
        if self.signature and signature != self.signature:
            raise ValueError(
                f"actor {name!r}: its env's spaces differ from the learner's ({signature} vs "
                f"{self.signature}); start the actor with the learner's task and options"
            )
        with self._lock:
            known = [i for i, r in self.actors.items() if r.name == name]
            if known:
                actor_id = known[0]
                self._inbox.put(_Break(actor_id))
            else:
                actor_id = len(self.actors)
                if actor_id >= self.learner.layout.max_actors:
                    raise ValueError(
                        f"actor {name!r}: the learner takes at most "
                        f"{self.learner.layout.max_actors} actors"
                    )
                self.actors[actor_id] = _ActorRecord(name)
            self.actors[actor_id].where = where
            acked = self.actors[actor_id].acked
        place = f" ({where})" if where else ""
        self.event(f"actor {name} {'restarted' if known else 'registered'} as {actor_id}{place}")
        return actor_id, acked

    def hello(self, actor_id: int) -> Reply:
        """Where the learner stands for this actor (after a reconnect: what to send again)."""
        with self._lock:
            if actor_id not in self.actors:  # restored from a checkpoint older than the actor
                self.actors[actor_id] = _ActorRecord(f"actor-{actor_id}")
            return self._reply(self.actors[actor_id])

    def add(self, actor_id: int, start: int, steps: Sequence[Step],
            episodes: Sequence[dict[str, Any]] = (), after: int = -1) -> Reply:  # fmt: skip
        """Take a batch whose first step is the actor's ``start``-th and that follows its batch
        ending at ``after`` (-1: follows whatever the learner holds, after a reconnect).

        Batches may arrive out of order (the learner serves calls in threads): one whose
        predecessor has not arrived waits for it. Steps already held are skipped; a gap (steps
        the actor dropped, or lost with a learner that restarted) is counted as dropped and
        starts a new chain.
        """
        if self._error is not None:
            raise RuntimeError(f"the learner's update thread failed: {self._error!r}")
        with self._lock:
            record = self.actors.setdefault(actor_id, _ActorRecord(f"actor-{actor_id}"))
            parked = self._parked.setdefault(actor_id, {})
            parked[after] = (start, list(steps), list(episodes))
            while True:
                ready = [a for a in parked if a == -1 or a <= record.acked]
                if not ready:
                    break
                self._accept(actor_id, record, *parked.pop(min(ready)))
            return self._reply(record)

    def _accept(self, actor_id: int, record: _ActorRecord, start: int, steps: list[Step],
                episodes: list[dict[str, Any]]) -> None:  # fmt: skip
        skip = max(record.acked - start, 0)
        fresh = steps[skip:]
        if fresh and start > record.acked:  # a gap: steps that never reached the replay
            record.dropped += start - record.acked
            self._inbox.put(_Break(actor_id))
        for step in fresh:
            self._inbox.put(step)
        if fresh:
            record.acked = start + len(steps)
            record.episodes += sum(1 for s in fresh if s.done)
        self.episodes.extend(episodes)

    def _reply(self, record: _ActorRecord) -> Reply:
        version = self._published[0]
        steps = self.learner.steps + self._inbox.qsize()
        lead = steps - max(self.loop.warmup_steps, 1) + 1 - self.blocks_done
        return Reply(record.acked, record.saved, version, steps, max(lead, 0))

    # -- the driver's view --------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters for the driver's progress bar and the run's metrics."""
        if self._error is not None:
            raise RuntimeError(f"the learner's update thread failed: {self._error!r}")
        with self._lock:
            return {
                "steps": self.learner.steps + self._inbox.qsize(),
                "updates": self.learner.updates,
                "version": self._published[0],
                "blocks": self.blocks_done,
                "caught_up": not self.learner.ready or self.blocks_done >= self._owed(),
                "saved_steps": self.saved_steps,
                "dropped": sum(r.dropped for r in self.actors.values()),
                "actors": {i: dataclasses.asdict(r) for i, r in self.actors.items()},
                "metrics": self.learner.last_metrics,
            }

    def take_episodes(self) -> list[dict[str, Any]]:
        """The episodes actors finished since the last call."""
        with self._lock:
            out, self.episodes = self.episodes, []
        return out

    def latest(self) -> tuple[int, list[Any], float]:
        """``(version, [reference], published_s)`` of the newest broadcast params (the
        reference in a list, so that Ray hands it over unresolved: each actor fetches the one
        stored copy)."""
        version, ref, published = self._published
        return version, [ref], published

    def agent(self) -> tuple[SAC, DistConfig, int]:
        """The agent, the batching settings and the warm-up steps, for actors that join."""
        return self.sac, self.dist, self.loop.warmup_steps

    def save_best(self, extra: dict[str, Any]) -> None:
        """Write the current policy as the run's best checkpoint (``checkpoints/best``)."""
        if self.folder is None:
            return
        with self.learner.lock:
            state = self.learner.state
        write_checkpoint_dir(self.folder / "checkpoints" / "best", lambda path: save_checkpoint(
            path, state, self.sac.config, self.sac.obs_spec, self.sac.action_spec, extra=extra,
            pairs=self.sac.pairs))  # fmt: skip

    # -- updating -----------------------------------------------------------------------------
    def _take(self, item: Step | _Break) -> None:
        """Hand one inbox item to the learner (under its lock)."""
        if isinstance(item, _Break):  # what is staged belongs to the old chain
            self.learner.flush()
            self.learner.break_chain(item.actor_id)
        else:
            self.learner.add(item)

    def _drain(self) -> None:
        with self.learner.lock:
            while not self._inbox.empty():
                self._take(self._inbox.get_nowait())

    def _owed(self) -> int:
        """Update blocks the steps held so far are owed (one per step after warm-up)."""
        return self.learner.steps - max(self.loop.warmup_steps, 1) + 1

    def _learn(self) -> None:
        learner = self.learner
        try:
            while not self._stop.is_set():
                self._drain()
                if self.folder is not None and learner.steps >= self.next_checkpoint:
                    self.save()
                    continue
                if learner.ready and self.blocks_done < self._owed():
                    learner.update()
                    self.blocks_done += 1
                    if self.blocks_done % self.dist.broadcast_blocks == 0:
                        self._broadcast()
                    continue
                try:  # caught up: wait for data rather than train the same buffer more
                    item = self._inbox.get(timeout=0.02)
                except queue.Empty:
                    continue
                with learner.lock:
                    self._take(item)
        except BaseException as err:  # reported to the actors and the driver
            self._error = err
            self.event(f"learner update thread failed: {err!r}")

    def _broadcast(self) -> None:
        with self.learner.lock:
            version, params = self.learner.latest()
            self._published = (version, self.put(params), time.time())

    def wait_for(self, steps: int, timeout_s: float = 60.0) -> bool:
        """Block until the learner has inserted ``steps`` steps and run the blocks they are owed
        (tests and the driver's end of run)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            caught_up = not self.learner.ready or self.blocks_done >= self._owed()
            if self.learner.steps >= steps and caught_up:
                return True
            if self._error is not None:
                raise RuntimeError(f"the learner's update thread failed: {self._error!r}")
            time.sleep(0.01)
        return False

    def close(self) -> None:
        """Stop the update thread."""
        self._stop.set()
        self._thread.join(timeout=30)

    # -- checkpoints --------------------------------------------------------------------------
    @property
    def latest_dir(self) -> Path:
        """The learner's latest checkpoint (a symlink, see ``write_checkpoint_dir``)."""
        assert self.folder is not None
        return self.folder / "checkpoints" / "latest"

    def save(self) -> None:
        """Checkpoint the learner (state, replay, counters, acknowledgements) atomically; the
        actors learn from the next reply which of their steps it holds."""
        if self.folder is None:
            return
        with self.learner.lock, self._lock:  # no batch comes in until it is written
            self._drain()  # what was acknowledged is what is saved
            self.learner.flush()
            counters = {"seed": self.seed, "learner": self.learner.counters(),
                        "blocks_done": self.blocks_done,
                        "actors": {str(i): dataclasses.asdict(r)
                                   for i, r in self.actors.items()}}  # fmt: skip

            write_checkpoint_dir(
                self.latest_dir, lambda path: self.learner.save_files(path, counters, LEARNER_FILE)
            )
            self.saved_steps = self.learner.steps
            self.next_checkpoint = self.learner.steps + self.dist.checkpoint_every
            for record in self.actors.values():
                record.saved = record.acked

    def _restore(self) -> bool:
        if self.folder is None or not (self.latest_dir / LEARNER_FILE).is_file():
            return False
        state, extra = load_checkpoint(self.latest_dir / "learner", self.sac)
        counters = read_json(self.latest_dir / LEARNER_FILE)
        if counters != extra:
            raise ValueError(f"{self.latest_dir}: its files are not from one save; start afresh")
        arrays = replay_io.load_arrays(self.latest_dir / REPLAY_FILE)
        self.learner.restore(state, arrays, counters["learner"])  # fmt: skip
        self.blocks_done = counters["blocks_done"]
        self.actors = {int(i): _ActorRecord(**r) for i, r in counters["actors"].items()}
        for record in self.actors.values():
            record.saved, record.where = record.acked, ""
        self.saved_steps = self.learner.steps
        self.next_checkpoint = self.learner.steps + self.dist.checkpoint_every
        return True

    def event(self, text: str) -> None:
        """One line in the run folder's event log (and nowhere else when there is none)."""
        if self.folder is not None:
            log_event(self.folder, text)


def log_event(folder: Path, text: str) -> None:
    """Append one line to ``folder``'s event log (the learner and the driver both write it)."""
    with open(Path(folder) / EVENTS_FILE, "a") as f:
        f.write(json.dumps({"time": time.time(), "event": text}) + "\n")


class RemoteParams:
    """An actor's :class:`~handrail.control.step.ParameterSource`: the newest broadcast params
    it has fetched (``fetch`` turns a reference into params: ``ray.get``)."""

    def __init__(self, fetch: Callable[[Any], Any]) -> None:
        self.fetch = fetch
        self.version = -1
        self.params: Any = None
        self.published_s = 0.0

    def latest(self) -> tuple[int, Any]:
        return self.version, self.params


@dataclass
class SenderStats:
    """What an actor's sender counted (reported by ``handrail actor`` and the tests)."""

    taken: int = 0
    """Steps the actor took and handed to the sender."""
    dropped: int = 0
    """Steps dropped unsent because the buffer was full (the learner was away too long); the
    learner counts these and any it lost in a restart that the actor no longer held."""
    resent: int = 0
    """Steps sent again after the learner restarted from a checkpoint."""
    reconnects: int = 0
    """Times the learner was found back after a failure."""
    staleness: list[tuple[int, float]] = field(default_factory=list)
    """At each params fetch: (versions the acting params were behind the newest broadcast, s
    between their broadcasts)."""


class StepSender:
    """An env actor's :class:`~handrail.control.step.TransitionSink` towards a remote learner.

    Args:
        call: ``call(method, *args) -> future`` on the learner (Ray: ``handle.method.remote``).
        ready: ``ready(futures) -> done futures`` without waiting (Ray: ``ray.wait(timeout=0)``).
        result: a done future's value, raising the learner's failure (Ray: ``ray.get``).
        params: where fetched params go.
        actor_id: this actor's id at the learner.
        dist: batching settings.
    """

    def __init__(self, call: Callable[..., Any], ready: Callable[[list[Any]], list[Any]],
                 result: Callable[[Any], Any], params: RemoteParams, actor_id: int,
                 dist: DistConfig, start: int = 0) -> None:  # fmt: skip
        self.call, self.ready, self.result = call, ready, result
        self.params, self.actor_id, self.dist = params, actor_id, dist
        self.buffer: deque[Step] = deque()  # steps from index `base` on, not yet saved
        self.base = start  # index of buffer[0]
        self.sent = start  # steps up to this index have been sent
        self.after = start  # where the last batch sent ended (-1: the learner resyncs)
        self.in_flight: list[Any] = []
        self.episodes: list[dict[str, Any]] = []
        self.stats = SenderStats()
        self.connected = True
        self.learner_steps = 0
        self.learner_lead = 0
        self._latest: Reply | None = None
        self._since_params = 0
        self._retry_at = 0.0
        self._hello: Any = None
        self._status: Any = None
        self._fetching: Any = None

    def add(self, step: Step) -> None:
        """Keep a step; send a batch when one is full (never waits for the learner)."""
        self.buffer.append(dataclasses.replace(step, actor_id=self.actor_id))
        self.stats.taken += 1
        while len(self.buffer) > self.dist.buffer_steps:
            self.buffer.popleft()
            if self.base >= self.sent:  # never sent: gone
                self.stats.dropped += 1
                self.sent += 1
            self.base += 1
        self._since_params += 1
        self.pump(force=step.done)

    def episode(self, stats: EpisodeStats) -> None:
        """Report a finished episode with the next batch."""
        self.episodes.append({"return": stats.return_, "length": stats.length,
                              "success": stats.success, "human_steps": stats.human_steps})  # fmt: skip

    def pump(self, force: bool = False) -> None:
        """Collect replies, reconnect after a failure, and send what is due."""
        for future in self.ready(self.in_flight):
            if future not in self.in_flight:  # cleared by a failure of an earlier one
                break
            self.in_flight.remove(future)
            try:
                self._adopt(self.result(future))
            except Exception:  # the learner failed or is restarting
                self._lost()
        if not self.connected:
            self._reconnect()
            if not self.connected:
                return
        unsent = self.base + len(self.buffer) - self.sent
        due = unsent >= self.dist.send_every or (force and (unsent > 0 or bool(self.episodes)))
        if due and len(self.in_flight) < self.dist.max_in_flight:
            first = self.sent - self.base
            batch = [self.buffer[i] for i in range(first, len(self.buffer))]
            episodes, self.episodes = self.episodes, []
            self.in_flight.append(self.call("add", self.actor_id, self.sent, batch, episodes,
                                            self.after))  # fmt: skip
            self.sent += len(batch)
            self.after = self.sent
        self._refresh()

    def poll(self) -> None:
        """Refresh the learner's counters without sending (a paused actor has no batch in
        flight to bring them back)."""
        self.pump()
        if not self.connected:
            return
        if self._status is None:
            self._status = self.call("hello", self.actor_id)
        elif self.ready([self._status]):
            future, self._status = self._status, None
            try:
                self._adopt(self.result(future))
            except Exception:
                self._lost()

    def _adopt(self, reply: Reply) -> None:
        self._latest = reply
        self.learner_steps, self.learner_lead = reply.steps, reply.lead
        if reply.saved > self.base:  # the learner's checkpoint holds these: forget them
            forget = min(reply.saved - self.base, len(self.buffer), max(self.sent - self.base, 0))
            for _ in range(forget):
                self.buffer.popleft()
            self.base += forget

    def _refresh(self) -> None:
        """Fetch the newest broadcast params when due (none yet, or ``params_every`` steps
        since the last fetch and a newer version out): ask for its reference, then take it."""
        params = self.params
        if self._fetching is None:
            latest = self._latest
            newer = latest is not None and latest.version != params.version
            if params.params is not None and not (
                newer and self._since_params >= self.dist.params_every
            ):
                return
            self._fetching = self.call("latest")
        if not self.ready([self._fetching]):
            return
        future, self._fetching = self._fetching, None
        try:
            version, refs, published = self.result(future)
            fetched = params.fetch(refs[0])
        except Exception:
            self._lost()
            return
        held = params.params is not None
        self.stats.staleness.append(
            (
                version - params.version if held else 0,
                published - params.published_s if held else 0.0,
            )
        )
        params.params, params.version, params.published_s = fetched, version, published
        self._since_params = 0

    def _lost(self) -> None:
        if self.connected:
            self.connected = False
            self.in_flight.clear()
            self._hello = self._status = self._fetching = None
            self._retry_at = 0.0

    def _reconnect(self) -> None:
        """Ask the learner where it stands (once a second, never waiting); once it answers,
        send again whatever it does not hold."""
        if self._hello is None:
            if time.monotonic() < self._retry_at:
                return
            self._retry_at = time.monotonic() + 1.0
            try:
                self._hello = self.call("hello", self.actor_id)
            except Exception:
                return
        if not self.ready([self._hello]):
            return
        hello, self._hello = self._hello, None
        try:
            reply = self.result(hello)
        except Exception:
            return
        if reply.acked < self.base:  # lost with the learner, and no longer here: a gap it counts
            self.sent = self.base
        else:
            self.stats.resent += max(self.sent - reply.acked, 0)
            self.sent = reply.acked
        self.connected = True
        self.after = -1  # the first batch sent again takes up wherever the learner stands
        self.stats.reconnects += 1
        self._adopt(reply)

    def drain(self, timeout_s: float = 30.0) -> bool:
        """Send everything and wait for the acknowledgements (at the end of a run)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.pump(force=True)
            done = self.sent == self.base + len(self.buffer) and not self.episodes
            if self.connected and not self.in_flight and done:
                return True
            time.sleep(0.01)
        return False


def _where() -> str:
    """This process, as the event log names it."""
    import socket

    return f"pid {os.getpid()} on {socket.gethostname()}"


def env_signature(env: Any) -> str:
    """The env's observation and action spaces, as a learner and its actors compare them."""
    return f"obs={env.observation_space}, action={env.action_space}"


class ActorService:
    """An env actor for a remote learner: the env loop, its sender and its params.

    Args:
        env: the env (made on this process or machine).
        sac: the agent (for ``make_policy``).
        loop: loop settings (the actor's share of warm-up: ``warmup_steps``).
        dist: batching settings.
        learner: the link to the learner (see :class:`StepSender`'s ``call``/``ready``/
            ``result``) and ``fetch`` for params.
        seed: this actor's seed (its episodes are reset with ``seed + i``).
        name: how the learner's event log names it.
        success_key: info key of the success flag.
        warmup_steps: env steps of random actions before the policy acts.
        sinks: more places every step goes (a Zarr recorder...).
    """

    def __init__(self, env: Any, sac: SAC, dist: DistConfig, learner: dict[str, Any], *,
                 seed: int, name: str, success_key: str = "success", warmup_steps: int = 0,
                 sinks: Sequence[Any] = ()) -> None:  # fmt: skip
        call, result = learner["call"], learner["result"]
        actor_id, start = result(call("register", name, env_signature(env), _where()))
        self.params = RemoteParams(learner["fetch"])
        self.sender = StepSender(call, learner["ready"], result, self.params, actor_id, dist,
                                 start)  # fmt: skip
        from functools import partial

        make = partial(sac.make_policy, deterministic=False)
        self.policy = LearnedPolicy(make, self.params, sac.obs_spec, sac.action_spec, seed=seed)
        self.actor = Actor(env, self._act, seed=seed, sinks=[self.sender, *sinks],
                           warmup_steps=warmup_steps, actor_id=actor_id,
                           success_key=success_key)  # fmt: skip
        self.actor_id = actor_id

    def _act(self, obs: Any) -> np.ndarray:
        if self.params.params is None:  # no params yet: act at random, as in warm-up
            return self.actor.warmup_policy(obs)
        return self.policy(obs)

    def step(self) -> EpisodeStats | None:
        """One env step (never waits for the learner: a robot's control loop calls this)."""
        stats = self.actor.step()
        if stats is not None:
            self.sender.episode(stats)
            self.sender.pump(force=True)
        return stats

    def run(self, until_steps: int, stop: Callable[[], bool] = lambda: False) -> SenderStats:
        """A sim actor: step until the learner holds ``until_steps`` steps (over all actors) or
        ``stop()``, pausing while the learner is too far behind; then send what is left."""
        sender, max_lead = self.sender, self.sender.dist.max_lead
        while sender.learner_steps < until_steps and not stop():
            if sender.learner_lead > max_lead or not sender.connected:  # backpressure
                time.sleep(0.02)  # a learner block takes about as long on a CPU
                sender.poll()
                continue
            self.step()
        sender.drain()
        return sender.stats
