"""What a ``handrail train`` run is: :class:`TrainConfig`, resolved from layers of presets.

:func:`resolve` stacks the presets of :mod:`handrail.app.presets` (the task's, a named SAC
preset, a person's, a residual's) under the command line and records which layer set each
setting: ``handrail train --task T`` starts from them and every option given on the command line
replaces one field, nested configs included (``--sac.actor-lr 1e-4``, ``--loop.offline-ratio
0.25``). The resolved config is saved as the run's ``config.json`` and read back by
``--resume`` and ``handrail eval``; its layers beside it (:mod:`handrail.app.provenance`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from handrail.app.envs import HANDRAIL_TASKS, parse_env_kwargs
from handrail.app.human import HumanLoopConfig
from handrail.app.presets import (
    GENERIC,
    MANIPULATION,
    PIXELS,
    RESIDUAL_SAC,
    SAC_PRESETS,
    TASK_PRESETS,
    Layer,
)
from handrail.learners.agents.learned_reward import CLASSIFIER_PREFIX
from handrail.learners.agents.sac import SACConfig
from handrail.learners.distributed.protocol import DistConfig
from handrail.learners.learner import LoopConfig

__all__ = ["LAYERS", "CorrectionConfig", "Settings", "TrainConfig", "bc_preset",
           "check_task_options", "default_run_dir", "format_env_kwargs", "parse_env_kwargs",
           "preset", "resolve", "settings_of"]  # fmt: skip


@dataclass(frozen=True)
class CorrectionConfig:
    """A person who checks the episodes a ``--reward classifier:`` ended and marks the false
    ones (HIL-SERL's repeated labelling); in simulation the task's own success flag is the
    person."""

    episodes: int = 0
    """Marked false positives at most, each a labelled failed episode: it joins the
    classifier's training frames, the classifier is retrained (its threshold on the same
    held-out episodes), the replay's rewards and ends are relabelled by it, and the run goes
    on with it. 0: the classifier stays as it was given."""
    every: int = 1000
    """Env steps between two corrections at least: the person looks now and then, not at
    every episode (the first false positives come before the policy acts with intent)."""

    def __post_init__(self) -> None:
        if self.episodes < 0 or self.every < 1:
            raise ValueError(f"--corrections.episodes must be >= 0 and --corrections.every >= "
                             f"1, got {self.episodes} and {self.every}")  # fmt: skip


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
    """A named SAC preset over the task's --sac.* settings (its sizes and rates; the task's
    other settings, a person's and a residual's stay): cpu (2 critics, 128x128, UTD 4), rlpd
    (10 LayerNorm critics, UTD 20, 256x256) or hil_serl (2 critics, gamma 0.97); task: none."""
    sac: SACConfig = field(default_factory=SACConfig.cpu)
    """The learner's algorithm settings."""
    loop: LoopConfig = field(default_factory=LoopConfig)
    """How training runs around the learner (warm-up, replay, offline share, fused/async)."""
    human: Literal["none", "keyboard", "gamepad", "spacemouse", "simulated"] = "none"
    """Who may take over while the policy trains: a person at a device, or the simulated
    person (the task's scripted expert, which takes over when the policy goes off course)."""
    hil: HumanLoopConfig = field(default_factory=HumanLoopConfig)
    """Human-in-the-loop settings (device mapping, engage/release rules, the simulated person)."""
    reward: str = "task"
    """Where the reward comes from: task (the env's own), or classifier:PATH, a success
    classifier (``handrail reward train``) on the env's camera frames: reward 1 and the
    episode's end where it fires (a handrail task then renders the classifier's cameras and
    leaves the ending to it); the run reports its false positives and negatives against the
    task's own success where the env reports one."""
    corrections: CorrectionConfig = field(default_factory=CorrectionConfig)
    """With --reward classifier:PATH: a person's corrections of its false positives."""
    encoder: Path | None = None
    """A frozen image encoder (``handrail encoder train``) the policy sees the cameras
    through: they become one feature key, ``camera_features``, beside the state keys (a handrail
    task renders the encoder's cameras at its frames' size; leave out object poses with
    --ignore-obs-keys to learn from cameras and proprioception alone)."""
    pixels: bool = False
    """Learn from the env's camera keys end to end: each camera through an encoder of the
    agent's own, trained by the critics' loss with random shifts (DrQ, RLPD; ``--sac.image-*``),
    its uint8 frames stored once in the replay. A handrail task renders the cameras of
    ``--env-kwargs cameras=('front','wrist') image_size=64``. Needs a GPU to be quick; on a CPU
    ``--encoder`` (frozen) is the faster path. handrail's SAC only, local or ``--actors``
    (not --encoder, --learner sb3|sbx); with --residual-on the base sees the env's
    observation and the residual the cameras, the state and the base's action."""
    pixels_size: int | None = None
    """With --pixels: the learner reads every camera at this size (square), each frame
    resized once where it enters (the env loop, the demos, eval, a policy loaded from the
    run), never in the update; None: at the size the env gives."""
    residual_on: str | None = None
    """Residual RL: learn a bounded correction on top of this frozen base policy: expert,
    bc:PATH (handrail bc), sb3:PATH (an SB3 .zip or run), run:PATH (a handrail run), or
    module:attr (a Python callable). Starts from the task's residual preset (--sac.*)."""
    residual_enable_steps: int = 0
    """Residual RL: switch the correction on progressively over this many env steps (each
    step runs the base alone with probability 1 - steps/N; Policy Decorator). 0: at once."""
    actors: int = 0
    """Env actors on Ray (each its own process: ``pip install 'handrail[ray]'``), all feeding
    one learner; 0: everything in this process, without Ray (the default, fastest on one CPU)."""
    ray_address: str | None = None
    """With --actors: join the Ray cluster at HOST:PORT instead of starting one (loopback)."""
    dist: DistConfig = field(default_factory=DistConfig)
    """With --actors: batching, params broadcast and learner checkpoints (see
    docs/distributed.md)."""

    def __post_init__(self) -> None:
        bad = [
            f"--{name.replace('_', '-')} must be >= {low}, got {getattr(self, name)}"
            for name, low in (
                ("steps", 1),
                ("eval_every", 1),
                ("eval_episodes", 1),
                ("expert_demos", 0),
                ("residual_enable_steps", 0),
                ("actors", 0),
            )
            if getattr(self, name) < low
        ]
        if self.stop_at_success is not None and not 0 < self.stop_at_success <= 1:
            bad.append(f"--stop-at-success must be in (0, 1], got {self.stop_at_success}")
        if self.human != "none" and self.learner != "jax":
            bad.append(f"--human {self.human} needs --learner jax (peers take no interventions)")
        if self.reward != "task" and not (
            self.reward.startswith(CLASSIFIER_PREFIX)
            and self.reward.removeprefix(CLASSIFIER_PREFIX)
        ):
            bad.append(f"--reward {self.reward!r}: give task, or classifier:PATH (a folder "
                       "written by handrail reward train)")  # fmt: skip
        if self.corrections.episodes and self.reward == "task":
            bad.append("--corrections.episodes corrects a learned reward: give --reward "
                       "classifier:PATH too")  # fmt: skip
        if self.corrections.episodes and self.learner != "jax":
            bad.append(f"--corrections.episodes needs --learner jax (it relabels handrail's "
                       f"replay), not {self.learner}")  # fmt: skip
        if self.demos is not None and self.expert_demos:
            bad.append("--demos and --expert-demos exclude each other: pick one source of demos")
        if bad:
            raise ValueError("; ".join(bad))
        parse_env_kwargs(self.env_kwargs)

    @property
    def env(self) -> dict[str, Any]:
        """The env keyword arguments as a dict (values parsed by the task config's field types
        on a handrail task, as Python literals on others)."""
        return parse_env_kwargs(self.env_kwargs, self.task)

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
        values["dist"] = DistConfig(**values.get("dist", {}))
        values["corrections"] = CorrectionConfig(**values.get("corrections", {}))
        for name in ("demos", "resume", "run_dir", "record", "encoder"):
            if values.get(name) is not None:
                values[name] = Path(values[name])
        for name in ("env_kwargs", "ignore_obs_keys"):
            values[name] = tuple(values.get(name, ()))
        return cls(**values)


