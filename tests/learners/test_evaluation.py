"""Evaluation statistics: Wilson interval, success fallback, per-episode seeding."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

from handrail.learners.evaluation import (
    DEFAULT_VIDEO_FPS,
    env_fps,
    evaluate,
    wilson_interval,
)


class CoinEnv(gym.Env):
    """Episodes of 3 steps; succeeds when the reset seed is even. Reward = action[0]."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, key: str = "success", render_mode: str | None = None) -> None:
        self.key = key
        self.render_mode = render_mode
        self.seeds: list[int | None] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seeds.append(seed)
        self.t = 0
        self.win = seed is not None and seed % 2 == 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        info = {self.key: self.win and self.t == 2} if self.key else {}
        return np.zeros(2, np.float32), float(action[0]), False, self.t >= 3, info

    def render(self):
        return np.full((8, 8, 3), self.t, np.uint8)


def test_wilson_matches_hand_computed_values() -> None:
    # 8/10 at z=1.96: centre (0.8 + 0.19208)/1.38416, half 1.96/1.38416*sqrt(0.016 + 0.0009604)
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4)
    assert hi == pytest.approx(0.9433, abs=1e-4)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(3.8415 / (20 + 3.8415), abs=1e-4)
    lo, hi = wilson_interval(20, 20)
    assert hi == 1.0 and lo == pytest.approx(20 / (20 + 3.8415), abs=1e-4)


@pytest.mark.parametrize(("successes", "trials"), [(0, 1), (3, 7), (50, 100), (99, 100)])
def test_wilson_contains_the_estimate(successes: int, trials: int) -> None:
    lo, hi = wilson_interval(successes, trials)
    assert 0.0 <= lo <= successes / trials <= hi <= 1.0
    assert hi - lo < 1.0


