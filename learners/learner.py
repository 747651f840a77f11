"""The learner: takes Steps from anywhere, runs update blocks, publishes versioned params.

A :class:`Learner` owns the agent state (:class:`~handrail.learners.agents.sac.SACState`), the replay
(:mod:`handrail.learners.replay`: segments ``online``, ``demos`` and ``interventions``) and the
counters. It is a :class:`~handrail.control.step.TransitionSink` (``add(step)``) and a
:class:`~handrail.control.step.ParameterSource` (``latest() -> (version, actor params)``), so
an actor in the same process, a thread, a Ray worker or a ROS node can feed it and read from it.

Routing (HIL-SERL): every step goes to ``online``; a step a human chose also goes to
``interventions``, which is sampled together with ``demos`` as the offline half of every batch
(``LoopConfig.offline_ratio``). A run of intervened steps ends with its next observation as a
final row, so intervention segments bootstrap like truncated episodes. With
``LoopConfig.takeover_penalty`` the policy step a takeover follows is learned with a lower
reward (RLIF); with ``LoopConfig.cut_returns_at_takeover`` online n-step returns stop where who
acts changes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jax
import numpy as np

from handrail.control.step import ActedBy, Step
from handrail.learners import obs_norm, replay, replay_io
from handrail.learners.agents.losses import Batch
from handrail.learners.agents.sac import SAC, SACState
from handrail.learners.replay import Mixture, ReplayField, ReplayLayout, ReplayState, Rows
from handrail.learners.specs import ObsSpec

REPLAY_FILE = "replay.npz"
"""A checkpoint's replay (and step count)."""

ONLINE, DEMOS, INTERVENTIONS = "online", "demos", "interventions"


@dataclass(frozen=True)
class LoopConfig:
    """How training is run around the learner (the algorithm's own settings are SACConfig)."""

    warmup_steps: int = 1000
    """Env steps before the first update: uniformly random actions, or for a residual learner
    the base action plus Gaussian noise of std ``warmup_noise``."""
    warmup_noise: float = 0.1
    """Residual learners: std of the noise on the base action during warm-up (normalised)."""
    buffer_capacity: int = 1_000_000
    """Rows of the online replay (one per env step plus one per episode end)."""
    intervention_capacity: int = 100_000
    """Rows of the intervention replay (human-chosen steps)."""
    offline_ratio: float = 0.5
    """Share of every minibatch drawn from demonstrations + interventions when there are any."""
    pretrain_steps: int = 0
    """Offline-only steps (critic + BC actor) on the demonstrations before the first update."""
    max_nonfinite_updates: int = 10
    """Consecutive non-finite update blocks after which training stops with an error."""
    mode: Literal["fused", "async"] = "fused"
    """fused: one jitted call per env step (fast, one process); async: the learner updates in
    its own thread and the actor never waits for it (robots, envs slower than an update)."""
    cut_returns_at_takeover: bool = False
    """End the online rows' n-step returns where who acts changes (policy to person or back),
    bootstrapping from the policy's value there: a policy step's return then never sums the
    rewards a person's rescue earned (n-step returns are only on-policy inside one actor's run).
    The online buffer gains one row per change."""
    takeover_penalty: float = 0.0
    """Subtracted from the reward the learner sees for a policy step that a person's takeover
    follows (RLIF: a takeover says the policy's last action was bad; without it, a rescued
    episode credits the policy's drift with the person's success). The stored and recorded
    reward is unchanged. Each actor's latest step is held back one step to know what follows."""
    normalize_obs: bool = True
    """Normalise the state inputs (each column centred, one scale per key) before the networks
    see them, with statistics fitted at the first update on the demonstrations and warm-up data
    and frozen there (:mod:`handrail.learners.obs_norm`; saved in checkpoints). Off: raw."""
    relative_inputs: bool = True
    """With demonstrations, the networks also read the differences of the columns that every
    demonstration ends with at the same value although they started apart (the gripper and the
    object it lifts, an object and its goal: ``obs_norm.meeting_pairs``), found in the data."""

    def __post_init__(self) -> None:
        checks = {
            "warmup_steps": self.warmup_steps >= 0,
            "warmup_noise": self.warmup_noise >= 0.0,
            "buffer_capacity": self.buffer_capacity >= 2,
            "intervention_capacity": self.intervention_capacity >= 2,
            "offline_ratio": 0.0 <= self.offline_ratio <= 1.0,
            "pretrain_steps": self.pretrain_steps >= 0,
            "max_nonfinite_updates": self.max_nonfinite_updates >= 1,
            "mode": self.mode in ("fused", "async"),
            "takeover_penalty": self.takeover_penalty >= 0.0,
        }
        bad = [f"{name}={getattr(self, name)!r}" for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"LoopConfig: invalid {', '.join(bad)} (need warmup/pretrain/warmup_noise >= 0, "
                "capacities >= 2, offline_ratio in [0, 1], max_nonfinite_updates >= 1, mode "
                "fused|async, takeover_penalty >= 0)"
            )


