"""The tiny trainer the crash-during-save test and its child processes share."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import jax
import numpy as np

from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.learner import LoopConfig
from handrail.learners.loop import Trainer
from handrail.learners.specs import ActionSpec, ObsSpec


def make_trainer(sac: SAC | None = None) -> Trainer:
    """Pendulum with 10-step episodes, 32x32 nets; a replay big enough to make saves take a while.

    A fresh trainer; on ``sac`` when given, so that it shares that agent's compiled steps (they
    are jitted with the agent as a static argument).
    """
    env = gym.make("Pendulum-v1", max_episode_steps=10)
    if sac is None:
        config = SACConfig(hidden_dims=(32, 32), num_critics=2, utd=1, batch_size=32, n_step=2)
        sac = SAC(ObsSpec.from_space(env.observation_space),
                  ActionSpec.from_space(env.action_space), config)  # fmt: skip
    return Trainer(env, sac, LoopConfig(warmup_steps=10, buffer_capacity=50_000), seed=0)


def state_digest(trainer: Trainer) -> str:
    """SHA-256 of the learner's state and replay: equal digests, identical training state."""
    digest = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves((trainer.learner.state, trainer.learner.replay)):
        digest.update(np.asarray(leaf).tobytes())
    return digest.hexdigest()
