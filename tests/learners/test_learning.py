"""Learning tests: small CPU configs must reach a success threshold within a step budget.

Marked slow, still run in CI. Each test trains in-process through ``handrail train`` with the
task's preset (``handrail.launch.train_config.PRESETS``: 128x128 MLPs, 2 LayerNorm critics, batch
128, UTD 8, gamma 0.95, initial temperature 0.05, dense reward; pick_cube adds a TD3+BC-scaled
behaviour-cloning term on the demo rows, bc_weight 2.0) and stops at the first evaluation
(20 episodes, every 1000 env steps) that reaches the threshold.

Measured (2-core CPU shared with other jobs, so wall clock is pessimistic; stop at threshold):
- reach, 90%: seed 0 at 7.0k env steps (95%, 1.8 min of training when alone), seed 1 at 7.0k
  (100%, 2.6 min next to another run).
- pick_cube + 20 expert demos (``--demos expert:20``), bc_weight 2.0, 80%: seed 0 at 10k env
  steps (3.2 min next to another run; 90% at 13k), seed 1 at 10k (3.5 min), seed 2 at 12k
  (4.1 min), seed 3 at 12k (3.8 min). bc_weight 1.0: seeds 0-2 at 12-14k but seed 3 peaked at
  75% in 20k. Without the BC term seed 0 needed 28k (8.8 min), seed 1 peaked at 55% in 30k.
  Runs are deterministic on one CPU (a repeated seed-2 run gave the same curve).
The pick_cube budget, 20k env steps, is about 1.7x the slowest seed (at most ~5.5 min).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handrail.launch.train_cmd import train
from handrail.launch.train_config import TrainConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REACH_STEPS = 15_000
"""Env-step budget for reach to reach 90% (about 2x what seeds 0 and 1 needed)."""
PICK_STEPS = 20_000
"""Env-step budget for pick_cube with 20 expert demos to reach 80% (seeds 0-3 needed 10-12k)."""


def run_until(tmp_path: Path, threshold: float, **options: object) -> list[dict]:
    config = TrainConfig(run_dir=tmp_path / "run", stop_at_success=threshold, progress=False,
                         **options)  # fmt: skip
    assert train(config) == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "eval"]


def test_reach_reaches_90_percent(tmp_path: Path) -> None:
    evals = run_until(tmp_path, 0.9, task="reach", steps=REACH_STEPS, seed=0)
    best = max(r["success_rate"] for r in evals)
    assert best >= 0.9, f"reach: best eval success {best:.0%} after {evals[-1]['env_steps']} steps"
    assert (tmp_path / "run" / "checkpoints" / "best" / "state.msgpack").is_file()


def test_pick_cube_with_20_expert_demos_reaches_80_percent(tmp_path: Path) -> None:
    evals = run_until(tmp_path, 0.8, task="pick_cube", demos="expert:20", steps=PICK_STEPS, seed=0)
    best = max(r["success_rate"] for r in evals)
    assert best >= 0.8, f"pick_cube: best success {best:.0%} after {evals[-1]['env_steps']} steps"
