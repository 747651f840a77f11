"""`handrail bench sim` prints a table with a row per task, writes JSON, and times honest physics."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

from handrail import sim
from handrail.bench import sim as bench_sim_cmd


def test_bench_sim_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert bench_sim_cmd.bench_sim(steps=4, repeats=1, out=out) == 0
    table = capsys.readouterr().out.splitlines()
    rows = json.loads(out.read_text())
    assert [r["task"] for r in rows] == list(sim.TASKS)
    assert len([line for line in table if line.startswith("| ")]) == 1 + len(rows)  # + header
    for r in rows:
        for name in ("state", "camera84"):
            ratio = r[f"step_us_{name}"] / r[f"bare_mj_step_us_{name}"]
            assert r[f"ratio_to_bare_{name}"] == pytest.approx(ratio)
        assert r["steps_per_s_state"] == pytest.approx(1e6 / r["step_us_state"])
        assert r["steps_per_s_camera84"] == pytest.approx(1e6 / r["step_us_camera84"])
        assert r["ratio_to_bare_mj_step"] == r["ratio_to_bare_state"]
        assert r["mj_step_share"] == r["mj_step_share_state"]
        # The printed row shows the JSON's figures, column by column.
        cells = next(line for line in table if line.startswith(f"| {r['task']} |")).split(" | ")
        for i, name in ((1, "state"), (5, "camera84")):
            assert cells[i] == f"{r[f'step_us_{name}']:.0f}"
            assert cells[i + 1] == f"{r[f'bare_mj_step_us_{name}']:.0f}"
            assert cells[i + 2] == f"{r[f'ratio_to_bare_{name}']:.2f}"
            assert cells[i + 3].rstrip(" |") == f"{100 * r[f'mj_step_share_{name}']:.0f}%"


def _fake_row(task: str, step_us: float, bare_us: float) -> dict:
    row: dict = {"task": task}
    for name in ("state", "camera84"):
        row |= {f"step_us_{name}": step_us, f"bare_mj_step_us_{name}": bare_us,
                f"ratio_to_bare_{name}": step_us / bare_us, f"mj_step_share_{name}": 0.5}  # fmt: skip
    return row


def test_table_warns_about_ratios_that_can_only_be_noise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An env step contains its mj_step calls, so a step faster than its bare physics is noise."""
    bench_sim_cmd._print_table([_fake_row("reach", 900.0, 600.0), _fake_row("push", 500, 600)])
    out = capsys.readouterr().out
    assert "| reach | 900 | 600 | 1.50 | 50% | 900 | 600 | 1.50 | 50% |" in out
    assert "warning: ratio below 1 for push:" in out
    bench_sim_cmd._print_table([_fake_row("reach", 900.0, 600.0)])
    assert "warning" not in capsys.readouterr().out


def test_saved_states_replay_the_env_physics_exactly() -> None:
    """The bare timing restores the state saved before each env mj_step call: same physics."""
    env = sim.make("pick_cube")
    model, data = env.unwrapped.model, env.unwrapped.data
    actions = bench_sim_cmd._expert_actions("pick_cube", 6)
    timer = bench_sim_cmd._StepTimer(mujoco.mj_step, model)
    env.reset(seed=0)
    after = []
    mujoco.mj_step = timer
    try:
        timer.record = []
        for action in actions:
            env.step(action)
            after.append(data.qpos.copy())
    finally:
        mujoco.mj_step = timer.real
    assert [nstep for *_, nstep in timer.record] == [env.unwrapped.config.substeps] * 6
    for (state, wrap, nstep), expected in zip(timer.record[::-1], after[::-1], strict=True):
        mujoco.mj_setState(model, data, state, timer.state_sig)
        model.wrap_prm[:] = wrap
        mujoco.mj_step(model, data, nstep)
        np.testing.assert_array_equal(data.qpos, expected)


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="steps"):
        bench_sim_cmd.bench_sim(steps=0)
