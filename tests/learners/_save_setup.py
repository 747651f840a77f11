"""The tiny trainer the crash-during-save test and its child processes share."""

from __future__ import annotations

import gymnasium as gym

from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.learner import LoopConfig
from handrail.learners.loop import Trainer
from handrail.learners.specs import ActionSpec, ObsSpec


def make_trainer() -> Trainer:
    """Pendulum with 10-step episodes, 32x32 nets; a replay big enough to make saves take a while."""
    env = gym.make("Pendulum-v1", max_episode_steps=10)
    config = SACConfig(hidden_dims=(32, 32), num_critics=2, utd=1, batch_size=32, n_step=2)
    sac = SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
              config)  # fmt: skip
    return Trainer(env, sac, LoopConfig(warmup_steps=10, buffer_capacity=50_000), seed=0)
