"""``handrail record``: record a task's scripted expert into a Zarr episode store.

The sim is imported when the command runs, not when the command table is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
import tyro

from handrail.app.human import DEVICES, HumanLoopConfig
from handrail.demos.format import fields_from_space
from handrail.launch.commands.common import CAMERAS, check_out, guarded

HUMAN_SOURCES = DEVICES
"""Sources of `record` that are a person at a device."""


@dataclass(frozen=True)
class RecordConfig:
    """Options of ``handrail record``."""

    task: str
    """Task to record (reach, pick_cube, peg_insert, push)."""
    out: str
    """Episode store to write (a folder)."""
    source: Literal["expert", "keyboard", "gamepad", "spacemouse"] = "expert"
    """Who acts: the task's scripted expert, or a person at a device (keyboard in this
    terminal, a gamepad, a SpaceMouse): the person is in control from each episode start."""
    episodes: int = 10
    """Number of episodes to record."""
    seed: int = 0
    """Seed of the first episode; episode i is reset with seed + i (stored for replay)."""
    cameras: str = ""
    """Comma-separated cameras to record, e.g. front,wrist; empty records state only."""
    image_size: int = 64
    """Camera image height and width in pixels."""
    env_kwargs: tuple[str, ...] = ()
    """KEY=VALUE task settings, as ``handrail train --env-kwargs`` (e.g.
    terminate_on_success=false keeps an episode going after success)."""
    append: bool = False
    """Append to an existing store (its fields must match) instead of creating one."""
    overwrite: bool = False
    """Replace an existing store at --out."""
    noise: float = 0.0
    """With the scripted expert: the arm executes each of its actions plus N(0, noise^2)
    (normalised units, clipped to the action space; seeded by each episode's seed), as DART
    does (Laskey et al. 2017): the demos then visit the states the expert's own errors lead to,
    and show what it does there. The store keeps the executed (noisy) action as the action and
    the expert's own as the proposed one (``handrail bc --labels proposed`` clones it);
    episodes the noise made fail are kept, marked failed. 0: the expert as it is."""
    hil: HumanLoopConfig = field(default_factory=HumanLoopConfig)
    """Device settings for a person (--hil.mapping FILE, --hil.arbiter.operator-yaw-rad...)."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {self.episodes}")
        if self.image_size < 8:
            raise ValueError(f"--image-size must be >= 8 pixels, got {self.image_size}")
        if self.append and self.overwrite:
            raise ValueError("--append and --overwrite exclude each other: pick one")
        if not self.noise >= 0:
            raise ValueError(f"--noise must be >= 0 (a standard deviation), got {self.noise}")
        if self.noise > 0 and self.source != "expert":
            raise ValueError(
                f"--noise perturbs the scripted expert's actions; a person at a "
                f"{self.source} records as they act (leave out --noise, or use --source expert)"
            )
        unknown = sorted(set(self.camera_names) - set(CAMERAS))
        if unknown:
            raise ValueError(f"--cameras: unknown {unknown}; choose from {', '.join(CAMERAS)}")

    @property
    def camera_names(self) -> tuple[str, ...]:
        """The cameras as a tuple."""
        return tuple(c.strip() for c in self.cameras.split(",") if c.strip())


def open_record_writer(cfg: RecordConfig, env: Any) -> Any:
    """The store writer of ``handrail record`` for ``env``'s fields: a new store at ``cfg.out``
    (or the one it appends to), as the command checks and opens it (the benchmarks record
    their own policies' episodes through it)."""
    from handrail.demos import create_store, open_store, open_writer
    from handrail.demos.format import check_fields

    fields = fields_from_space(env.observation_space)
    if cfg.append:
        check_fields(open_store(cfg.out), fields)
        return open_writer(cfg.out)
    return create_store(
        cfg.out,
        kind="demo",
        obs_fields=fields,
        action_dim=int(env.action_space.shape[0]),
        control_dt_s=float(env.unwrapped.control_dt_s),
        task=cfg.task,
        overwrite=cfg.overwrite,
    )