def format_env_kwargs(kwargs: dict[str, Any]) -> tuple[str, ...]:
    """Inverse of :func:`parse_env_kwargs`."""
    return tuple(f"{k}={v!r}" if not isinstance(v, str) else f"{k}={v}" for k, v in kwargs.items())


@dataclass(frozen=True)
class Settings:
    """A resolved TrainConfig and, for each of its settings, the layer that set it."""

    config: TrainConfig
    """The resolved config."""
    values: dict[str, Any]
    """Every setting by dotted path (``steps``, ``sac.utd``, ``env.episode_steps``,
    ``hil.simulated.stall_from``...), in the config's field order."""
    layers: dict[str, str]
    """The layer that set each setting of ``values`` (see :data:`LAYERS`)."""
    applied: tuple[str, ...]
    """The layers that set anything, lowest first."""

    @property
    def preset(self) -> str:
        """The preset in words and why: ``task pick_cube``, ``manipulation (no preset for
        <task>; ...)`` or ``generic (no preset for <task>; ...)``, then the layers above it that
        apply (``+ pixels``, ``+ with_person``, ``+ residual``...)."""
        task, config = self.config.task, self.config
        words = f"task {task}"
        if task not in TASK_PRESETS:
            kind, why = base_preset(task, config.demos is not None, config.success_key)[::2]
            words = f"{kind} (no preset for {task}; {why})"
        above = [name for name in self.applied if name.startswith("sac-preset:")
                 or name in ("pixels", "with_person", "residual", "task residual")]  # fmt: skip
        return " + ".join([words, *above])


