"""`handrail bench store` runs end to end with tiny sizes and reports every number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handrail.launch.bench_store_cmd import bench_store


def test_bench_store_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    rc = bench_store(
        latency_steps=20,
        throughput_steps=300,
        load_steps=500,
        baseline_steps=5,
        episode_steps=50,
        control_hz=500.0,
        image_size=16,
        workdir=tmp_path,
        out=out,
    )
    assert rc == 0
    results = json.loads(out.read_text())
    for key in ("add_step_p99_ms", "write_steps_per_s", "load_s", "naive_write_steps_per_s"):
        assert results[key] > 0, key
    assert results["add_step_p50_ms"] <= results["add_step_max_ms"]
    table = capsys.readouterr().out
    assert "naive zarr append" in table and "state-only write throughput" in table
    assert list(tmp_path.iterdir()) == [out]  # the temporary stores are removed


def test_bench_store_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="--load-steps"):
        bench_store(load_steps=0)
