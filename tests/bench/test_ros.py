"""`handrail bench ros` end to end (real ROS 2 in a private network namespace, small settings)."""

import json
import sys
from pathlib import Path


def test_bench_ros_reports_timing_per_rate_and_camera(tmp_path, in_netns):
    out = tmp_path / "ros.json"
    handrail = str(Path(sys.executable).with_name("handrail"))
    cmd = [handrail, "bench", "ros", "--steps", "20", "--rates", "20", "--image-size", "32",
           "--no-learner", "--out", str(out)]  # fmt: skip
    proc = in_netns(cmd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(r["rate_hz"], r["camera"]) for r in rows] == [(20.0, "none"), (20.0, "32x32")]
    for r in rows:
        assert r["steps"] == 20 and r["learner_updates"] == 0
        assert 0 <= r["jitter_p50_ms"] <= r["jitter_p99_ms"]
        assert 0 < r["obs_age_p50_ms"] <= r["obs_age_p99_ms"]
        assert 0 < r["latency_p50_ms"] <= r["latency_p99_ms"]
    assert "| 20 Hz | 32x32 |" in proc.stdout