def test_wilson_rejects_bad_counts() -> None:
    with pytest.raises(ValueError, match="trials"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(5, 3)


@pytest.mark.parametrize("key", ["success", "is_success"])
def test_evaluate_counts_success_at_any_step(key: str) -> None:
    env = CoinEnv(key)
    result = evaluate(env, lambda obs: np.array([0.5], np.float32), episodes=4, seed=10)
    assert env.seeds == [10, 11, 12, 13]
    assert result.successes == (True, False, True, False)
    assert result.success_rate == 0.5
    assert (result.ci_low, result.ci_high) == pytest.approx(wilson_interval(2, 4))
    assert result.mean_return == pytest.approx(1.5)
    assert result.mean_length == 3.0
    assert "success 50.0%" in result.summary()


def test_evaluate_without_success_flag_still_reports_return() -> None:
    result = evaluate(CoinEnv(key=""), lambda obs: np.array([-1.0]), episodes=2, seed=0)
    assert result.success_rate is None and result.ci_low is None
    assert result.mean_return == -3.0
    assert "return -3.00" in result.summary()
    assert result.mean_length == 3.0


def test_evaluate_records_video_frames_of_first_episode_only() -> None:
    env = CoinEnv(render_mode="rgb_array")
    result = evaluate(env, lambda obs: np.zeros(1), episodes=3, seed=0, video=True)
    assert [int(f[0, 0, 0]) for f in result.frames] == [0, 1, 2, 3]  # reset + 3 steps, in order
    assert result.as_dict()["episodes"] == 3 and "frames" not in result.as_dict()


def test_evaluate_records_the_first_failed_episodes_each_on_its_own() -> None:
    class SeedFrames(CoinEnv):  # a frame tells the episode's seed and step
        renders = 0

        def render(self):
            self.renders += 1
            return np.full((8, 8, 3), 10 * (self.seeds[-1] % 10) + self.t, np.uint8)

    env = SeedFrames(render_mode="rgb_array")
    result = evaluate(env, lambda obs: np.zeros(1), episodes=6, seed=10, failures=2, video=True)
    assert result.failed_episodes() == [1, 3, 5]  # odd seeds fail
    assert [i for i, _ in result.failed_frames] == [1, 3]  # the first two only
    for i, frames in result.failed_frames:
        assert [int(f[0, 0, 0]) for f in frames] == [10 * i + t for t in range(4)]
    assert [int(f[0, 0, 0]) for f in result.frames] == [0, 1, 2, 3]  # --video: still episode 0
    assert env.renders == 4 * 4  # episodes 4 and 5 are not rendered: both failures were found
    none = evaluate(CoinEnv(render_mode="rgb_array"), lambda obs: np.zeros(1), episodes=2,
                    seed=0, failures=3)  # fmt: skip
    assert none.failed_episodes() == [1] and [i for i, _ in none.failed_frames] == [1]
    assert none.frames == []
    with pytest.raises(ValueError, match=r"evaluate\(failures=...\).*rgb_array"):
        evaluate(CoinEnv(), lambda obs: np.zeros(1), episodes=1, seed=0, failures=1)
    with pytest.raises(ValueError, match="failures must be >= 0"):
        evaluate(CoinEnv(render_mode="rgb_array"), lambda obs: np.zeros(1), 1, 0, failures=-1)


def test_video_needs_rgb_array_render_mode() -> None:
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        evaluate(CoinEnv(), lambda obs: np.zeros(1), episodes=1, seed=0, video=True)


def test_env_fps_is_the_control_rate_then_render_fps_then_the_default() -> None:
    class TenHz(CoinEnv):
        control_dt_s = 0.1
        metadata: ClassVar[dict[str, Any]] = {"render_fps": 50}  # control_dt_s wins over it

    class Rendered(CoinEnv):
        metadata: ClassVar[dict[str, Any]] = {"render_fps": 25}

    assert env_fps(gym.wrappers.TimeLimit(TenHz(), max_episode_steps=3)) == pytest.approx(10.0)
    assert env_fps(gym.wrappers.TimeLimit(Rendered(), max_episode_steps=3)) == 25.0
    assert env_fps(CoinEnv()) == DEFAULT_VIDEO_FPS


def test_the_seed_streams_of_runs_and_of_one_run_never_overlap() -> None:
    from handrail.learners.evaluation import (
        DEMO_SEED_OFFSET,
        EVAL_SEED_OFFSET,
        RUN_SEED_SPREAD,
        actor_seed_offset,
        run_seed,
    )

    streams = [0, EVAL_SEED_OFFSET, DEMO_SEED_OFFSET, *(actor_seed_offset(k) for k in range(16))]
    assert streams == sorted(streams) and actor_seed_offset(15) < RUN_SEED_SPREAD
    # Each stream has room for its episodes before the next one starts (10,000 training
    # episodes, 1,000,000 of each actor), in every run; seed 0's seeds are the ones before.
    assert [run_seed(0, s) for s in streams[:3]] == [0, 10_000, 1_000_000]
    ranges = [(run_seed(seed, s), run_seed(seed, s) + 10_000) for seed in range(5) for s in streams]
    ranges.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
    assert max(run_seed(seed, s) for seed in range(100) for s in streams) < 2**32
    with pytest.raises(ValueError, match="non-negative"):
        run_seed(-1)


def test_evaluate_counts_how_the_failed_episodes_ended() -> None:
    """The env's ``info["outcome"]`` on an episode's last step, tallied over the failed ones."""

    class SaysHow(CoinEnv):  # seeds 1 and 5 fail "short", 3 "far"; a win says "success"
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            if truncated:
                seed = self.seeds[-1]
                info["outcome"] = "success" if self.win else ("far" if seed == 3 else "short")
            return obs, reward, terminated, truncated, info

    result = evaluate(SaysHow(), lambda obs: np.zeros(1), episodes=6, seed=0)
    assert result.outcomes == ("success", "short", "success", "far", "success", "short")
    assert result.failure_outcomes() == [("short", 2), ("far", 1)]  # most frequent first
    assert result.failures_line() == "how the 3 failed episodes ended: short 2, far 1"
    one = evaluate(SaysHow(), lambda obs: np.zeros(1), episodes=2, seed=2)
    assert one.failures_line() == "how the 1 failed episode ended: far 1"
    silent = evaluate(CoinEnv(), lambda obs: np.zeros(1), episodes=4, seed=0)
    assert silent.outcomes == (None,) * 4  # an env that names no outcome
    assert silent.failure_outcomes() == [] and silent.failures_line() == ""
    won = evaluate(SaysHow(), lambda obs: np.zeros(1), episodes=1, seed=0)
    assert won.failure_outcomes() == [] and won.failures_line() == ""
