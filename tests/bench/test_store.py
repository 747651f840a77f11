"""`handrail bench store` runs end to end with tiny sizes and reports every number."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.bench import store as bench_store_cmd
from handrail.bench.store import bench_store


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
    r = json.loads(out.read_text())
    assert set(r) == {"add_step_p50_ms", "add_step_p99_ms", "add_step_max_ms",
                      "naive_step_p50_ms", "naive_step_p99_ms", "write_steps_per_s",
                      "naive_write_steps_per_s", "load_s", "naive_load_s"}  # fmt: skip
    table = capsys.readouterr().out.splitlines()
    # One line per metric, labelled with the sizes it ran with, showing the JSON's figures.
    expected = {
        "add_step p99, 2x16px cams @ 500 Hz (20 steps)": (
            f"{r['add_step_p99_ms']:.3f} ms", f"{r['naive_step_p99_ms']:.2f} ms"),
        "add_step p50 / max": (
            f"{r['add_step_p50_ms']:.3f} / {r['add_step_max_ms']:.2f} ms",
            f"{r['naive_step_p50_ms']:.2f} ms (p50)"),
        "state-only write throughput": (
            f"{r['write_steps_per_s']:,.0f} steps/s", f"{r['naive_write_steps_per_s']:,.0f} steps/s"),
        "load 500 state transitions to RAM": (
            f"{r['load_s']:.3f} s", f"{r['naive_load_s']:.1f} s (extrapolated)"),
    }  # fmt: skip
    assert table[0].split() == ["metric", "handrail.demos", "naive", "zarr", "append", "target"]
    for label, (ours, naive) in expected.items():
        line = next(line for line in table if line.startswith(label))
        assert f"  {ours}  " in line and f"  {naive}" in line, line
    assert list(tmp_path.iterdir()) == [out]  # the temporary stores are removed


class _Recorder:
    """An EpisodeWriter stand-in that records the calls the bench makes."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def begin_episode(self, seed: int) -> None:
        self.calls.append(("begin", seed))

    def add_step(self, *, obs: dict, action: np.ndarray, reward: float, terminated: bool,
                 truncated: bool) -> None:  # fmt: skip
        self.calls.append(("step", int(obs["x"][0]), truncated))

    def end_episode(self, *, final_obs: dict, success: bool, wait: bool) -> None:
        self.calls.append(("end", int(final_obs["x"][0])))


def test_timed_loop_cuts_episodes_and_truncates_their_last_step() -> None:
    steps = [{"obs": {"x": np.array([i])}, "action": np.zeros(2)} for i in range(3)]
    writer = _Recorder()
    latencies = bench_store_cmd._write(writer, steps, 5, episode_steps=2, period_s=0.0)
    assert latencies.shape == (5,)
    assert writer.calls == [
        ("begin", 0), ("step", 0, False), ("step", 1, True), ("end", 1),
        ("begin", 2), ("step", 2, False), ("step", 0, True), ("end", 0),
        ("begin", 4), ("step", 1, True), ("end", 1),  # the run's last step ends its episode
    ]  # fmt: skip


def test_naive_baseline_appends_every_field_of_every_step(tmp_path: Path) -> None:
    import zarr

    rng = np.random.default_rng(0)
    fields = bench_store_cmd._fields(8, 1)
    pool = bench_store_cmd._steps(rng, fields, 2)
    assert len(bench_store_cmd._naive(tmp_path / "n", fields, pool, 3)) == 3
    root = zarr.open_group(tmp_path / "n", mode="r")
    for f in fields:
        stored = root[f.name][:]
        assert stored.shape == (3, *f.shape) and stored.dtype == np.dtype(f.dtype)
        np.testing.assert_array_equal(stored[2], pool[0]["obs"][f.name])  # step 2 = pool[2 % 2]
    np.testing.assert_array_equal(root["action"][1], pool[1]["action"])
    assert root["reward"].shape == root["terminated"].shape == (3,)


def test_bench_store_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="--load-steps"):
        bench_store(load_steps=0)