def _record(cfg: RecordConfig) -> int:
    from handrail import sim
    from handrail.control.step import ActedBy
    from handrail.demos.recorder import EpisodeRecorder
    from handrail.learners.actor import Actor

    check_out(cfg.out, overwrite=cfg.overwrite, append=cfg.append)  # before the sim starts
    from handrail.app.envs import parse_env_kwargs

    overrides: dict[str, Any] = parse_env_kwargs(cfg.env_kwargs, cfg.task)
    if cfg.camera_names:
        overrides.update(cameras=cfg.camera_names, image_size=cfg.image_size)
    env: Any = sim.make(cfg.task, **overrides)
    if cfg.source in DEVICES:
        return _record_person(cfg, env)
    expert = sim.make_expert(cfg.task, env)
    if cfg.noise > 0:
        from handrail.app.envs import ExecutionNoise

        env = ExecutionNoise(env, cfg.noise)
    try:
        with EpisodeRecorder(open_record_writer(cfg, env), task=cfg.task) as recorder:
            actor = Actor(env, expert, seed=cfg.seed, sinks=[recorder], acted_by=ActedBy.SCRIPTED)
            try:
                stats = actor.run_episodes(cfg.episodes, progress=f"record {cfg.task}")
            except KeyboardInterrupt:
                print(f"interrupted: {actor.episodes} finished episodes committed to {cfg.out}; "
                      "the unfinished one was dropped")  # fmt: skip
                return 130
    finally:
        env.close()
    successes = sum(bool(s.success) for s in stats)
    print(f"recorded {len(stats)} episodes of {cfg.task} into {cfg.out}: {successes} successful")
    return 0


def _record_person(cfg: RecordConfig, env: Any) -> int:
    """Teleoperated demonstrations: the person drives every step and ends each episode with
    an event (success, failure, end) or the time limit; "rerecord" throws the episode away."""
    from handrail.app.human import KeepOrDiscard, make_device_human
    from handrail.control.takeover import InterventionEnv
    from handrail.demos.recorder import EpisodeRecorder
    from handrail.learners.actor import Actor

    human = make_device_human(env, cfg.task, cfg.source, cfg.hil, in_control=True)
    wrapped = InterventionEnv(env, human, wait_at_reset=True)
    still = np.zeros(env.action_space.shape, env.action_space.dtype)  # if the person lets go
    kept, successes = 0, 0
    try:
        with EpisodeRecorder(open_record_writer(cfg, env), task=cfg.task) as recorder:
            actor = Actor(wrapped, lambda obs: still, seed=cfg.seed,
                          sinks=[KeepOrDiscard(recorder, wrapped)])  # fmt: skip
            try:
                while kept < cfg.episodes:
                    stats = actor.run_episodes(1)[0]
                    if wrapped.rerecord_requested:
                        print(f"episode thrown away; recording it again ({kept}/{cfg.episodes})")
                        continue
                    kept, successes = kept + 1, successes + bool(stats.success)
                    print(f"episode {kept}/{cfg.episodes}: {stats.length} steps, "
                          f"{'success' if stats.success else 'no success'}, human "
                          f"{stats.human_steps / max(stats.length, 1):.0%}")  # fmt: skip
            except KeyboardInterrupt:
                print(f"interrupted: {kept} finished episodes committed to {cfg.out}; "
                      "the unfinished one was dropped")  # fmt: skip
                return 130
    finally:
        wrapped.close()
    print(f"recorded {kept} episodes of {cfg.task} into {cfg.out}: {successes} successful")
    return 0


def _record_or_say_what_is_kept(cfg: RecordConfig) -> int:
    """Records; a failed write (a full disk) says what the store kept and how to go on."""
    from handrail.demos import StoreWriteError

    try:
        return _record(cfg)
    except StoreWriteError as exc:
        longer = "" if exc.cut else " (its arrays stay longer until then; readers ignore that)"
        raise StoreWriteError(
            f"{cfg.out}: {exc.reason}; it keeps the {exc.committed} episodes committed before "
            "that, the episode being recorded was not stored: free some space, then record "
            f"more with --append{longer}",
            committed=exc.committed,
            reason=exc.reason,
            cut=exc.cut,
        ) from exc


def record(cfg: Annotated[RecordConfig, tyro.conf.arg(name="")]) -> int:
    """Record episodes of a task into a Zarr episode store (scripted expert or a person)."""
    return guarded("record", lambda: _record_or_say_what_is_kept(cfg))
