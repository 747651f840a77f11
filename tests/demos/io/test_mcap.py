"""MCAP export and import: a lossless round trip, ROS 2 schemas and topics a viewer reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from mcap_ros2.writer import Writer as RosWriter

from handrail.demos import FieldSpec, create_store, open_store
from handrail.demos.io._ros2msg import schema_name
from handrail.demos.io.mcap import export_mcap, import_mcap, msgdef

FIELDS = [
    FieldSpec("proprio", "float32", (14,), "mixed"),
    FieldSpec("object", "float64", (2, 3), "m"),
    FieldSpec("count", "int32", (2,)),
    FieldSpec("half", "float16", (3,)),
    FieldSpec("flags", "bool", (2,)),
    FieldSpec("front", "uint8", (6, 8, 3)),
]


def make_store(path: Path, lengths: list[int]) -> None:
    rng = np.random.default_rng(1)

    def obs() -> dict[str, np.ndarray]:
        scale = {f.name: 7 if f.dtype.startswith("float") else 1 for f in FIELDS}
        return {f.name: rng.integers(0, 200, f.shape) / scale[f.name] for f in FIELDS}

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
    np.testing.assert_array_equal(da.timestamp, db.timestamp)  # ns in the file: no float64 lost
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
    assert {s.name for s in summary.schemas.values()} >= {"geometry_msgs/msg/PoseStamped",
                                                       "sensor_msgs/msg/Image"}  # fmt: skip
    assert all("/msg/" in s.name for s in summary.schemas.values())  # as rosbag2 names them
    assert {c.message_encoding for c in summary.channels.values()} == {"cdr"}
    # The ros2 profile requires each channel's offered QoS (rosbag2's YAML list of profiles).
    qos = {
        c.topic: yaml.safe_load(c.metadata["offered_qos_profiles"])
        for c in summary.channels.values()
    }
    assert all(len(q) == 1 and q[0]["reliability"] == "reliable" for q in qos.values())
    assert qos["/episode"][0]["durability"] == "transient_local"
    assert (
        qos["/action"][0]["durability"] == "volatile"
        and qos["/action"][0]["history"] == "keep_last"
    )
    counts = {
        c.topic: summary.statistics.channel_message_counts[i] for i, c in summary.channels.items()
    }
    per_step = ["/obs/proprio", "/obs/object", "/obs/count", "/obs/half", "/obs/flags",
                "/camera/front/image_raw", "/action", "/policy_action", "/reward",
                "/intervention", "/human/engaged", "/terminated", "/truncated", "/ee_pose",
                "/gripper_state"]  # fmt: skip
    per_episode = ["/episode", "/success"] + [f"/final_obs/{f.name}" for f in FIELDS]
    assert counts == {**dict.fromkeys(per_step, 5), **dict.fromkeys(per_episode, 2)}
    with (tmp_path / "d.mcap").open("rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        msgs = {channel.topic: msg for _, channel, _, msg in reader.iter_decoded_messages()}
    assert msgs["/ee_pose"].header.frame_id == "base"
    image = msgs["/camera/front/image_raw"]
    assert (image.height, image.width, image.encoding, image.step) == (6, 8, "rgb8", 24)
    assert json.loads(msgs["/episode"].data)["seed"] == 12
    assert msgs["/success"].data is False  # the last episode's (episode 0 succeeded)


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
    whole = (tmp_path / "d.mcap").read_bytes()
    for cut in (30, len(whole) // 2, len(whole) - 40):  # a recording cut short: no footer
        (tmp_path / "cut.mcap").write_bytes(whole[:cut])
        with pytest.raises(ValueError, match=r"not a readable MCAP file.*mcap recover"):
            import_mcap(tmp_path / "cut.mcap", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- arm recordings

T0 = 1_700_000_000 * 10**9  # ns
MS = 10**6


def write_recording(path: Path, messages: list[tuple[str, str, int, dict]]) -> None:
    """An MCAP file of ROS 2 messages as `ros2 bag record` would write it (no handrail record)."""
    with path.open("wb") as f:
        writer, schemas = RosWriter(f), {}
        for topic, datatype, t_ns, msg in sorted(messages, key=lambda m: m[2]):
            if datatype not in schemas:
                schemas[datatype] = writer.register_msgdef(schema_name(datatype), msgdef(datatype))
            writer.write_message(topic, schemas[datatype], msg, log_time=t_ns, publish_time=t_ns)
        writer.finish()


def pose(
    t_ns: int, x: float, y: float, quat_wxyz: tuple[float, ...] = (0.0, 1.0, 0.0, 0.0)
) -> dict:
    w, qx, qy, qz = quat_wxyz
    header = {"stamp": {"sec": t_ns // 10**9, "nanosec": t_ns % 10**9}, "frame_id": "base"}
    return {"header": header,
            "pose": {"position": {"x": x, "y": y, "z": 0.3},
                     "orientation": {"w": w, "x": qx, "y": qy, "z": qz}}}  # fmt: skip


def arm_state(until_ms: int) -> list[tuple[str, str, int, dict]]:
    """ee_pose and gripper_state at 100 Hz from 0 ms; the quaternion's sign flips every message."""
    out = []
    for i in range(until_ms // 10):
        t = T0 + 10 * i * MS
        quat = (0.0, 1.0, 0.0, 0.0) if i % 2 == 0 else (-0.0, -1.0, -0.0, -0.0)
        out.append(("/ee_pose", "geometry_msgs/PoseStamped", t, pose(t, 0.01 * i, 0.0, quat)))
        joint = {"name": ["gripper"], "position": [0.01 * (i % 8)], "velocity": [], "effort": []}
        out.append(("/gripper_state", "sensor_msgs/JointState", t, joint))
    return out


def bool_at(topic: str, *changes: tuple[int, bool]) -> list[tuple[str, str, int, dict]]:
    return [(topic, "std_msgs/Bool", T0 + ms * MS, {"data": v}) for ms, v in changes]


def test_a_recording_of_arm_topics_imports_as_episodes(tmp_path: Path) -> None:
    msgs = arm_state(2000)
    for i in range(200):
        twist = {
            "linear": {"x": float(i), "y": 0.0, "z": 0.0},
            "angular": {"x": 0.0, "y": 0.0, "z": 1.0},
        }
        msgs.append(("/ee_twist", "geometry_msgs/TwistStamped", T0 + 10 * i * MS,
                     {"header": {"frame_id": "base"}, "twist": twist}))  # fmt: skip
    for j in range(100):  # 50 Hz
        msgs.append(("/objects/cube/pose", "geometry_msgs/PoseStamped", T0 + 20 * j * MS,
                     pose(T0, 0.5, float(j))))  # fmt: skip
    for f in range(50):  # 25 Hz from 20 ms: the first action (5 ms) comes before any image
        image = {"header": {"frame_id": "cam"}, "height": 4, "width": 5, "encoding": "rgb8",
                 "is_bigendian": 0, "step": 15, "data": bytes([f]) * 60}  # fmt: skip
        msgs.append(
            ("/camera/front/image_raw", "sensor_msgs/Image", T0 + (20 + 40 * f) * MS, image)
        )
    for k in range(20):  # 10 Hz from 5 ms
        act = {"layout": {"dim": [], "data_offset": 0}, "data": [float(k), -float(k), 0.5]}
        msgs.append(("/action", "std_msgs/Float32MultiArray", T0 + (5 + 100 * k) * MS, act))
    msgs += bool_at("/human/engaged", (0, False), (300, True), (600, False))
    msgs += bool_at("/success", (0, False), (850, True), (950, False))
    status = {"data": json.dumps({"episode": 0, "success": True, "length": 10})}
    msgs.append(("/actor/status", "std_msgs/String", T0 + 1000 * MS, status))
    msgs.append(
        ("/joint_states", "sensor_msgs/JointState", T0, {"name": ["j1"], "position": [0.0]})
    )
    write_recording(tmp_path / "rec.mcap", msgs)

    report = import_mcap(tmp_path / "rec.mcap", tmp_path / "s", task="reach")
    assert (report.episodes, report.steps) == (2, 19)
    assert "1 action messages before the first observation dropped" in report.notes
    assert "10 steps after the last actor/status line kept as an unfinished episode" in report.notes
    reader = open_store(tmp_path / "s")
    assert [(f.name, f.dtype, f.shape) for f in reader.obs_fields] == [
        ("proprio", "float32", (14,)), ("cube_pose", "float32", (7,)), ("front", "uint8", (4, 5, 3))
    ]  # fmt: skip
    assert (reader.attrs["kind"], reader.attrs["task"], reader.attrs["action_dim"]) == (
        "intervention", "reach", 3
    )  # fmt: skip
    assert reader.attrs["control_dt_s"] == pytest.approx(0.1)
    data = reader.load()
    k = np.arange(1, 20)  # the steps kept; step k at 5 + 100 k ms holds pose 10 k, cube 5 k
    i = 10 * k
    np.testing.assert_array_equal(data.episode_lengths, [9, 10])
    np.testing.assert_array_equal(data.timestamp, (T0 + (5 + 100 * k) * MS) / 10**9)
    expected = np.zeros((19, 14), np.float32)
    expected[:, 0], expected[:, 2], expected[:, 4] = 0.01 * i, 0.3, 1.0  # quaternion sign: x >= 0
    expected[:, 7], expected[:, 12], expected[:, 13] = i, 1.0, 0.01 * (i % 8)
    np.testing.assert_allclose(data.obs["proprio"], expected, rtol=1e-6)
    np.testing.assert_array_equal(data.obs["cube_pose"][:, 1], 5 * k)
    np.testing.assert_array_equal(data.obs["front"][:, 0, 0, 0], (100 * k - 15) // 40)
    np.testing.assert_array_equal(data.action, np.stack([k, -k, 0.5 + 0 * k], 1))
    np.testing.assert_array_equal(data.intervention, np.isin(k, [3, 4, 5]).astype(np.int8))
    np.testing.assert_array_equal(data.reward, (k == 8).astype(np.float32))  # true at k = 9
    assert [r.success for r in data.records] == [True, False]  # actor/status; the flag only
    np.testing.assert_array_equal(np.flatnonzero(data.terminated), [8])
    np.testing.assert_array_equal(np.flatnonzero(data.truncated), [18])
    np.testing.assert_allclose(data.final_obs["proprio"][:, 0], [1.0, 1.99])  # status; the end
    np.testing.assert_array_equal(data.final_obs["front"][:, 0, 0, 0], [24, 49])


def test_target_pose_commands_are_the_actions_without_an_action_topic(tmp_path: Path) -> None:
    msgs = arm_state(1000)
    for k in range(5):  # commands at 10 Hz from 5 ms; the gripper commanded from 205 ms
        t = T0 + (5 + 100 * k) * MS
        msgs.append(("/cmd/target_pose", "geometry_msgs/PoseStamped", t, pose(t, 0.4, float(k))))
    msgs.append(("/cmd/gripper", "std_msgs/Float64", T0 + 205 * MS, {"data": 0.07}))
    write_recording(tmp_path / "rec.mcap", msgs)
    report = import_mcap(tmp_path / "rec.mcap", tmp_path / "s", control_dt_s=0.1)
    assert "no ee_twist: the velocities in proprio are zeros" in report.notes
    assert (
        "action: the absolute target x y z qw qx qy qz and the commanded opening (m)"
        in report.notes
    )
    data = open_store(tmp_path / "s").load()
    np.testing.assert_array_equal(data.episode_lengths, [5])
    np.testing.assert_allclose(data.action[:, :7], [[0.4, k, 0.3, 0, 1, 0, 0] for k in range(5)])
    measured = [0.0, 0.01 * (10 % 8)]  # opening measured at 5 and 105 ms, before any command
    np.testing.assert_allclose(data.action[:, 7], [*measured, 0.07, 0.07, 0.07], rtol=1e-6)
    assert not data.records[0].success and data.truncated[-1] and not data.terminated.any()
    np.testing.assert_array_equal(data.obs["proprio"][:, 7:13], 0)


def test_a_recording_without_the_arm_topics_names_what_is_missing(tmp_path: Path) -> None:
    msgs = [m for m in arm_state(100) if m[0] == "/ee_pose"]
    msgs.append(
        ("/joint_states", "sensor_msgs/JointState", T0, {"name": ["j1"], "position": [0.0]})
    )
    write_recording(tmp_path / "rec.mcap", msgs)
    with pytest.raises(ValueError) as info:
        import_mcap(tmp_path / "rec.mcap", tmp_path / "out")
    message = str(info.value)
    assert "lacks gripper_state, action or cmd/target_pose" in message
    assert message.endswith("Topics present: /ee_pose, /joint_states")
    assert not (tmp_path / "out").exists()


def test_an_arm_topic_of_another_type_is_refused(tmp_path: Path) -> None:
    msgs = [m for m in arm_state(100) if m[0] == "/gripper_state"]
    msgs.append(("/ee_pose", "std_msgs/String", T0, {"data": "x"}))
    msgs.append(
        ("/action", "std_msgs/Float32MultiArray", T0, {"layout": {"dim": []}, "data": [1.0]})
    )
    write_recording(tmp_path / "rec.mcap", msgs)
    with pytest.raises(
        ValueError,
        match="topic /ee_pose is std_msgs/msg/String, expected geometry_msgs/PoseStamped",
    ):
        import_mcap(tmp_path / "rec.mcap", tmp_path / "out")


def test_the_mcap_packages_are_needed_only_when_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code = (
        "import sys, handrail.demos.io.mcap; print(sorted(m for m in sys.modules if 'mcap' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['handrail.demos.io.mcap']"
    make_store(tmp_path / "s", [1])
    monkeypatch.setitem(sys.modules, "mcap_ros2.writer", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'handrail\[ros\]'"):
        export_mcap(tmp_path / "s", tmp_path / "d.mcap")
