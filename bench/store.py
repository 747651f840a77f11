"""``handrail bench store``: episode-store latency and throughput next to naive zarr appends.

Three numbers, each beside a naive baseline that appends every step to plain zarr arrays:
- added latency per step of ``add_step`` in a simulated control loop (two cameras), p50/p99/max;
- state-only write throughput (steps/s, including the final commit and close);
- seconds to load a state-only store into RAM.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

STATE_DIM, ACTION_DIM = 7, 4


def _fields(image_size: int, cameras: int) -> list:
    from handrail.demos import FieldSpec

    fields = [FieldSpec("state", "float32", (STATE_DIM,), "mixed")]
    fields += [FieldSpec(f"cam{i}", "uint8", (image_size, image_size, 3)) for i in range(cameras)]
    return fields


def _steps(rng: np.random.Generator, fields: list, pool: int) -> list[dict]:
    """A pool of random steps (images included) so generating data costs nothing in the loop."""
    return [
        {
            "obs": {f.name: _random(rng, f) for f in fields},
            "action": rng.uniform(-1, 1, ACTION_DIM).astype(np.float32),
        }
        for _ in range(pool)
    ]


def _random(rng: np.random.Generator, f) -> np.ndarray:
    if f.dtype == "uint8":
        return rng.integers(0, 256, f.shape, dtype=np.uint8)
    return rng.standard_normal(f.shape).astype(f.dtype)


def _write(writer, steps: list[dict], n: int, episode_steps: int, period_s: float) -> np.ndarray:
    """Run ``n`` steps (paced at ``period_s`` when > 0); returns add_step seconds per step."""
    lat = np.empty(n)
    next_tick = time.perf_counter()
    for t in range(n):
        if period_s > 0:
            next_tick += period_s
            time.sleep(max(0.0, next_tick - time.perf_counter()))
        step = steps[t % len(steps)]
        if t % episode_steps == 0:
            writer.begin_episode(seed=t)
        last = (t + 1) % episode_steps == 0 or t == n - 1
        t0 = time.perf_counter()
        writer.add_step(
            obs=step["obs"], action=step["action"], reward=0.0, terminated=False, truncated=last
        )
        lat[t] = time.perf_counter() - t0
        if last:
            writer.end_episode(final_obs=step["obs"], success=True, wait=False)
    return lat


def _naive(path: Path, fields: list, steps: list[dict], n: int) -> np.ndarray:
    """Per-step ``Array.append`` of every field to plain zarr arrays; seconds per step."""
    import zarr

    root = zarr.open_group(path, mode="w")
    # name -> (shape, dtype, the value of a step that does not carry it)
    rows: dict[str, tuple[tuple[int, ...], str, float | None]] = {
        f.name: (f.shape, f.dtype, None) for f in fields
    }
    rows |= {"action": ((ACTION_DIM,), "float32", None), "reward": ((), "float32", 0.0)}
    rows |= {"terminated": ((), "bool", False), "truncated": ((), "bool", False)}
    arrays = {
        k: root.create_array(k, shape=(0, *s), chunks=(1 if len(s) == 3 else 256, *s), dtype=d)
        for k, (s, d, _) in rows.items()
    }
    lat = np.empty(n)
    for t in range(n):
        step = steps[t % len(steps)]
        t0 = time.perf_counter()
        for k, arr in arrays.items():
            value = step["obs"].get(k, step["action"] if k == "action" else rows[k][2])
            arr.append(np.asarray(value, dtype=rows[k][1])[None])
        lat[t] = time.perf_counter() - t0
    return lat


def _load_naive(path: Path, n: int) -> float:
    """Seconds to read ``n`` steps one index at a time (a naive per-step loader)."""
    import zarr

    arrays = [zarr.open_array(path / k, mode="r") for k in ("state", "action", "reward")]
    t0 = time.perf_counter()
    for t in range(n):
        for arr in arrays:
            arr[t]
    return time.perf_counter() - t0


def _ms(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q) * 1e3)


class _Steps(NamedTuple):
    """Step counts of the three measurements and the naive baseline (named like their flags)."""

    latency_steps: int
    throughput_steps: int
    load_steps: int
    baseline_steps: int
    episode_steps: int


def _check_args(steps: _Steps, image_size: int, control_hz: float) -> None:
    """Reject counts below 1 and a non-positive control rate, naming the flag."""
    for name, value in [*steps._asdict().items(), ("image_size", image_size)]:
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if control_hz <= 0:
        raise ValueError(f"--control-hz must be > 0, got {control_hz}")


def _latency(
    tmp: Path, kw: dict, fields: list, pool: list[dict], n: _Steps, control_hz: float
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per add_step in the paced camera loop, and per step of the naive baseline."""
    from handrail.demos import create_store

    with create_store(tmp / "cams", obs_fields=fields, **kw) as w:
        lat = _write(w, pool, n.latency_steps, n.episode_steps, 1.0 / control_hz)
    return lat, _naive(tmp / "naive_cams", fields, pool, n.baseline_steps)


