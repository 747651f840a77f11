"""`handrail bench sim` prints a table with a row per task and writes JSON."""

from __future__ import annotations

import json
from pathlib import Path

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
        assert r["steps_per_s_state"] > 0 and r["steps_per_s_camera84"] > 0
        assert 0 < r["mj_step_share"] <= 1
        assert r["ratio_to_bare_mj_step"] > 0
