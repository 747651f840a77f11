"""Episode store: round trips of every dtype and shape, filters, appends, locking, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from handrail.demos import (
    FORMAT_NAME,
    FieldSpec,
    StoreError,
    StoreLockedError,
    create_store,
    open_store,
    open_writer,
)
from handrail.demos.format import SUPPORTED_DTYPES

ACTION_DIM = 3


def _random(rng: np.random.Generator, spec: FieldSpec) -> np.ndarray:
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "b":
        return rng.random(spec.shape) > 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, spec.shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(spec.shape) * 1e3).astype(dtype)


def _write(writer, fields, lengths, rng, *, success=lambda e: e % 2 == 0, inter=lambda e, t: 0):
    """Write episodes of the given lengths; returns what was written, per episode."""
    episodes = []
    for e, n in enumerate(lengths):
        eid = writer.begin_episode(seed=100 + e, task="reach" if e % 3 else "push")
        steps = []
        for t in range(n):
            step = {
                "obs": {f.name: _random(rng, f) for f in fields},
                "action": rng.uniform(-1, 1, ACTION_DIM).astype(np.float32),
                "policy_action": rng.uniform(-1, 1, ACTION_DIM).astype(np.float32),
                "intervention": inter(e, t),
                "reward": float(rng.standard_normal()),
                "terminated": t == n - 1 and e % 2 == 0,
                "truncated": t == n - 1 and e % 2 == 1,
                "timestamp": 1000.0 + e + t * 0.02,
            }
            writer.add_step(**step)
            steps.append(step)
        final = {f.name: _random(rng, f) for f in fields}
        writer.end_episode(final_obs=final, success=success(e))
        episodes.append({"id": eid, "steps": steps, "final": final, "success": success(e)})
    return episodes


def _assert_matches(data, written) -> None:
    """EpisodeData equals the written episodes exactly (bit for bit)."""
    assert list(data.episode_lengths) == [len(w["steps"]) for w in written]
    for i, w in enumerate(written):
        s, n = data.episode_starts[i], data.episode_lengths[i]
        for name, ref in w["final"].items():
            np.testing.assert_array_equal(data.final_obs[name][i], ref)
        for t, step in enumerate(w["steps"]):
            for name, ref in step["obs"].items():
                np.testing.assert_array_equal(data.obs[name][s + t], ref)
            np.testing.assert_array_equal(data.action[s + t], step["action"])
            np.testing.assert_array_equal(data.policy_action[s + t], step["policy_action"])
            assert data.intervention[s + t] == step["intervention"]
            assert data.reward[s + t] == np.float32(step["reward"])
            assert data.terminated[s + t] == step["terminated"]
            assert data.truncated[s + t] == step["truncated"]
            assert data.timestamp[s + t] == step["timestamp"]
        assert data.records[i].success == w["success"]
        assert data.records[i].num_steps == n


ALL_FIELDS = [
    *(FieldSpec(f"s_{d}", d, ()) for d in SUPPORTED_DTYPES),
    *(FieldSpec(f"v_{d}", d, (3,), "m") for d in SUPPORTED_DTYPES),
    FieldSpec("m_float16", "float16", (2, 3)),
    FieldSpec("m_bool", "bool", (2, 2, 2)),
    FieldSpec("cam", "uint8", (8, 6, 3)),
]


def test_round_trip_every_dtype_and_shape(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lengths = [1, 5, 1, 70, 2]
    with create_store(
        tmp_path / "s",
        kind="demo",
        obs_fields=ALL_FIELDS,
        action_dim=ACTION_DIM,
        control_dt_s=0.05,
        task="reach",
        durable=False,
    ) as w:
        written = _write(w, ALL_FIELDS, lengths, rng)
    reader = open_store(tmp_path / "s")
    assert reader.num_episodes == len(lengths) and reader.num_steps == sum(lengths)
    assert reader.obs_fields == ALL_FIELDS
    data = reader.load()
    _assert_matches(data, written)
    for f in ALL_FIELDS:
        assert data.obs[f.name].dtype == np.dtype(f.dtype)
        assert data.obs[f.name].shape == (sum(lengths), *f.shape)
    assert [r.seed for r in reader.episodes] == [100 + e for e in range(len(lengths))]
    assert [r.task for r in reader.episodes] == ["push", "reach", "reach", "push", "reach"]


def test_ram_copy_equals_disk_copy_and_streaming(tmp_path: Path) -> None:
    fields = [FieldSpec("state", "float32", (4,)), FieldSpec("front", "uint8", (16, 16, 3))]
    rng = np.random.default_rng(1)
    lengths = [int(n) for n in rng.integers(1, 40, 30)]
    with create_store(
        tmp_path / "s",
        kind="rollout",
        obs_fields=fields,
        action_dim=ACTION_DIM,
        control_dt_s=0.02,
        task="reach",
    ) as w:
        written = _write(w, fields, lengths, rng, inter=lambda e, t: (e % 3 == 0) * (t % 2))
    reader = open_store(tmp_path / "s")
    ram = reader.load()
    _assert_matches(ram, written)
    streamed = list(reader.iter_episodes())
    assert len(streamed) == len(lengths)
    for i, ep in enumerate(streamed):
        s, n = ram.episode_starts[i], ram.episode_lengths[i]
        np.testing.assert_array_equal(ep.obs["front"], ram.obs["front"][s : s + n])
        np.testing.assert_array_equal(ep.action, ram.action[s : s + n])
        np.testing.assert_array_equal(ep.final_obs["state"][0], ram.final_obs["state"][i])
        assert ep.records == [ram.records[i]]
    # The same arrays read with plain zarr agree (the format is inspectable without handrail).
    root = zarr.open_group(tmp_path / "s", mode="r")
    assert root.attrs["format"] == FORMAT_NAME
    np.testing.assert_array_equal(root["data/obs/state"][:], ram.obs["state"])


def test_filters_select_the_right_episodes(tmp_path: Path) -> None:
    fields = [FieldSpec("state", "float64", (2,))]
    rng = np.random.default_rng(2)
    with create_store(
        tmp_path / "s",
        kind="intervention",
        obs_fields=fields,
        action_dim=3,
        control_dt_s=0.1,
        task="reach",
        durable=False,
    ) as w:
        written = _write(
            w,
            fields,
            [3, 4, 5, 6, 7, 8],
            rng,
            success=lambda e: e in (1, 2, 5),
            inter=lambda e, t: 1 if e in (2, 3) and t == 1 else 0,
        )
    reader = open_store(tmp_path / "s")
    assert [r.num_intervened for r in reader.episodes] == [0, 0, 1, 1, 0, 0]
    ok = reader.load(successful_only=True)
    _assert_matches(ok, [written[i] for i in (1, 2, 5)])
    assert [r.id for r in reader.load(interventions_only=True).records] == [2, 3]
    both = reader.load(successful_only=True, interventions_only=True)
    assert [r.id for r in both.records] == [2]
    picked = reader.load(episodes=[4, 0])
    _assert_matches(picked, [written[4], written[0]])
    assert reader.load(episodes=[]).num_steps == 0
    with pytest.raises(ValueError, match="out of range"):
        reader.load(episodes=[6])


def test_append_from_new_session_and_next_obs(tmp_path: Path) -> None:
    fields = [FieldSpec("state", "float32", (3,))]
    rng = np.random.default_rng(3)
    kw = dict(kind="demo", obs_fields=fields, action_dim=3, control_dt_s=0.05, task="reach")
    with create_store(tmp_path / "s", **kw) as w:
        first = _write(w, fields, [4, 2], rng)
    with open_writer(tmp_path / "s") as w:
        assert w.num_episodes == 2
        second = _write(w, fields, [3], rng)
        assert second[0]["id"] == 2
    data = open_store(tmp_path / "s").load()
    _assert_matches(data, first + second)
    nxt = data.next_obs()["state"]
    np.testing.assert_array_equal(nxt[0], data.obs["state"][1])
    np.testing.assert_array_equal(nxt[3], first[0]["final"]["state"])
    with pytest.raises(FileExistsError, match="overwrite=True"):
        create_store(tmp_path / "s", **kw)
    create_store(tmp_path / "s", overwrite=True, **kw).close()
    assert open_store(tmp_path / "s").num_episodes == 0


def test_second_writer_is_refused_with_holder_pid(tmp_path: Path) -> None:
    import os

    kw = dict(kind="demo", action_dim=2, control_dt_s=0.05, task="reach")
    w = create_store(tmp_path / "s", obs_fields=[FieldSpec("x", "float32", ())], **kw)
    with pytest.raises(StoreLockedError) as info:
        open_writer(tmp_path / "s")
    assert info.value.pid == os.getpid()
    assert str(os.getpid()) in str(info.value)
    w.close()
    open_writer(tmp_path / "s").close()  # free again once closed


def test_abort_and_empty_episode(tmp_path: Path) -> None:
    fields = [FieldSpec("x", "float32", (2,))]
    w = create_store(
        tmp_path / "s",
        kind="demo",
        obs_fields=fields,
        action_dim=2,
        control_dt_s=0.05,
        task="reach",
        durable=False,
    )
    obs = {"x": np.ones(2, np.float32)}
    w.begin_episode()
    for _ in range(300):
        w.add_step(obs=obs, action=np.zeros(2), reward=0.0, terminated=False, truncated=False)
    w.abort_episode()
    w.begin_episode()
    with pytest.raises(ValueError, match="no steps"):
        w.end_episode(final_obs=obs, success=True)
    w.add_step(obs=obs, action=np.zeros(2), reward=1.0, terminated=True, truncated=False)
    w.end_episode(final_obs=obs, success=True)
    w.begin_episode()
    w.add_step(obs=obs, action=np.zeros(2), reward=1.0, terminated=True, truncated=False)
    w.close()  # the open episode is dropped, not committed
    reader = open_store(tmp_path / "s")
    assert reader.num_episodes == 1 and reader.num_steps == 1
    assert reader.load().reward.tolist() == [1.0]
    assert zarr.open_array(tmp_path / "s" / "data/reward", mode="r").shape == (1,)


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    fields = [FieldSpec("x", "float32", (2,)), FieldSpec("img", "uint8", (4, 4, 3))]
    with pytest.raises(ValueError, match="kind="):
        create_store(
            tmp_path / "a",
            kind="demos",
            obs_fields=fields,
            action_dim=2,
            control_dt_s=0.05,
            task="t",
        )
    with pytest.raises(ValueError, match="duplicate"):
        create_store(
            tmp_path / "a",
            kind="demo",
            obs_fields=fields + fields[:1],
            action_dim=2,
            control_dt_s=0.05,
            task="t",
        )
    with pytest.raises(ValueError, match="control_dt_s"):
        create_store(
            tmp_path / "a", kind="demo", obs_fields=fields, action_dim=2, control_dt_s=0.0, task="t"
        )
    with pytest.raises(ValueError, match="name"):
        FieldSpec("a/b", "float32", ())
    with pytest.raises(ValueError, match="not supported"):
        FieldSpec("a", "complex64", ())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a handrail episode store"):
        create_store(
            tmp_path / "b",
            kind="demo",
            obs_fields=fields,
            action_dim=2,
            control_dt_s=0.05,
            task="t",
            overwrite=True,
        )
    assert (tmp_path / "b" / "keep.txt").exists()
    w = create_store(
        tmp_path / "c",
        kind="demo",
        obs_fields=fields,
        action_dim=2,
        control_dt_s=0.05,
        task="t",
        durable=False,
    )
    obs = {"x": np.zeros(2, np.float32), "img": np.zeros((4, 4, 3), np.uint8)}
    with pytest.raises(ValueError, match="begin_episode"):
        w.add_step(obs=obs, action=np.zeros(2), reward=0.0, terminated=False, truncated=False)
    w.begin_episode()
    with pytest.raises(ValueError, match="shape"):
        w.add_step(obs=obs, action=np.zeros(3), reward=0.0, terminated=False, truncated=False)
    with pytest.raises(ValueError, match="missing field 'img'"):
        w.add_step(
            obs={"x": obs["x"]}, action=np.zeros(2), reward=0.0, terminated=False, truncated=False
        )
    with pytest.raises(TypeError, match="img"):
        w.add_step(
            obs={**obs, "img": np.zeros((4, 4, 3))},
            action=np.zeros(2),
            reward=0.0,
            terminated=False,
            truncated=False,
        )
    with pytest.raises(ValueError, match="intervention"):
        w.add_step(
            obs=obs,
            action=np.zeros(2),
            intervention=3,
            reward=0.0,
            terminated=False,
            truncated=False,
        )
    w.close()
    with pytest.raises(StoreError, match="closed"):
        w.begin_episode()


def _shapes(path: Path) -> dict[str, int]:
    """Rows of every array as its metadata on disk says (what plain zarr shows)."""
    import json

    docs = {p.parent: json.loads(p.read_text()) for p in path.rglob("zarr.json")}
    return {str(d.relative_to(path)): doc["shape"][0] for d, doc in docs.items() if "shape" in doc}


def _write_steps(writer, n: int) -> dict:
    obs = {"x": np.ones(2, np.float32)}
    for t in range(n):
        writer.add_step(obs=obs, action=np.zeros(2), reward=float(t), terminated=False,
                        truncated=t == n - 1)  # fmt: skip
    return obs


@pytest.mark.parametrize("chunks_only", [True, False], ids=["chunks", "every-file"])
def test_a_full_disk_keeps_the_committed_episodes_and_cuts_the_rest(
    tmp_path: Path, full_disk, chunks_only: bool
) -> None:
    from handrail.demos import StoreWriteError
    from handrail.demos.ops import validate_store

    path = tmp_path / "s"
    writer = create_store(path, kind="demo", obs_fields=[FieldSpec("x", "float32", (2,))],
                          action_dim=2, control_dt_s=0.05, task="t")  # fmt: skip
    for _ in range(2):
        writer.begin_episode()
        obs = _write_steps(writer, 5)
        writer.end_episode(final_obs=obs, success=True)
    full_disk.full, full_disk.chunks_only = True, chunks_only
    writer.begin_episode()
    _write_steps(writer, 300)  # more than one staging block: rows go to disk mid-episode
    with pytest.raises(StoreWriteError, match="the disk is full") as info:
        writer.flush()
    assert info.value.committed == 2 and "2 episodes committed before it" in str(info.value)
    if chunks_only:  # metadata still fits: the arrays are cut back to the two episodes
        writer.close()  # raised already: closing does not raise it again
        assert set(_shapes(path).values()) <= {2, 10} and _shapes(path)["data/action"] == 10
        assert _shapes(path)["meta/episode_ends"] == 2
    else:  # not a byte left: the arrays stay longer, and closing says so
        with pytest.raises(StoreWriteError, match="cutting its arrays back failed") as info:
            writer.close()
        assert not info.value.cut and _shapes(path)["data/action"] > 10
    assert open_store(path).num_episodes == 2 and validate_store(path) == []
    full_disk.full = False  # space freed: appending works, and cuts what was left
    with open_writer(path) as w:
        w.begin_episode()
        w.end_episode(final_obs=_write_steps(w, 3), success=False)
    assert open_store(path).num_steps == 13 and _shapes(path)["data/action"] == 13
    assert not (path / "handrail.pending.json").exists()


def test_a_store_the_full_disk_stopped_being_created_leaves_no_folder(
    tmp_path: Path, full_disk
) -> None:
    full_disk.full, full_disk.chunks_only = True, False
    with pytest.raises(OSError, match="No space left"):
        create_store(tmp_path / "s", kind="demo", obs_fields=[FieldSpec("x", "float32", ())],
                     action_dim=2, control_dt_s=0.05, task="t")  # fmt: skip
    assert not (tmp_path / "s").exists()  # the next try needs no --overwrite
    full_disk.full = False
    create_store(tmp_path / "s", kind="demo", obs_fields=[FieldSpec("x", "float32", ())],
                 action_dim=2, control_dt_s=0.05, task="t").close()  # fmt: skip
