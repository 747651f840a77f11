"""SB3 comparison backend: same run folder, same flattening, demos preloaded, clear ImportError."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np
import pytest

from handrail.learners import sb3_backend
from handrail.learners.agents.sac import SACConfig
from handrail.learners.demo_data import Transitions
from handrail.learners.evaluation import evaluate
from handrail.learners.learner import LoopConfig
from handrail.learners.runlog import RunDir
from handrail.learners.specs import ObsSpec

SAC = SACConfig(hidden_dims=(32, 32), num_critics=2, batch_size=32, utd=1)


def short_pendulum() -> gym.Env:
    return gym.wrappers.TimeLimit(gym.make("Pendulum-v1").unwrapped, max_episode_steps=40)


class Filmed(gym.Wrapper):
    """Renders a blank 16x16 frame per step, stated to play at 25 fps (no pygame needed)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.metadata = {**env.metadata, "render_fps": 25}

    @property
    def render_mode(self) -> str:
        return "rgb_array"

    def render(self) -> np.ndarray:
        return np.zeros((16, 16, 3), np.uint8)


def test_missing_sb3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    with pytest.raises(ImportError, match=r"pip install handrail\[sb3\]"):
        sb3_backend.require_sb3()


def test_dict_observations_flatten_like_obs_spec() -> None:
    space = gym.spaces.Dict(
        {
            "proprio": gym.spaces.Box(-1, 1, (3,)),
            "goal": gym.spaces.Box(-1, 1, (2,)),
            "front": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
        }
    )
    spec = ObsSpec.from_space(space, ignore=("front",))

    class DictEnv(gym.Env):
        observation_space = space
        action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

        def reset(self, *, seed=None, options=None):
            return space.sample(), {}

    wrapped = sb3_backend.FlattenObs(DictEnv(), spec)
    obs = space.sample()
    np.testing.assert_array_equal(wrapped.observation(obs), spec.flatten(obs))
    first = spec.keys[0]
    np.testing.assert_array_equal(wrapped.observation(obs)[: obs[first].size], obs[first])
    assert wrapped.observation_space.shape == (5,)


def test_sac_kwargs_follow_the_handrail_config() -> None:
    kwargs = sb3_backend.sb3_sac_kwargs(SAC, warmup_steps=7, buffer_size=99, action_dim=4)
    assert kwargs["gradient_steps"] == SAC.utd and kwargs["learning_starts"] == 7
    assert kwargs["target_entropy"] == -2.0 and kwargs["ent_coef"] == "auto_1.0"
    assert kwargs["policy_kwargs"] == {"net_arch": [32, 32], "n_critics": 2}
    assert kwargs["n_steps"] == SAC.n_step
    sbx = sb3_backend.sb3_sac_kwargs(SAC, warmup_steps=7, buffer_size=99, action_dim=4,
                                     library="sbx")  # fmt: skip
    assert sbx["policy_kwargs"]["layer_norm"] is SAC.critic_layer_norm
    own = sb3_backend.sb3_sac_kwargs(SAC, warmup_steps=7, buffer_size=99, action_dim=4,
                                     library_defaults=True)  # fmt: skip
    assert own == {"buffer_size": 99, "learning_starts": 7}


def test_peer_differences_name_what_the_library_cannot_follow() -> None:
    """A comparison says what it compares: every handrail setting the peer's SAC runs without
    is named with its option, and nothing is named when there is nothing to name."""
    same = SACConfig(num_critics=2, critic_subset=2, critic_layer_norm=False, actor_utd=0)
    assert sb3_backend.peer_differences(same, LoopConfig(pretrain_steps=0), demos=False) == []
    rlpd = SACConfig.rlpd(actor_utd=1, bc_weight=1.0, entropy_rows="online",
                          backup_entropy=False, critic_lr=1e-3, actor_delay_blocks=5)  # fmt: skip
    loop = LoopConfig(offline_ratio=0.5, pretrain_steps=100)
    text = "; ".join(sb3_backend.peer_differences(rlpd, loop))
    for option in ("--loop.offline-ratio", "--loop.pretrain-steps 100", "--sac.critic-subset",
                   "--sac.critic-layer-norm", "--sac.critic-lr 0.001", "--sac.actor-utd",
                   "--sac.actor-delay-blocks 5", "--sac.bc-weight 1", "--sac.entropy-rows",
                   "--sac.backup-entropy"):  # fmt: skip
        assert option in text, option
    assert "all 10 critics, not over a random 2" in text
    sbx = "; ".join(sb3_backend.peer_differences(rlpd, loop, library="sbx"))
    assert "--sac.critic-layer-norm" not in sbx  # SBX's critics take LayerNorm
    own = sb3_backend.peer_differences(rlpd, loop, library_defaults=True)
    assert len(own) == 2 and "--loop.offline-ratio" in own[0]