def _throughput(
    tmp: Path, kw: dict, fields: list, pool: list[dict], n: _Steps
) -> tuple[float, np.ndarray]:
    """State-only steps/s of the store, and seconds per step of the naive baseline."""
    from handrail.demos import create_store

    with create_store(tmp / "state", obs_fields=fields, **kw) as w:
        t0 = time.perf_counter()  # from the first step to the last commit and close
        _write(w, pool, n.throughput_steps, n.episode_steps, 0.0)
    write_sps = n.throughput_steps / (time.perf_counter() - t0)
    return write_sps, _naive(tmp / "naive_state", fields, pool, n.baseline_steps)


def _load(tmp: Path, kw: dict, fields: list, pool: list[dict], n: _Steps) -> tuple[float, float]:
    """Seconds to load a state-only store, and the naive per-step loader's (extrapolated)."""
    from handrail.demos import create_store, open_store

    with create_store(tmp / "load", obs_fields=fields, durable=False, **kw) as w:
        _write(w, pool, n.load_steps, n.episode_steps, 0.0)
    t0 = time.perf_counter()
    data = open_store(tmp / "load").load()
    load_s = time.perf_counter() - t0
    assert data.num_steps == n.load_steps
    naive_load_s = (
        _load_naive(tmp / "naive_state", n.baseline_steps) * n.load_steps / n.baseline_steps
    )
    return load_s, naive_load_s


def _measure(
    workdir: Path | None, seed: int, n: _Steps, image_size: int, cameras: int, control_hz: float
) -> dict[str, float]:
    """Run every measurement in a fresh temporary directory (removed after); the results."""
    rng = np.random.default_rng(seed)
    tmp = Path(tempfile.mkdtemp(prefix="bench_store_", dir=workdir))
    kw = dict(kind="rollout", action_dim=ACTION_DIM, control_dt_s=1.0 / control_hz, task="bench")
    try:
        cam_fields = _fields(image_size, cameras)
        cam_steps = _steps(rng, cam_fields, 16)
        lat, naive_cam = _latency(tmp, kw, cam_fields, cam_steps, n, control_hz)
        state_fields = _fields(image_size, 0)
        state_steps = _steps(rng, state_fields, 64)
        write_sps, naive_state = _throughput(tmp, kw, state_fields, state_steps, n)
        load_s, naive_load_s = _load(tmp, kw, state_fields, state_steps, n)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "add_step_p50_ms": _ms(lat, 50),
        "add_step_p99_ms": _ms(lat, 99),
        "add_step_max_ms": float(lat.max() * 1e3),
        "naive_step_p50_ms": _ms(naive_cam, 50),
        "naive_step_p99_ms": _ms(naive_cam, 99),
        "write_steps_per_s": write_sps,
        "naive_write_steps_per_s": float(len(naive_state) / naive_state.sum()),
        "load_s": load_s,
        "naive_load_s": naive_load_s,
    }


def bench_store(
    latency_steps: int = 1500,
    throughput_steps: int = 20_000,
    load_steps: int = 100_000,
    baseline_steps: int = 200,
    episode_steps: int = 200,
    control_hz: float = 50.0,
    image_size: int = 128,
    cameras: int = 2,
    seed: int = 0,
    workdir: Path | None = None,
    out: Path | None = None,
) -> int:
    """Episode-store latency, throughput and load time next to a naive per-step zarr append.

    Args:
        latency_steps: steps of the simulated control loop with cameras (1500 = 30 s at 50 Hz).
        throughput_steps: steps written as fast as possible to a state-only store.
        load_steps: state transitions in the store that is loaded into RAM.
        baseline_steps: steps of the naive per-step zarr append baseline.
        episode_steps: steps per episode in every test.
        control_hz: rate of the simulated control loop.
        image_size: height and width of each camera image.
        cameras: number of cameras in the latency test.
        seed: seed of the random data.
        workdir: where to put the stores (a fresh temporary directory by default; removed after).
        out: also write the results as JSON here.
    """
    n = _Steps(latency_steps, throughput_steps, load_steps, baseline_steps, episode_steps)
    _check_args(n, image_size, control_hz)
    results = _measure(workdir, seed, n, image_size, cameras, control_hz)
    _print_table(results, latency_steps, cameras, image_size, control_hz, load_steps)
    if out is not None:
        Path(out).write_text(json.dumps(results, indent=2))
    return 0


def _print_table(r: dict, steps: int, cameras: int, size: int, hz: float, load_steps: int) -> None:
    rows = [
        (
            f"add_step p99, {cameras}x{size}px cams @ {hz:g} Hz ({steps} steps)",
            f"{r['add_step_p99_ms']:.3f} ms",
            f"{r['naive_step_p99_ms']:.2f} ms",
            "< 1 ms",
        ),
        (
            "add_step p50 / max",
            f"{r['add_step_p50_ms']:.3f} / {r['add_step_max_ms']:.2f} ms",
            f"{r['naive_step_p50_ms']:.2f} ms (p50)",
            "",
        ),
        (
            "state-only write throughput",
            f"{r['write_steps_per_s']:,.0f} steps/s",
            f"{r['naive_write_steps_per_s']:,.0f} steps/s",
            ">= 5,000 steps/s",
        ),
        (
            f"load {load_steps:,} state transitions to RAM",
            f"{r['load_s']:.3f} s",
            f"{r['naive_load_s']:.1f} s (extrapolated)",
            "< 2 s",
        ),
    ]
    head = ("metric", "handrail.demos", "naive zarr append", "target")
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(4)]
    for row in [head, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
