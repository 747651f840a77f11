"""Replay: n-step rows at episode ends (terminated vs truncated) and batch composition."""

from __future__ import annotations

import numpy as np
import pytest

from handrail.learners.replay import MixedSampler, ReplayBuffer, unpack

GAMMA = 0.5


def _episode(buffer: ReplayBuffer, rewards: list[float], terminated: bool, start: float) -> None:
    """Obs are scalars start, start+1, ...; the last step ends the episode."""
    for t, r in enumerate(rewards):
        last = t == len(rewards) - 1
        buffer.add(
            [start + t], [0.0], r, [start + t + 1], terminated and last, (not terminated) and last
        )


def _rows(buffer: ReplayBuffer):
    return unpack(buffer.valid_rows(), buffer.obs_dim, buffer.action_dim)


@pytest.mark.parametrize("terminated", [True, False])
def test_n_step_rows_at_episode_end(terminated: bool) -> None:
    buf = ReplayBuffer(1, 1, capacity=100, n_step=3, gamma=GAMMA)
    _episode(buf, [1.0, 2.0, 4.0, 8.0], terminated, start=0.0)
    b = _rows(buf)
    assert len(buf) == 4
    np.testing.assert_array_equal(b.obs[:, 0], [0, 1, 2, 3])
    # Full 3-step returns where available, then shorter ones at the end.
    np.testing.assert_allclose(b.reward, [1 + 1 + 1, 2 + 2 + 2, 4 + 4, 8])
    np.testing.assert_array_equal(b.next_obs[:, 0], [3, 4, 4, 4])
    if terminated:
        np.testing.assert_allclose(b.discount, [GAMMA**3, 0.0, 0.0, 0.0])
    else:  # truncation bootstraps from the final observation with the shorter horizon
        np.testing.assert_allclose(b.discount, [GAMMA**3, GAMMA**3, GAMMA**2, GAMMA])


def test_n_step_never_crosses_episode_boundary() -> None:
    buf = ReplayBuffer(1, 1, capacity=100, n_step=4, gamma=GAMMA)
    _episode(buf, [1.0, 1.0], terminated=False, start=0.0)
    _episode(buf, [100.0, 100.0, 100.0], terminated=True, start=10.0)
    b = _rows(buf)
    np.testing.assert_allclose(b.reward[:2], [1.5, 1.0])  # no 100s leaked in
    np.testing.assert_array_equal(b.next_obs[:2, 0], [2, 2])
    np.testing.assert_allclose(b.reward[2:], [175.0, 150.0, 100.0])
    np.testing.assert_allclose(b.discount[2:], 0.0)


def test_one_step_rows_and_ring_wraparound() -> None:
    buf = ReplayBuffer(1, 1, capacity=3, n_step=1, gamma=0.9)
    _episode(buf, [1.0, 2.0, 3.0, 4.0, 5.0], terminated=True, start=0.0)
    assert len(buf) == 3
    b = _rows(buf)
    assert sorted(b.obs[:, 0].tolist()) == [2.0, 3.0, 4.0]
    np.testing.assert_allclose(sorted(b.discount.tolist()), [0.0, 0.9, 0.9])


def test_add_episode_equals_add() -> None:
    a = ReplayBuffer(1, 1, capacity=10, n_step=2, gamma=GAMMA)
    b = ReplayBuffer(1, 1, capacity=10, n_step=2, gamma=GAMMA)
    _episode(a, [1.0, 2.0, 3.0], terminated=True, start=0.0)
    b.add_episode(np.arange(4.0)[:, None], np.zeros((3, 1)), [1.0, 2.0, 3.0], [0, 0, 1], [0, 0, 0])
    np.testing.assert_array_equal(a.valid_rows(), b.valid_rows())
    with pytest.raises(ValueError, match="obs must have shape"):
        b.add_episode(np.zeros((3, 1)), np.zeros((3, 1)), [0, 0, 0], [0, 0, 1], [0, 0, 0])


def test_sample_shapes_and_empty_error() -> None:
    buf = ReplayBuffer(3, 2, capacity=10)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(np.random.default_rng(0), 4)
    buf.add(np.ones(3), np.zeros(2), 1.0, np.ones(3), False, False)
    batch = buf.sample(np.random.default_rng(0), 5, num_batches=7)
    assert batch.obs.shape == (7, 5, 3) and batch.action.shape == (7, 5, 2)
    assert batch.reward.shape == batch.discount.shape == (7, 5)
    assert batch.obs.dtype == np.float32


@pytest.mark.parametrize(("ratio", "expected_demo"), [(0.5, 16), (0.25, 8), (0.3, 10), (1.0, 32)])
def test_mixed_sampler_exact_composition(ratio: float, expected_demo: int) -> None:
    online = ReplayBuffer(1, 1, capacity=50)
    demos = ReplayBuffer(1, 1, capacity=50)
    for _ in range(20):
        online.add([1.0], [0.0], 0.0, [1.0], False, False)  # online obs = +1
        demos.add([-1.0], [0.0], 0.0, [-1.0], False, False)  # demo obs = -1
    sampler = MixedSampler(online, demos, demo_ratio=ratio)
    batch = sampler.sample(np.random.default_rng(1), batch_size=32, num_batches=3)
    assert batch.obs.shape == (3, 32, 1)
    demo_count = (batch.obs[..., 0] < 0).sum(axis=1)
    np.testing.assert_array_equal(demo_count, [expected_demo] * 3)


def test_mixed_sampler_without_demos_is_all_online() -> None:
    online = ReplayBuffer(1, 1, capacity=5)
    online.add([1.0], [0.0], 0.0, [1.0], False, False)
    empty = ReplayBuffer(1, 1, capacity=5)
    for demos in (None, empty):
        batch = MixedSampler(online, demos).sample(np.random.default_rng(0), 8)
        assert (batch.obs == 1.0).all()
    with pytest.raises(ValueError, match="demo_ratio"):
        MixedSampler(online, None, demo_ratio=1.5)
