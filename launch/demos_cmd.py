"""``handrail record``, ``handrail replay`` and ``handrail demos info|validate|filter|merge|...``.

Store-only commands never import JAX or MuJoCo; record and replay import the sim when they run.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import tyro

from handrail.demos.replay import DEFAULT_TOLERANCE

StorePath = Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="PATH")]
"""A positional store path, shown as PATH in --help."""

CAMERAS = ("front", "wrist")
HUMAN_SOURCES = ("keyboard", "gamepad", "spacemouse")
SCRIPTED = 2  # intervention source code of the store: 0 policy, 1 human, 2 scripted


def _fail(command: str, message: str, code: int = 2) -> int:
    print(f"handrail {command}: {message}", file=sys.stderr)
    return code


def _guarded(command: str, body: Callable[[], int]) -> int:
    """Runs ``body``; a bad input or a damaged store becomes one clear line and exit code 2."""
    from handrail.demos import StoreError

    try:
        return body()
    except (StoreError, ValueError, TypeError, OSError, ImportError) as exc:
        return _fail(command, f"error: {exc}")


def parse_episodes(spec: str) -> list[int] | None:
    """``"0,3,5-7"`` -> ``[0, 3, 5, 6, 7]``; an empty string means all episodes (None)."""
    if not spec.strip():
        return None
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise ValueError(f"--episodes {spec!r}: use ids and ranges such as 0,3,5-7")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"--episodes {spec!r}: range {part.strip()} runs backwards")
        out.extend(range(lo, hi + 1))
    return list(dict.fromkeys(out))


# ----------------------------------------------------------------------------- record


@dataclass(frozen=True)
class RecordConfig:
    """Options of ``handrail record``."""

    task: str
    """Task to record (reach, pick_cube, peg_insert, push)."""
    out: str
    """Episode store to write (a folder)."""
    source: Literal["expert", "keyboard", "gamepad", "spacemouse"] = "expert"
    """Who acts: the task's scripted expert, or a human device (comes with interventions)."""
    episodes: int = 10
    """Number of episodes to record."""
    seed: int = 0
    """Seed of the first episode; episode i is reset with seed + i (stored for replay)."""
    cameras: str = ""
    """Comma-separated cameras to record, e.g. front,wrist; empty records state only."""
    image_size: int = 64
    """Camera image height and width in pixels."""
    append: bool = False
    """Append to an existing store (its fields must match) instead of creating one."""
    overwrite: bool = False
    """Replace an existing store at --out."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {self.episodes}")
        if self.image_size < 8:
            raise ValueError(f"--image-size must be >= 8 pixels, got {self.image_size}")
        if self.append and self.overwrite:
            raise ValueError("--append and --overwrite exclude each other: pick one")
        unknown = sorted(set(self.camera_names) - set(CAMERAS))
        if unknown:
            raise ValueError(f"--cameras: unknown {unknown}; choose from {', '.join(CAMERAS)}")

    @property
    def camera_names(self) -> tuple[str, ...]:
        """The cameras as a tuple."""
        return tuple(c.strip() for c in self.cameras.split(",") if c.strip())


def fields_from_space(space: Any) -> list[Any]:
    """One FieldSpec per key of a gymnasium Dict observation space."""
    from handrail.demos import FieldSpec

    return [
        FieldSpec(name=k, dtype=str(np.dtype(box.dtype)), shape=tuple(box.shape))
        for k, box in space.spaces.items()
    ]


def _record_episode(env: Any, expert: Any, writer: Any, seed: int, task: str) -> bool:
    """Runs and commits one expert episode; an interruption aborts it (nothing half-written)."""
    obs, info = env.reset(seed=seed)
    expert.reset(seed=seed)
    writer.begin_episode(seed=seed, task=task)
    try:
        while True:
            action = np.asarray(expert(obs), dtype=np.float32)
            nxt, reward, terminated, truncated, info = env.step(action)
            writer.add_step(
                obs=obs,
                action=action,
                policy_action=action,
                intervention=SCRIPTED,
                reward=float(reward),
                terminated=bool(terminated),
                truncated=bool(truncated),
            )
            obs = nxt
            if terminated or truncated:
                break
    except BaseException:
        writer.abort_episode()
        raise
    success = bool(info.get("success", False))
    writer.end_episode(final_obs=obs, success=success)
    return success


def _open_record_writer(cfg: RecordConfig, env: Any) -> Any:
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
    from tqdm import tqdm

    from handrail import sim

    overrides: dict[str, Any] = {}
    if cfg.camera_names:
        overrides.update(cameras=cfg.camera_names, image_size=cfg.image_size)
    env = sim.make(cfg.task, **overrides)
    expert = sim.make_expert(cfg.task, env)
    done = successes = 0
    bar = tqdm(total=cfg.episodes, desc=f"record {cfg.task}", unit="ep")
    try:
        with _open_record_writer(cfg, env) as writer:
            for i in range(cfg.episodes):
                successes += _record_episode(env, expert, writer, cfg.seed + i, cfg.task)
                done += 1
                bar.update(1)
                bar.set_postfix_str(f"success {successes}/{done}")
    except KeyboardInterrupt:
        bar.close()
        print(
            f"interrupted: {done} finished episodes committed to {cfg.out}; the unfinished one "
            "was dropped"
        )
        return 130
    finally:
        env.close()
    bar.close()
    print(f"recorded {done} episodes of {cfg.task} into {cfg.out}: {successes} successful")
    return 0


def record(cfg: Annotated[RecordConfig, tyro.conf.arg(name="")]) -> int:
    """Record episodes of a task into a Zarr episode store."""
    if cfg.source in HUMAN_SOURCES:
        return _fail(
            "record",
            f"--source {cfg.source}: human teleoperation devices come with the interventions "
            "work; use --source expert for now",
        )
    return _guarded("record", lambda: _record(cfg))


# ----------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class ReplayConfig:
    """Options of ``handrail replay``."""

    path: StorePath
    """Episode store to replay."""
    episodes: str = ""
    """Episode ids to replay, e.g. 0,3 or 2-5; empty replays all."""
    video: str | None = None
    """Write an MP4 of the replayed episodes here."""
    tolerance: float = DEFAULT_TOLERANCE
    """Largest allowed max abs error of state observations (their units); images not held to it."""
    on_robot: bool = False
    """Replay on the robot through ROS 2 (comes with the ROS 2 work)."""

    def __post_init__(self) -> None:
        if not self.tolerance >= 0:
            raise ValueError(f"--tolerance must be >= 0, got {self.tolerance}")


def env_overrides(fields: list[Any], max_steps: int) -> dict[str, Any]:
    """sim.make overrides that reproduce a store's observation fields and episode lengths."""
    cams = tuple(f.name for f in fields if f.name in CAMERAS and len(f.shape) == 3)
    out: dict[str, Any] = {"episode_steps": int(max_steps)}
    if cams:
        out.update(
            cameras=cams, image_size=int(fields[[f.name for f in fields].index(cams[0])].shape[0])
        )
    return out


