"""Scripted experts reach >= 95% success on 50 seeded episodes."""

from __future__ import annotations

import pytest

from handrail import sim


@pytest.mark.parametrize("task", ["reach", "pick_cube"])
def test_expert_success_rate(task: str) -> None:
    env = sim.make(task)
    expert = sim.make_expert(task, env)
    successes = 0
    for seed in range(50):
        obs, _ = env.reset(seed=seed)
        expert.reset(seed=seed)
        done = False
        info = {"success": False}
        while not done:
            action = expert(obs)
            assert env.action_space.contains(action)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        successes += bool(info["success"])
    assert successes >= 48, f"{task}: expert succeeded in {successes}/50"
