"""LeRobotDataset v3 export and import: layout, round trip, and a foreign dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from handrail.demos import FieldSpec, create_store, open_store
from handrail.demos.io.lerobot import export_lerobot, import_lerobot, write_lerobot
from handrail.demos.ops import iter_store_episodes, store_meta

FIELDS = [
    FieldSpec("proprio", "float32", (4,), "m"),
    FieldSpec("object", "float32", (2, 3)),
    FieldSpec("wrist", "uint8", (8, 8, 3)),
]


def make_store(path: Path, lengths: list[int], fields: list[FieldSpec] = FIELDS) -> None:
    rng = np.random.default_rng(0)
    with create_store(
        path,
        kind="demo",
        obs_fields=fields,
        action_dim=3,
        control_dt_s=0.1,
        task="pick_cube",
        durable=False,
    ) as w:
        for i, steps in enumerate(lengths):
            w.begin_episode(seed=3 + i, task="pick_cube" if i != 1 else "push")
            for t in range(steps):
                obs = {f.name: rng.integers(0, 255, f.shape).astype(f.dtype) for f in fields}
                act = rng.uniform(-1, 1, 3).astype(np.float32)
                w.add_step(
                    obs=obs,
                    action=act,
                    policy_action=-act,
                    intervention=(t + i) % 2,
                    reward=float(t),
                    terminated=False,
                    truncated=t == steps - 1,
                    timestamp=10.0 + t,
                )
            final = {f.name: rng.integers(0, 255, f.shape).astype(f.dtype) for f in fields}
            w.end_episode(final_obs=final, success=i != 1)


def test_export_writes_the_v3_layout(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [3, 2, 4])
    report = export_lerobot(tmp_path / "s", tmp_path / "lr")
    assert any("final_obs" in d for d in report.dropped)
    info = json.loads((tmp_path / "lr/meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"], info["fps"]) == (
        3,
        9,
        2,
        10,
    )
    feats = info["features"]
    assert feats["observation.state"] == {"dtype": "float32", "shape": [4], "names": None}
    assert feats["observation.images.wrist"]["dtype"] == "image"
    assert feats["observation.object"]["shape"] == [6]
    assert feats["action"]["shape"] == [3]
    frames = pq.read_table(tmp_path / "lr/data/chunk-000/file-000.parquet")
    for col in ("episode_index", "frame_index", "index", "timestamp", "task_index"):
        assert col in frames.column_names
    assert frames.column("index").to_pylist() == list(range(9))
    assert frames.column("frame_index").to_pylist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    np.testing.assert_allclose(frames.column("timestamp").to_numpy()[:3], [0.0, 0.1, 0.2])
    tasks = pq.read_table(tmp_path / "lr/meta/tasks.parquet").to_pydict()
    assert tasks == {"task_index": [0, 1], "task": ["pick_cube", "push"]}
    eps = pq.read_table(tmp_path / "lr/meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert eps["length"] == [3, 2, 4]
    assert eps["dataset_from_index"] == [0, 3, 5] and eps["dataset_to_index"] == [3, 5, 9]
    assert eps["tasks"] == [["pick_cube"], ["push"], ["pick_cube"]]
    stats = json.loads((tmp_path / "lr/meta/stats.json").read_text())
    assert len(stats["action"]["mean"]) == 3


def test_round_trip_keeps_every_field_but_final_obs(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [3, 1, 4])
    export_lerobot(tmp_path / "s", tmp_path / "lr")
    report = import_lerobot(tmp_path / "lr", tmp_path / "back")
    assert (report.episodes, report.steps) == (3, 8)
    assert [d for d in report.dropped if "final_obs" not in d] == []
    a, b = open_store(tmp_path / "s"), open_store(tmp_path / "back")
    assert [(f.name, f.dtype, f.shape, f.units) for f in a.obs_fields] == [
        (f.name, f.dtype, f.shape, f.units) for f in b.obs_fields
    ]
    assert b.attrs["control_dt_s"] == a.attrs["control_dt_s"]
    da, db = a.load(), b.load()
    for k in da.obs:
        np.testing.assert_array_equal(da.obs[k], db.obs[k], err_msg=k)
    for name in (
        "action",
        "policy_action",
        "intervention",
        "reward",
        "terminated",
        "truncated",
        "timestamp",
    ):
        np.testing.assert_array_equal(getattr(da, name), getattr(db, name), err_msg=name)
    keys = ("task", "success", "seed", "num_steps")
    assert [[r[k] for k in keys] for r in da.records] == [[r[k] for k in keys] for r in db.records]
    last = np.cumsum(db.episode_lengths) - 1
    np.testing.assert_array_equal(db.final_obs["proprio"], db.obs["proprio"][last])


def test_grey_and_rgba_images_round_trip_as_png(tmp_path: Path) -> None:
    fields = [FieldSpec("proprio", "float32", (2,)), FieldSpec("depth", "uint8", (8, 6, 1)),
              FieldSpec("rgba", "uint8", (8, 6, 4))]  # fmt: skip
    make_store(tmp_path / "s", [3, 2], fields)
    export_lerobot(tmp_path / "s", tmp_path / "lr")
    feats = json.loads((tmp_path / "lr/meta/info.json").read_text())["features"]
    assert feats["observation.images.depth"]["dtype"] == "image"
    assert feats["observation.images.rgba"]["shape"] == [8, 6, 4]
    import_lerobot(tmp_path / "lr", tmp_path / "back")
    da, db = open_store(tmp_path / "s").load(), open_store(tmp_path / "back").load()
    for k in ("depth", "rgba"):
        np.testing.assert_array_equal(da.obs[k], db.obs[k], err_msg=k)


def test_episodes_never_span_data_files(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [3, 3, 3])
    reader = open_store(tmp_path / "s")
    eps = (ep for _, ep in iter_store_episodes(reader))
    write_lerobot(tmp_path / "lr", store_meta(reader), eps, frames_per_file=5)
    files = sorted((tmp_path / "lr/data/chunk-000").glob("*.parquet"))
    assert [pq.read_metadata(f).num_rows for f in files] == [3, 3, 3]
    rows = pq.read_table(tmp_path / "lr/meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert rows["data/file_index"] == [0, 1, 2]
    import_lerobot(tmp_path / "lr", tmp_path / "back")
    np.testing.assert_array_equal(open_store(tmp_path / "back").load().action, reader.load().action)


def _foreign_dataset(root: Path) -> None:
    """A minimal LeRobot v3 dataset as another tool writes it (state, video, no handrail keys)."""
    feats = {
        "observation.state": {"dtype": "float32", "shape": [2], "names": ["a", "b"]},
        "observation.images.top": {
            "dtype": "video",
            "shape": [3, 8, 8],
            "names": ["channels", "height", "width"],
        },
        "action": {"dtype": "float32", "shape": [2], "names": None},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    info = {"codebase_version": "v3.0", "fps": 30, "robot_type": "so100", "features": feats}
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    (root / "data/chunk-000").mkdir(parents=True)
    (root / "meta/info.json").write_text(json.dumps(info))
    state = np.arange(10, dtype=np.float32).reshape(5, 2)
    table = pa.table(
        {
            "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(state.ravel()), 2),
            "action": pa.FixedSizeListArray.from_arrays(pa.array(-state.ravel()), 2),
            "next.reward": pa.array([0, 0, 1, 0, 1], pa.float32()),
            "next.done": pa.array([False, False, True, False, True]),
            "timestamp": pa.array([0, 1 / 30, 2 / 30, 0, 1 / 30], pa.float32()),
            "frame_index": pa.array([0, 1, 2, 0, 1], pa.int64()),
            "episode_index": pa.array([0, 0, 0, 1, 1], pa.int64()),
            "index": pa.array(range(5), pa.int64()),
            "task_index": pa.array([0, 0, 0, 0, 0], pa.int64()),
        }
    )
    pq.write_table(table, root / "data/chunk-000/file-000.parquet")
    pq.write_table(
        pa.table({"task_index": [0], "__index_level_0__": ["fold the towel"]}),
        root / "meta/tasks.parquet",
    )
    pq.write_table(
        pa.table({"episode_index": [0, 1], "length": [3, 2]}),
        root / "meta/episodes/chunk-000/file-000.parquet",
    )


def test_import_of_a_foreign_dataset_drops_video_and_says_so(tmp_path: Path) -> None:
    _foreign_dataset(tmp_path / "lr")
    report = import_lerobot(tmp_path / "lr", tmp_path / "s")
    assert any("observation.images.top" in d for d in report.dropped)
    reader = open_store(tmp_path / "s")
    assert [f.name for f in reader.obs_fields] == ["state"]
    assert reader.attrs["task"] == "fold the towel"
    assert reader.attrs["control_dt_s"] == pytest.approx(1 / 30)
    d = reader.load()
    np.testing.assert_array_equal(d.obs["state"], np.arange(10, dtype=np.float32).reshape(5, 2))
    assert d.episode_lengths.tolist() == [3, 2]
    assert d.terminated.tolist() == [False, False, True, False, True]
    assert d.records[0].task == "fold the towel"


def test_import_rejects_an_older_codebase_version(tmp_path: Path) -> None:
    (tmp_path / "lr/meta").mkdir(parents=True)
    (tmp_path / "lr/meta/info.json").write_text(json.dumps({"codebase_version": "v2.1"}))
    with pytest.raises(ValueError, match=r"v2\.1"):
        import_lerobot(tmp_path / "lr", tmp_path / "s")
