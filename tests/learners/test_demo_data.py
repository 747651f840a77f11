"""Episode store -> transitions / replay rows: next_obs within and across episodes, checks."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from handrail.demos import FieldMismatchError, FieldSpec, create_store, open_store
from handrail.learners import replay
from handrail.learners.demo_data import check_fields, to_rows, to_transitions
from handrail.learners.replay import Mixture, ReplayField, ReplayLayout
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


def test_demo_rows_in_a_replay_sample_every_step_with_its_return(tmp_path: Path) -> None:
    write_store(tmp_path / "s.zarr", [4, 3, 5], [True, False, True])
    data = open_store(tmp_path / "s.zarr").load(successful_only=True)
    rows = to_rows(data, OBS_SPEC, ACT_SPEC)
    assert len(rows.valid) == 9 + 2  # every step, then each episode's final observation
    assert rows.final.sum() == 2 and rows.first.sum() == 2
    fields = (ReplayField("obs", (3,), "float32"), ReplayField("action", (2,), "float32", "step"))
    layout = ReplayLayout(fields, (("demos", 11),), n_step=1, gamma=0.9)
    state = replay.insert(layout, replay.init(layout), 0, rows)
    got = replay.sample(layout, state, jax.random.PRNGKey(0), Mixture(((("demos",), 256),)))
    proprio = np.asarray(got.obs["obs"])[:, 0]
    assert set(proprio.tolist()) == {0, 1, 2, 3, 200, 201, 202, 203, 204}
    # The terminal steps (reward t = 3 of episode 0, t = 4 of episode 2) have discount 0.
    terminal = np.asarray(got.discount) == 0.0
    assert set(np.asarray(got.reward)[terminal].tolist()) == {3.0, 4.0}
    np.testing.assert_allclose(np.asarray(got.next_obs["obs"])[:, 0] - proprio, 1.0)
    np.testing.assert_allclose(np.asarray(got.step["action"]), [[1.0, -0.5]] * 256)


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
