"""The DSRL example: the learner's action is a flow base's noise, decoded and played as the base
was trained to."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium
import numpy as np
import pytest

from handrail.app.envs import make_env
from handrail.examples.steer_flow_base import ENV_ID, NoiseSteering
from handrail.learners.agents.bc import BCConfig, load_bc, save_bc, train_bc
from handrail.learners.specs import ActionSpec, ObsSpec

TASK = f"handrail.examples.steer_flow_base:{ENV_ID}"


class Recorder(gymnasium.Env[dict[str, np.ndarray], np.ndarray]):
    """Observes a random ``x``; keeps every action it is given."""

    observation_space = gymnasium.spaces.Dict({"x": gymnasium.spaces.Box(-1, 1, (2,))})
    action_space = gymnasium.spaces.Box(-2.0, 2.0, (2,), np.float32)

    def __init__(self) -> None:
        self.actions: list[np.ndarray] = []
        self.rng = np.random.default_rng(0)

    def _obs(self) -> dict[str, np.ndarray]:
        return {"x": self.rng.uniform(-1, 1, 2).astype(np.float32)}

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict]:  # fmt: skip
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        self.actions.append(np.asarray(action))
        return self._obs(), 0.0, False, False, {}


def flow_base(folder: Path, space: Any, action_space: Any, **config: Any) -> Path:
    """A flow BC checkpoint (a few steps: what it acts does not matter here) in ``folder``."""
    obs_spec, action_spec = ObsSpec.from_space(space), ActionSpec.from_space(action_space)
    rng = np.random.default_rng(0)
    obs = {k: np.stack([space[k].sample() for _ in range(40)]) for k in obs_spec.keys}
    data = SimpleNamespace(obs=obs, action=rng.uniform(-0.5, 0.5, (40, action_spec.dim)),
                           episode_starts=np.array([0, 20]), episode_lengths=np.array([20, 20]))  # fmt: skip
    settings = BCConfig(hidden_dims=(16,), steps=20, eval_every=20, **config)
    folder.mkdir()
    save_bc(folder, train_bc(data, obs_spec, action_spec, settings), settings, obs_spec,
            action_spec)  # fmt: skip
    return folder


def test_the_learners_noise_is_what_the_base_decodes_and_plays(tmp_path: Path) -> None:
    inner = Recorder()
    base = flow_base(tmp_path / "flow", inner.observation_space, inner.action_space, flow_steps=3)
    env = NoiseSteering(inner, load_bc(base), bound=1.5)
    assert env.action_space.shape == (2,) and env.action_space.high.tolist() == [1.5, 1.5]
    obs, _ = env.reset(seed=0)
    policy = load_bc(base)
    for noise in (np.array([1.5, -1.5]), np.array([-1.5, 1.5]), np.zeros(2)):
        expected = policy.decode(obs, noise.reshape(1, 2).astype(np.float32))[0]
        obs, *_ = env.step(noise)
        np.testing.assert_array_equal(inner.actions[-1], expected)
    assert not np.allclose(inner.actions[0], inner.actions[1])


def test_a_chunked_base_is_played_as_trained_with_the_noise_of_each_query(tmp_path: Path) -> None:
    inner = Recorder()
    base = flow_base(tmp_path / "flow", inner.observation_space, inner.action_space,
                     flow_steps=3, horizon=3, execute=2)  # fmt: skip
    env = NoiseSteering(inner, load_bc(base), bound=1.0)
    assert env.action_space.shape == (6,)
    obs, _ = env.reset(seed=0)
    policy = load_bc(base)
    noise = np.linspace(-1, 1, 6).astype(np.float32)
    chunk = policy.decode(obs, noise.reshape(3, 2))
    env.step(noise)
    env.step(-noise)  # the second action of the first chunk: this step's noise is not asked
    np.testing.assert_array_equal(np.stack(inner.actions), chunk[:2])


def test_a_base_that_ignores_noise_or_a_bound_of_zero_is_refused(tmp_path: Path) -> None:
    inner = Recorder()
    mse = flow_base(tmp_path / "mse", inner.observation_space, inner.action_space)
    with pytest.raises(ValueError, match=r"nothing to steer.*--bc\.flow-steps"):
        NoiseSteering(inner, load_bc(mse))
    flow = flow_base(tmp_path / "flow", inner.observation_space, inner.action_space, flow_steps=2)
    with pytest.raises(ValueError, match="bound must be > 0"):
        NoiseSteering(inner, load_bc(flow), bound=0.0)


def test_handrail_train_builds_it_by_name_around_a_handrail_task(tmp_path: Path) -> None:
    reach = make_env("reach")
    base = flow_base(tmp_path / "flow", reach.observation_space, reach.action_space,
                     flow_steps=2, horizon=2, temporal_ensemble=True)  # fmt: skip
    reach.close()
    env = make_env(TASK, inner_task="reach", base=str(base), bound=1.0, episode_steps=7)
    inner, layers = env, []
    while inner is not None:
        layers.append(type(inner))
        inner = getattr(inner, "env", None)
    assert NoiseSteering in layers and env.action_space.shape == (8,)
    env.reset(seed=1)
    ends = [env.step(env.action_space.sample())[3] for _ in range(7)]
    assert ends == [False] * 6 + [True]  # the task's own settings reach the task
    env.close()
