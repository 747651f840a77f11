"""Import a recording of an arm's own ROS 2 topics (``ros2 bag record -s mcap``) into a store.

The topics are those of hw/INTERFACES.md (with or without a leading ``/``):

- ``ee_pose`` (``geometry_msgs/PoseStamped``) and ``gripper_state`` (``sensor_msgs/JointState``,
  the opening is its first position) make the 14-number ``proprio`` observation of handrail's
  arms (position, quaternion ``w x y z`` with ``x >= 0`` as the sim has it, linear and angular
  velocity, opening); the velocities come from ``ee_twist`` (``TwistStamped``), or are zeros.
- Steps: one per ``action`` message (``std_msgs/Float32MultiArray``: the action as recorded)
  or, without that topic, per ``cmd/target_pose`` message (the action is then the absolute
  target ``x y z qw qx qy qz`` and, with ``cmd/gripper``, the commanded opening in m).
- Optional: ``objects/<name>/pose`` (observation ``<name>_pose``, 7 numbers),
  ``camera/<name>/image_raw`` (``rgb8`` or ``bgr8``; observation ``<name>``, uint8 RGB),
  ``human/engaged`` (intervention 1 while true), ``success`` (``std_msgs/Bool``: a step's
  reward is 1.0 when it is true after the step, the sparse reward; an episode succeeded when a
  reward was), ``actor/status`` (``std_msgs/String``, the actor node's JSON line: each one ends
  an episode, and its ``success`` is the episode's).

A step's observation is the newest message of each topic at or before the step's message (the
observation the command was computed from); an episode's final observation is the one at its
``actor/status`` line, or at the end of the recording. Steps before every needed topic has a
message are dropped. Without ``actor/status`` the whole recording is one episode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos.episodes import (
    ConversionReport,
    Episode,
    StoreMeta,
    import_into_store,
    require,
)
from handrail.demos.format import FieldSpec, StoreKind
from handrail.demos.io._ros2msg import schema_name

__all__ = ["import_arm_recording"]

NEEDED = ("ee_pose", "gripper_state")
"""Topics an arm recording must have, besides one of :data:`ACTION_TOPICS`."""
ACTION_TOPICS = ("action", "cmd/target_pose")
"""Topics that define the steps, in order of preference."""
TYPES = {
    "ee_pose": "geometry_msgs/PoseStamped",
    "ee_twist": "geometry_msgs/TwistStamped",
    "gripper_state": "sensor_msgs/JointState",
    "action": "std_msgs/Float32MultiArray",
    "cmd/target_pose": "geometry_msgs/PoseStamped",
    "cmd/gripper": "std_msgs/Float64",
    "human/engaged": "std_msgs/Bool",
    "success": "std_msgs/Bool",
    "actor/status": "std_msgs/String",
}
"""The message type each known topic must have."""
_OBJECT = re.compile(r"^objects/([A-Za-z0-9_][A-Za-z0-9_.-]*)/pose$")
_CAMERA = re.compile(r"^camera/([A-Za-z0-9_][A-Za-z0-9_.-]*)/image_raw$")


@dataclass
class _Stream:
    """One topic's messages as converted values at their log times (ns), for sample and hold."""

    times: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)

    @cached_property
    def _sorted_times(self) -> np.ndarray:  # read only once every message is in
        return np.asarray(self.times, np.int64)

    def index(self, t_ns: np.ndarray) -> np.ndarray:
        """Index of the newest message at or before each time; -1 before the first."""
        return np.searchsorted(self._sorted_times, t_ns, side="right") - 1

    def held(self, t_ns: np.ndarray, before: Any) -> list[Any]:
        """The newest value at or before each time, ``before`` where there is none yet."""
        return [self.values[i] if i >= 0 else before for i in self.index(t_ns)]


def _pose(msg: Any) -> np.ndarray:
    p, q = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z, q.w, q.x, q.y, q.z])


def _image(topic: str, msg: Any) -> np.ndarray:
    if msg.encoding not in ("rgb8", "bgr8"):
        raise ValueError(f"{topic} is {msg.encoding!r}: only rgb8 and bgr8 images are imported")
    rows = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.step)
    image = rows[:, : 3 * msg.width].reshape(msg.height, msg.width, 3)
    return (image[..., ::-1] if msg.encoding == "bgr8" else image).copy()


