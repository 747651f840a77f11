"""`handrail bench learner` runs side by side and prints a table with ratios (tiny config)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handrail.launch import bench_learner_cmd


def test_bench_learner_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = bench_learner_cmd.bench_learner(
        steps=10, warmup=40, envs=("Pendulum-v1",), utds=(1,), learners=("handrail", "sbx"),
        rlpd=False, hidden=(32,), batch=32, out=out,
    )  # fmt: skip
    table = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert code == 0, rows
    assert [r["learner"] for r in rows] == ["handrail", "sbx"]
    for r in rows:
        assert r["env_steps_per_s"] > 0 and r["ms_per_update"] > 0
        assert r["updates_per_s"] == pytest.approx(r["env_steps_per_s"] * r["utd"])
    assert "| Pendulum-v1 | 1 | handrail |" in table
    handrail_line = next(line for line in table.splitlines() if "| handrail |" in line)
    assert handrail_line.count("x |") == 1  # ratio against SBX, none against the absent SB3


def test_unknown_learner_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="--learners"):
        bench_learner_cmd.bench_learner(learners=("dqn",))
