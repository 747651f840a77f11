"""Scripted experts reach >= 95% success on 50 seeded episodes, for every task."""

from __future__ import annotations

import pytest

from handrail import sim


@pytest.mark.parametrize("task", sim.available_tasks())
def test_expert_success_rate(task: str) -> None:
    """Default configs: sparse reward and termination on success, so both must match success."""
    env = sim.make(task)
    expert = sim.make_expert(task, env)
    successes = 0
    for seed in range(50):
        obs, _ = env.reset(seed=seed)
        expert.reset(seed=seed)
        terminated = truncated = False
        info = {"success": False}
        while not (terminated or truncated):
            action = expert(obs)
            assert env.action_space.contains(action)
            obs, reward, terminated, truncated, info = env.step(action)
        successes += bool(info["success"])
        assert terminated == info["success"] and reward == float(info["success"])
    assert successes >= 48, f"{task}: expert succeeded in {successes}/50"
