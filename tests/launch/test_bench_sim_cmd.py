"""`handrail bench sim` prints a table with a row per task, writes JSON, and times honest physics."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

from handrail import sim
from handrail.launch import bench_sim_cmd


def test_bench_sim_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert bench_sim_cmd.bench_sim(steps=4, repeats=1, out=out) == 0
    table = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [r["task"] for r in rows] == list(sim.available_tasks())
    for r in rows:
        assert f"| {r['task']} |" in table
        for name in ("state", "camera84"):
            assert r[f"step_us_{name}"] > 0 and r[f"bare_mj_step_us_{name}"] > 0
            assert 0 < r[f"mj_step_share_{name}"] <= 1
            ratio = r[f"step_us_{name}"] / r[f"bare_mj_step_us_{name}"]
            assert r[f"ratio_to_bare_{name}"] == pytest.approx(ratio)
        assert r["steps_per_s_state"] == pytest.approx(1e6 / r["step_us_state"])
        assert r["ratio_to_bare_mj_step"] == r["ratio_to_bare_state"]


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
        mujoco.mj_setState(model, data, state, timer._sig)
        model.wrap_prm[:] = wrap
        mujoco.mj_step(model, data, nstep)
        np.testing.assert_array_equal(data.qpos, expected)


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="steps"):
        bench_sim_cmd.bench_sim(steps=0)
