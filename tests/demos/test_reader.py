"""Reading damaged or foreign stores gives a clear, typed error, never zeros or garbage."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr

from handrail.demos import (
    FieldMismatchError,
    FieldSpec,
    NotAStoreError,
    StoreCorruptError,
    StoreVersionError,
    check_fields,
    create_store,
    open_store,
)

FIELDS = [FieldSpec("state", "float32", (4,), "m"), FieldSpec("cam", "uint8", (16, 16, 3))]


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s"
    rng = np.random.default_rng(0)
    with create_store(
        path, kind="demo", obs_fields=FIELDS, action_dim=2, control_dt_s=0.05, task="reach"
    ) as w:
        for n in (30, 50):
            w.begin_episode(seed=n)
            for _ in range(n):
                obs = {
                    "state": rng.standard_normal(4).astype(np.float32),
                    "cam": rng.integers(0, 256, (16, 16, 3), dtype=np.uint8),
                }
                w.add_step(
                    obs=obs,
                    action=rng.uniform(-1, 1, 2),
                    reward=1.0,
                    terminated=False,
                    truncated=False,
                )
            w.end_episode(final_obs=obs, success=True)
    open_store(path).load()  # intact before the damage
    return path


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


DAMAGE: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "truncated state chunk": ("data/obs/state/c/0/0", _truncate, "data/obs/state"),
    "truncated image shard": ("data/obs/cam/c/0/0/0/0", _truncate, "data/obs/cam"),
    "flipped byte in action": ("data/action/c/0/0", _flip, "data/action"),
    "flipped byte in image": ("data/obs/cam/c/1/0/0/0", _flip, "data/obs/cam"),
    "flipped byte in meta": ("meta/success/c/0", _flip, "meta/success"),
    "deleted reward chunk": ("data/reward/c/0", lambda p: p.unlink(), "missing"),
    "deleted image shard": ("data/obs/cam/c/1/0/0/0", lambda p: p.unlink(), "missing"),
    "deleted final obs": ("meta/final_obs/state/c/0/0", lambda p: p.unlink(), "missing"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_chunk_is_a_typed_error(store: Path, case: str) -> None:
    rel, damage, message = DAMAGE[case]
    damage(store / rel)
    with pytest.raises(StoreCorruptError, match=message):
        open_store(store).load()


def test_damage_in_one_episode_leaves_others_readable(store: Path) -> None:
    _flip(store / "data/obs/cam/c/1/0/0/0")  # frames 64..127: only episode 1 (rows 30..79)
    reader = open_store(store)
    assert reader.load(episodes=[0]).obs["cam"].shape == (30, 16, 16, 3)
    with pytest.raises(StoreCorruptError):
        list(reader.iter_episodes())


def test_broken_metadata(store: Path) -> None:
    (store / "data/action/zarr.json").write_text("{not json")
    with pytest.raises(StoreCorruptError, match="data/action"):
        open_store(store)
    (store / "zarr.json").write_text('{"zarr_format": 3, "node_type": "gr')
    with pytest.raises(StoreCorruptError, match="not valid JSON"):
        open_store(store)


def test_broken_commit_record(store: Path) -> None:
    doc = json.loads((store / "zarr.json").read_text())
    doc["attributes"]["commit"]["num_steps"] = 79  # disagrees with the episode boundaries
    (store / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(StoreCorruptError, match="boundaries"):
        open_store(store)
    del doc["attributes"]["commit"]
    (store / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(StoreCorruptError, match="commit record"):
        open_store(store)


def test_newer_format_version(store: Path) -> None:
    doc = json.loads((store / "zarr.json").read_text())
    doc["attributes"]["format_version"] += 1
    (store / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(StoreVersionError, match="upgrade handrail"):
        open_store(store)


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(NotAStoreError, match=r"no zarr\.json"):
        open_store(tmp_path / "nothing")
    zarr.open_group(tmp_path / "plain", mode="w").create_array("x", shape=(3,), dtype="f4")
    with pytest.raises(NotAStoreError, match="not a handrail episode store"):
        open_store(tmp_path / "plain")


def test_field_spec_mismatch(store: Path) -> None:
    reader = open_store(store)
    check_fields(reader, FIELDS)
    with pytest.raises(FieldMismatchError, match=r"'cam': store has uint8\[16, 16, 3\]"):
        check_fields(reader, [FIELDS[0], FieldSpec("cam", "uint8", (84, 84, 3))])
    with pytest.raises(FieldMismatchError, match="missing field 'wrist'"):
        check_fields(reader, [*FIELDS, FieldSpec("wrist", "uint8", (16, 16, 3))])
    with pytest.raises(FieldMismatchError, match="units"):
        check_fields(reader, [FieldSpec("state", "float32", (4,), "rad"), FIELDS[1]])


def test_attrs_describe_the_store(store: Path) -> None:
    reader = open_store(store)
    attrs = reader.attrs
    assert attrs["kind"] == "demo" and attrs["control_dt_s"] == 0.05 and attrs["task"] == "reach"
    assert attrs["format_version"] == 1 and "zarr" in attrs["versions"]
    paths = {f["path"] for f in attrs["fields"]}
    assert {"data/obs/cam", "data/action", "meta/final_obs/state", "meta/seed"} <= paths
    assert reader.episodes[1]["seed"] == 50 and reader.episodes[1].start == 30