def _convert(topic: str) -> Callable[[Any], Any]:
    """How a topic's decoded message becomes a value."""
    if topic == "ee_twist":
        return lambda m: np.array([getattr(getattr(m.twist, v), a) for v in ("linear", "angular")
                                   for a in "xyz"])  # fmt: skip
    if topic == "gripper_state":
        return lambda m: float(m.position[0]) if len(m.position) else np.nan
    if topic == "action":
        return lambda m: np.asarray(m.data, np.float32)
    if _CAMERA.match(topic):
        return lambda m: _image(topic, m)
    if TYPES.get(topic, "").endswith("PoseStamped") or _OBJECT.match(topic):
        return _pose
    return lambda m: m.data  # Float64, Bool, String


def _topics(path: Path) -> dict[str, tuple[str, str]]:
    """``{topic without leading /: (topic as recorded, schema name)}`` of every channel."""
    reader_mod = require("mcap.reader", "MCAP import", "ros")
    with path.open("rb") as stream:
        reader = reader_mod.make_reader(stream)
        summary = reader.get_summary()
        if summary is not None:
            pairs = [(c.topic, summary.schemas[c.schema_id].name if c.schema_id else "")
                     for c in summary.channels.values()]  # fmt: skip
        else:  # the summary section is optional in MCAP: scan the messages
            pairs = list({(c.topic, s.name if s else "") for s, c, _ in reader.iter_messages()})
    return {topic.lstrip("/"): (topic, schema) for topic, schema in pairs}


def _check(path: Path, topics: dict[str, tuple[str, str]]) -> str:
    """Checks the needed topics and the known topics' types; returns the step topic."""
    missing = [t for t in NEEDED if t not in topics]
    if not any(t in topics for t in ACTION_TOPICS):
        missing.append(" or ".join(ACTION_TOPICS))
    if missing:
        present = ", ".join(sorted(raw for raw, _ in topics.values())) or "none"
        raise ValueError(
            f"{path} has no 'handrail' metadata record (not written by `handrail demos export`), "
            f"and as a recording of an arm's topics it lacks {', '.join(missing)}; it needs "
            f"{', '.join(NEEDED)} and one of {', '.join(ACTION_TOPICS)} (hw/INTERFACES.md). "
            f"Topics present: {present}"
        )
    for topic, (raw, schema) in topics.items():
        expected = "sensor_msgs/Image" if _CAMERA.match(topic) else TYPES.get(topic)
        if _OBJECT.match(topic):
            expected = "geometry_msgs/PoseStamped"
        if expected and schema_name(schema) != schema_name(expected):
            raise ValueError(f"{path}: topic {raw} is {schema or 'untyped'}, expected {expected}")
    return next(t for t in ACTION_TOPICS if t in topics)


def _read(
    path: Path, topics: dict[str, tuple[str, str]], names: list[str], needed: np.ndarray | None
) -> dict[str, _Stream]:
    """The messages of ``names``, converted, in log-time order.

    With ``needed`` (sorted times, ns), only the messages that are the newest at one of those
    times are decoded and kept, so a long recording's camera images do not all sit in memory.
    """
    reader_mod = require("mcap.reader", "MCAP import", "ros")
    decoder_mod = require("mcap_ros2.decoder", "MCAP import", "ros")
    factory = decoder_mod.DecoderFactory()
    streams = {n: _Stream() for n in names}
    convert = {n: _convert(n) for n in names}
    decoders: dict[int, Callable[[bytes], Any]] = {}
    pending: dict[str, tuple[int, Callable[[bytes], Any], bytes]] = {}

    def keep(name: str, t: int, decode: Callable[[bytes], Any], data: bytes) -> None:
        streams[name].times.append(t)
        streams[name].values.append(convert[name](decode(data)))

    def used(a: int, b: float) -> bool:  # some needed time in [a, b)
        assert needed is not None
        return bool(np.searchsorted(needed, a) < np.searchsorted(needed, b))

    with path.open("rb") as stream:
        reader = reader_mod.make_reader(stream)
        for schema, channel, message in reader.iter_messages(topics=[topics[n][0] for n in names]):
            if channel.id not in decoders:
                decoders[channel.id] = factory.decoder_for(channel.message_encoding, schema)
            name, t = channel.topic.lstrip("/"), message.log_time
            if needed is None:
                keep(name, t, decoders[channel.id], message.data)
                continue
            if name in pending and used(pending[name][0], t):
                keep(name, *pending[name])
            pending[name] = (t, decoders[channel.id], message.data)
    for name, (t, decode, data) in pending.items():
        if used(t, np.inf):
            keep(name, t, decode, data)
    return streams


