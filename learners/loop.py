"""Local training: an :class:`~handrail.learners.actor.Actor` and a
:class:`~handrail.learners.learner.Learner` in one process, fused or asynchronous.

:class:`Trainer` (``mode="fused"``, the default) makes one jitted call per env step after
warm-up: it inserts the step's rows, samples ``utd`` minibatches, runs the update block and
computes the policy's next action with the new params, so only the new rows go to the device
and only the action comes back. It is the same computation as the actor and the learner run
one after the other (a test checks params and actions bit for bit).

:class:`AsyncTrainer` (``mode="async"``) runs the learner in a thread of its own. The actor
never waits for an update: it acts with the newest published params and hands its steps over
a queue; the learner runs one update block per received step (the UTD ratio) when it keeps up,
fewer when it cannot. Use it on a robot (the control loop must keep its rate) or when the env
step is slower than an update block; use the fused trainer everywhere else (it is faster on a
shared CPU and exactly reproducible).

Saving: :meth:`Trainer.save_into` writes the learner checkpoint, the replay and the counters
into a folder; callers use :func:`~handrail.learners.checkpoint.write_checkpoint_dir` so the
folder appears atomically. Allowed only between episodes. Episode ``i`` is reset with
``seed + i``, so a loaded trainer continues bit for bit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import jax
import numpy as np

from handrail.control.step import BOX_KEY, Step, TransitionSink
from handrail.learners import replay, replay_io
from handrail.learners.actor import Actor, EpisodeStats, LearnedPolicy, policy_key
from handrail.learners.agents.sac import SAC, SACState
from handrail.learners.checkpoint import load_checkpoint, read_json
from handrail.learners.evaluation import run_seed
from handrail.learners.learner import REPLAY_FILE, Learner, LoopConfig, update_block
from handrail.learners.replay import Mixture, ReplayLayout, ReplayState, Rows
from handrail.learners.specs import ActionSpec

TRAINER_FILE = "trainer.json"
"""Counters of the learner and the actor, next to ``learner/`` and the replay."""


def check_env(env: Any, sac: SAC) -> None:
    """The env observes every key the learner reads, in its shape, and acts in its action space.

    Keys the learner leaves out (``ObsSpec.from_space(..., ignore=...)``) may be in the env.
    """
    space = env.observation_space
    spaces = space.spaces if isinstance(space, gym.spaces.Dict) else {BOX_KEY: space}
    problems = [
        f"{key!r}: the learner reads {shape}, the env has "
        f"{getattr(spaces.get(key), 'shape', 'no such key')}"
        for key, shape in zip(sac.obs_spec.keys, sac.obs_spec.shapes, strict=True)
        if key not in spaces or not sac.obs_spec.takes(key, tuple(spaces[key].shape or ()))
    ]
    if problems:
        raise ValueError(
            "Trainer: env observations differ from sac.obs_spec: " + "; ".join(problems)
        )
    action_spec = ActionSpec.from_space(env.action_space)
    if action_spec != sac.action_spec:
        raise ValueError(f"Trainer: env actions {action_spec} differ from sac.action_spec")


def make_learned_policy(sac: SAC, source: Any, seed: int) -> LearnedPolicy:
    """The stochastic training policy of ``sac`` over ``source`` (keys from ``seed``)."""
    make = functools.partial(sac.make_policy, deterministic=False)
    return LearnedPolicy(make, source, sac.obs_spec, sac.action_spec, seed=seed)


class Trainer:
    """Random warm-up, then one env step + one UTD block of updates per :meth:`step`.

    Args:
        env: the training env.
        sac: the agent.
        config: loop settings (warm-up, replay capacities, offline ratio, pretraining...).
        seed: seeds the env's episodes, the warm-up actions, the learner and the policy noise.
        demos: demonstration rows for the ``demos`` segment (see ``demo_data.to_rows``).
        sinks: more places every step goes (a Zarr recorder...).
        success_key: info key of the success flag.
    """

    def __init__(
        self,
        env: Any,
        sac: SAC,
        config: LoopConfig,
        *,
        seed: int,
        demos: Rows | None = None,
        sinks: Sequence[TransitionSink] = (),
        success_key: str = "success",
    ) -> None:
        check_env(env, sac)
        self.sac, self.config, self.seed = sac, config, seed
        self.learner = Learner(sac, config, seed=seed, demos=demos)
        self.policy = make_learned_policy(sac, self.learner, seed)
        self.actor = Actor(env, self._next_action, seed=run_seed(seed),
                           sinks=[self._learner_sink(), *sinks],
                           warmup_steps=config.warmup_steps, success_key=success_key)  # fmt: skip
        if sac.residual:  # warm up around the base policy, not uniformly at random
            from handrail.learners.agents.residual import BaseWarmup

            self.actor.warmup_policy = BaseWarmup(sac.action_spec, config.warmup_noise,
                                                  self.actor.rng)  # fmt: skip
        self._pending: np.ndarray | None = None

    @property
    def env_steps(self) -> int:
        """Env steps taken."""
        return self.actor.env_steps

    @property
    def episodes(self) -> int:
        """Episodes finished."""
        return self.actor.episodes

    @property
    def updates(self) -> int:
        """Gradient (critic) steps run."""
        return self.learner.updates

    @property
    def state(self) -> SACState:
        """The agent state."""
        return self.learner.state

    @property
    def last_metrics(self) -> dict[str, float]:
        """Metrics of the latest update block."""
        return self.learner.last_metrics

    def _learner_sink(self) -> TransitionSink:
        """Where the actor hands its steps for the learner: the learner itself."""
        return self.learner

    def _next_action(self, obs: Any) -> np.ndarray:
        """The actor's policy: the action the last fused call computed for ``obs``."""
        if self._pending is None:  # no fused call yet (before the learner is ready)
            return self.policy(obs)
        action, self._pending = self._pending, None
        return action

    def step(self) -> list[EpisodeStats]:
        """One env step, its replay insert and (when ready) one update block."""
        stats = self.actor.step()
        learner = self.learner
        if not learner.ready:
            learner.flush()
        else:
            if not learner.pretrained:  # the first fit sees this step's rows, as update()'s does
                learner.flush()
            learner.pretrain()
            online = learner.take_online_rows()
            obs = self.sac.obs_spec.flatten(self.actor.obs)
            learner.state, learner.replay, action, metrics = _fused_jit(
                self.sac, learner.layout, learner.mixture, learner.state, learner.replay,
                online, obs, self.policy.base_key, np.int32(self.policy.calls),
            )  # fmt: skip
            self.policy.calls += 1
            learner.after_block(metrics)
            self._pending = self.sac.action_spec.to_env(np.asarray(action))
        return [] if stats is None else [stats]

    def run(self, num_env_steps: int) -> list[EpisodeStats]:
        """Take ``num_env_steps`` steps; returns the episodes that finished."""
        out: list[EpisodeStats] = []
        for _ in range(num_env_steps):
            out += self.step()
        return out

    def edit_replay(self, edit: Callable[[ReplayLayout, ReplayState], ReplayState]) -> None:
        """Replace the replay by ``edit(layout, replay)`` once every step taken is in it (a
        learned reward's relabelling)."""
        learner = self.learner
        with learner.lock:
            learner.flush()
            learner.replay = edit(learner.layout, learner.replay)

    # -- save / resume ------------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
        """Everything besides the agent state and the replay that a resume needs."""
        return {
            "seed": self.seed,
            "learner": self.learner.counters(),
            "actor": self.actor.counters(),
            "policy_calls": self.policy.calls,
        }

    def save_into(self, path: Path) -> None:
        """Write the checkpoint files into ``path`` (between episodes only)."""
        if not self.actor.at_episode_start or self.learner.pending_steps:
            raise RuntimeError(
                "Trainer.save: call it between episodes (right after a step that ended one); "
                "mid-episode state is not saved"
            )
        pending = np.zeros(0, np.float32) if self._pending is None else self._pending
        self.learner.save_files(path, self.counters(), TRAINER_FILE, pending_action=pending)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore a saved trainer (same env, config and seed) and continue from it."""
        path = Path(path)
        state, extra = load_checkpoint(path / "learner", self.sac)
        counters = read_json(path / TRAINER_FILE)
        if counters != extra or counters["seed"] != self.seed:
            raise ValueError(
                f"{path}: the learner checkpoint and {TRAINER_FILE} disagree (or the seed differs "
                f"from {self.seed}); they are not from the same save. Resume from an intact "
                "checkpoint folder"
            )
        arrays = replay_io.load_arrays(path / REPLAY_FILE)
        if int(arrays["steps"]) != counters["learner"]["steps"]:
            raise ValueError(
                f"{path}: {REPLAY_FILE} holds {int(arrays['steps'])} env steps but the counters "
                f"say {counters['learner']['steps']}; the replay belongs to another save"
            )
        self.learner.restore(state, arrays, counters["learner"])  # fmt: skip
        self.actor.restore(counters["actor"])
        self.policy.calls = counters["policy_calls"]
        pending = arrays["pending_action"]
        self._pending = pending if pending.size else None


class _QueueSink:
    """Hands steps to the learner thread (never blocks the actor)."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Step] = queue.SimpleQueue()

    def add(self, step: Step) -> None:
        self.queue.put(step)