def replay_layout(sac: SAC, config: LoopConfig, demo_rows: int) -> ReplayLayout:
    """The learner's replay: the flat state (and each camera's uint8 frames, stored once: the
    encoder reads them in the update), the action, and its three segments."""
    spec = sac.obs_spec
    fields = (
        ReplayField("obs", (spec.state_spec().dim,), "float32"),
        *(ReplayField(key, shape, "uint8") for key, _, shape in spec.image_slices()),
        ReplayField("action", (sac.action_spec.dim,), "float32", "step"),
    )
    segments = (
        (ONLINE, config.buffer_capacity),
        (DEMOS, max(demo_rows, 2)),
        (INTERVENTIONS, config.intervention_capacity),
    )
    return ReplayLayout(fields, segments, n_step=sac.config.n_step, gamma=sac.config.gamma)


def available_memory() -> int:
    """Bytes this machine can still give (``MemAvailable``; all of its memory where that is
    not reported)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_memory(layout: ReplayLayout, available: int | None = None) -> None:
    """Refuse, in one line naming the fix, a replay that would not fit in memory: it is
    allocated whole at the start, and camera frames make rows large (two 64x64 cameras: 24.6 kB
    a row), so the default million rows would be killed by the system, not refused."""
    available = available_memory() if available is None else available
    need = layout.total * layout.row_bytes
    if need <= 0.8 * available:
        return
    fits = int(0.8 * available // layout.row_bytes) - (layout.total - layout.capacity(0))
    raise ValueError(
        f"the replay would take {need / 1e9:.1f} GB ({layout.total:,} rows of "
        f"{layout.row_bytes:,} bytes), more than the {available / 1e9:.1f} GB this machine has "
        f"free; lower --loop.buffer-capacity (at most {max(fits, 0):,} rows fit)"
    )


def to_batch(sample: replay.Sample, layout: ReplayLayout, spec: ObsSpec) -> Batch:
    """The SAC minibatch of a replay sample (group 0 is the online group)."""
    return Batch(
        obs=spec.join(sample.obs),
        action=sample.step["action"],
        reward=sample.reward,
        discount=sample.discount,
        next_obs=spec.join(sample.next_obs),
        online=sample.group == 0,
        human=sample.segment == layout.segment(INTERVENTIONS),
    )


class Learner:
    """Replay + agent state + counters; see the module docstring.

    Attributes:
        state: the agent state.
        replay: the replay state.
        steps: env steps received.
        updates: critic steps run (``utd`` per update block).
        version: update blocks run (the version of the published params).
    """

    def __init__(
        self,
        sac: SAC,
        config: LoopConfig,
        *,
        seed: int,
        demos: Rows | None = None,
    ) -> None:
        self.sac, self.config = sac, config
        demo_rows = 0 if demos is None else len(np.asarray(demos.valid))
        self.layout = replay_layout(sac, config, demo_rows)
        check_memory(self.layout)
        batch = sac.config.batch_size
        self.mixture = Mixture.symmetric(
            batch, config.offline_ratio, (ONLINE,), (DEMOS, INTERVENTIONS)
        )
        # Pretraining draws demonstrations only (reported as group 0; its BC step uses them all).
        self.pretrain_mixture = Mixture((((DEMOS,), batch),))
        self.state: SACState = sac.init(jax.random.PRNGKey(seed))
        self.replay: ReplayState = replay.init(self.layout)
        if demos is not None:
            self.replay = replay.insert(self.layout, self.replay, self.layout.segment(DEMOS), demos)
        self.has_demos = demos is not None
        self.steps = self.updates = self.version = 0
        self.pretrained = False
        self.nonfinite_streak = 0
        self.metrics: dict[str, Any] = {}
        self.lock = threading.RLock()
        self._staged: list[Step] = []
        self._held: dict[int, Step] = {}  # each actor's latest step, with takeover_penalty
        self._first_online: dict[int, bool] = {}  # the actor's next step starts an episode
        self._in_intervention: dict[int, bool] = {}  # the actor is inside a human run

    # -- TransitionSink / ParameterSource -----------------------------------------------------
    def add(self, step: Step) -> None:
        """Stage one step; it is inserted at the next :meth:`update` (or :meth:`flush`).

        With ``takeover_penalty``, an actor's step is staged when its next step arrives (with the
        penalty if a person took over there) or at once when it ends the episode.
        """
        self.steps += 1
        penalty = self.config.takeover_penalty
        if penalty <= 0.0:
            self._staged.append(step)
            return
        held = self._held.pop(step.actor_id, None)
        if held is not None:
            if step.acted_by == ActedBy.HUMAN and held.acted_by != ActedBy.HUMAN:
                held = dataclasses.replace(held, reward=held.reward - penalty)
            self._staged.append(held)
        if step.done:
            self._staged.append(step)
        else:
            self._held[step.actor_id] = step

    def latest(self) -> tuple[int, Any]:
        """``(version, policy params)`` of the newest update block (version 0 before any): the
        actor's params and the observation normalisation (``SAC.policy_params``)."""
        return self.version, self.sac.policy_params(self.state)

    # -- inserting ----------------------------------------------------------------------------
    def rows_of(self, steps: Sequence[Step]) -> dict[str, list[dict[str, Any]]]:
        """The replay rows of some steps, per segment (see the module docstring)."""
        out: dict[str, list[dict[str, Any]]] = {ONLINE: [], INTERVENTIONS: []}
        spec, aspec = self.sac.obs_spec, self.sac.action_spec
        for step in steps:
            actor = step.actor_id
            transition = {
                **spec.split(step.obs),
                "action": aspec.from_env(step.action),
                "reward": step.reward,
                "terminated": step.terminated,
                "actor": actor,
            }
            end = {**spec.split(step.next_obs), "final": True, "actor": actor}
            human = step.acted_by == ActedBy.HUMAN
            open_run = self._in_intervention.get(actor, False)
            first = self._first_online.get(actor, True)
            if self.config.cut_returns_at_takeover and not first and human != open_run:
                # who acts changed: this observation ends the chain (a final row)
                out[ONLINE].append({**spec.split(step.obs), "final": True, "actor": actor})
                first = True
            out[ONLINE].append({**transition, "first": first})
            self._first_online[actor] = step.done
            if step.done:
                out[ONLINE].append(end)
            if open_run and not human:  # the run ended: its next observation closes it
                out[INTERVENTIONS].append({**spec.split(step.obs), "final": True, "actor": actor})
            if human:
                out[INTERVENTIONS].append({**transition, "first": not open_run})
                if step.done:
                    out[INTERVENTIONS].append(end)
            self._in_intervention[actor] = human and not step.done
        return out

    def pack(self, items: list[dict[str, Any]], size: int | None = None) -> Rows:
        """Rows from row dicts, padded with invalid rows to ``size``."""
        size = len(items) if size is None else size
        adim = self.sac.action_spec.dim
        fields = {f.name: np.zeros((size, *f.shape), f.dtype)
                  for f in self.layout.fields if f.kind == "obs"}  # fmt: skip
        action = np.zeros((size, adim), np.float32)
        reward = np.zeros(size, np.float32)
        flags = np.zeros((4, size), bool)  # terminated, final, first, valid
        actor = np.zeros(size, np.int32)
        for i, item in enumerate(items):
            for name, column in fields.items():
                column[i] = item[name]
            if "action" in item:
                action[i] = item["action"]
                reward[i] = item["reward"]
            flags[:, i] = (item.get("terminated", False), item.get("final", False),
                           item.get("first", False), True)  # fmt: skip
            actor[i] = item["actor"]
        return Rows(data={**fields, "action": action}, reward=reward, terminated=flags[0],
                    final=flags[1], first=flags[2], actor=actor, valid=flags[3])  # fmt: skip

    def take_online_rows(self) -> Rows:
        """Take the staged steps: insert their intervention rows, return their online rows.

        For a caller that inserts the online rows itself (the fused trainer does it inside its
        jitted step); :meth:`flush` inserts them at once. Blocks are padded to a power of two
        (two rows per step for the online segment, more when returns are cut at takeovers), so
        the jitted insert compiles once per block size whatever the number of steps it gets.
        """
        steps, self._staged = self._staged, []
        per_segment = self.rows_of(steps)
        rows = per_segment[ONLINE]  # up to 3 per step: a cut where who acts changes, the end
        online = self.pack(rows, max(2 * _pow2(len(steps)), _pow2(len(rows))))
        runs = per_segment[INTERVENTIONS]
        if runs:
            seg = self.layout.segment(INTERVENTIONS)
            self.replay = replay.insert(self.layout, self.replay, seg,
                                        self.pack(runs, _pow2(len(runs))))  # fmt: skip
        return online

    def flush(self) -> None:
        """Insert every staged step into the replay."""
        if not self._staged:
            return
        online = self.take_online_rows()
        self.replay = replay.insert(self.layout, self.replay, self.layout.segment(ONLINE), online)

    def break_chain(self, actor_id: int) -> None:
        """The actor's next step starts a new chain: its open one (steps lost in between, or an
        actor that restarted mid-episode) is never sampled past its last row. Flush first."""
        self._first_online[actor_id] = True
        self._in_intervention[actor_id] = False

    @property
    def pending_steps(self) -> int:
        """Steps received but not in the replay yet: staged for the next insert, or held back
        one step (``takeover_penalty``) to see whether a person takes over next."""
        return len(self._staged) + len(self._held)

    # -- updating -----------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Enough online steps for updates (warm-up done and at least one complete row)."""
        return self.steps >= max(self.config.warmup_steps, self.sac.config.n_step + 1)

    def pretrain(self) -> None:
        """The offline-only steps before the first update (once; a resumed run skips them)."""
        if self.pretrained:
            return
        if self.config.normalize_obs or self.sac.pairs:  # handrail's own inputs, always
            self.fit_obs_norm(None if self.config.normalize_obs else (obs_norm.RELATIVE_KEY,))
        self.pretrained = True
        if self.config.pretrain_steps > 0 and self.has_demos:
            # With cameras one jitted step at a time: XLA:CPU slows convolutions in a loop.
            calls, steps = ((self.config.pretrain_steps, 1) if self.sac.cameras
                            else (1, self.config.pretrain_steps))  # fmt: skip
            for _ in range(calls):
                self.state, metrics = _pretrain_jit(
                    self.sac, self.layout, self.pretrain_mixture, steps, self.state, self.replay
                )
            self.metrics = dict(metrics)

    def fit_obs_norm(self, only: tuple[str, ...] | None = None) -> None:
        """Fit the observation normalisation on every row the replay holds (demonstrations,
        warm-up, corrections) and freeze it in the agent state (see :mod:`obs_norm`); ``only``:
        of these keys alone."""
        live = replay_io.to_arrays(self.layout, self.replay)
        rows = np.concatenate([live[f"{name}/obs"] for name, _ in self.layout.segments])
        spec = self.sac.input_spec
        if spec.images:  # fitted on the state columns; the frames stay as they are
            state = obs_norm.fit(spec.state_spec(), rows, only=only)
            norm = obs_norm.identity(spec.dim)
            for part, values in state.items():
                norm[part][self.sac.obs_spec.state_columns()] = values
        else:
            norm = obs_norm.fit(spec, obs_norm.extend(rows, self.sac.pairs), only=only)
        self.state = dataclasses.replace(
            self.state, obs_norm=jax.tree_util.tree_map(jax.numpy.asarray, norm)
        )

    def compile(self) -> None:
        """Compile the update block now (its result is thrown away; nothing changes).

        The first update otherwise traces and compiles in the learner's thread, holding
        Python's GIL for seconds: an actor in the same process (a robot's control loop) would
        stall. Call this before the actor starts.
        """
        with self.lock:
            jax.block_until_ready(
                _update_jit(self.sac, self.layout, self.mixture, self.state, self.replay)
            )

    def update(self) -> dict[str, Any]:
        """Insert staged steps, then (when :attr:`ready`) run one update block and publish."""
        with self.lock:
            self.flush()
            if not self.ready:
                return {}
            self.pretrain()
            self.state, metrics = _update_jit(self.sac, self.layout, self.mixture, self.state,
                                              self.replay)  # fmt: skip
            self.after_block(metrics)
            return metrics

    def after_block(self, metrics: dict[str, Any]) -> None:
        """Count a finished update block and stop a run whose losses keep going non-finite."""
        self.metrics = metrics
        self.updates += self.sac.config.utd
        self.version += 1
        flag = float(metrics["update/nonfinite"])
        self.nonfinite_streak = self.nonfinite_streak + 1 if flag > 0 else 0
        limit = self.config.max_nonfinite_updates
        if self.nonfinite_streak >= limit:
            raise RuntimeError(
                f"{self.nonfinite_streak} consecutive update blocks had non-finite losses "
                f"(max_nonfinite_updates={limit}); each was skipped. Check the env's "
                "rewards and observations for NaN/inf, or lower the learning rates"
            )

    @property
    def last_metrics(self) -> dict[str, float]:
        """Metrics of the latest update block (or of pretraining), as floats."""
        return {k: float(v) for k, v in self.metrics.items()}

    # -- save / load --------------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
        """JSON-able counters saved with a checkpoint."""
        return {
            "steps": self.steps,
            "updates": self.updates,
            "version": self.version,
            "pretrained": self.pretrained,
            "nonfinite_streak": self.nonfinite_streak,
            "first_online": {str(k): v for k, v in self._first_online.items()},
            "in_intervention": {str(k): v for k, v in self._in_intervention.items()},
        }

    def save_files(self, path: Path, counters: dict[str, Any], counters_file: str,
                   **arrays: np.ndarray) -> None:  # fmt: skip
        """Write a checkpoint's files into ``path``: the agent (``learner/``, ``counters`` in
        its record), the replay with ``arrays`` and the step count (``replay.npz``, synced), and
        ``counters`` again as ``counters_file`` (a loader checks the two agree)."""
        from handrail.learners.checkpoint import save_checkpoint

        save_checkpoint(path / "learner", self.state, self.sac.config, self.sac.obs_spec,
                        self.sac.action_spec, extra=counters, pairs=self.sac.pairs)  # fmt: skip
        out = {**replay_io.to_arrays(self.layout, self.replay), **arrays,
               "steps": np.asarray(self.steps, np.int64)}  # fmt: skip
        with open(path / REPLAY_FILE, "wb") as f:
            np.savez(f, allow_pickle=False, **out)
            f.flush()
            os.fsync(f.fileno())
        (path / counters_file).write_text(json.dumps(counters))

    def restore(
        self, state: SACState, arrays: Mapping[str, np.ndarray], counters: dict[str, Any]
    ) -> None:
        """Adopt a saved state, replay (:func:`~handrail.learners.replay_io.to_arrays`'s
        arrays) and counters (checked by the caller, but for the replay's layout)."""
        replay_io.check_layout(self.layout, arrays)
        # The empty replay goes before the saved one is built: with cameras each is GBs.
        self.replay = None  # type: ignore[assignment]
        self.state, self.replay = state, replay_io.from_arrays(self.layout, arrays)
        self.steps, self.updates = counters["steps"], counters["updates"]
        self.version, self.pretrained = counters["version"], counters["pretrained"]
        self.nonfinite_streak = counters["nonfinite_streak"]
        self._first_online = {int(k): v for k, v in counters["first_online"].items()}
        self._in_intervention = {int(k): v for k, v in counters["in_intervention"].items()}
        self._staged, self._held = [], {}


