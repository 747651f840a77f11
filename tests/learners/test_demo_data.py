"""Episode store -> transitions / ReplayBuffer: next_obs within and across episodes, checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.demos import FieldMismatchError, FieldSpec, create_store, open_store
from handrail.learners.demo_data import check_fields, to_replay_buffer, to_transitions
from handrail.learners.specs import ActionSpec, ObsSpec

OBS_SPEC = ObsSpec(keys=("proprio", "goal"), shapes=((2,), (1,)))
ACT_SPEC = ActionSpec(low=(-2.0, -2.0), high=(2.0, 2.0))


def write_store(path: Path, lengths: list[int], successes: list[bool], goal_dim: int = 1) -> None:
    """Episode e, step t has proprio = (100 e + t, -t), goal = e; final obs step = length."""
    fields = [FieldSpec("proprio", "float32", (2,)), FieldSpec("goal", "float32", (goal_dim,))]
    with create_store(path, kind="demo", obs_fields=fields, action_dim=2, control_dt_s=0.1,
                      task="toy") as writer:  # fmt: skip
        for e, (length, success) in enumerate(zip(lengths, successes, strict=True)):
            writer.begin_episode(seed=e)

            def obs(t: int, e: int = e) -> dict[str, np.ndarray]:
                return {"proprio": np.array([100 * e + t, -t], np.float32),
                        "goal": np.full(goal_dim, e, np.float32)}  # fmt: skip

            for t in range(length):
                last = t == length - 1
                writer.add_step(obs=obs(t), action=np.array([2.0, -1.0], np.float32),
                                reward=float(t), terminated=last and success, truncated=False)  # fmt: skip
            writer.end_episode(final_obs=obs(length), success=success)


def test_next_obs_is_the_following_step_then_final_obs(tmp_path: Path) -> None:
    write_store(tmp_path / "s.zarr", [3, 2], [True, False])
    tr = to_transitions(open_store(tmp_path / "s.zarr").load(), OBS_SPEC, ACT_SPEC)
    assert len(tr) == 5 and tr.obs.shape == (5, 3)
    np.testing.assert_array_equal(tr.obs[:, 0], [0, 1, 2, 100, 101])
    np.testing.assert_array_equal(tr.next_obs[:, 0], [1, 2, 3, 101, 102])
    np.testing.assert_array_equal(tr.next_obs[:, 2], [0, 0, 0, 1, 1])  # goal stays per episode
    # Actions mapped from env units ([-2, 2]) into [-1, 1].
    np.testing.assert_allclose(tr.action, [[1.0, -0.5]] * 5)
    assert tr.terminated.tolist() == [False, False, True, False, False]
    # Episode 2 stopped without termination: its last step is truncated (bootstraps).
    assert tr.truncated.tolist() == [False, False, False, False, True]


def test_replay_buffer_holds_every_demo_step(tmp_path: Path) -> None:
    write_store(tmp_path / "s.zarr", [4, 3, 5], [True, False, True])
    data = open_store(tmp_path / "s.zarr").load(successful_only=True)
    buffer = to_replay_buffer(data, OBS_SPEC, ACT_SPEC, n_step=1, gamma=0.9)
    assert len(buffer) == 9
    batch = buffer.sample(np.random.default_rng(0), 64)
    # The terminal step (reward t = 3 of episode 0, t = 4 of episode 2) has discount 0.
    terminal = batch.discount[0] == 0.0
    assert terminal.any() and set(batch.reward[0][terminal].tolist()) <= {3.0, 4.0}
    np.testing.assert_allclose(batch.next_obs[0][:, 0] - batch.obs[0][:, 0], 1.0)


def test_field_shape_mismatch_names_the_field(tmp_path: Path) -> None:
    write_store(tmp_path / "s.zarr", [2], [True], goal_dim=3)
    data = open_store(tmp_path / "s.zarr").load()
    with pytest.raises(FieldMismatchError, match=r"'goal' has per-step shape \(3,\).*\(1,\)"):
        to_transitions(data, OBS_SPEC, ACT_SPEC)


def test_missing_field_and_action_width_are_clear_errors(tmp_path: Path) -> None:
    write_store(tmp_path / "s.zarr", [2], [True])
    data = open_store(tmp_path / "s.zarr").load()
    spec = ObsSpec(keys=("proprio", "object"), shapes=((2,), (3,)))
    with pytest.raises(FieldMismatchError, match=r"lacks observation field\(s\) \['object'\]"):
        check_fields(data, spec, ACT_SPEC)
    with pytest.raises(FieldMismatchError, match=r"width 2.*3 dims"):
        check_fields(data, OBS_SPEC, ActionSpec(low=(-1.0,) * 3, high=(1.0,) * 3))