def _episode_bounds(
    streams: dict[str, _Stream], steps: np.ndarray, end_ns: int, report: ConversionReport
) -> tuple[list[slice], list[int], list[bool | None]]:
    """Each episode's steps, end time (ns) and success as ``actor/status`` says (None: unsaid).

    Each ``actor/status`` line ends an episode; steps after the last one (or all, without any)
    make one more episode that ends at ``end_ns``, the end of the recording.
    """
    status = streams.get("actor/status", _Stream())
    ends = list(status.times)
    said: list[bool | None] = [json.loads(s).get("success") for s in status.values]
    starts = [0, *np.searchsorted(steps, np.asarray(ends, np.int64), side="right").tolist()]
    if starts[-1] < len(steps):
        if ends:
            report.note(f"{len(steps) - starts[-1]} steps after the last actor/status line kept "
                        "as an unfinished episode")  # fmt: skip
        ends.append(end_ns)
        said.append(None)
        starts.append(len(steps))
    kept = [i for i in range(len(ends)) if starts[i + 1] > starts[i]]
    return ([slice(starts[i], starts[i + 1]) for i in kept], [ends[i] for i in kept],
            [said[i] for i in kept])  # fmt: skip


def _observations(streams: dict[str, _Stream], t_ns: np.ndarray) -> dict[str, np.ndarray]:
    """The observation dict at each time (``proprio``, object poses, cameras), stacked."""
    pose = np.stack(streams["ee_pose"].held(t_ns, None))
    pose[:, 3:7] *= np.where(pose[:, 4:5] < 0, -1.0, 1.0)  # the sim's quaternion sign
    twist = streams.get("ee_twist")
    vel = np.stack(twist.held(t_ns, np.zeros(6))) if twist else np.zeros((len(t_ns), 6))
    grip = np.asarray(streams["gripper_state"].held(t_ns, None), np.float64)[:, None]
    obs = {"proprio": np.concatenate([pose, vel, grip], axis=1).astype(np.float32)}
    for topic, stream in streams.items():
        if m := _OBJECT.match(topic):
            obs[f"{m[1]}_pose"] = np.stack(stream.held(t_ns, None)).astype(np.float32)
        elif m := _CAMERA.match(topic):
            obs[m[1]] = np.stack(stream.held(t_ns, None))
    return obs


def _actions(streams: dict[str, _Stream], step_topic: str, steps: np.ndarray) -> np.ndarray:
    values = streams[step_topic].values
    if step_topic == "action":
        if len({v.shape for v in values}) > 1:
            raise ValueError(
                f"action messages differ in length: {sorted({len(v) for v in values})}"
            )
        return np.stack(values).astype(np.float32)
    targets = np.stack(values)
    if "cmd/gripper" not in streams:
        return targets.astype(np.float32)
    opening = streams["gripper_state"].held(steps, np.nan)
    commanded = streams["cmd/gripper"].held(steps, None)
    grip = [c if c is not None else o for c, o in zip(commanded, opening, strict=True)]
    return np.concatenate([targets, np.asarray(grip)[:, None]], axis=1).astype(np.float32)


