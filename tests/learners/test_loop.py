"""Local training: the fused path equals actor + learner bit for bit, resume after wrap-around
equals an uninterrupted run, the asynchronous actor never waits, guards and errors."""

from __future__ import annotations

import threading
from pathlib import Path

import gymnasium as gym
import jax
import numpy as np
import pytest

from handrail.learners.actor import Actor
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.checkpoint import write_checkpoint_dir
from handrail.learners.evaluation import run_seed
from handrail.learners.learner import Learner, LoopConfig
from handrail.learners.loop import AsyncTrainer, Trainer, make_learned_policy
from handrail.learners.replay import Rows
from handrail.learners.specs import ActionSpec, ObsSpec

CONFIG = SACConfig(hidden_dims=(32, 32), num_critics=2, utd=2, batch_size=32, n_step=2)


def _pendulum() -> gym.Env:
    return gym.make("Pendulum-v1", max_episode_steps=10)


@pytest.fixture(scope="module")
def sac() -> SAC:
    env = _pendulum()
    return SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
               CONFIG)  # fmt: skip


class Actions:
    """A sink keeping the executed actions."""

    def __init__(self) -> None:
        self.actions: list[np.ndarray] = []

    def add(self, step) -> None:
        self.actions.append(np.asarray(step.action))


def _demo_rows(dim: int = 3) -> Rows:
    """Two short demo episodes (obs 7.0...) in replay rows."""
    k = 8  # 3 + final, 3 + final
    final = np.array([0, 0, 0, 1, 0, 0, 0, 1], bool)
    first = np.array([1, 0, 0, 0, 1, 0, 0, 0], bool)
    return Rows(data={"obs": np.full((k, dim), 7.0, np.float32),
                      "action": np.full((k, 1), 0.5, np.float32)},
                reward=np.ones(k, np.float32), terminated=np.zeros(k, bool), final=final,
                first=first, actor=np.zeros(k, np.int32), valid=np.ones(k, bool))  # fmt: skip


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def _assert_trees_equal(a, b) -> None:
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_fused_path_equals_actor_plus_learner(sac: SAC) -> None:
    loop = LoopConfig(warmup_steps=5, buffer_capacity=64)
    fused_actions = Actions()
    fused = Trainer(_pendulum(), sac, loop, seed=3, demos=_demo_rows(), sinks=[fused_actions])
    fused.run(35)
    learner = Learner(sac, loop, seed=3, demos=_demo_rows())
    actions = Actions()
    # the trainer's episodes come from the run's training stream of env seeds
    actor = Actor(_pendulum(), make_learned_policy(sac, learner, 3), seed=run_seed(3),
                  sinks=[learner, actions], warmup_steps=5)  # fmt: skip
    for _ in range(35):
        actor.step()
        learner.update()
    assert fused.updates == learner.updates == CONFIG.utd * (35 - 5 + 1)
    np.testing.assert_array_equal(np.array(fused_actions.actions), np.array(actions.actions))
    _assert_trees_equal(fused.learner.state, learner.state)
    _assert_trees_equal(fused.learner.replay, learner.replay)


def test_resume_after_wrap_around_equals_uninterrupted(tmp_path: Path, sac: SAC) -> None:
    loop = LoopConfig(warmup_steps=15, buffer_capacity=24)  # 40 steps + 4 finals wrap it
    full = Trainer(_pendulum(), sac, loop, seed=3, demos=_demo_rows())
    full.run(40)
    first = Trainer(_pendulum(), sac, loop, seed=3, demos=_demo_rows())
    first.run(30)  # 10-step episodes: step 30 ends one
    write_checkpoint_dir(tmp_path / "latest", first.save_into)
    resumed = Trainer(_pendulum(), sac, loop, seed=3, demos=_demo_rows())
    resumed.load(tmp_path / "latest")
    assert (resumed.env_steps, resumed.episodes) == (30, 3)
    resumed.run(10)
    assert (resumed.env_steps, resumed.updates) == (full.env_steps, full.updates)
    _assert_trees_equal(full.learner.state, resumed.learner.state)
    _assert_trees_equal(full.learner.replay, resumed.learner.replay)


