"""``handrail sim rollout`` and ``handrail sim view``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

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
    from handrail.learners.evaluation import env_fps
    from handrail.learners.runlog import write_video

    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    if video is not None and video.suffix != ".mp4":
        raise ValueError(f"--video {video}: the video is an mp4; name the file *.mp4")
    env = sim.make(task, render_mode="rgb_array" if video else None)
    expert = sim.make_expert(task, env) if policy == "expert" else None
    rng = np.random.default_rng(seed)
    frames: list[np.ndarray] = []
    successes = 0
    for ep in tqdm(range(episodes), desc=f"{task}/{policy}", unit="ep"):
        record = video is not None and ep < video_episodes
        successes += _episode(env, expert, rng, seed + ep, frames if record else None)
    env.close()
    print(f"success rate: {successes / episodes:.2f} ({successes}/{episodes}) on {task} ({policy})")
    if video is not None:
        print(f"video: {write_video(video.parent, frames, video.stem, env_fps(env))}")
    return 0


def _episode(
    env: Any, expert: Any, rng: np.random.Generator, seed: int, frames: list[np.ndarray] | None
) -> bool:
    """One episode with the expert (or uniform random actions from ``rng``); whether it succeeded.

    Rendered frames are appended to ``frames`` unless it is None.
    """
    obs, _ = env.reset(seed=seed)
    if expert is not None:
        expert.reset(seed=seed)
    if frames is not None:
        frames.append(env.render())
    done, info = False, {"success": False}
    while not done:
        if expert is not None:
            action = expert(obs)
        else:
            action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        if frames is not None:
            frames.append(env.render())
    return bool(info["success"])


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