def _replay_episode(env: Any, ep: Any, eid: int, frames: list[np.ndarray] | None) -> Any:
    from handrail.demos.replay import EpisodeDrift, episode_drift

    if ep.seed is None:
        return EpisodeDrift(eid, 0, {}, note="no seed recorded: the start state is unknown")
    obs, _ = env.reset(seed=int(ep.seed))
    seen = {k: [v] for k, v in obs.items()}
    note = ""
    if frames is not None:
        frames.append(env.render())
    for t, action in enumerate(ep.action):
        obs, _, terminated, truncated, _ = env.step(action)
        for k, v in obs.items():
            seen[k].append(v)
        if frames is not None:
            frames.append(env.render())
        if (terminated or truncated) and t < ep.num_steps - 1:
            note = f"the replay ended after {t + 1} of {ep.num_steps} recorded steps"
            break
    recorded = {k: np.concatenate([v, ep.final_obs[k][None]]) for k, v in ep.obs.items()}
    return episode_drift(eid, recorded, {k: np.stack(v) for k, v in seen.items()}, note=note)


def _replay(cfg: ReplayConfig) -> int:
    from handrail import sim
    from handrail.demos import open_store
    from handrail.demos.ops import iter_store_episodes, record_value, store_meta
    from handrail.demos.replay import drift_failures, format_drift_table, overall_drift

    reader = open_store(cfg.path)
    meta = store_meta(reader)
    wanted = parse_episodes(cfg.episodes)
    records = [r for r in reader.episodes if wanted is None or record_value(r, "id") in wanted]
    missing = sorted(set(wanted or []) - {record_value(r, "id") for r in records})
    if missing:
        raise ValueError(f"--episodes: {missing} not in {cfg.path}")
    steps = max((int(record_value(r, "num_steps")) for r in records), default=1)
    overrides = env_overrides(list(meta.obs_fields), steps)
    envs: dict[str, Any] = {}
    frames: list[np.ndarray] | None = [] if cfg.video else None
    drifts = []
    for rec, ep in iter_store_episodes(reader, episodes=wanted):
        task = ep.task or meta.task
        if task not in envs:
            mode = "rgb_array" if cfg.video else None
            envs[task] = sim.make(task, render_mode=mode, **overrides)
        drifts.append(_replay_episode(envs[task], ep, int(record_value(rec, "id")), frames))
    for env in envs.values():
        env.close()
    rows = {f"ep {d.episode}": d.keys for d in drifts}
    rows["overall"] = overall_drift(drifts)
    print(format_drift_table(rows))
    if frames:
        import imageio.v2 as imageio

        imageio.mimwrite(cfg.video, frames, fps=max(1, round(1.0 / meta.control_dt_s)))
        print(f"video: {cfg.video} ({len(frames)} frames)")
    failures = drift_failures(drifts, cfg.tolerance)
    for line in failures:
        print(line, file=sys.stderr)
    verdict = "FAIL" if failures else "OK"
    print(f"{verdict}: {len(drifts)} episodes replayed; tolerance {cfg.tolerance:g} (max abs)")
    return 1 if failures else 0


