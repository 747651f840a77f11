"""MCAP export and import: a lossless round trip, ROS 2 schemas and topics a viewer reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

from handrail.demos import FieldSpec, create_store, open_store
from handrail.demos.io_mcap import export_mcap, import_mcap, msgdef

FIELDS = [
    FieldSpec("proprio", "float32", (14,), "mixed"),
    FieldSpec("object", "float64", (2, 3), "m"),
    FieldSpec("count", "int32", (2,)),
    FieldSpec("front", "uint8", (6, 8, 3)),
]


def make_store(path: Path, lengths: list[int]) -> None:
    rng = np.random.default_rng(1)

    def obs() -> dict[str, np.ndarray]:
        return {f.name: rng.integers(0, 200, f.shape).astype(f.dtype) / (1 if f.dtype in ("uint8", "int32") else 7)
                for f in FIELDS}  # fmt: skip

    with create_store(path, kind="intervention", obs_fields=FIELDS, action_dim=4, control_dt_s=0.05,
                      task="pick_cube", robot="ros_cartesian_pose", durable=False) as w:  # fmt: skip
        for i, steps in enumerate(lengths):
            w.begin_episode(seed=11 + i)
            for t in range(steps):
                o = {
                    k: np.asarray(v).astype(f.dtype)
                    for (k, v), f in zip(obs().items(), FIELDS, strict=True)
                }
                act = rng.uniform(-1, 1, 4).astype(np.float32)
                w.add_step(obs=o, action=act, policy_action=-act, intervention=t % 3, reward=float(t),
                           terminated=t == steps - 1 and i == 0, truncated=t == steps - 1 and i > 0,
                           timestamp=1.7e9 + 10 * i + 0.05 * t)  # fmt: skip
            final = {
                k: np.asarray(v).astype(f.dtype)
                for (k, v), f in zip(obs().items(), FIELDS, strict=True)
            }
            w.end_episode(final_obs=final, success=i == 0)


def test_round_trip_is_lossless(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [3, 1, 4])
    report = export_mcap(tmp_path / "s", tmp_path / "d.mcap")
    assert (report.episodes, report.steps) == (3, 8)
    back = import_mcap(tmp_path / "d.mcap", tmp_path / "back")
    assert (back.episodes, back.steps) == (3, 8)
    ra, rb = open_store(tmp_path / "s"), open_store(tmp_path / "back")
    assert [(f.name, f.dtype, f.shape, f.units) for f in ra.obs_fields] == [
        (f.name, f.dtype, f.shape, f.units) for f in rb.obs_fields
    ]
    for key in ("kind", "task", "control_dt_s", "action_dim", "robot"):
        assert ra.attrs[key] == rb.attrs[key], key
    da, db = ra.load(), rb.load()
    for name in ("action", "policy_action", "intervention", "reward", "terminated", "truncated",
                 "episode_lengths"):  # fmt: skip
        a, b = getattr(da, name), getattr(db, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    np.testing.assert_allclose(da.timestamp, db.timestamp, rtol=0, atol=1e-6)  # ns in the file
    for k in da.obs:
        assert da.obs[k].dtype == db.obs[k].dtype, k
        np.testing.assert_array_equal(da.obs[k], db.obs[k], err_msg=k)
        np.testing.assert_array_equal(da.final_obs[k], db.final_obs[k], err_msg=k)
    keys = ("success", "seed", "num_steps", "num_intervened")
    assert [[r[k] for k in keys] for r in da.records] == [[r[k] for k in keys] for r in db.records]


def test_the_file_has_ros2_schemas_and_the_topics_viewers_read(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [3, 2])
    export_mcap(tmp_path / "s", tmp_path / "d.mcap")
    with (tmp_path / "d.mcap").open("rb") as f:
        summary = make_reader(f).get_summary()
    assert summary is not None
    assert {s.encoding for s in summary.schemas.values()} == {"ros2msg"}
    assert {c.message_encoding for c in summary.channels.values()} == {"cdr"}
    counts = {
        c.topic: summary.statistics.channel_message_counts[i] for i, c in summary.channels.items()
    }
    for topic in ("/obs/proprio", "/obs/object", "/obs/count", "/camera/front/image_raw", "/action",
                  "/policy_action", "/reward", "/intervention", "/terminated", "/truncated",
                  "/ee_pose", "/gripper_state"):  # fmt: skip
        assert counts[topic] == 5, topic
    assert counts["/episode"] == 2 and counts["/final_obs/front"] == 2
    with (tmp_path / "d.mcap").open("rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        msgs = {channel.topic: msg for _, channel, _, msg in reader.iter_decoded_messages()}
    assert msgs["/ee_pose"].header.frame_id == "base"
    image = msgs["/camera/front/image_raw"]
    assert (image.height, image.width, image.encoding, image.step) == (6, 8, "rgb8", 24)
    assert json.loads(msgs["/episode"].data)["seed"] == 12


def test_message_definitions_carry_their_dependencies() -> None:
    text = msgdef("geometry_msgs/PoseStamped")
    for dep in ("std_msgs/Header", "builtin_interfaces/Time", "geometry_msgs/Pose",
                "geometry_msgs/Point", "geometry_msgs/Quaternion"):  # fmt: skip
        assert f"MSG: {dep}\n" in text, dep
    assert text.count("MSG: ") == 5


def test_bad_inputs_say_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "x.mcap").write_text("{}")
    with pytest.raises(ValueError, match="is not a readable MCAP file"):
        import_mcap(tmp_path / "x.mcap", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_mcap(tmp_path / "missing.mcap", tmp_path / "out")
    make_store(tmp_path / "s", [2])
    export_mcap(tmp_path / "s", tmp_path / "d.mcap")
    with pytest.raises(FileExistsError, match="--overwrite"):
        export_mcap(tmp_path / "s", tmp_path / "d.mcap")
    assert not (tmp_path / "out").exists()
