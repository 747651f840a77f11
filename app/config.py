"""What a ``handrail train`` run is: :class:`TrainConfig` and the task presets.

A run's defaults are its task's preset (:func:`preset`): ``handrail train --task T`` starts from
``preset(T)`` and every option given on the command line replaces one field of it, nested
configs included (``--sac.actor-lr 1e-4``, ``--loop.offline-ratio 0.25``). The resolved config
is saved as the run's ``config.json`` and read back by ``--resume`` and ``handrail eval``.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from handrail.app.envs import HANDRAIL_TASKS
from handrail.app.human import HumanLoopConfig
from handrail.learners.agents.sac import SACConfig
from handrail.learners.learner import LoopConfig
from handrail.sim.simulated_human import SimulatedHumanConfig


@dataclass(frozen=True)
class TrainConfig:
    """Options of ``handrail train``; defaults come from the task's preset."""

    task: str = "pick_cube"
    """A handrail task (reach, pick_cube, ...), a gymnasium id, or module:EnvId."""
    steps: int = 50_000
    """Env steps to train for (total, including warm-up and steps before a resume)."""
    seed: int = 0
    """Seed of the env, the learner, warm-up and evaluations."""
    learner: Literal["jax", "sb3", "sbx"] = "jax"
    """jax: handrail's SAC/RLPD; sb3 or sbx: that library's SAC on the same task, demos and run
    folder, for comparison (with handrail's sizes and rates unless --peer-defaults)."""
    peer_defaults: bool = False
    """With --learner sb3|sbx: keep the library's own default hyper-parameters."""
    demos: Path | None = None
    """A Zarr episode store whose successful episodes are the demonstrations."""
    expert_demos: int = 0
    """Generate this many successful demonstrations with the task's scripted expert."""
    env_kwargs: tuple[str, ...] = ()
    """KEY=VALUE keyword arguments for the env (a handrail task's config fields, or
    gymnasium.make's), e.g. reward=dense episode_steps=50; they add to the preset's."""
    ignore_obs_keys: tuple[str, ...] = ()
    """Observation keys the learner leaves out (e.g. camera images the state learner cannot use)."""
    resume: Path | None = None
    """Resume a run folder from its latest checkpoint (its config.json is reused)."""
    run_dir: Path | None = None
    """Run folder to write; default runs/<task>-<learner>-s<seed>-<time>."""
    record: Path | None = None
    """Also write every training episode into this Zarr episode store (created if missing)."""
    eval_every: int = 1_000
    """Env steps between evaluations (also saves checkpoints/latest and refreshes the plot)."""
    eval_episodes: int = 20
    """Episodes per evaluation."""
    video: bool = False
    """Record the first episode of every evaluation as an mp4 in the run's videos/."""
    success_key: str = "success"
    """Info key with the success flag (info['is_success'] is the fallback)."""
    stop_at_success: float | None = None
    """Stop early once an evaluation's success rate reaches this value (0..1)."""
    progress: bool = True
    """Show the progress bar."""
    sac_preset: Literal["task", "cpu", "rlpd", "hil_serl"] = "task"
    """Where --sac.* starts from: the task's preset, or SACConfig's cpu, rlpd (10 LayerNorm
    critics, UTD 20, 256x256) or hil_serl (2 critics, gamma 0.97) preset."""
    sac: SACConfig = field(default_factory=SACConfig.cpu)
    """The learner's algorithm settings."""
    loop: LoopConfig = field(default_factory=LoopConfig)
    """How training runs around the learner (warm-up, replay, offline share, fused/async)."""
    human: Literal["none", "keyboard", "gamepad", "spacemouse", "simulated"] = "none"
    """Who may take over while the policy trains: a person at a device, or the simulated
    person (the task's scripted expert, which takes over when the policy goes off course)."""
    hil: HumanLoopConfig = field(default_factory=HumanLoopConfig)
    """Human-in-the-loop settings (device mapping, engage/release rules, the simulated person)."""
    residual_on: str | None = None
    """Residual RL: learn a bounded correction on top of this frozen base policy: expert,
    bc:PATH (handrail bc), sb3:PATH (an SB3 .zip or run), run:PATH (a handrail run), or
    module:attr (a Python callable). Starts from the task's residual preset (--sac.*)."""
    residual_enable_steps: int = 0
    """Residual RL: switch the correction on progressively over this many env steps (each
    step runs the base alone with probability 1 - steps/N; Policy Decorator). 0: at once."""

    def __post_init__(self) -> None:
        bad = [
            f"--{name.replace('_', '-')} must be >= {low}, got {getattr(self, name)}"
            for name, low in (
                ("steps", 1),
                ("eval_every", 1),
                ("eval_episodes", 1),
                ("expert_demos", 0),
                ("residual_enable_steps", 0),
            )
            if getattr(self, name) < low
        ]
        if self.stop_at_success is not None and not 0 < self.stop_at_success <= 1:
            bad.append(f"--stop-at-success must be in (0, 1], got {self.stop_at_success}")
        if self.human != "none" and self.learner != "jax":
            bad.append(f"--human {self.human} needs --learner jax (peers take no interventions)")
        if self.demos is not None and self.expert_demos:
            bad.append("--demos and --expert-demos exclude each other: pick one source of demos")
        if bad:
            raise ValueError("; ".join(bad))
        parse_env_kwargs(self.env_kwargs)

    @property
    def env(self) -> dict[str, Any]:
        """The env keyword arguments as a dict (values parsed as Python literals)."""
        return parse_env_kwargs(self.env_kwargs)

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict (nested configs as dicts, paths as strings)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value = json.loads(json.dumps(dataclasses.asdict(value), default=str))  # type: ignore[arg-type]
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_json`; unknown keys are a ValueError naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"config.json has fields {unknown} this version does not know")
        values = dict(data)
        values["sac"] = SACConfig.from_json(values.get("sac", {}))
        values["loop"] = LoopConfig(**values.get("loop", {}))
        values["hil"] = HumanLoopConfig.from_json(values.get("hil", {}))
        for name in ("demos", "resume", "run_dir", "record"):
            if values.get(name) is not None:
                values[name] = Path(values[name])
        for name in ("env_kwargs", "ignore_obs_keys"):
            values[name] = tuple(values.get(name, ()))
        return cls(**values)


def parse_env_kwargs(items: tuple[str, ...]) -> dict[str, Any]:
    """``("reward=dense", "episode_steps=50")`` -> ``{"reward": "dense", "episode_steps": 50}``.

    Values are read as Python literals (numbers, booleans, tuples...) and otherwise kept as
    strings.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env-kwargs {item!r}: expected KEY=VALUE, e.g. reward=dense")
        try:
            out[key.strip()] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key.strip()] = text
    return out


def format_env_kwargs(kwargs: dict[str, Any]) -> tuple[str, ...]:
    """Inverse of :func:`parse_env_kwargs`."""
    return tuple(f"{k}={v!r}" if not isinstance(v, str) else f"{k}={v}" for k, v in kwargs.items())


# The arm tasks: sparse reward (1 on success, the episode ends there), 20 scripted demos sampled
# 50/50 with online data, n-step returns without the entropy term in the backup, the temperature
# tuned on the policy's own (online) states. Measured by `handrail bench learning` (README).
# A person's corrections (--human) are also imitated: `handrail bench hil` (README).
# pick_cube steps its actor after every critic step (actor_utd 0, as SB3/SBX do), not once
# per block as RLPD: 90% sustained from 7.0k/5.0k/5.0k env steps instead of 10.0k/8.0k/8.0k
# (3 seeds). peg_insert does too since its late entropy target: 6.0k/6.0k/6.0k instead of
# 8.0k/9.0k/7.0k (bench learning; 4 actor steps per block: 8.0k/6.0k/9.0k); before it, on every
# key, it did not help (seed 0: 34k vs 28k). reach and push keep RLPD's rule.
# pick_cube's learner does not see the cube's absolute pose (cube_from_tcp_dm says where it is
# from the gripper): steadier and faster. With 20 demos 90% sustained from 2.5k env steps on
# the mean of 5 seeds instead of 3.6k, final success 100% on every seed (bench hil's no-person
# arm; with the person 1.37k either way, so its speed-up fell from 2.59x to 1.84x); with 10
# demos from 3.0k/2.5k/4.0k instead of 4.5k/3.5k/6.5k (bench residual's SAC arm). A 10-demo BC
# base reads 85% on these keys, 64% on every key.
# pick_cube starts updating after 250 env steps, not 500 (bench hil, evaluations every 250,
# 5 seeds): with the person 90% sustained from 1.07k on the mean instead of 1.37k, as
# its corrections are learned from sooner; alone 2.4k instead of 2.5k. Its residual runs keep
# 500: with 250 the critics had seen fewer of the base's returns when the actor started, and the
# 85% base read 24-48% at the next evaluation (3 of 3 seeds; 76% with 500).
# reach's learner sees only the goal from the gripper (goal_from_tcp_dm), not the arm's state
# or the goal's absolute position: `handrail bc` on 20 demos reads 100% (50 episodes, --seed 0-2,
# two demo sets) instead of 24-28%; SAC is unchanged, 100% from 2k env steps on seeds 0-2 either
# way (every key: 88%, 100%, 0% at 1k; these keys: 100%, 6%, 0%).
# peg_insert's learner sees only where to go next (the tip-to-entry offset and the yaw turn to
# the hole), not the absolute poses: 90% sustained from 6.5-10k env steps instead of 11-18k
# (bench residual's SAC arm, 10 demos, and bench hil's no-person arm, 20 demos; 3 seeds each).
# With a person, peg_insert imitates the corrections 4x harder and penalises the policy step a
# takeover follows, and its simulated person is a patient one (stall clock from the first gain of
# progress, direction judged below 75% progress: the default, eager one took over mid-insertion):
# that person then sped it up 1.9x on the mean of 3 seeds, where with pick_cube's settings it
# never held 90% in 10k (bench hil, README). All three only act on runs with a person.
# peg_insert's temperature targets an entropy of -8 instead of -2 after 1,500 update blocks
# (about 2k env steps), with or without a person: it explores as before while it learns, then
# settles to a less random policy. With the person 90% sustained from 3.5k env steps on the mean
# of 5 seeds instead of 4.1k, alone 6.9k instead of 7.3k: 2.41x/2.10x on seeds 0-2 (mean of
# ratios / mean steps) instead of 1.89x/1.50x (bench hil). A less random policy from the start
# held what it learned but lost the speed-up (docs/hil_peg_insert.md).
# peg_insert's runs with a person keep one actor step per block (with_person): stepping it after
# every critic step made the policy alone faster (6.9k to 5.7k env steps on the mean of 5 seeds,
# bench hil) but the person slower (3.5k to 4.5k; seeds 0-2: 3.2k to 4.7k).
_SPARSE_SAC = {
    "hidden_dims": (128, 128),
    "utd": 8,
    "gamma": 0.95,
    "init_temperature": 0.05,
    "n_step": 3,
    "backup_entropy": False,
    "entropy_rows": "online",
    "intervention_bc_weight": 2.0,
}
# A task's residual-RL settings (--residual-on), on top of RESIDUAL_SAC below; measured by
# `handrail bench residual` on a 10-demo BC base (README). pick_cube: that base departs from the
# expert by 0.4-0.8 per action dimension on its own states, more than the 0.1 default can
# correct, so the correction may reach 0.5 and also imitates the demos. peg_insert: a bias of
# 0.01 (0.3 mm per step) on the base's x action takes it from 65% to 5%, so the correction stays
# small (0.1), is penalised towards zero and moves slowly (actor learning rate 1e-5).
_PICK_CUBE_RESIDUAL = {"residual_scale": 0.5, "bc_weight": 1.0}
_PEG_INSERT_RESIDUAL = {"bc_weight": 1.0, "residual_penalty": 10.0, "actor_lr": 1e-5}
# A task's `handrail bc` settings (BCConfig fields, on the task's observation keys), measured on
# 10 scripted demos (README). pick_cube: 8-action chunks, temporally ensembled, on every episode
# (one held out is a tenth of 10): 85% over 100 episodes, against 10% with BCConfig's defaults.
# peg_insert: BCConfig's defaults (one action per step) read 72-100% on its keys, chunks 22-44%.
_PICK_CUBE_BC = {"horizon": 8, "temporal_ensemble": True, "val_fraction": 0.0, "steps": 2000}
_PRESETS: dict[str, dict[str, Any]] = {
    "reach": {"steps": 15_000, "env": {"reward": "dense"},
              "sac": {**_SPARSE_SAC, "n_step": 1, "backup_entropy": True},
              "loop": {"warmup_steps": 500}, "ignore_obs_keys": ("proprio", "goal")},
    "pick_cube": {"steps": 20_000, "expert_demos": 20, "sac": {**_SPARSE_SAC, "actor_utd": 0},
                  "loop": {"warmup_steps": 250}, "env": {"episode_steps": 50},
                  "residual": {"sac": _PICK_CUBE_RESIDUAL, "loop": {"warmup_steps": 500}},
                  "ignore_obs_keys": ("object",),
                  "bc": _PICK_CUBE_BC},
    "peg_insert": {"steps": 20_000, "expert_demos": 20,
                   "sac": {**_SPARSE_SAC, "actor_utd": 0, "intervention_bc_weight": 8.0,
                           "late_target_entropy": -8.0, "late_entropy_blocks": 1500},
                   "loop": {"warmup_steps": 500, "takeover_penalty": 1.0},
                   "person": {"stall_from": "first-gain", "judge_direction_below": 0.75},
                   "with_person": {"sac": {"actor_utd": 1}},
                   "residual": {"sac": _PEG_INSERT_RESIDUAL},
                   "ignore_obs_keys": ("proprio", "peg", "hole")},
    "push": {"steps": 50_000, "expert_demos": 20, "eval_every": 2_500, "sac": _SPARSE_SAC,
             "loop": {"warmup_steps": 500}},
}  # fmt: skip
# Any other Gymnasium id: SAC with LayerNorm critics at UTD 1, sized to learn as well as
# Stable-Baselines3's defaults (256x256) at a fraction of the compute (batch 128).
_GENERIC: dict[str, Any] = {"steps": 50_000, "eval_every": 5_000, "eval_episodes": 10,
                            "sac": {"hidden_dims": (256, 256), "utd": 1}}  # fmt: skip


# Residual RL (--residual-on): a correction of at most 0.1 (normalised) on the base action, the
# actor learning slowly and only after the critics have seen the base's returns (ResFiT), with
# n-step returns. TD3 rather than SAC: a bounded correction changes Q by little, and SAC's
# entropy bonus outweighed it (on pick_cube the residual stayed near uniform noise, 3.3 nats,
# while TD3 learned). Measured by `handrail bench residual` (README).
# One actor step per update block (RLPD's rule) whatever the task's preset says: with
# pick_cube's actor_utd 0 the actor's first block took 8 Adam steps, each moving every weight
# by the full learning rate in its gradient's direction, and an 85% base read 6-10% at the
# next evaluation (3 of 3 seeds); with 1 step per block it read 74% (3 of 3), 64% at the worst.
RESIDUAL_SAC: dict[str, Any] = {"algorithm": "td3", "residual_scale": 0.1, "actor_lr": 1e-4,
                                "n_step": 3, "actor_delay_blocks": 500, "actor_utd": 1}  # fmt: skip


def preset(task: str, residual_on: str | None = None, **overrides: Any) -> TrainConfig:
    """The defaults of a task (the generic preset for a task without one), then ``overrides``.

    ``residual_on``: a base policy (see ``--residual-on``): the residual-RL defaults
    (``RESIDUAL_SAC``, then the task's own ``residual`` settings) on top of its preset. With a
    ``human`` override other than "none", the task's ``with_person`` settings go over its own
    (and under the residual's and ``overrides``).
    ``overrides`` are TrainConfig fields; ``sac`` and ``loop`` may be dicts of their fields,
    merged into the preset's.
    """
    spec = _PRESETS.get(task, _GENERIC)
    residual = spec.get("residual", {}) if residual_on is not None else {}
    person = spec.get("with_person", {}) if overrides.get("human", "none") != "none" else {}
    sac = {**spec.get("sac", {}), **person.get("sac", {}),
           **(RESIDUAL_SAC if residual_on is not None else {}), **residual.get("sac", {}),
           **overrides.pop("sac", {})}  # fmt: skip
    loop = {**spec.get("loop", {}), **residual.get("loop", {}), **overrides.pop("loop", {})}
    env = {**spec.get("env", {}), **parse_env_kwargs(tuple(overrides.pop("env_kwargs", ())))}
    nested = ("sac", "loop", "env", "person", "with_person", "residual", "bc")
    plain = {k: v for k, v in spec.items() if k not in nested}
    if "person" in spec and "hil" not in overrides:
        plain["hil"] = HumanLoopConfig(simulated=SimulatedHumanConfig(**spec["person"]))
    if overrides.get("demos") is not None and "expert_demos" not in overrides:
        plain.pop("expert_demos", None)  # a recorded store replaces the preset's expert demos
    return TrainConfig(
        task=task, sac=SACConfig.cpu(**sac), loop=LoopConfig(**loop), residual_on=residual_on,
        env_kwargs=format_env_kwargs(env), **{**plain, **overrides},
    )  # fmt: skip


def bc_preset(task: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The defaults of ``handrail bc`` on a task: BCConfig fields (none for a task without its
    own) and the observation keys to leave out, the same as ``handrail train``'s (so a base
    clones from what a residual on it, and SAC, see)."""
    return dict(_PRESETS.get(task, _GENERIC).get("bc", {})), preset(task).ignore_obs_keys


def check_task_options(config: TrainConfig) -> None:
    """Options that apply to handrail tasks only are errors on other envs; residual options
    come together (a base and a correction scale)."""
    if config.residual_on is not None and config.learner != "jax":
        raise ValueError(f"--residual-on needs --learner jax, not {config.learner}")
    if config.sac.algorithm != "sac" and config.learner != "jax":
        raise ValueError(
            f"--sac.algorithm {config.sac.algorithm} needs --learner jax: --learner "
            f"{config.learner} trains the library's SAC"
        )
    if config.residual_on is not None and config.sac.residual_scale <= 0:
        raise ValueError("--residual-on needs --sac.residual-scale > 0 (the preset's is 0.1)")
    if config.residual_on is None and config.sac.residual_scale > 0:
        raise ValueError("--sac.residual-scale > 0 needs a base policy: give --residual-on BASE")
    if config.expert_demos and config.task not in HANDRAIL_TASKS:
        raise ValueError(
            f"--expert-demos needs a handrail task {HANDRAIL_TASKS} (they have scripted "
            f"experts), got {config.task!r}; pass a recorded store with --demos"
        )


def default_run_dir(cfg: TrainConfig) -> Path:
    """``runs/<task>-<learner>-s<seed>-<YYYYmmdd-HHMMSS>`` (``:``/``/`` in ids become ``_``)."""
    name = cfg.task.replace(":", "_").replace("/", "_")
    return Path("runs") / f"{name}-{cfg.learner}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
