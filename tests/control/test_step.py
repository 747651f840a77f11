"""Step record, success flag and the episode tally (success = true at any step)."""

from __future__ import annotations

import pickle

import numpy as np

from handrail.control.step import ActedBy, EpisodeTally, Step, step_success


def test_step_is_picklable_and_reports_done_and_proposal() -> None:
    obs = {"proprio": np.arange(3, dtype=np.float32), "front": np.zeros((4, 4, 3), np.uint8)}
    step = Step(obs=obs, action=np.ones(2, np.float32), reward=1.0, next_obs=obs,
                terminated=False, truncated=True, policy_action=np.zeros(2, np.float32),
                acted_by=ActedBy.HUMAN, extras={"base_action": np.full(2, 0.5)})  # fmt: skip
    back = pickle.loads(pickle.dumps(step))
    assert back.done and back.acted_by is ActedBy.HUMAN and int(back.acted_by) == 1
    np.testing.assert_array_equal(back.proposed, np.zeros(2))
    assert back.obs["front"].dtype == np.uint8
    plain = Step(obs=obs, action=np.ones(2), reward=0.0, next_obs=obs, terminated=False,
                 truncated=False)  # fmt: skip
    assert not plain.done and plain.proposed is plain.action


def test_step_success_reads_the_key_then_is_success() -> None:
    assert step_success({"success": np.array(True)}) is True
    assert step_success({"is_success": 0.0}) is False
    assert step_success({"goal_reached": 1}, success_key="goal_reached") is True
    assert step_success({"other": 1}) is None


def test_tally_counts_success_at_any_step() -> None:
    tally = EpisodeTally()
    tally.reset({})
    assert tally.success is None
    for reward, success in ((0.0, False), (1.0, True), (0.5, False)):  # lifted, then dropped
        tally.add(reward, success)
    assert (tally.return_, tally.length, tally.success) == (1.5, 3, True)
    tally.reset({"success": False})
    tally.add(0.0, False)
    assert tally.success is False