class AsyncTrainer(Trainer):
    """The learner updates in a background thread; the actor never waits (see module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._inbox = _QueueSink()  # before the actor is built: its learner sink
        super().__init__(*args, **kwargs)
        self.actor.policy = self.policy
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._learn, name="handrail-learner", daemon=True)
        self._thread.start()

    def _learn(self) -> None:
        """The learner thread: take the queued steps, run the blocks they are owed, else wait."""
        learner, inbox, blocks_done = self.learner, self._inbox.queue, 0
        try:
            while not self._stop.is_set():
                while not inbox.empty():
                    learner.add(inbox.get_nowait())
                with learner.lock:
                    learner.flush()
                    owed = learner.steps - max(learner.config.warmup_steps, 1) + 1
                    if learner.ready and blocks_done < owed:
                        learner.update()
                        blocks_done += 1
                        continue
                with contextlib.suppress(queue.Empty):  # caught up: wait for the next step
                    learner.add(inbox.get(timeout=0.05))
        except BaseException as err:  # surfaced in the actor's thread
            self._error = err

    def _learner_sink(self) -> TransitionSink:
        """The queue the learner thread reads (the actor never waits for the learner)."""
        return self._inbox

    def step(self) -> list[EpisodeStats]:
        """One env step with the newest params; the learner catches up in its thread."""
        if self._error is not None:
            raise RuntimeError(f"the learner thread failed: {self._error!r}") from self._error
        stats = self.actor.step()
        return [] if stats is None else [stats]

    def edit_replay(self, edit: Callable[[ReplayLayout, ReplayState], ReplayState]) -> None:
        """As the fused trainer's, with the queued steps inserted first (the learner paused)."""
        with self.learner.lock:
            while not self._inbox.queue.empty():
                self.learner.add(self._inbox.queue.get_nowait())
            super().edit_replay(edit)

    def save_into(self, path: Path) -> None:
        """Drain the queue, pause the learner and save (between episodes)."""
        while not self._inbox.queue.empty():
            self.learner.add(self._inbox.queue.get_nowait())
        with self.learner.lock:
            self.learner.flush()
            super().save_into(path)

    def close(self) -> None:
        """Stop the learner thread."""
        self._stop.set()
        self._thread.join(timeout=10)


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=4)
def _fused_jit(
    sac: SAC,
    layout: ReplayLayout,
    mixture: Mixture,
    state: SACState,
    replay_state: ReplayState,
    rows: Rows,
    obs: jax.Array,
    base_key: jax.Array,
    calls: jax.Array,
) -> tuple[SACState, ReplayState, jax.Array, dict[str, jax.Array]]:
    """Insert rows, run one update block, act on ``obs`` with the new params."""
    replay_state = replay.insert_fn(layout, replay_state, 0, rows)
    state, metrics = update_block(sac, layout, mixture, state, replay_state)
    action = sac.act_fn(sac.policy_params(state), obs, policy_key(base_key, calls), False)
    return state, replay_state, action, metrics
