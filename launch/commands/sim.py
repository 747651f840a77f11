"""``handrail sim rollout`` and ``handrail sim view``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

import numpy as np
from tqdm import tqdm


def rollout(
    task: str = "pick_cube",
    policy: Literal["expert", "random"] = "expert",
    episodes: int = 10,
    video: Path | None = None,
    seed: int = 0,
    video_episodes: int = 3,
) -> int:
    """Run episodes with a policy, print the success rate and optionally write an mp4.

    Args:
        task: task name, e.g. reach or pick_cube.
        policy: expert (the task's scripted expert) or random (uniform actions).
        episodes: number of episodes; episode i is reset with seed + i.
        video: mp4 file to write (240x320 frames from the front camera); none if omitted.
        seed: seed of the first episode.
        video_episodes: at most this many episodes go into the video.

    Returns:
        0 on success (the exit code).
    """
    from handrail import sim
    from handrail.control.step import ActedBy
    from handrail.learners.actor import Actor, UniformPolicy
    from handrail.learners.evaluation import env_fps
    from handrail.learners.runlog import write_video

    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    if video is not None and video.suffix != ".mp4":
        raise ValueError(f"--video {video}: the video is an mp4; name the file *.mp4")
    env = sim.make(task, render_mode="rgb_array" if video else None)
    if policy == "expert":
        actor = Actor(env, sim.make_expert(task, env), seed=seed, acted_by=ActedBy.SCRIPTED)
    else:
        actor = Actor(env, UniformPolicy(env.action_space, seed), seed=seed)
    frames: list[np.ndarray] = []
    successes = 0
    for ep in tqdm(range(episodes), desc=f"{task}/{policy}", unit="ep"):
        actor.frames = frames if video is not None and ep < video_episodes else None
        successes += bool(actor.run_episodes(1)[0].success)  # true at any step
    env.close()
    print(f"success rate: {successes / episodes:.2f} ({successes}/{episodes}) on {task} ({policy})")
    if video is not None:
        print(f"video: {write_video(video.parent, frames, video.stem, env_fps(env))}")
    return 0


def view(task: str = "pick_cube", seed: int = 0) -> int:
    """Open the interactive MuJoCo viewer on a task (needs a display).

    Args:
        task: task name, e.g. reach or pick_cube.
        seed: reset seed of the shown scene.

    Returns:
        0 after the viewer closes; 2 when no display exists.
    """
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        print(
            "handrail sim view: no display found (DISPLAY and WAYLAND_DISPLAY are unset). "
            "Run it on a desktop session, or use `handrail sim rollout --video out.mp4`.",
            file=sys.stderr,
        )
        return 2
    import mujoco.viewer

    from handrail import sim

    env = sim.make(task)
    env.reset(seed=seed)
    mujoco.viewer.launch(env.unwrapped.model, env.unwrapped.data)
    return 0
