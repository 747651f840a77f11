"""Steering a flow BC base in its noise space (DSRL; Wagenmaker et al. 2025) with handrail train.

A flow policy (``handrail bc --bc.flow-steps K``) turns Gaussian noise into an action chunk.
DSRL leaves the base frozen and learns which noise to give it: the learner's action is the
noise, so everything it can do is something the base does. Importing this module registers
``SteerFlow-v0``: a handrail task whose action is the base's noise, in [-bound, bound] per
dimension (horizon x action_dim of them), decoded and played as the base was trained to
(every ``execute`` steps or temporally ensembled)::

    handrail bc --demos STORE --task peg_insert --bc.flow-steps 10 --run-dir runs/flow-base
    handrail train --task handrail.examples.steer_flow_base:SteerFlow-v0 \\
        --env-kwargs inner_task=peg_insert base=runs/flow-base bound=3 \\
        --sac.algorithm td3 --ignore-obs-keys proprio peg hole

Other ``--env-kwargs`` go to the task (``episode_steps=50``). The learner's actions are noise,
not the arm's, so demonstrations (``--demos``), a person (``--human``) and ``--record`` do not
apply here: the base has learned the demonstrations already.

What it gave on peg_insert and pick_cube, against residual RL on the same demonstrations:
docs/benchmarks/residual.md#steering-a-flow-bases-noise-dsrl. It is an example, not a learner
of handrail's: on those tasks it did not beat the residual.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from handrail.learners.agents.bc import BCPolicy, load_bc
from handrail.learners.checkpoint import checkpoint_folder

ENV_ID = "SteerFlow-v0"
"""The registered id (``handrail.examples.steer_flow_base:SteerFlow-v0``)."""


class NoiseSteering(gymnasium.Wrapper):
    """``env`` whose action is ``policy``'s noise (see the module docstring).

    Args:
        env: a handrail task (or any env whose observations the base reads).
        policy: a flow BC policy (:func:`~handrail.learners.agents.bc.load_bc`).
        bound: the noise's range per dimension, [-bound, bound] (the base was trained on
            N(0, 1)).

    Raises:
        ValueError: the policy is not a flow policy (its actions ignore noise), or the bound
            is not positive.
    """

    def __init__(self, env: gymnasium.Env, policy: BCPolicy, bound: float = 1.0) -> None:
        super().__init__(env)
        if policy.config.flow_steps <= 0:
            raise ValueError(
                f"{policy.name} regresses its actions: they do not depend on noise, so there is "
                "nothing to steer; train the base with handrail bc --bc.flow-steps 10"
            )
        if not bound > 0:
            raise ValueError(f"the noise bound must be > 0, got {bound}")
        self.policy = policy
        self.noise = np.zeros(policy.shape, np.float32)
        self.base = policy.per_step(lambda obs: policy.decode(obs, self.noise))
        size = int(np.prod(policy.shape))
        self.action_space = gymnasium.spaces.Box(-bound, bound, (size,), np.float32)
        self._obs: Mapping[str, np.ndarray] | None = None

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        obs, info = self.env.reset(seed=seed, options=options)
        self.base.reset(seed=seed)
        self._obs = obs
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("NoiseSteering: reset the env before stepping it")
        self.noise = np.asarray(action, np.float32).reshape(self.policy.shape)
        obs, reward, terminated, truncated, info = self.env.step(self.base(self._obs))
        self._obs = obs
        return obs, reward, terminated, truncated, info


def make(inner_task: str, base: str | Path, bound: float = 1.0, render_mode: str | None = None,
         **task_kwargs: Any) -> NoiseSteering:  # fmt: skip
    """``inner_task`` (a handrail task or gymnasium id, with ``task_kwargs``) steered through the flow
    BC run or checkpoint ``base``."""
    from handrail.app.envs import make_env

    env = make_env(inner_task, render_mode=render_mode, **task_kwargs)
    return NoiseSteering(env, load_bc(checkpoint_folder(Path(base))), float(bound))


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=make)  # type: ignore[arg-type]
