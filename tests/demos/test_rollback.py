"""Rolling a store back to its first N episodes: the rest are gone for readers and writers, the
store validates, and appending continues at episode N; a crash mid-way leaves N or all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.demos import FieldSpec, StoreError, StoreLockedError, create_store, open_store
from handrail.demos import open_writer as open_store_writer
from handrail.demos.ops import validate_store
from handrail.demos.rollback import roll_back

FIELDS = [FieldSpec("proprio", "float32", (2,))]


def _episodes(writer, lengths: list[int], first_seed: int) -> None:
    for e, n in enumerate(lengths):
        writer.begin_episode(seed=first_seed + e)
        for t in range(n):
            writer.add_step(obs={"proprio": np.full(2, t, np.float32)},
                            action=np.full(1, first_seed + e, np.float32), reward=1.0,
                            terminated=False, truncated=t == n - 1, timestamp=float(t))  # fmt: skip
        writer.end_episode(final_obs={"proprio": np.zeros(2, np.float32)}, success=True)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Four episodes of 3, 5, 2 and 4 steps, seeds 10..13."""
    path = tmp_path / "store"
    with create_store(path, kind="rollout", obs_fields=FIELDS, action_dim=1, control_dt_s=0.1,
                      task="reach") as writer:  # fmt: skip
        _episodes(writer, [3, 5, 2, 4], first_seed=10)
    return path


def test_rolling_back_keeps_the_first_episodes_and_appending_continues(store: Path) -> None:
    assert roll_back(store, 2) == 2
    reader = open_store(store)
    assert (reader.num_episodes, reader.num_steps) == (2, 8)
    assert [r.seed for r in reader.episodes] == [10, 11]
    assert validate_store(store) == []
    assert roll_back(store, 2) == 0  # already there
    with open_store_writer(store) as writer:
        _episodes(writer, [6], first_seed=12)
    data = open_store(store).load()
    assert data.num_episodes == 3 and data.num_steps == 14
    np.testing.assert_array_equal(data.action[8:, 0], np.full(6, 12.0))
    assert validate_store(store) == []
    assert roll_back(store, 0) == 3 and open_store(store).num_episodes == 0


def test_a_store_with_fewer_episodes_or_another_writer_is_refused(store: Path) -> None:
    with pytest.raises(StoreError, match="holds 4 episodes, fewer than the 5 to keep"):
        roll_back(store, 5)
    with open_store_writer(store), pytest.raises(StoreLockedError):
        roll_back(store, 1)
    assert open_store(store).num_episodes == 4  # nothing changed


def test_a_crash_after_the_commit_leaves_the_rolled_back_store(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dying between the new commit record and the trimming of the arrays: readers see the
    rolled-back store, and the next writer trims the rows past it."""
    from handrail.demos import _zarr

    def crash(*args: object) -> None:
        raise OSError("killed")

    monkeypatch.setattr(_zarr, "resize_many", crash)
    with pytest.raises(OSError, match="killed"):
        roll_back(store, 1)
    monkeypatch.undo()
    assert open_store(store).num_episodes == 1
    with open_store_writer(store) as writer:
        _episodes(writer, [2], first_seed=11)
    assert [r.seed for r in open_store(store).episodes] == [10, 11]
    assert validate_store(store) == []
