"""The actor: steps to its sinks, one success definition, make_policy gives the actor's action,
stateful policies are reset with each episode, episodes cut for envs without a time limit, a
restored actor continues as the uninterrupted one."""

from __future__ import annotations

import functools
import json

import gymnasium as gym
import jax
import numpy as np

from handrail.control.step import ActedBy
from handrail.learners.actor import Actor, LearnedPolicy, policy_key
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.checkpoint import StaticParams
from handrail.learners.evaluation import evaluate
from handrail.learners.learner import LoopConfig
from handrail.learners.loop import Trainer
from handrail.learners.specs import ActionSpec, ObsSpec


class LiftThenDrop(gym.Env):
    """Success is true at step 2 only (a cube lifted, then dropped); episodes last 4 steps."""

    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,), np.float32)})
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"x": np.full(2, seed or 0, np.float32) / 1e3}, {"success": False}

    def step(self, action):
        self.t += 1
        obs = {"x": np.full(2, self.t / 10, np.float32)}
        return obs, float(self.t == 2), False, self.t == 4, {"success": self.t == 2}


class Sink:
    def __init__(self) -> None:
        self.steps: list = []

    def add(self, step) -> None:
        self.steps.append(step)


def test_training_and_evaluation_count_success_the_same_way() -> None:
    env = LiftThenDrop()
    sac = SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
              SACConfig(hidden_dims=(8,), num_critics=2, utd=1, batch_size=8))  # fmt: skip
    trainer = Trainer(env, sac, LoopConfig(warmup_steps=8, buffer_capacity=64), seed=0)
    training = [e.success for e in trainer.run(8)]
    evaluated = evaluate(LiftThenDrop(), lambda obs: np.zeros(1, np.float32), 2, seed=0)
    assert training == [True, True]  # success at step 2 counts although step 4 reports False
    assert evaluated.successes == (True, True) and evaluated.success_rate == 1.0


def test_steps_go_to_every_sink_with_seeds_and_who_acted() -> None:
    sinks = [Sink(), Sink()]
    actor = Actor(LiftThenDrop(), lambda obs: np.full(1, 0.5, np.float32), seed=7, sinks=sinks,
                  acted_by=ActedBy.SCRIPTED)  # fmt: skip
    stats = actor.run_episodes(2)
    assert [s.length for s in stats] == [4, 4] and sinks[0].steps == sinks[1].steps
    steps = sinks[0].steps
    assert [s.episode_seed for s in steps] == [7] * 4 + [8] * 4
    assert all(s.acted_by is ActedBy.SCRIPTED for s in steps)
    assert [s.done for s in steps] == [False, False, False, True] * 2
    np.testing.assert_array_equal(steps[1].obs["x"], steps[0].next_obs["x"])


def test_warmup_acts_at_random_inside_the_action_space() -> None:
    sink = Sink()
    actor = Actor(LiftThenDrop(), lambda obs: np.full(1, 0.5, np.float32), seed=0, sinks=[sink],
                  warmup_steps=5)  # fmt: skip
    actor.run_episodes(2)
    actions = np.array([s.action for s in sink.steps])
    assert np.all(actions[5:] == 0.5) and np.all(np.abs(actions[:5]) <= 1)
    assert len(set(actions[:5, 0].tolist())) == 5


def test_stateful_policies_are_reset_with_each_episode() -> None:
    class Counting:
        def __init__(self) -> None:
            self.resets: list[int | None] = []

        def reset(self, seed=None) -> None:
            self.resets.append(seed)

        def __call__(self, obs):
            return np.zeros(1, np.float32)

    policy = Counting()
    Actor(LiftThenDrop(), policy, seed=3).run_episodes(3)
    assert policy.resets == [3, 4, 5]


def test_episodes_are_cut_for_envs_without_a_time_limit() -> None:
    class Endless(LiftThenDrop):
        def step(self, action):
            obs, reward, _, _, info = super().step(action)
            return obs, reward, False, False, info

    sink = Sink()
    stats = Actor(Endless(), lambda obs: np.zeros(1, np.float32), seed=0, sinks=[sink],
                  max_episode_steps=6).run_episodes(1)  # fmt: skip
    assert stats[0].length == 6 and sink.steps[-1].truncated and not sink.steps[-1].terminated


def test_make_policy_gives_the_action_the_actor_takes() -> None:
    env = LiftThenDrop()
    sac = SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
              SACConfig(hidden_dims=(8,), num_critics=2))  # fmt: skip
    params = sac.policy_params(sac.init(jax.random.PRNGKey(0)))
    make = functools.partial(sac.make_policy, deterministic=False)
    learned = LearnedPolicy(make, StaticParams(params), sac.obs_spec, sac.action_spec, seed=4)
    sink = Sink()
    Actor(env, learned, seed=0, sinks=[sink]).run_episodes(1)
    policy = sac.make_policy(params, deterministic=False)
    for n, step in enumerate(sink.steps):
        expected = policy(sac.obs_spec.flatten(step.obs), policy_key(learned.base_key, n))
        np.testing.assert_array_equal(step.action, sac.action_spec.to_env(np.asarray(expected)))


def test_a_restored_actor_continues_as_the_uninterrupted_one() -> None:
    """Counters saved between episodes (env steps, episodes, the warm-up generator) give the
    same episodes and warm-up actions; the episode the restored actor was in is dropped."""

    def actor(sink: Sink) -> Actor:
        return Actor(LiftThenDrop(), lambda obs: np.full(1, 0.5, np.float32), seed=5,
                     sinks=[sink], warmup_steps=14)  # fmt: skip

    full_sink, first_sink, resumed_sink = Sink(), Sink(), Sink()
    actor(full_sink).run_episodes(4)
    first = actor(first_sink)
    first.run_episodes(2)
    counters = json.loads(json.dumps(first.counters()))  # as a checkpoint stores them
    resumed = actor(resumed_sink)
    resumed.step()  # mid-episode: restore drops this episode
    resumed.restore(counters)
    assert resumed.at_episode_start and (resumed.env_steps, resumed.episodes) == (8, 2)
    resumed.run_episodes(2)
    expected = full_sink.steps[8:]
    assert [s.episode_seed for s in resumed_sink.steps[1:]] == [s.episode_seed for s in expected]
    np.testing.assert_array_equal([s.action for s in resumed_sink.steps[1:]],
                                  [s.action for s in expected])  # fmt: skip