LAYERS: tuple[str, ...] = ("default", "cpu", "task:<name> | manipulation | generic", "pixels",
                           "sac-preset:<name>", "with_person", "residual", "task residual",
                           "command line")  # fmt: skip
"""The layers a setting can come from, lowest first (each one over those before it)."""


def resolve(task: str, *, residual_on: str | None = None, human: str = "none",
            sac_preset: str = "task", overrides: Mapping[str, Any] | None = None) -> Settings:  # fmt: skip
    """The TrainConfig of a task, and the layer that set each of its settings.

    Layers, lowest first: ``default`` (the config dataclasses' own), ``cpu`` (SACConfig.cpu,
    the learner a run starts from), the task's preset (``task:<name>``, ``generic`` for a task
    without one), ``pixels`` (:data:`~handrail.app.presets.PIXELS`, with ``pixels``), the
    named SAC preset ``sac-preset:<name>`` (unless ``sac_preset`` is "task"), the task's
    ``with_person`` settings (``human`` other than "none"), ``residual``
    (:data:`~handrail.app.presets.RESIDUAL_SAC`) and the task's own ``task residual`` settings
    (both with ``residual_on``), then ``command line``: ``overrides``, and ``task``,
    ``residual_on``, ``human`` and ``sac_preset`` where they are not TrainConfig's defaults.

    Args:
        overrides: settings by dotted path (``"sac.utd": 3``) or TrainConfig field: ``sac``,
            ``loop`` and ``hil`` may be dicts of their fields (merged into the preset's) or
            configs; ``env_kwargs`` KEY=VALUE items add to the preset's, parsed by the task
            config's field types. A recorded store (``demos``) replaces the preset's
            ``expert_demos`` unless those are given too.

    Raises:
        ValueError: An unknown ``sac_preset`` or setting, or a bad ``env_kwargs`` item.
    """
    if sac_preset not in ("task", *SAC_PRESETS):
        raise ValueError(f"--sac-preset {sac_preset!r}: choose task, {', '.join(SAC_PRESETS)}")
    default = _flatten(TrainConfig(sac=SACConfig()), task)
    mine = _flat_overrides(overrides or {}, task, default)
    spec = TASK_PRESETS.get(task)
    base = base_preset(task, mine.get("demos") is not None, mine.get("success_key", "success"))
    own = _preset_layer(base[1])
    if mine.get("demos") is not None and "expert_demos" not in mine:
        own.pop("expert_demos", None)  # a recorded store replaces the preset's expert demos
    spec = spec or {}
    selected = {"task": task, "residual_on": residual_on, "human": human, "sac_preset": sac_preset}
    stack: list[tuple[str, dict[str, Any]]] = [
        ("default", default),
        ("cpu", _sac_layer("cpu")),
        (base[0], own),
        ("pixels", _preset_layer(PIXELS) if mine.get("pixels") else {}),
        (f"sac-preset:{sac_preset}", {} if sac_preset == "task" else _sac_layer(sac_preset)),
        ("with_person", _preset_layer(spec.get("with_person", {})) if human != "none" else {}),
        ("residual", {f"sac.{k}": v for k, v in RESIDUAL_SAC.items()} if residual_on else {}),
        ("task residual", _preset_layer(spec.get("residual", {})) if residual_on else {}),
        ("command line", {**{k: v for k, v in selected.items() if v != default[k]}, **mine}),
    ]
    values: dict[str, Any] = {}
    layers: dict[str, str] = {}
    for name, layer in stack:
        values.update(layer)
        layers.update(dict.fromkeys(layer, name))
    config = _build(TrainConfig(sac=SACConfig()), values)
    env = {k.removeprefix("env."): v for k, v in values.items() if k.startswith("env.")}
    ordered = _flatten(config, task, env=env)
    return Settings(config, ordered, {path: layers[path] for path in ordered},
                    tuple(name for name, layer in stack if layer))  # fmt: skip