def test_save_only_between_episodes_and_mismatched_files_refused(tmp_path: Path, sac: SAC) -> None:
    trainer = Trainer(_pendulum(), sac, LoopConfig(warmup_steps=3, buffer_capacity=64), seed=1)
    trainer.run(13)
    with pytest.raises(RuntimeError, match="between episodes"):
        write_checkpoint_dir(tmp_path / "mid", trainer.save_into)
    trainer.run(7)
    a = write_checkpoint_dir(tmp_path / "a", trainer.save_into)
    trainer.run(10)
    b = write_checkpoint_dir(tmp_path / "b", trainer.save_into)
    (a / "replay.npz").replace(b / "replay.npz")  # a replay from another save
    fresh = Trainer(_pendulum(), sac, LoopConfig(warmup_steps=3, buffer_capacity=64), seed=1)
    with pytest.raises(ValueError, match="replay belongs to another save"):
        fresh.load(tmp_path / "b")


def test_pretraining_runs_once_and_not_again_after_resume(tmp_path: Path, sac: SAC,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import handrail.learners.learner as learner_module

    calls = []
    real = learner_module._pretrain_jit

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(learner_module, "_pretrain_jit", counting)
    loop = LoopConfig(warmup_steps=3, buffer_capacity=64, pretrain_steps=20)
    trainer = Trainer(_pendulum(), sac, loop, seed=0, demos=_demo_rows())
    trainer.run(10)
    assert len(calls) == 1 and trainer.learner.pretrained
    write_checkpoint_dir(tmp_path / "latest", trainer.save_into)
    resumed = Trainer(_pendulum(), sac, loop, seed=0, demos=_demo_rows())
    resumed.load(tmp_path / "latest")
    resumed.run(10)
    assert len(calls) == 1


class OverridingWrapper(gym.Wrapper):
    """Executes a fixed action instead of the one it is given, and says so in info."""

    def step(self, action):
        executed = np.array([1.5], np.float32)
        obs, reward, terminated, truncated, info = self.env.step(executed)
        return obs, reward, terminated, truncated, {**info, "executed_action": executed,
                                                     "acted_by": 1}  # fmt: skip


def test_sinks_and_replay_get_the_executed_action(sac: SAC) -> None:
    sink = Actions()
    trainer = Trainer(OverridingWrapper(_pendulum()), sac, LoopConfig(warmup_steps=4,
                      buffer_capacity=64), seed=0, sinks=[sink])  # fmt: skip
    trainer.run(12)
    assert all(np.array_equal(a, [1.5]) for a in sink.actions)
    stored = np.asarray(trainer.learner.replay.data["action"])[:12]
    live = stored[np.asarray(trainer.learner.replay.next)[:12] != -2]
    np.testing.assert_allclose(live, 1.5 / 2.0)  # Pendulum's [-2, 2] mapped to [-1, 1]
    # a human chose it (acted_by 1), so the steps also went to the intervention segment
    assert int(trainer.learner.replay.size[2]) > 0


def test_async_actor_never_waits_for_a_blocked_learner(sac: SAC) -> None:
    trainer = AsyncTrainer(_pendulum(), sac, LoopConfig(warmup_steps=5, buffer_capacity=256),
                           seed=0)  # fmt: skip
    release = threading.Event()
    real_update = trainer.learner.update

    def blocked_update():
        release.wait(timeout=60)
        return real_update()

    trainer.learner.update = blocked_update  # type: ignore[method-assign]
    try:
        trainer.run(60)  # would hang if the actor waited for the learner
        assert trainer.env_steps == 60 and trainer.learner.version == 0
        release.set()
        for _ in range(3000):  # the first update compiles; a loaded CI machine is slow
            if trainer.learner.version > 0:
                break
            threading.Event().wait(0.1)
        assert trainer.learner.version > 0
        trainer.run(5)  # the actor picks up the published params
        assert trainer.policy.version == trainer.learner.version or trainer.policy.version > 0
    finally:
        release.set()
        trainer.close()


def test_async_steps_reach_the_learner_only_through_its_queue(tmp_path: Path, sac: SAC) -> None:
    """The actor hands steps to the learner thread's queue (never to the learner itself, which
    the thread may be updating); other sinks get them directly; a save drains the queue."""
    sink = Actions()
    trainer = AsyncTrainer(_pendulum(), sac, LoopConfig(warmup_steps=1000, buffer_capacity=64),
                           seed=0, sinks=[sink])  # fmt: skip
    try:
        assert trainer.learner not in trainer.actor.sinks and sink in trainer.actor.sinks
        trainer.run(10)
        write_checkpoint_dir(tmp_path / "latest", trainer.save_into)
        assert trainer.learner.steps == len(sink.actions) == 10
        assert trainer.learner.pending_steps == 0
    finally:
        trainer.close()


@pytest.mark.parametrize("kind", [Trainer, AsyncTrainer])
def test_a_replay_edit_sees_every_step_taken(sac: SAC, kind: type) -> None:
    """A relabelling (the learned reward's corrections) edits the replay with every step the
    actor took in it: the asynchronous learner's queue is drained first."""
    trainer = kind(_pendulum(), sac, LoopConfig(warmup_steps=1000, buffer_capacity=64), seed=0)
    try:
        trainer.run(20)  # two episodes of 10: 20 transitions and 2 final rows
        seen = {}

        def edit(layout, state):
            seen["rows"] = int(state.size[layout.segment("online")])
            return state.replace(reward=state.reward + 1.0)

        trainer.edit_replay(edit)
        assert seen["rows"] == 22 and trainer.learner.pending_steps == 0
        assert float(trainer.learner.replay.reward[0]) != 0.0
    finally:
        if isinstance(trainer, AsyncTrainer):
            trainer.close()


def test_nonfinite_updates_stop_the_run() -> None:
    class NanReward(gym.Wrapper):
        def step(self, action):
            obs, _, terminated, truncated, info = self.env.step(action)
            return obs, float("nan"), terminated, truncated, info

    env = NanReward(_pendulum())
    config = SACConfig(hidden_dims=(32,), num_critics=2, utd=1, batch_size=32)
    sac = SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
              config)  # fmt: skip
    trainer = Trainer(env, sac, LoopConfig(warmup_steps=2, buffer_capacity=50,
                      max_nonfinite_updates=3), seed=0)  # fmt: skip
    before = _leaves(trainer.state.critic_params)
    with pytest.raises(RuntimeError, match="3 consecutive update blocks had non-finite"):
        trainer.run(20)
    assert trainer.env_steps == 4  # ready after 2 steps (warm-up): blocks at steps 2, 3, 4
    for a, b in zip(before, _leaves(trainer.state.critic_params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_env_that_does_not_match_the_learner_is_a_clear_error(sac: SAC) -> None:
    env = gym.make("MountainCarContinuous-v0")
    with pytest.raises(ValueError, match=r"differ from sac\.obs_spec"):
        Trainer(env, sac, LoopConfig(), seed=0)


def test_keys_the_learner_leaves_out_may_stay_in_the_env() -> None:
    class WithCamera(gym.ObservationWrapper):
        def __init__(self, env: gym.Env) -> None:
            super().__init__(env)
            self.observation_space = gym.spaces.Dict(
                {"state": env.observation_space,
                 "front": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)})  # fmt: skip

        def observation(self, obs):
            return {"state": obs, "front": np.zeros((8, 8, 3), np.uint8)}

    env = WithCamera(_pendulum())
    spec = ObsSpec.from_space(env.observation_space, ignore=("front",))
    sac = SAC(spec, ActionSpec.from_space(env.action_space), CONFIG)
    trainer = Trainer(env, sac, LoopConfig(warmup_steps=4, buffer_capacity=64), seed=0)
    trainer.run(12)
    assert trainer.learner.version == 12 - 4 + 1
    narrow = SAC(ObsSpec(("state",), ((2,),)), ActionSpec.from_space(env.action_space), CONFIG)
    with pytest.raises(ValueError, match=r"'state': the learner reads \(2,\), the env has \(3,\)"):
        Trainer(env, narrow, LoopConfig(), seed=0)