def replay(cfg: Annotated[ReplayConfig, tyro.conf.arg(name="")]) -> int:
    """Replay recorded actions open loop in the sim; report observation drift; render."""
    if cfg.on_robot:
        return _fail(
            "replay",
            "--on-robot comes with the ROS 2 work; it will send the recorded actions through "
            "the same safety filter as every other command to the arm",
        )
    return _guarded("replay", lambda: _replay(cfg))


# ----------------------------------------------------------------------------- demos ...


def info(path: StorePath) -> int:
    """Summary table of an episode store.

    Args:
        path: Episode store to summarise.
    """
    from handrail.demos.ops import format_summary, summarize

    def body() -> int:
        print(format_summary(summarize(path)))
        return 0

    return _guarded("demos info", body)


def validate(path: StorePath) -> int:
    """Validate an episode store: read every chunk and check it; exit 1 on any problem.

    Args:
        path: Episode store to validate.
    """
    from handrail.demos.ops import validate_store

    problems = validate_store(path)
    if problems:
        print(f"{path}: {len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(f"{path}: OK (every chunk read and checked)")
    return 0


def filter_(
    path: StorePath,
    out: str,
    successful_only: bool = False,
    interventions_only: bool = False,
    episodes: str = "",
    overwrite: bool = False,
) -> int:
    """Copy a filtered subset of a store into a new store.

    Args:
        path: Source episode store.
        out: New store to write.
        successful_only: Keep only episodes marked successful.
        interventions_only: Keep only episodes with at least one intervened step.
        episodes: Episode ids to keep, e.g. 0,3,5-7; empty keeps all.
        overwrite: Replace an existing store at --out.
    """
    from handrail.demos.ops import filter_store

    def body() -> int:
        n = filter_store(
            path,
            out,
            successful_only=successful_only,
            interventions_only=interventions_only,
            episodes=parse_episodes(episodes),
            overwrite=overwrite,
        )
        print(f"wrote {n} episodes to {out}")
        return 0

    return _guarded("demos filter", body)


def merge(
    stores: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="STORE")],
    out: str,
    overwrite: bool = False,
) -> int:
    """Merge several stores (same fields, action size and control period) into a new store.

    Args:
        stores: Stores to merge, in order.
        out: New store to write.
        overwrite: Replace an existing store at --out.
    """
    from handrail.demos.ops import merge_stores

    def body() -> int:
        n = merge_stores(list(stores), out, overwrite=overwrite)
        print(f"merged {len(stores)} stores: {n} episodes into {out}")
        return 0

    return _guarded("demos merge", body)


def export(
    path: StorePath,
    format: Literal["robomimic", "lerobot"],
    out: str,
    overwrite: bool = False,
) -> int:
    """Export a store to robomimic HDF5 or a LeRobotDataset v3 folder.

    Args:
        path: Episode store to export.
        format: Target format.
        out: Output file (robomimic) or folder (lerobot).
        overwrite: Replace an existing output.
    """

    def body() -> int:
        if format == "robomimic":
            from handrail.demos.io_robomimic import export_robomimic as run
        else:
            from handrail.demos.io_lerobot import export_lerobot as run
        print(run(path, out, overwrite=overwrite).format())
        return 0

    return _guarded("demos export", body)


def import_(
    src: StorePath,
    format: Literal["robomimic", "lerobot", "diffusion_policy"],
    out: str,
    task: str | None = None,
    control_dt_s: float | None = None,
    mark_successful: bool = False,
    overwrite: bool = False,
) -> int:
    """Import robomimic HDF5, LeRobotDataset v3 or a diffusion_policy zarr buffer into a store.

    Args:
        src: File or folder to import.
        format: Source format.
        out: New episode store to write.
        task: Task name to record (default: taken from the source, where it has one).
        control_dt_s: Control period in seconds where the source does not state one.
        mark_successful: diffusion_policy only: mark every episode successful.
        overwrite: Replace an existing store at --out.
    """

    def body() -> int:
        if format == "robomimic":
            from handrail.demos.io_robomimic import import_robomimic

            report = import_robomimic(
                src, out, task=task, control_dt_s=control_dt_s, overwrite=overwrite
            )
        elif format == "lerobot":
            from handrail.demos.io_lerobot import import_lerobot

            report = import_lerobot(src, out, task=task, overwrite=overwrite)
        else:
            from handrail.demos.io_diffusion_policy import import_diffusion_policy

            report = import_diffusion_policy(
                src,
                out,
                task=task or "unknown",
                control_dt_s=control_dt_s,
                mark_successful=mark_successful,
                overwrite=overwrite,
            )
        print(report.format())
        return 0

    return _guarded("demos import", body)
