"""ROS 2 message definitions and time stamps for MCAP files, without rclpy.

:func:`msgdef` builds the complete ``ros2msg`` definition of a message type (its ``.msg`` text and
those of every type it uses, as rosbag2 stores them in a bag) from the ``.msg`` files the ROS 2
message packages install; :func:`schema_name` names its schema as rosbag2 does. The converters
in :mod:`handrail.demos.io.mcap` encode and decode messages from these with ``mcap-ros2-support``.
"""

from __future__ import annotations

import os
import re
import site
import sys
from fractions import Fraction
from pathlib import Path

__all__ = ["msgdef", "nanoseconds", "schema_name", "stamp"]

_PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16",
               "int32", "uint32", "int64", "uint64", "string", "wstring"}  # fmt: skip
_SEPARATOR = "=" * 80


def _share_dirs() -> list[Path]:
    """Where ROS 2 message packages keep their ``.msg`` files.

    The ``ros-jazzy-*`` wheels install them as data files under the environment's prefix
    (``<venv>/share/<pkg>/msg``, or the user base with ``pip install --user``); a sourced ROS 2
    installation lists its prefixes in ``AMENT_PREFIX_PATH``.
    """
    prefixes = [sys.prefix, site.getuserbase()]
    prefixes += [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    candidates = [Path(p) / "share" for p in prefixes] + sorted(Path("/opt/ros").glob("*/share"))
    return [d for d in candidates if (d / "std_msgs" / "msg").is_dir()]


def _split(datatype: str) -> tuple[str, str]:
    """``pkg/Type`` or ``pkg/msg/Type`` -> ``(pkg, Type)``."""
    pkg, _, name = datatype.partition("/")
    return pkg, name.removeprefix("msg/")


def schema_name(datatype: str) -> str:
    """The name rosbag2 gives a message type's schema: ``pkg/msg/Type``."""
    pkg, name = _split(datatype)
    return f"{pkg}/msg/{name}"


def _msg_text(datatype: str) -> str:
    """The installed ``.msg`` text of one type."""
    pkg, name = _split(datatype)
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
    """The full ``ros2msg`` definition of ``datatype`` with its dependencies, as rosbag2 writes it.

    The type's own ``.msg`` text, then each type it depends on (recursively, once each) after a
    line of 80 ``=`` and a line ``MSG: pkg/Type``.

    Raises:
        FileNotFoundError: a definition is not installed (names the ROS extra to install).
    """
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


def nanoseconds(t_s: float) -> int:
    """Unix seconds -> integer nanoseconds, exactly rounded (float64 seconds lose nothing)."""
    return round(Fraction(t_s) * 10**9)


def stamp(t_s: float) -> dict[str, int]:
    """Unix seconds as a ``builtin_interfaces/Time`` dict."""
    sec, nanosec = divmod(nanoseconds(t_s), 10**9)
    return {"sec": sec, "nanosec": nanosec}