def base_preset(task: str, demos: bool, success_key: str) -> tuple[str, Layer, str]:
    """The preset a task starts from, its layer name and why: the task's own; for a task
    without one, :data:`~handrail.app.presets.MANIPULATION` when it is trained from
    demonstrations (``demos``) or judged by a success flag of its own (``success_key`` other
    than "success"), :data:`~handrail.app.presets.GENERIC` otherwise."""
    if task in TASK_PRESETS:
        return f"task:{task}", TASK_PRESETS[task], "its own preset"
    if demos:
        return "manipulation", MANIPULATION, "trained from demonstrations (--demos)"
    if success_key != "success":
        return (
            "manipulation",
            MANIPULATION,
            f"judged by a success flag (--success-key {success_key})",
        )
    return "generic", GENERIC, "neither --demos nor --success-key"


def settings_of(config: TrainConfig) -> Settings:
    """The layers of a config made without :func:`resolve`'s record (``preset(...)`` in a
    bench or a test): those of its presets where it holds their values, ``command line``
    where it does not."""
    chosen: dict[str, Any] = {"demos": config.demos} if config.demos is not None else {}
    if config.pixels:
        chosen["pixels"] = True
    if config.success_key != "success":
        chosen["success_key"] = config.success_key
    base = resolve(config.task, residual_on=config.residual_on, human=config.human,
                   sac_preset=config.sac_preset, overrides=chosen)  # fmt: skip
    values = _flatten(config, config.task)
    layers = {path: base.layers[path] if base.values.get(path, _MISSING) == value
              else "command line" for path, value in values.items()}  # fmt: skip
    mine = ("command line",) if "command line" in layers.values() else ()
    applied = tuple(name for name in base.applied if name != "command line") + mine
    return Settings(config, values, layers, applied)


def preset(task: str, residual_on: str | None = None, **overrides: Any) -> TrainConfig:
    """The config of a task: :func:`resolve`'s, with ``overrides`` as its command line.

    ``residual_on``: a base policy (see ``--residual-on``). ``overrides`` are TrainConfig
    fields; ``sac``, ``loop`` and ``hil`` may be dicts of their fields, merged into the
    preset's; a ``human`` other than "none" applies the task's ``with_person`` settings and a
    ``sac_preset`` its named SAC preset.
    """
    return resolve(task, residual_on=residual_on, human=overrides.get("human", "none"),
                   sac_preset=overrides.get("sac_preset", "task"), overrides=overrides).config  # fmt: skip


def bc_preset(task: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The defaults of ``handrail bc`` on a task: BCConfig fields (none for a task without its
    own) and the observation keys to leave out, the same as ``handrail train``'s (so a base
    clones from what a residual on it, and SAC, see)."""
    return dict(TASK_PRESETS.get(task, {}).get("bc", {})), preset(task).ignore_obs_keys


_MISSING = object()
_SECTIONS = {"sac": "sac.", "loop": "loop.", "env": "env.", "person": "hil.simulated."}
"""Where a preset's nested dicts go (``person``: the simulated person's settings)."""


def _preset_layer(spec: Layer) -> dict[str, Any]:
    """A preset's settings by dotted path (its ``with_person``, ``residual`` and ``bc`` left
    out: those are layers of their own, or ``handrail bc``'s)."""
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key in _SECTIONS:
            out.update({_SECTIONS[key] + name: item for name, item in value.items()})
        elif key not in ("with_person", "residual", "bc"):
            out[key] = value
    return out


