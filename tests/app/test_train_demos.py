"""`--demos expert:N`: scripted expert episodes in the same form a store loads."""

from __future__ import annotations

import numpy as np

from handrail.app import train_demos
from handrail.app.envs import make_env


def test_expert_demos_load_like_a_store() -> None:
    """`--demos expert:N` yields the same EpisodeData a store loads, so one converter serves both."""
    from handrail.demos import EpisodeData
    from handrail.learners.demo_data import to_transitions
    from handrail.learners.specs import ActionSpec, ObsSpec

    data = train_demos.expert_episodes("reach", 3, seed=5)
    assert isinstance(data, EpisodeData)
    assert data.num_episodes == 3 and np.all(data.intervention == 2)  # 2: scripted
    assert [r.start for r in data.records] == data.episode_starts.tolist()
    assert [r.num_steps for r in data.records] == data.episode_lengths.tolist()
    assert all(r.success for r in data.records) and data.records[0].seed == 5
    env = make_env("reach")
    transitions = to_transitions(
        data, ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space)
    )
    assert len(transitions.reward) == data.num_steps
