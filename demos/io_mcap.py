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
  ``/intervention`` (``std_msgs/Int8``: 0 policy, 1 human, 2 scripted), ``/terminated`` and
  ``/truncated`` (``std_msgs/Bool``).
- ``/episode`` (``std_msgs/String``): one JSON line at each episode's start (index, seed,
  task, success, steps).
- For a ``proprio`` field of handrail's 14-number layout, also ``/ee_pose``
  (``geometry_msgs/PoseStamped``) and ``/gripper_state`` (``sensor_msgs/JointState``) in frame
  ``base``, the names of hw/INTERFACES.md, for viewing.
- Metadata record ``handrail``: the store's kind, task, robot, control period and fields, so an
  import rebuilds the same store.
"""

from __future__ import annotations

import json
import re
import struct
import sys
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
from handrail.demos.format import FieldSpec

__all__ = ["export_mcap", "import_mcap", "write_mcap"]

_ARRAYS = {
    "float32": "Float32MultiArray", "float64": "Float64MultiArray", "uint8": "UInt8MultiArray",
    "int8": "Int8MultiArray", "int16": "Int16MultiArray", "int32": "Int32MultiArray",
    "int64": "Int64MultiArray", "uint16": "UInt16MultiArray", "uint32": "UInt32MultiArray",
    "uint64": "UInt64MultiArray", "bool": "UInt8MultiArray",
}  # fmt: skip
_PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16",
               "int32", "uint32", "int64", "uint64", "string", "wstring"}  # fmt: skip
_SEPARATOR = "=" * 80


def _share_dirs() -> list[Path]:
    """Where ROS 2 message packages keep their ``.msg`` files (venv and system installs)."""
    candidates = [Path(sys.prefix) / "share", Path("/opt/ros/jazzy/share")]
    return [d for d in candidates if (d / "std_msgs" / "msg").is_dir()]


def _msg_text(datatype: str) -> str:
    pkg, _, name = datatype.partition("/msg/") if "/msg/" in datatype else datatype.partition("/")
    for share in _share_dirs():
        path = share / pkg / "msg" / f"{name}.msg"
        if path.is_file():
            return path.read_text()
    raise FileNotFoundError(
        f"no ROS 2 message definition for {datatype}: install handrail's ROS extra "
        "(`pip install 'handrail[ros]'`) or source a ROS 2 installation"
    )


def _dependencies(pkg: str, body: str) -> list[str]:
    """The non-primitive field types of a ``.msg`` body, as ``pkg/Type``."""
    out = []
    for raw in body.splitlines():
        tokens = raw.split("#")[0].split()
        if len(tokens) < 2 or "=" in raw.split("#")[0]:
            continue  # blank, comment, or a constant (always primitive)
        base = re.sub(r"(\[.*\]|<=\d+)$", "", tokens[0])
        if base in _PRIMITIVES:
            continue
        out.append(
            base if "/" in base else "std_msgs/Header" if base == "Header" else f"{pkg}/{base}"
        )
    return out


def msgdef(datatype: str) -> str:
    """The full ``ros2msg`` definition of ``datatype`` with its dependencies, as rosbag2 writes it."""
    text = _msg_text(datatype)
    seen: list[str] = []
    todo = _dependencies(datatype.split("/")[0], text)
    while todo:
        dep = todo.pop(0)
        if dep not in seen:
            seen.append(dep)
            todo += _dependencies(dep.split("/")[0], _msg_text(dep))
    parts = [text.rstrip("\n")]
    parts += [f"{_SEPARATOR}\nMSG: {dep}\n{_msg_text(dep).rstrip()}" for dep in seen]
    return "\n".join(parts) + "\n"


def _array_msg(value: np.ndarray) -> dict[str, Any]:
    dims, stride = [], int(value.size)
    for i, size in enumerate(value.shape):
        dims.append({"label": f"d{i}", "size": int(size), "stride": stride})
        stride //= max(int(size), 1)
    data = value.astype(np.uint8) if value.dtype == np.bool_ else value
    return {"layout": {"dim": dims, "data_offset": 0}, "data": data.reshape(-1).tolist()}


def _is_image(spec: FieldSpec) -> bool:
    return spec.dtype == "uint8" and len(spec.shape) == 3 and spec.shape[2] == 3


def _stamp(t_s: float) -> dict[str, int]:
    sec = int(np.floor(t_s))
    return {"sec": sec, "nanosec": min(round((t_s - sec) * 1e9), 999_999_999)}


class _Out:
    """The MCAP writer with one schema per message type, registered on first use."""

    def __init__(self, stream: Any) -> None:
        writer_mod = require("mcap_ros2.writer", "MCAP export", "ros")
        self.writer = writer_mod.Writer(stream)
        self.schemas: dict[str, Any] = {}

    def write(self, topic: str, datatype: str, message: dict[str, Any], t_s: float) -> None:
        if datatype not in self.schemas:
            self.schemas[datatype] = self.writer.register_msgdef(datatype, msgdef(datatype))
        ns = round(t_s * 1e9)
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
            msg = {"header": {"stamp": _stamp(t), "frame_id": f"camera_{spec.name}"}, "height": h, "width": w,
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
    header = {"stamp": _stamp(t), "frame_id": "base"}
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


def write_mcap(
    out: str | Path, meta: StoreMeta, episodes: Iterator[Episode], *, overwrite: bool = False
) -> ConversionReport:
    """Write ``episodes`` into a new MCAP file (see the module doc for the topics)."""
    path = Path(out)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite to replace it")
    report = ConversionReport()
    fields = tuple(meta.obs_fields)
    viewing = any(f.name == "proprio" and f.shape == (14,) for f in fields)
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
            info = {
                "episode": index,
                "seed": ep.seed,
                "task": ep.task,
                "success": bool(ep.success),
                "steps": n,
            }
            mc.write("/episode", "std_msgs/String", {"data": json.dumps(info)}, float(times[0]))
            for i in range(n):
                t = float(times[i])
                _write_obs(mc, "/obs", fields, {k: v[i] for k, v in ep.obs.items()}, t)
                if viewing:
                    _write_viewing(mc, np.asarray(ep.obs["proprio"][i]), t)
                mc.write("/action", "std_msgs/Float32MultiArray", _array_msg(ep.action[i]), t)
                if ep.policy_action is not None:
                    mc.write(
                        "/policy_action",
                        "std_msgs/Float32MultiArray",
                        _array_msg(ep.policy_action[i]),
                        t,
                    )
                if ep.intervention is not None:
                    mc.write("/intervention", "std_msgs/Int8", {"data": int(ep.intervention[i])}, t)
                mc.write("/reward", "std_msgs/Float32", {"data": float(ep.reward[i])}, t)
                mc.write("/terminated", "std_msgs/Bool", {"data": bool(ep.terminated[i])}, t)
                mc.write("/truncated", "std_msgs/Bool", {"data": bool(ep.truncated[i])}, t)
            t_end = float(times[-1]) + dt
            _write_obs(mc, "/final_obs", fields, ep.final_obs, t_end)
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


def _meta(path: Path) -> tuple[StoreMeta, tuple[FieldSpec, ...]]:
    reader_mod = require("mcap.reader", "MCAP import", "ros")
    errors = require("mcap.exceptions", "MCAP import", "ros")
    try:
        with path.open("rb") as stream:
            records = {m.name: m.metadata for m in reader_mod.make_reader(stream).iter_metadata()}
    except (errors.McapError, struct.error, EOFError) as exc:
        raise ValueError(f"{path} is not a readable MCAP file ({exc!r})") from None
    if "handrail" not in records:
        raise ValueError(
            f"{path} has no 'handrail' metadata: only MCAP files written by `handrail demos export "
            "--format mcap` can be imported (a raw recording of arm topics is not supported yet)"
        )
    m = records["handrail"]
    fields = tuple(FieldSpec(n, d, tuple(s), u) for n, d, s, u in json.loads(m["obs_fields"]))
    meta = StoreMeta(kind=m["kind"], task=m["task"], obs_fields=fields, action_dim=int(m["action_dim"]),
                     control_dt_s=float(m["control_dt_s"]), robot=m["robot"])  # fmt: skip
    return meta, fields


def _value(msg: Any, spec: FieldSpec | None) -> np.ndarray:
    if hasattr(msg, "encoding"):  # sensor_msgs/Image
        return np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3).copy()
    shape = tuple(int(d.size) for d in msg.layout.dim)
    dtype = np.dtype(spec.dtype) if spec is not None else np.float32
    return np.asarray(msg.data).astype(dtype).reshape(shape)


def _episodes(path: Path, fields: tuple[FieldSpec, ...], task: str) -> Iterator[Episode]:
    reader_mod = require("mcap.reader", "MCAP import", "ros")
    decoder = require("mcap_ros2.decoder", "MCAP import", "ros")
    by_topic = {f"/obs/{f.name}": f for f in fields}
    by_topic.update({f"/camera/{f.name}/image_raw": f for f in fields if _is_image(f)})
    finals = {f"/final_obs/{f.name}": f for f in fields}
    current: dict[str, Any] | None = None
    with path.open("rb") as stream:  # in write order: an episode's messages follow its /episode
        reader = reader_mod.make_reader(stream, decoder_factories=[decoder.DecoderFactory()])
        for _, channel, record, msg in reader.iter_decoded_messages(log_time_order=False):
            topic = channel.topic
            if topic == "/episode":
                current = {"info": json.loads(msg.data), "obs": {f.name: [] for f in fields}, "final": {},
                           **{t: [] for t in _STEP_TOPICS}, "time": []}  # fmt: skip
            elif current is None:
                continue
            elif topic in by_topic:
                current["obs"][by_topic[topic].name].append(_value(msg, by_topic[topic]))
            elif topic in finals:
                current["final"][finals[topic].name] = _value(msg, finals[topic])
                if len(current["final"]) == len(fields):
                    yield _episode(current, task)
                    current = None
            elif topic in _STEP_TOPICS:
                current[topic].append(_value(msg, None) if topic.endswith("action") else msg.data)
                if topic == "/action":
                    current["time"].append(record.log_time * 1e-9)


def _episode(cur: dict[str, Any], task: str) -> Episode:
    info = cur["info"]
    return Episode(
        obs={k: np.stack(v) for k, v in cur["obs"].items()},
        final_obs=cur["final"],
        action=np.stack(cur["/action"]).astype(np.float32),
        reward=np.asarray(cur["/reward"], np.float32),
        terminated=np.asarray(cur["/terminated"], bool),
        truncated=np.asarray(cur["/truncated"], bool),
        policy_action=np.stack(cur["/policy_action"]).astype(np.float32)
        if cur["/policy_action"]
        else None,
        intervention=np.asarray(cur["/intervention"], np.int8) if cur["/intervention"] else None,
        timestamp=np.asarray(cur["time"], np.float64),
        success=bool(info["success"]),
        seed=info["seed"],
        task=info.get("task") or task,
    )


def import_mcap(
    src: str | Path, out: str | Path, *, task: str | None = None, overwrite: bool = False
) -> ConversionReport:
    """Import an MCAP file written by :func:`export_mcap` into a new store (lossless)."""
    path = Path(src)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    meta, fields = _meta(path)
    if task is not None:
        meta = StoreMeta(
            meta.kind, task, meta.obs_fields, meta.action_dim, meta.control_dt_s, meta.robot
        )
    return import_into_store(
        out, meta, _episodes(path, fields, meta.task), ConversionReport(), overwrite=overwrite
    )
