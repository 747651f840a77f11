"""Export a store as ROS 2 messages in an MCAP file (Foxglove, rosbag2), and import it back.

The file holds one ROS 2 message per step and field, CDR-encoded (profile ``ros2``, schemas in
``ros2msg`` form), logged at the step's timestamp, written with the pure-Python ``mcap`` and
``mcap-ros2-support`` packages (no rclpy needed). The message definitions come from the ROS 2
message packages installed with ``handrail[ros]`` (their ``share/<pkg>/msg`` files).

Topics (``demos/FORMAT.md`` lists them too):

- ``/obs/<key>``: each observation field as a ``std_msgs/<Type>MultiArray`` of its dtype with
  the field's shape in ``layout.dim`` (lossless); uint8 images ``H x W x 3`` as
  ``/camera/<key>/image_raw`` (``sensor_msgs/Image``, rgb8). ``/final_obs/<key>``: the same at
  the end of each episode (the observation after its last step).
- ``/action``, ``/policy_action`` (``Float32MultiArray``), ``/reward`` (``std_msgs/Float32``),
  ``/intervention`` (``std_msgs/Int8``: 0 policy, 1 human, 2 scripted), ``/human/engaged``,
  ``/terminated`` and ``/truncated`` (``std_msgs/Bool``).
- ``/episode`` (``std_msgs/String``): one JSON line at each episode's start (index, seed,
  task, success, steps); ``/success`` (``std_msgs/Bool``) at its end.
- For a ``proprio`` field of handrail's 14-number layout, also ``/ee_pose``
  (``geometry_msgs/PoseStamped``) and ``/gripper_state`` (``sensor_msgs/JointState``) in frame
  ``base``, the names of hw/INTERFACES.md, for viewing.
- Metadata record ``handrail``: the store's kind, task, robot, control period and fields, so an
  import rebuilds the same store.

Schemas are named as rosbag2 names them (``geometry_msgs/msg/PoseStamped``). An MCAP file
without the ``handrail`` record is read as a recording of an arm's own topics
(:mod:`handrail.demos.io._mcap_arm`).
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos.episodes import (
    ConversionReport,
    Episode,
    StoreMeta,
    export_store,
    import_into_store,
    require,
)
from handrail.demos.format import FieldSpec, parse_kind
from handrail.demos.io._ros2msg import msgdef, nanoseconds, schema_name, stamp

__all__ = ["export_mcap", "import_mcap", "msgdef", "read_metadata", "write_mcap"]

_ARRAYS = {
    "float32": "Float32MultiArray", "float64": "Float64MultiArray", "uint8": "UInt8MultiArray",
    "int8": "Int8MultiArray", "int16": "Int16MultiArray", "int32": "Int32MultiArray",
    "int64": "Int64MultiArray", "uint16": "UInt16MultiArray", "uint32": "UInt32MultiArray",
    "uint64": "UInt64MultiArray", "bool": "UInt8MultiArray", "float16": "Float32MultiArray",
}  # fmt: skip


def _array_msg(value: np.ndarray) -> dict[str, Any]:
    dims, stride = [], int(value.size)
    for i, size in enumerate(value.shape):
        dims.append({"label": f"d{i}", "size": int(size), "stride": stride})
        stride //= max(int(size), 1)
    data = value.astype(np.uint8) if value.dtype == np.bool_ else value
    return {"layout": {"dim": dims, "data_offset": 0}, "data": data.reshape(-1).tolist()}


def _is_image(spec: FieldSpec) -> bool:
    return spec.dtype == "uint8" and len(spec.shape) == 3 and spec.shape[2] == 3


def offered_qos(durability: str = "volatile") -> str:
    """A channel's ``offered_qos_profiles`` (the ros2 MCAP profile requires it): rosbag2's YAML
    of one reliable keep-last publisher; durations 0 mean the rmw default (none)."""
    zero = "{sec: 0, nsec: 0}"
    return (
        f"- history: keep_last\n  depth: 10\n  reliability: reliable\n  durability: {durability}\n"
        f"  deadline: {zero}\n  lifespan: {zero}\n  liveliness: automatic\n"
        f"  liveliness_lease_duration: {zero}\n  avoid_ros_namespace_conventions: false\n"
    )


_LATCHED_TOPICS = ("/episode",)
"""Exported topics offered transient local, so ``ros2 bag play`` latches them."""


class _Out:
    """The MCAP writer with one schema per message type, registered on first use, and one
    channel per topic with its offered QoS."""

    def __init__(self, stream: Any) -> None:
        writer_mod = require("mcap_ros2.writer", "MCAP export", "ros")
        self.writer = writer_mod.Writer(stream)
        self.schemas: dict[str, Any] = {}

    def _channel(self, topic: str, schema: Any) -> None:
        # mcap_ros2's Writer registers a channel on a topic's first message, without the channel
        # metadata the ros2 profile requires; register it first, with the metadata, in its place.
        # tests/demos/io/test_mcap.py checks every channel has it.
        channels: dict[str, int] = self.writer._channel_ids
        if topic not in channels:
            durability = "transient_local" if topic in _LATCHED_TOPICS else "volatile"
            channels[topic] = self.writer._writer.register_channel(
                topic=topic, message_encoding="cdr", schema_id=schema.id,
                metadata={"offered_qos_profiles": offered_qos(durability)},
            )  # fmt: skip

    def write(self, topic: str, datatype: str, message: dict[str, Any], t_s: float) -> None:
        if datatype not in self.schemas:
            name = schema_name(datatype)
            self.schemas[datatype] = self.writer.register_msgdef(name, msgdef(datatype))
        self._channel(topic, self.schemas[datatype])
        ns = nanoseconds(t_s)
        self.writer.write_message(
            topic, self.schemas[datatype], message, log_time=ns, publish_time=ns
        )


def _write_obs(
    out: _Out, prefix: str, fields: tuple[FieldSpec, ...], obs: dict[str, np.ndarray], t: float
) -> None:
    for spec in fields:
        value = np.asarray(obs[spec.name])
        if _is_image(spec):
            h, w, _ = value.shape
            msg = {"header": {"stamp": stamp(t), "frame_id": f"camera_{spec.name}"}, "height": h, "width": w,
                   "encoding": "rgb8", "is_bigendian": 0, "step": 3 * w, "data": value.tobytes()}  # fmt: skip
            topic = (
                f"/camera/{spec.name}/image_raw" if prefix == "/obs" else f"{prefix}/{spec.name}"
            )
            out.write(topic, "sensor_msgs/Image", msg, t)
        else:
            out.write(
                f"{prefix}/{spec.name}", f"std_msgs/{_ARRAYS[spec.dtype]}", _array_msg(value), t
            )


def _write_viewing(out: _Out, proprio: np.ndarray, t: float) -> None:
    header = {"stamp": stamp(t), "frame_id": "base"}
    x, y, z, qw, qx, qy, qz = (float(v) for v in proprio[:7])
    pose = {"header": header, "pose": {"position": {"x": x, "y": y, "z": z},
                                       "orientation": {"x": qx, "y": qy, "z": qz, "w": qw}}}  # fmt: skip
    out.write("/ee_pose", "geometry_msgs/PoseStamped", pose, t)
    joint = {
        "header": header,
        "name": ["gripper"],
        "position": [float(proprio[13])],
        "velocity": [],
        "effort": [],
    }
    out.write("/gripper_state", "sensor_msgs/JointState", joint, t)


def _write_step(mc: _Out, fields: tuple[FieldSpec, ...], ep: Episode, i: int, t: float) -> None:
    """Every message of step ``i`` of ``ep``, at time ``t``."""
    obs = {k: v[i] for k, v in ep.obs.items()}
    _write_obs(mc, "/obs", fields, obs, t)
    if any(f.name == "proprio" and f.shape == (14,) for f in fields):  # hw/mirrors.PROPRIO_DIM
        _write_viewing(mc, np.asarray(obs["proprio"]), t)
    mc.write("/action", "std_msgs/Float32MultiArray", _array_msg(ep.action[i]), t)
    if ep.policy_action is not None:
        mc.write("/policy_action", "std_msgs/Float32MultiArray", _array_msg(ep.policy_action[i]), t)
    if ep.intervention is not None:
        mc.write("/intervention", "std_msgs/Int8", {"data": int(ep.intervention[i])}, t)
        mc.write("/human/engaged", "std_msgs/Bool", {"data": int(ep.intervention[i]) == 1}, t)
    mc.write("/reward", "std_msgs/Float32", {"data": float(ep.reward[i])}, t)
    mc.write("/terminated", "std_msgs/Bool", {"data": bool(ep.terminated[i])}, t)
    mc.write("/truncated", "std_msgs/Bool", {"data": bool(ep.truncated[i])}, t)


def write_mcap(
    out: str | Path, meta: StoreMeta, episodes: Iterator[Episode], *, overwrite: bool = False
) -> ConversionReport:
    """Write ``episodes`` into a new MCAP file (see the module doc for the topics).

    Args:
        out: The ``.mcap`` file to write.
        meta: The store's metadata (kept in the file's ``handrail`` metadata record).
        episodes: The episodes, in order.
        overwrite: Replace an existing file.

    Raises:
        FileExistsError: ``out`` exists and ``overwrite`` is false.
        ImportError: the ``ros`` extra is not installed.
    """
    path = Path(out)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite to replace it")
    report = ConversionReport()
    fields = tuple(meta.obs_fields)
    dt = meta.control_dt_s
    with path.open("wb") as stream:
        mc = _Out(stream)
        mc.writer.add_metadata("handrail", {
            "kind": meta.kind, "task": meta.task, "robot": meta.robot, "control_dt_s": repr(dt),
            "action_dim": str(meta.action_dim),
            "obs_fields": json.dumps([[f.name, f.dtype, list(f.shape), f.units] for f in fields]),
        })  # fmt: skip
        t_end = 0.0
        for index, ep in enumerate(episodes):
            n = ep.num_steps
            times = ep.timestamp if ep.timestamp is not None else t_end + dt * np.arange(n)
            info = {"episode": index, "seed": ep.seed, "task": ep.task,
                    "success": bool(ep.success), "steps": n}  # fmt: skip
            mc.write("/episode", "std_msgs/String", {"data": json.dumps(info)}, float(times[0]))
            for i in range(n):
                _write_step(mc, fields, ep, i, float(times[i]))
            t_end = float(times[-1]) + dt
            _write_obs(mc, "/final_obs", fields, ep.final_obs, t_end)
            mc.write("/success", "std_msgs/Bool", {"data": bool(ep.success)}, t_end)
            report.episodes += 1
            report.steps += n
        mc.writer.finish()
    return report


def export_mcap(store: str | Path, out: str | Path, *, overwrite: bool = False) -> ConversionReport:
    """Export every episode of a handrail store to one MCAP file."""
    return export_store(write_mcap, store, out, overwrite=overwrite)


_STEP_TOPICS = (
    "/action",
    "/policy_action",
    "/intervention",
    "/reward",
    "/terminated",
    "/truncated",
)


def read_metadata(path: Path) -> dict[str, dict[str, str]]:
    """The metadata records of an MCAP file, by name.

    Raises:
        ValueError: ``path`` is not a readable MCAP file.
        ImportError: the ``ros`` extra is not installed.
    """
    reader_mod = require("mcap.reader", "MCAP import", "ros")
    errors = require("mcap.exceptions", "MCAP import", "ros")
    try:
        with path.open("rb") as stream:
            return {m.name: m.metadata for m in reader_mod.make_reader(stream).iter_metadata()}
    except (errors.McapError, struct.error, EOFError, ValueError, OSError) as exc:
        raise ValueError(
            f"{path} is not a readable MCAP file ({exc!r}); a recording cut short has no footer: "
            "repair it with `mcap recover`"
        ) from None


def _store_meta(record: dict[str, str]) -> StoreMeta:
    fields = tuple(FieldSpec(n, d, tuple(s), u) for n, d, s, u in json.loads(record["obs_fields"]))
    return StoreMeta(
        kind=parse_kind(record["kind"]),
        task=record["task"],
        obs_fields=fields,
        action_dim=int(record["action_dim"]),
        control_dt_s=float(record["control_dt_s"]),
        robot=record["robot"],
    )


def _value(msg: Any, spec: FieldSpec | None) -> np.ndarray:
    if spec is not None and _is_image(spec):  # sensor_msgs/Image
        return np.frombuffer(bytes(msg.data), np.uint8).reshape(spec.shape).copy()
    shape = tuple(int(d.size) for d in msg.layout.dim)
    dtype = np.dtype(spec.dtype) if spec is not None else np.float32
    data = msg.data  # uint8[] (UInt8MultiArray: uint8 and bool fields) decodes as bytes
    raw = np.frombuffer(data, np.uint8) if isinstance(data, bytes | bytearray) else np.asarray(data)
    return raw.astype(dtype).reshape(shape)


def _episodes(path: Path, fields: tuple[FieldSpec, ...], task: str) -> Iterator[Episode]:
    """The episodes of a file written by :func:`write_mcap`, in file order: each ``/episode``
    message opens one, and its steps, final observation and ``/success`` follow it."""
    reader_mod = require("mcap.reader", "MCAP import", "ros")
    decoder = require("mcap_ros2.decoder", "MCAP import", "ros")
    by_topic = {f"/obs/{f.name}": f for f in fields}
    by_topic.update({f"/camera/{f.name}/image_raw": f for f in fields if _is_image(f)})
    finals = {f"/final_obs/{f.name}": f for f in fields}
    current: dict[str, Any] | None = None
    with path.open("rb") as stream:
        reader = reader_mod.make_reader(stream, decoder_factories=[decoder.DecoderFactory()])
        for _, channel, record, msg in reader.iter_decoded_messages(log_time_order=False):
            topic = channel.topic
            if topic == "/episode":
                if current is not None:
                    yield _episode(current, task)
                current = {"info": json.loads(msg.data), "obs": {f.name: [] for f in fields},
                           "final": {}, "time": [], **{t: [] for t in _STEP_TOPICS}}  # fmt: skip
            elif current is None:
                continue
            elif topic in by_topic:
                current["obs"][by_topic[topic].name].append(_value(msg, by_topic[topic]))
            elif topic in finals:
                current["final"][finals[topic].name] = _value(msg, finals[topic])
            elif topic in _STEP_TOPICS:
                current[topic].append(_value(msg, None) if topic.endswith("action") else msg.data)
                if topic == "/action":
                    current["time"].append(record.log_time / 10**9)  # int / int: correctly rounded
    if current is not None:
        yield _episode(current, task)


def _episode(cur: dict[str, Any], task: str) -> Episode:
    info = cur["info"]
    policy, interv = cur["/policy_action"], cur["/intervention"]
    return Episode(
        obs={k: np.stack(v) for k, v in cur["obs"].items()},
        final_obs=cur["final"],
        action=np.stack(cur["/action"]).astype(np.float32),
        reward=np.asarray(cur["/reward"], np.float32),
        terminated=np.asarray(cur["/terminated"], bool),
        truncated=np.asarray(cur["/truncated"], bool),
        policy_action=np.stack(policy).astype(np.float32) if policy else None,
        intervention=np.asarray(interv, np.int8) if interv else None,
        timestamp=np.asarray(cur["time"], np.float64),
        success=bool(info["success"]),
        seed=info["seed"],
        task=info.get("task") or task,
    )


def import_mcap(
    src: str | Path,
    out: str | Path,
    *,
    task: str | None = None,
    control_dt_s: float | None = None,
    overwrite: bool = False,
) -> ConversionReport:
    """Import an MCAP file into a new store.

    A file written by :func:`export_mcap` comes back losslessly; a file without its ``handrail``
    metadata record is read as a recording of an arm's topics
    (:func:`handrail.demos.io._mcap_arm.import_arm_recording`).

    Args:
        src: The ``.mcap`` file.
        out: The new store.
        task: Task name to record (default: the file's, or ``unknown`` for an arm recording).
        control_dt_s: Control period (s) of an arm recording (default: its median step
            interval); a file written by :func:`export_mcap` states its own.
        overwrite: Replace an existing store at ``out``.

    Raises:
        FileNotFoundError: ``src`` does not exist.
        ValueError: ``src`` is not a readable MCAP file, or lacks topics an import needs.
        ImportError: the ``ros`` extra is not installed.
    """
    path = Path(src)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    records = read_metadata(path)
    if "handrail" not in records:
        from handrail.demos.io._mcap_arm import import_arm_recording

        return import_arm_recording(
            path, out, task=task, control_dt_s=control_dt_s, overwrite=overwrite
        )
    meta = _store_meta(records["handrail"])
    if task is not None:
        meta = dataclasses.replace(meta, task=task)
    return import_into_store(
        out,
        meta,
        _episodes(path, meta.obs_fields, meta.task),
        ConversionReport(),
        overwrite=overwrite,
    )