def test_train_writes_the_run_folder_and_preloads_demos(tmp_path: Path) -> None:
    n = 30
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    demos = Transitions(
        obs=obs, action=rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        reward=np.ones(n, np.float32), next_obs=obs + 1, terminated=np.zeros(n, bool),
        truncated=np.arange(n) % 10 == 9, episode_lengths=np.full(3, 10),
    )  # fmt: skip
    with RunDir(tmp_path / "run") as run:
        run.write_config({"task": "Pendulum-v1", "learner": "sb3"})
        settings = sb3_backend.PeerRun(
            sac=SAC, steps=80, seed=0, warmup_steps=40, buffer_capacity=1000, eval_every=40,
            eval_episodes=1, progress=False, video=True,
        )  # fmt: skip
        env = short_pendulum()
        spec = ObsSpec.from_space(env.observation_space)
        last = sb3_backend.train_sb3(env, Filmed(short_pendulum()), run, settings, spec, demos)
    assert last is not None and last["env_steps"] == 80 and last["mean_length"] == 40.0
    records = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records if r["kind"] == "episode"] == [40, 80]
    assert [r["env_steps"] for r in records if r["kind"] == "eval"] == [40, 80]
    assert (tmp_path / "run/learning_curve.png").is_file()
    with imageio.get_reader(tmp_path / "run/videos/eval_00000080.mp4") as mp4:
        assert mp4.get_meta_data()["fps"] == 25.0  # the eval env's render_fps
    for which in ("best", "latest"):
        assert (tmp_path / "run/checkpoints" / which / "model.zip").is_file()
    policy = sb3_backend.load_sb3_policy(tmp_path / "run/checkpoints/latest")
    result = evaluate(short_pendulum(), policy, episodes=1, seed=0)
    assert result.mean_length == 40.0


@pytest.mark.parametrize(("blocks", "target"), [(5, -7.0), (10**6, -0.5)])
def test_the_late_target_entropy_reaches_the_peer(
    tmp_path: Path, blocks: int, target: float
) -> None:
    """``sac.late_target_entropy`` applies to SB3 as to handrail's learner: after the blocks'
    gradient steps the model tunes its temperature to the late target (here within 40 updates;
    never, with more blocks than the run has: -|A|/2 throughout)."""
    import dataclasses

    from stable_baselines3 import SAC as SB3SAC

    sac = dataclasses.replace(SAC, late_target_entropy=-7.0, late_entropy_blocks=blocks)
    with RunDir(tmp_path / "run") as run:
        run.write_config({"task": "Pendulum-v1", "learner": "sb3"})
        settings = sb3_backend.PeerRun(
            sac=sac, steps=80, seed=0, warmup_steps=40, buffer_capacity=1000, eval_every=80,
            eval_episodes=1, progress=False,
        )  # fmt: skip
        env = short_pendulum()
        sb3_backend.train_sb3(env, short_pendulum(), run, settings,
                              ObsSpec.from_space(env.observation_space))  # fmt: skip
    model = SB3SAC.load(tmp_path / "run/checkpoints/latest/model.zip", device="cpu")
    assert model.target_entropy == target


def test_preload_marks_truncation_as_timeout() -> None:
    sb3 = sb3_backend.require_sb3()
    model = sb3.SAC("MlpPolicy", short_pendulum(), buffer_size=100, device="cpu")
    demos = Transitions(
        obs=np.zeros((2, 3), np.float32), action=np.zeros((2, 1), np.float32),
        reward=np.zeros(2, np.float32), next_obs=np.zeros((2, 3), np.float32),
        terminated=np.array([False, True]), truncated=np.array([True, False]),
        episode_lengths=np.array([1, 1]),
    )  # fmt: skip
    sb3_backend.preload_demos(model, demos)
    buf = model.replay_buffer
    assert buf.pos == 2
    np.testing.assert_array_equal(buf.dones[:2, 0], [1.0, 1.0])
    np.testing.assert_array_equal(buf.timeouts[:2, 0], [1.0, 0.0])  # truncation bootstraps
