"""``handrail bench sim``: env steps/s per task and how much of a step is physics."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np


def _measure(task: str, steps: int, cameras: tuple[str, ...], repeats: int) -> dict[str, float]:
    """Best-of-``repeats`` seconds per env step, per step inside mj_step, per bare substeps."""
    import mujoco

    from handrail import sim

    env = sim.make(task, cameras=cameras, image_size=84, episode_steps=10**9)
    model, data = env.unwrapped.model, env.unwrapped.data
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, np.float32)
    env.step(action)  # warm up (renderer creation, caches)
    inner = {"t": 0.0}
    real_step = mujoco.mj_step

    def timed_step(m: mujoco.MjModel, d: mujoco.MjData, nstep: int = 1) -> None:
        t0 = time.perf_counter()
        real_step(m, d, nstep)
        inner["t"] += time.perf_counter() - t0

    best = {"step_s": np.inf, "inner_s": np.inf, "bare_s": np.inf}
    snapshot = mujoco.MjData(model)
    substeps = env.unwrapped.config.substeps
    for _ in range(repeats):
        mujoco.mj_copyData(snapshot, model, data)
        inner["t"] = 0.0
        mujoco.mj_step = timed_step
        try:
            start = time.perf_counter()
            for _ in range(steps):
                env.step(action)
            total = time.perf_counter() - start
        finally:
            mujoco.mj_step = real_step
        best["step_s"] = min(best["step_s"], total / steps)
        best["inner_s"] = min(best["inner_s"], inner["t"] / steps)
        mujoco.mj_copyData(data, model, snapshot)  # same state, same controls: bare physics
        start = time.perf_counter()
        for _ in range(steps * substeps):
            real_step(model, data)
        best["bare_s"] = min(best["bare_s"], (time.perf_counter() - start) / steps)
    env.close()
    return best


def bench_sim(steps: int = 100, repeats: int = 5, out: Path | None = None) -> int:
    """Env steps/s per task (state only and with one 84x84 camera), and physics share.

    Columns: steps/s state-only; steps/s with the front camera at 84x84; share of the state-only
    step spent inside mj_step; ratio of the state-only step time to the same number of bare
    mj_step calls (goal <= 1.5).

    Args:
        steps: env steps timed per task and setting (a quarter of them with the camera).
        repeats: timing repeats; the best is reported (the machine may be shared).
        out: optional JSON file for the results.

    Returns:
        0 (the exit code).
    """
    from handrail import sim

    rows = []
    for task in sim.available_tasks():
        state = _measure(task, steps, (), repeats)
        cam = _measure(task, max(10, steps // 4), ("front",), repeats)
        rows.append(
            {
                "task": task,
                "steps_per_s_state": 1.0 / state["step_s"],
                "steps_per_s_camera84": 1.0 / cam["step_s"],
                "mj_step_share": state["inner_s"] / state["step_s"],
                "ratio_to_bare_mj_step": state["step_s"] / state["bare_s"],
            }
        )
    print("| task | steps/s state | steps/s 84x84 camera | time in mj_step | step / bare mj_step |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['task']} | {r['steps_per_s_state']:.0f} | {r['steps_per_s_camera84']:.0f} "
            f"| {100 * r['mj_step_share']:.0f}% | {r['ratio_to_bare_mj_step']:.2f} |"
        )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=2))
    return 0
