"""Learning tests: the task presets must reach a success threshold within a step budget.

Marked slow, still run in CI. Each test trains in-process through ``handrail train`` with the
task's preset (``handrail.app.config``) and stops at the first evaluation (20 episodes,
every 1000 env steps) that reaches the threshold.

pick_cube uses the sparse reward (1 on success, the episode ends there) and 20 scripted demos,
and no behaviour-cloning term: the default preset. Measured with `handrail bench learning`
(50-episode evaluations every 1000 env steps; the preset without the cube's absolute pose,
updating after 250 warm-up steps): seeds 0, 1, 2 first reached 90% or more at 2k, 1k and 2k env
steps and sustained 90% from 4k, 5k and 4k. The budget, 6k env steps, was set at twice the
latest first crossing (3k with 500 warm-up steps) and is three times it now. reach (dense
reward, no demos) crosses 90% well inside its 15k-step preset. A task of a user's own, with
no preset: tests/examples/test_lift_can_learning.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handrail.app.config import preset
from handrail.launch.commands.train import train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REACH_STEPS = 15_000
"""Env-step budget for reach to reach 90%."""
PICK_STEPS = 6_000
"""Env-step budget for sparse pick_cube with 20 expert demos to reach 80% (3x the measured)."""


def run_until(tmp_path: Path, task: str, threshold: float, steps: int) -> list[dict]:
    config = preset(task, run_dir=tmp_path / "run", stop_at_success=threshold, progress=False,
                    steps=steps, seed=0, eval_every=1_000, eval_episodes=20)  # fmt: skip
    assert train(config) == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "eval"]


def test_reach_reaches_90_percent(tmp_path: Path) -> None:
    evals = run_until(tmp_path, "reach", 0.9, REACH_STEPS)
    best = max(r["success_rate"] for r in evals)
    assert best >= 0.9, f"reach: best eval success {best:.0%} after {evals[-1]['env_steps']} steps"
    assert (tmp_path / "run" / "checkpoints" / "best" / "state.msgpack").is_file()


def test_sparse_pick_cube_with_20_expert_demos_reaches_80_percent(tmp_path: Path) -> None:
    from handrail.sim.tasks import discover

    config = preset("pick_cube")
    env_config = discover()["pick_cube"].make_config(**config.env)
    assert env_config.reward == "sparse" and env_config.terminate_on_success
    assert config.expert_demos == 20 and config.sac.bc_weight == 0.0  # no BC term by default
    evals = run_until(tmp_path, "pick_cube", 0.8, PICK_STEPS)
    best = max(r["success_rate"] for r in evals)
    assert best >= 0.8, f"pick_cube: best success {best:.0%} after {evals[-1]['env_steps']} steps"
