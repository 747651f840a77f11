"""Saving and loading a replay: a round trip after wrap-around, and the layout check."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from handrail.learners import replay, replay_io
from handrail.learners.replay import ReplayField, ReplayLayout, Rows

FIELDS = (ReplayField("obs", (1,), "float32"), ReplayField("action", (1,), "float32", "step"))


def episode(start: float, length: int, actor: int = 0) -> Rows:
    """``length`` transitions with obs start, start + 1, ..., then the final observation."""
    k = length + 1
    obs = (start + np.arange(k, dtype=np.float32)).reshape(k, 1)
    return Rows(data={"obs": obs, "action": -obs}, reward=np.ones(k, np.float32),
                terminated=np.zeros(k, bool), final=np.arange(k) == length,
                first=np.arange(k) == 0, actor=np.full(k, actor, np.int32),
                valid=np.ones(k, bool))  # fmt: skip


def test_save_load_after_wrap_round_trips_and_checks_the_layout() -> None:
    layout = ReplayLayout(FIELDS, (("online", 7), ("demos", 5)), n_step=2, gamma=0.5)
    state = replay.init(layout)
    for e in range(3):  # 12 rows into 7: the ring wraps
        state = replay.insert(layout, state, 0, episode(10.0 * e, 3))
    state = replay.insert(layout, state, 1, episode(100.0, 3, actor=1))
    assert int(state.pos[0]) == 12 % 7
    arrays = replay_io.to_arrays(layout, state)
    back = replay_io.from_arrays(layout, arrays)
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(back),
                    strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(replay.valid_mask(layout, state), replay.valid_mask(layout, back))
    other = ReplayLayout(FIELDS, (("online", 8), ("demos", 5)), n_step=2, gamma=0.5)
    with pytest.raises(ValueError, match="saved with layout"):
        replay_io.from_arrays(other, arrays)


def test_a_saved_replay_file_loads_and_a_damaged_one_is_named(tmp_path) -> None:
    from handrail.learners.checkpoint import CheckpointError

    layout = ReplayLayout(FIELDS, (("online", 7),), n_step=1, gamma=0.5)
    state = replay.insert(layout, replay.init(layout), 0, episode(0.0, 3))
    path = tmp_path / "replay.npz"
    np.savez(path, allow_pickle=False, **replay_io.to_arrays(layout, state))
    back = replay_io.from_arrays(layout, replay_io.load_arrays(path))
    np.testing.assert_array_equal(np.asarray(back.data["obs"]), np.asarray(state.data["obs"]))
    whole = path.read_bytes()
    for damaged in (whole[: len(whole) // 2], whole[:-30], b"garbage"):  # cut, a lost tail
        path.write_bytes(damaged)
        with pytest.raises(CheckpointError, match=rf"{path} is damaged or incomplete"):
            replay_io.load_arrays(path)
    np.savez(path, something=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a saved replay: it has no layout"):
        replay_io.load_arrays(path)
    with pytest.raises(CheckpointError, match=rf"{tmp_path / 'none.npz'} is missing"):
        replay_io.load_arrays(tmp_path / "none.npz")


def test_loading_a_replay_of_camera_frames_takes_its_size_once() -> None:
    # A pixel run's resume was killed for memory: loading a 4.9 GB replay built the empty one
    # on the device, copied it to the host, filled that and copied it back: 3x its size (and
    # the learner's own empty replay 1x more, now dropped first). Measured in a process of its
    # own: the peak over what the saved rows already take, in replay sizes.
    import json
    import subprocess
    import sys

    script = r"""
import json
import numpy as np
from handrail.learners import replay, replay_io
from handrail.learners.replay import ReplayField, ReplayLayout, Rows
fields = (ReplayField("frame", (1000,), "uint8"), ReplayField("action", (1,), "float32", "step"))
small, big = (ReplayLayout(fields, (("online", n),), n_step=1, gamma=0.5) for n in (20, 400_000))
k = 11
rows = Rows(data={"frame": np.ones((k, 1000), np.uint8), "action": np.zeros((k, 1), np.float32)},
            reward=np.ones(k, np.float32), terminated=np.zeros(k, bool),
            final=np.arange(k) == k - 1, first=np.arange(k) == 0, actor=np.zeros(k, np.int32),
            valid=np.ones(k, bool))
arrays = replay_io.to_arrays(small, replay.insert(small, replay.init(small), 0, rows))
arrays = {**{n: np.array(a) for n, a in arrays.items()},
          "layout": np.asarray(json.dumps(big.to_json()))}  # the same rows, saved from big
base = int(open("/proc/self/statm").read().split()[1]) * 4096
back = replay_io.from_arrays(big, arrays)
back.data["frame"].block_until_ready()
# VmHWM, this process's own high-water mark: ru_maxrss carries the parent's over the exec
# (a pytest worker's GBs read as 13x in CI)
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
peak = int(status["VmHWM"].split()[0]) * 1024
frames = np.asarray(back.data["frame"])
print(json.dumps({"peak": (peak - base) / 400e6, "rows": int(frames[:k].sum()),
                  "rest": int(frames[k:].sum())}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, check=True)  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["rows"] == 11 * 1000 and result["rest"] == 0  # the rows, in their place
    assert result["peak"] < 1.5, result  # 3.06 before