def _pow2(n: int) -> int:
    """The smallest power of two >= max(n, 1)."""
    return 1 << max(n - 1, 0).bit_length()


# Jitted bodies live at module level with the learner as a static argument, so every Learner
# built on an equal SAC (the same specs, config and pairs) shares one compilation (tests and
# resumes build several).


def update_block(
    sac: SAC, layout: ReplayLayout, mixture: Mixture, state: SACState, replay_state: ReplayState
) -> tuple[SACState, dict[str, jax.Array]]:
    """Sample ``utd`` minibatches from the replay and run one update block on them."""
    rng, key = jax.random.split(state.rng)
    sample = replay.sample(layout, replay_state, key, mixture, (sac.config.utd,))
    return sac.update_fn(
        dataclasses.replace(state, rng=rng), to_batch(sample, layout, sac.obs_spec)
    )


_update_jit = jax.jit(update_block, static_argnums=(0, 1, 2))


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _pretrain_jit(
    sac: SAC,
    layout: ReplayLayout,
    mixture: Mixture,
    steps: int,
    state: SACState,
    replay_state: ReplayState,
) -> tuple[SACState, dict[str, jax.Array]]:
    """``steps`` offline-only steps (critic + BC actor), sampled on device."""

    def body(state: SACState, _: None) -> tuple[SACState, dict[str, jax.Array]]:
        rng, key = jax.random.split(state.rng)
        batch = to_batch(replay.sample(layout, replay_state, key, mixture), layout, sac.obs_spec)
        return sac.pretrain_step(dataclasses.replace(state, rng=rng), batch)

    if steps == 1:  # no loop around an encoder's convolutions (see SAC._scan)
        return body(state, None)
    state, metrics = jax.lax.scan(body, state, None, length=steps)
    return state, {k: v[-1] for k, v in metrics.items()}
