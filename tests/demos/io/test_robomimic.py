"""robomimic HDF5 export and import: exact round trip, and import of a plain robomimic file."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from handrail.demos import FieldSpec, create_store, open_store
from handrail.demos.io.robomimic import export_robomimic, import_robomimic

FIELDS = [
    FieldSpec("proprio", "float32", (4,), "m"),
    FieldSpec("object", "float64", (2, 3)),
    FieldSpec("front", "uint8", (8, 8, 3)),
]


def make_store(path: Path, lengths: list[int]) -> None:
    rng = np.random.default_rng(0)
    with create_store(
        path,
        kind="intervention",
        obs_fields=FIELDS,
        action_dim=3,
        control_dt_s=0.04,
        task="push",
        durable=False,
    ) as w:
        for i, steps in enumerate(lengths):
            w.begin_episode(seed=7 + i, task="push" if i % 2 else "reach")
            for t in range(steps):
                obs = {f.name: rng.integers(0, 255, f.shape).astype(f.dtype) for f in FIELDS}
                act = rng.uniform(-1, 1, 3).astype(np.float32)
                w.add_step(
                    obs=obs,
                    action=act,
                    policy_action=act * 0.5,
                    intervention=t % 3,
                    reward=float(rng.normal()),
                    terminated=i == 0 and t == steps - 1,
                    truncated=i != 0 and t == steps - 1,
                    timestamp=50.0 + 0.04 * t,
                )
            final = {f.name: rng.integers(0, 255, f.shape).astype(f.dtype) for f in FIELDS}
            w.end_episode(final_obs=final, success=i == 0)


def assert_same_stores(a: Path, b: Path) -> None:
    ra, rb = open_store(a), open_store(b)
    assert [(f.name, f.dtype, f.shape, f.units) for f in ra.obs_fields] == [
        (f.name, f.dtype, f.shape, f.units) for f in rb.obs_fields
    ]
    for key in ("kind", "task", "control_dt_s", "action_dim", "robot"):
        assert ra.attrs[key] == rb.attrs[key], key
    da, db = ra.load(), rb.load()
    for name in (
        "action",
        "policy_action",
        "intervention",
        "reward",
        "terminated",
        "truncated",
        "timestamp",
        "episode_lengths",
    ):
        np.testing.assert_array_equal(getattr(da, name), getattr(db, name), err_msg=name)
    for k in da.obs:
        np.testing.assert_array_equal(da.obs[k], db.obs[k], err_msg=k)
        np.testing.assert_array_equal(da.final_obs[k], db.final_obs[k], err_msg=k)
    keys = ("task", "success", "seed", "num_steps", "num_intervened")
    assert [[r[k] for k in keys] for r in da.records] == [[r[k] for k in keys] for r in db.records]


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [3, 1, 4])
    report = export_robomimic(tmp_path / "s", tmp_path / "d.hdf5")
    assert (report.episodes, report.steps, report.dropped) == (3, 8, [])
    back = import_robomimic(tmp_path / "d.hdf5", tmp_path / "back")
    assert (back.episodes, back.steps, back.dropped) == (3, 8, [])
    assert_same_stores(tmp_path / "s", tmp_path / "back")


def test_export_follows_the_robomimic_layout(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [3, 2])
    export_robomimic(tmp_path / "s", tmp_path / "d.hdf5")
    with h5py.File(tmp_path / "d.hdf5", "r") as f:
        assert f["data"].attrs["total"] == 5
        env_args = json.loads(f["data"].attrs["env_args"])
        assert env_args["env_name"] == "push" and env_args["type"] == 2
        demo = f["data/demo_1"]
        assert demo.attrs["num_samples"] == 2
        assert demo["actions"].shape == (2, 3)
        assert demo["obs/front"].shape == (2, 8, 8, 3) and demo["obs/front"].dtype == np.uint8
        np.testing.assert_array_equal(demo["next_obs/proprio"][0], demo["obs/proprio"][1])
        assert demo["rewards"].shape == (2,) and demo["dones"].shape == (2,)
        assert [n.decode() for n in f["mask/successful"][:]] == ["demo_0"]


def test_import_of_a_plain_robomimic_file_states_its_assumptions(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    with h5py.File(tmp_path / "plain.hdf5", "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps(
            {"env_name": "Lift", "type": 1, "env_kwargs": {"control_freq": 20}}
        )
        for i, steps in enumerate([4, 2]):
            g = data.create_group(f"demo_{i}")
            g.attrs["num_samples"] = steps
            g["actions"] = rng.uniform(-1, 1, (steps, 7))
            g["rewards"] = np.r_[np.zeros(steps - 1), 1.0]
            g["dones"] = np.r_[np.zeros(steps - 1, np.int64), 1]
            g["states"] = rng.normal(size=(steps, 10))
            g["obs/robot0_eef_pos"] = rng.normal(size=(steps, 3))
            g["next_obs/robot0_eef_pos"] = rng.normal(size=(steps, 3))
        data.attrs["total"] = 6
    report = import_robomimic(tmp_path / "plain.hdf5", tmp_path / "s")
    assert any("states" in d for d in report.dropped)
    reader = open_store(tmp_path / "s")
    assert reader.attrs["task"] == "Lift"
    assert reader.attrs["control_dt_s"] == pytest.approx(0.05)
    d = reader.load()
    assert d.action.dtype == np.float32 and d.action.shape == (6, 7)
    assert [r.success for r in d.records] == [True, True]
    assert d.terminated.tolist() == [False, False, False, True, False, True]
    with h5py.File(tmp_path / "plain.hdf5", "r") as f:
        np.testing.assert_array_equal(
            d.final_obs["robot0_eef_pos"][1], f["data/demo_1/next_obs/robot0_eef_pos"][-1]
        )


def test_import_rejects_a_file_that_is_not_robomimic(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "x.hdf5", "w") as f:
        f["foo"] = np.zeros(3)
    with pytest.raises(ValueError, match="not a robomimic dataset"):
        import_robomimic(tmp_path / "x.hdf5", tmp_path / "s")