def _sac_layer(name: str) -> dict[str, Any]:
    """A named SAC preset as a layer: the fields where ``SACConfig.<name>()`` differs from
    SACConfig's defaults or from ``SACConfig.cpu()`` (so ``rlpd`` restores RLPD's sizes)."""
    named, plain, cpu = getattr(SACConfig, name)(), SACConfig(), SACConfig.cpu()
    return {f"sac.{f.name}": value for f in dataclasses.fields(SACConfig)
            for value in [getattr(named, f.name)]
            if value != getattr(plain, f.name) or value != getattr(cpu, f.name)}  # fmt: skip


def _flatten(config: Any, task: str, prefix: str = "", env: dict[str, Any] | None = None
             ) -> dict[str, Any]:  # fmt: skip
    """Every setting of a config by dotted path; its env_kwargs as ``env.<key>`` (``env``:
    their values, already parsed, by key)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_flatten(value, task, f"{prefix}{f.name}."))
        elif f"{prefix}{f.name}" == "env_kwargs":
            parsed = parse_env_kwargs(value, task) if env is None else env
            out.update({f"env.{key}": item for key, item in parsed.items()})
        else:
            out[prefix + f.name] = value
    return out


def _flat_overrides(overrides: Mapping[str, Any], task: str, known: dict[str, Any]
                    ) -> dict[str, Any]:  # fmt: skip
    """Overrides by dotted path (dicts and configs of nested fields taken apart)."""
    out: dict[str, Any] = {}
    for name, value in overrides.items():
        if name == "env_kwargs":
            parsed = parse_env_kwargs(tuple(value), task)
            out.update({f"env.{key}": item for key, item in parsed.items()})
        elif isinstance(value, Mapping):
            out.update(_flat_overrides({f"{name}.{k}": v for k, v in value.items()}, task, known))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(_flatten(value, task, f"{name}."))
        elif name in known or name.startswith("env."):
            out[name] = value
        else:
            raise ValueError(f"no setting {name!r} in TrainConfig (see handrail train --help)")
    return out


def _build(template: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """The config of type ``template``'s with every setting from ``values`` (by dotted path)."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(template):
        path, current = f"{prefix}{f.name}", getattr(template, f.name)
        if dataclasses.is_dataclass(current):
            kwargs[f.name] = _build(current, values, f"{path}.")
        elif path == "env_kwargs":
            env = {k.removeprefix("env."): v for k, v in values.items() if k.startswith("env.")}
            kwargs[f.name] = format_env_kwargs(env)
        else:
            kwargs[f.name] = values[path]
    return type(template)(**kwargs)


def check_pixel_options(pixels: bool, pixels_size: int | None, others: dict[str, bool]) -> None:
    """The one-line refusals of ``--pixels`` and ``--pixels-size`` (``handrail train`` and
    ``handrail bc``): a size without ``--pixels`` or under 8, and ``--pixels`` beside an option
    that reads the cameras another way (``others``: each such flag, and whether it was given)."""
    if pixels_size is not None and (not pixels or pixels_size < 8):
        raise ValueError(f"--pixels-size {pixels_size}: needs --pixels, and a size of at least 8")
    clash = [flag for flag, given in others.items() if given]
    if pixels and clash:
        raise ValueError(
            f"--pixels: not with {', '.join(clash)} (the agent's own encoder reads the "
            "cameras); use --encoder PATH alone for a frozen one"
        )


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
    if config.residual_on is None and config.sac.residual_q_filter != "off":
        raise ValueError(
            f"--sac.residual-q-filter {config.sac.residual_q_filter} needs a base policy to fall "
            "back on: give --residual-on BASE, or leave the filter off"
        )
    check_pixel_options(config.pixels, config.pixels_size,
                        {"--encoder": config.encoder is not None,
                         f"--learner {config.learner}": config.learner != "jax"})  # fmt: skip
    if config.expert_demos and config.task not in HANDRAIL_TASKS:
        raise ValueError(
            f"--expert-demos needs a handrail task {HANDRAIL_TASKS} (they have scripted "
            f"experts), got {config.task!r}; pass a recorded store with --demos"
        )


def default_run_dir(cfg: TrainConfig) -> Path:
    """``runs/<task>-<learner>-s<seed>-<YYYYmmdd-HHMMSS>`` (``:``/``/`` in ids become ``_``)."""
    name = cfg.task.replace(":", "_").replace("/", "_")
    return Path("runs") / f"{name}-{cfg.learner}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