def _episodes(
    streams: dict[str, _Stream],
    steps: np.ndarray,
    obs: dict[str, np.ndarray],
    actions: np.ndarray,
    bounds: tuple[list[slice], list[int], list[bool | None]],
    task: str,
) -> Iterator[Episode]:
    """The episodes of the steps at times ``steps`` (ns) with their observations and actions."""
    flag = streams.get("success", _Stream())
    engaged = streams.get("human/engaged")
    for sl, end, said in zip(*bounds, strict=True):
        t = steps[sl]
        final = {k: v[0] for k, v in _observations(streams, np.array([end], np.int64)).items()}
        # a step's reward is the success flag after it: at the next step, or at the episode's end
        reward = np.asarray(flag.held(np.append(t[1:], end), False), np.float32)
        success = bool(said) if said is not None else bool(reward.any())
        last = np.arange(len(t)) == len(t) - 1
        yield Episode(
            obs={k: v[sl] for k, v in obs.items()}, final_obs=final, action=actions[sl],
            reward=reward, terminated=last & success, truncated=last & (not success),
            timestamp=t / 10**9, success=success, task=task,
            intervention=np.asarray(engaged.held(t, False), np.int8) if engaged else None,
        )  # fmt: skip


def import_arm_recording(
    path: Path,
    out: str | Path,
    *,
    task: str | None = None,
    control_dt_s: float | None = None,
    overwrite: bool = False,
) -> ConversionReport:
    """Import a recording of an arm's topics (see the module doc) into a new store.

    Args:
        path: The ``.mcap`` recording.
        out: The new store.
        task: Task name to record (default ``unknown``).
        control_dt_s: Control period (s); default: the median interval between steps.
        overwrite: Replace an existing store at ``out``.

    Raises:
        ValueError: a needed topic is missing (names them and lists the topics present), a
            known topic has another message type, or no step has every needed observation.
    """
    report = ConversionReport()
    topics = _topics(path)
    step_topic = _check(path, topics)
    small = [t for t in topics if t in TYPES or _OBJECT.match(t)]
    streams = _read(path, topics, small, None)
    steps = np.asarray(streams[step_topic].times, np.int64)
    end_ns = max(max(s.times, default=0) for s in streams.values())
    cameras = [t for t in topics if _CAMERA.match(t)]
    if cameras:  # only the frames some step or episode end will hold
        status = streams.get("actor/status", _Stream()).times
        needed = np.sort(np.concatenate([steps, np.asarray([*status, end_ns], np.int64)]))
        streams.update(_read(path, topics, cameras, needed))
        for cam in cameras:
            if len(sizes := {v.shape for v in streams[cam].values}) > 1:
                raise ValueError(f"{path}: {topics[cam][0]} changes size: {sorted(sizes)}")
    observed = [*NEEDED, *(t for t in topics if _OBJECT.match(t)), *cameras]
    first = max(streams[t].times[0] if streams[t].times else np.inf for t in observed)
    skip = int(np.searchsorted(steps, first))
    if skip == len(steps):
        raise ValueError(f"{path}: no {step_topic} message comes after a message on every "
                         f"observation topic ({', '.join(observed)})")  # fmt: skip
    if skip:
        report.note(f"{skip} {step_topic} messages before the first observation dropped")
        old = streams[step_topic]
        streams[step_topic] = _Stream(old.times[skip:], old.values[skip:])
        steps = steps[skip:]
    if "ee_twist" not in streams:
        report.note("no ee_twist: the velocities in proprio are zeros")
    if step_topic == "cmd/target_pose":
        grip = " and the commanded opening (m)" if "cmd/gripper" in streams else ""
        report.note(f"action: the absolute target x y z qw qx qy qz{grip}")
    if control_dt_s is None:
        if len(steps) < 2:
            raise ValueError(f"{path}: one step only; pass --control-dt-s")
        control_dt_s = float(np.median(np.diff(steps))) / 1e9
        report.note(f"control period: the median step interval, {control_dt_s:.6g} s")
    name = task or "unknown"
    obs, actions = _observations(streams, steps), _actions(streams, step_topic, steps)
    fields = tuple(FieldSpec(k, str(v.dtype), v.shape[1:]) for k, v in obs.items())
    kind: StoreKind = "intervention" if "human/engaged" in streams else "rollout"
    meta = StoreMeta(kind, name, fields, actions.shape[1], control_dt_s, "ros_cartesian_pose")
    bounds = _episode_bounds(streams, steps, end_ns, report)
    episodes = _episodes(streams, steps, obs, actions, bounds, name)
    return import_into_store(out, meta, episodes, report, overwrite=overwrite)
