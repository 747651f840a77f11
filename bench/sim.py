"""``handrail bench sim``: cost of one env step per task against the bare physics it needs.

For every task the env replays a fixed action sequence (the scripted expert's, recorded once
from ``reset(seed=0)``, so the arm moves and grasps as in real use) from ``reset(seed=0)``,
``repeats`` times. Each env step is timed on its own and so is the time spent inside
``mujoco.mj_step`` during it. Then the same physics runs bare: the MuJoCo state (and the
controller's tendon coefficients, which live in the model) saved just before each of the env's
``mj_step`` calls is restored, untimed, and only ``mj_step`` with the same number of substeps is
timed. Every figure is the mean over steps of each step's minimum over the repeats, so a step
that another process pre-empted in one repeat does not count: the machine may be shared. The
env step time includes the ~1 us the mj_step stand-in adds to it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

_STATE = "mjSTATE_INTEGRATION"


def _expert_actions(task: str, steps: int) -> list[np.ndarray]:
    """The scripted expert's actions over ``steps`` env steps from ``reset(seed=0)``."""
    from handrail import sim

    env = sim.make(task, episode_steps=10**9)
    expert = sim.make_expert(task, env)
    obs, _ = env.reset(seed=0)
    expert.reset(seed=0)
    actions = []
    for _ in range(steps):
        actions.append(np.asarray(expert(obs), np.float32))
        obs, *_ = env.step(actions[-1])
    env.close()
    return actions


class _StepTimer:
    """Stands in for ``mujoco.mj_step``: times each call, optionally saves the state before it."""

    def __init__(self, real: Any, model: Any) -> None:
        import mujoco

        self.real, self.model = real, model
        self.inner_s = 0.0
        self.record: list[tuple[np.ndarray, np.ndarray, int]] | None = None
        self.state_sig = getattr(mujoco.mjtState, _STATE)
        """The parts of the MuJoCo state it saves (``mj_getState``'s ``sig``)."""
        self._size = mujoco.mj_stateSize(model, self.state_sig)
        self._get = mujoco.mj_getState

    def __call__(self, m: Any, d: Any, nstep: int = 1) -> None:
        if self.record is not None:
            state = np.empty(self._size)
            self._get(m, d, state, self.state_sig)
            self.record.append((state, m.wrap_prm.copy(), nstep))
        start = time.perf_counter()
        self.real(m, d, nstep)
        self.inner_s += time.perf_counter() - start


def _measure(
    task: str, actions: list[np.ndarray], cameras: tuple[str, ...], repeats: int
) -> dict[str, float]:
    """Seconds per env step, per step inside mj_step, and per bare physics of one env step."""
    import mujoco

    from handrail import sim

    env = sim.make(task, cameras=cameras, image_size=84, episode_steps=10**9)
    n = len(actions)
    env.reset(seed=0)
    env.step(actions[0])  # warm up (renderer creation, caches)
    step_s, inner_s = np.full(n, np.inf), np.full(n, np.inf)
    timer = _StepTimer(mujoco.mj_step, env.unwrapped.model)
    mujoco.mj_step = timer
    try:
        for _ in range(repeats):
            env.reset(seed=0)
            for i, action in enumerate(actions):
                timer.inner_s = 0.0
                start = time.perf_counter()
                env.step(action)
                step_s[i] = min(step_s[i], time.perf_counter() - start)
                inner_s[i] = min(inner_s[i], timer.inner_s)
        env.reset(seed=0)  # once more, saving the physics state before every mj_step call
        per_step = []
        for action in actions:
            timer.record = []
            env.step(action)
            per_step.append(timer.record)
    finally:
        mujoco.mj_step = timer.real
        timer.record = None
    bare_s = _bare_physics(timer, env.unwrapped.data, per_step, repeats)
    env.close()
    return {"step_s": step_s.mean(), "inner_s": inner_s.mean(), "bare_s": bare_s.mean()}


def _bare_physics(timer: _StepTimer, data: Any, per_step: list, repeats: int) -> np.ndarray:
    """Per env step, the best time of its mj_step calls alone from the saved states."""
    import mujoco

    model, sig, step = timer.model, timer.state_sig, timer.real
    bare_s = np.full(len(per_step), np.inf)
    for _ in range(repeats):
        for i, calls in enumerate(per_step):
            total = 0.0
            for state, wrap, nstep in calls:
                mujoco.mj_setState(model, data, state, sig)
                model.wrap_prm[:] = wrap
                start = time.perf_counter()
                step(model, data, nstep)
                total += time.perf_counter() - start
            bare_s[i] = min(bare_s[i], total)
    return bare_s


def _row(task: str, steps: int, camera_steps: int, repeats: int) -> dict[str, Any]:
    actions = _expert_actions(task, steps)
    state = _measure(task, actions, (), repeats)
    cam = _measure(task, actions[:camera_steps], ("front",), repeats)
    row: dict[str, Any] = {"task": task}
    for name, m in (("state", state), ("camera84", cam)):
        row[f"step_us_{name}"] = 1e6 * m["step_s"]
        row[f"bare_mj_step_us_{name}"] = 1e6 * m["bare_s"]
        row[f"ratio_to_bare_{name}"] = m["step_s"] / m["bare_s"]
        row[f"mj_step_share_{name}"] = m["inner_s"] / m["step_s"]
    # Earlier names of the state-only figures, kept for readers of old JSON files.
    row["steps_per_s_state"] = 1.0 / state["step_s"]
    row["steps_per_s_camera84"] = 1.0 / cam["step_s"]
    row["mj_step_share"] = row["mj_step_share_state"]
    row["ratio_to_bare_mj_step"] = row["ratio_to_bare_state"]
    return row


def bench_sim(steps: int = 100, repeats: int = 5, out: Path | None = None) -> int:
    """Env step time per task against the bare mj_step substeps it needs (goal: ratio <= 1.5).

    Printed per task, state only and with the front camera at 84x84: env step (us), bare
    physics of the same substeps from the same states (us), their ratio, and the share of the
    env step spent inside mj_step. The camera setting times a quarter of the steps.

    Args:
        steps: env steps of the expert's action sequence timed per task (state only).
        repeats: timing repeats; each step's best is kept (the machine may be shared).
        out: optional JSON file for the results.

    Returns:
        0 (the exit code).
    """
    from handrail import sim

    if steps < 1 or repeats < 1:
        raise ValueError(f"steps and repeats must be >= 1; got steps={steps}, repeats={repeats}")
    rows = [_row(t, steps, max(1, steps // 4), repeats) for t in sim.available_tasks()]
    _print_table(rows)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=2))
    return 0


def _print_table(rows: list[dict[str, Any]]) -> None:
    """Print the rows as a Markdown table, with a warning for ratios that can only be noise."""
    print(
        "| task | state: step us | bare us | ratio | in mj_step "
        "| 84x84 camera: step us | bare us | ratio | in mj_step |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [r["task"]]
        for name in ("state", "camera84"):
            cells += [
                f"{r[f'step_us_{name}']:.0f}",
                f"{r[f'bare_mj_step_us_{name}']:.0f}",
                f"{r[f'ratio_to_bare_{name}']:.2f}",
                f"{100 * r[f'mj_step_share_{name}']:.0f}%",
            ]
        print("| " + " | ".join(cells) + " |")
    noisy = [r["task"] for r in rows if r["ratio_to_bare_state"] < 1.0]
    if noisy:
        # An env step contains its substeps of mj_step, so a ratio below 1 is timing noise.
        print(
            f"warning: ratio below 1 for {', '.join(noisy)}: the machine was busy while timing; "
            "rerun on a quiet machine or with more --repeats"
        )
