"""``handrail replay``: replay a store's recorded actions in the sim and report the drift.

The sim is imported when the command runs, not when the command table is read.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro

from handrail.demos.replay import DEFAULT_TOLERANCE
from handrail.launch.commands.common import CAMERAS, StorePath, fail, guarded, parse_episodes


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
    highlight: bool = True
    """Caption video frames with who acted; orange border on human steps (frame t+1 = step t)."""
    on_robot: bool = False
    """Replay on the robot through ROS 2 (comes with the ROS 2 work)."""

    def __post_init__(self) -> None:
        if not self.tolerance >= 0:
            raise ValueError(f"--tolerance must be >= 0, got {self.tolerance}")
        if self.video is not None and Path(self.video).suffix != ".mp4":
            raise ValueError(f"--video {self.video}: the video is an mp4; name the file *.mp4")


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
    from handrail.demos.episodes import iter_store_episodes, record_value, store_meta
    from handrail.demos.finite import require_finite
    from handrail.demos.replay import (
        drift_failures,
        format_drift_table,
        highlight_episode_frames,
        overall_drift,
    )

    reader = open_store(cfg.path)
    meta = store_meta(reader)
    wanted = parse_episodes(cfg.episodes)
    records = [r for r in reader.episodes if wanted is None or record_value(r, "id") in wanted]
    missing = sorted(set(wanted or []) - {record_value(r, "id") for r in records})
    if missing:
        raise ValueError(f"--episodes: {missing} not in {cfg.path}")
    require_finite(reader, [int(record_value(r, "id")) for r in records])
    steps = max((int(record_value(r, "num_steps")) for r in records), default=1)
    overrides = env_overrides(list(meta.obs_fields), steps)
    envs: dict[str, Any] = {}
    frames: list[np.ndarray] = []
    drifts = []
    for rec, ep in iter_store_episodes(reader, episodes=wanted):
        task = ep.task or meta.task
        if task not in envs:
            mode = "rgb_array" if cfg.video else None
            envs[task] = sim.make(task, render_mode=mode, **overrides)
        eid = int(record_value(rec, "id"))
        shot: list[np.ndarray] = []
        drifts.append(_replay_episode(envs[task], ep, eid, shot if cfg.video else None))
        if cfg.highlight and ep.intervention is not None:  # frame t + 1 shows step t
            shot = highlight_episode_frames(shot, ep.intervention, episode=eid)
        frames += shot
    for env in envs.values():
        env.close()
    rows = {f"ep {d.episode}": d.keys for d in drifts}
    rows["overall"] = overall_drift(drifts)
    print(format_drift_table(rows))
    if frames and cfg.video:
        from handrail.learners.runlog import write_video

        video = Path(cfg.video)  # at the recorded control rate: real speed
        path = write_video(video.parent, frames, video.stem, 1.0 / meta.control_dt_s)
        print(f"video: {path} ({len(frames)} frames)")
    failures = drift_failures(drifts, cfg.tolerance)
    for line in failures:
        print(line, file=sys.stderr)
    verdict = "FAIL" if failures else "OK"
    print(f"{verdict}: {len(drifts)} episodes replayed; tolerance {cfg.tolerance:g} (max abs)")
    return 1 if failures else 0


def replay(cfg: Annotated[ReplayConfig, tyro.conf.arg(name="")]) -> int:
    """Replay recorded actions open loop in the sim; report observation drift; render."""
    if cfg.on_robot:
        return fail(
            "replay",
            "--on-robot comes with the ROS 2 work; it will send the recorded actions through "
            "the same safety filter as every other command to the arm",
        )
    return guarded("replay", lambda: _replay(cfg))
