"""ResetSequence: phases, deadlines and messages (no ROS, injected clock)."""

import numpy as np
import pytest

from handrail.control.reset import ResetConfig, ResetSequence


def test_resets_the_world_then_homes_then_waits_for_the_operator():
    # The world reset moves the arm (sim_robot puts it near its own home), so it comes first:
    # the arm then ends where the reset says, at the drawn home (issue 36: 19.5 mm off before).
    seq = ResetSequence(ResetConfig(home_offset_m=0.02, world=True, wait_for_operator=True))
    assert seq.start(0.0, np.random.default_rng(0)).phase == "world"
    assert seq.update(0.1, None).phase == "world"  # no deadline yet, no pose needed
    status = seq.world_done(0.2)
    assert status.phase == "home"
    goal = status.target_pos_m
    assert np.all(np.abs(goal - np.array(ResetConfig().home_pos_m)) <= 0.02)
    np.testing.assert_array_equal(goal, seq.goal_m)
    assert seq.update(0.3, goal + 0.05).phase == "home"
    assert not seq.confirm()  # not waiting for the operator yet
    assert seq.update(0.4, goal + 0.001).phase == "operator"
    assert seq.confirm() and seq.phase == "done" and seq.finished


def test_a_latched_estop_fails_the_reset_at_once_and_says_how_to_clear_it():
    seq = ResetSequence(ResetConfig())
    status = seq.start(0.0, np.random.default_rng(0), estopped=True)
    assert status.phase == "failed" and "e-stop is latched" in status.message
    assert "~/estop" in status.message
    seq.start(0.0, np.random.default_rng(0))
    assert seq.update(0.1, None).phase == "home"
    status = seq.update(0.2, None, estopped=True)  # latched while homing: no 20 s wait
    assert status.phase == "failed" and "e-stop is latched" in status.message


def test_offsets_differ_between_resets_and_repeat_with_the_seed():
    def goals(seed):
        seq, rng = ResetSequence(ResetConfig(home_offset_m=0.03)), np.random.default_rng(seed)
        return [seq.start(0.0, rng).target_pos_m for _ in range(3)]

    a, b = goals(1), goals(1)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a[0], a[1])


@pytest.mark.parametrize(
    ("phase_setup", "message"),
    [
        ("home", "did not reach home within 20.0 s (still 0.100 m away"),
        ("home-none", "no pose received"),
        ("world", "world reset did not finish within 10.0 s"),
        ("operator", "no operator confirmed the scene within 120.0 s"),
    ],
)
def test_each_phase_fails_at_its_deadline_with_a_message(phase_setup, message):
    seq = ResetSequence(ResetConfig(world=True, wait_for_operator=True))
    seq.start(0.0, np.random.default_rng(0))
    if phase_setup == "world":
        status = seq.update(11.0, None)
    else:
        goal = seq.world_done(1.0).target_pos_m
        if phase_setup == "home":
            status = seq.update(22.0, goal + np.array([0.1, 0, 0]))
        elif phase_setup == "home-none":
            status = seq.update(22.0, None)
        else:
            seq.update(2.0, goal)
            status = seq.update(200.0, goal)
    assert status.phase == "failed" and message in status.message


def test_a_failed_world_reset_fails_the_sequence():
    seq = ResetSequence(ResetConfig(world=True))
    seq.start(0.0, np.random.default_rng(0))
    assert "world reset failed: boom" in seq.world_done(0.2, ok=False, message="boom").message


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="unit quaternion"):
        ResetConfig(home_quat_wxyz=(1.0, 1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="timeouts"):
        ResetConfig(home_timeout_s=0)
