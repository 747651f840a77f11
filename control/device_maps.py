"""Teleop device mappings: which raw input drives which motion axis, event or gripper command.

Each device has a frozen mapping dataclass with a documented default (the tables are in
:mod:`handrail.control.devices`); a TOML file changes it field by field::

    handrail teleop map --source gamepad > my_pad.toml   # the default, with comments
    $EDITOR my_pad.toml
    handrail teleop check --source gamepad --mapping my_pad.toml

A field present in the file replaces the default's field as a whole (so ``[axes]`` lists every
axis binding; one left out is unbound); a field left out keeps its default. Unknown keys and
unknown input names are errors that list the valid ones. Validation happens on construction, so a
mapping built in code is checked the same way as one read from a file.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import math
import os
import string
import textwrap
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Literal, overload

from handrail.control.teleop import TWIST_AXES, TeleopEvent

DEVICES = ("keyboard", "gamepad", "spacemouse")
"""Teleop device kinds, as named on the command line (``--source``)."""

NAMED_KEYS = ("space", "enter", "tab", "backspace", "esc", "up", "down", "left", "right",
              "pageup", "pagedown", "home", "end", "insert", "delete")  # fmt: skip
"""Keyboard keys with a name; every other key is its character (lowercase for letters)."""
KEYBOARD_KEYS = frozenset(string.ascii_lowercase + string.digits + string.punctuation).union(
    NAMED_KEYS
)
"""Every key name a keyboard mapping may use."""

ABS_CODES = {"ABS_X": 0x00, "ABS_Y": 0x01, "ABS_Z": 0x02, "ABS_RX": 0x03, "ABS_RY": 0x04,
             "ABS_RZ": 0x05, "ABS_THROTTLE": 0x06, "ABS_RUDDER": 0x07, "ABS_WHEEL": 0x08,
             "ABS_GAS": 0x09, "ABS_BRAKE": 0x0A, "ABS_HAT0X": 0x10, "ABS_HAT0Y": 0x11}  # fmt: skip
"""Gamepad axes by their linux/input-event-codes.h names (EV_ABS codes)."""
BTN_CODES = {"BTN_TRIGGER": 0x120, "BTN_THUMB": 0x121, "BTN_THUMB2": 0x122, "BTN_TOP": 0x123,
             "BTN_TOP2": 0x124, "BTN_PINKIE": 0x125, "BTN_BASE": 0x126, "BTN_BASE2": 0x127,
             "BTN_SOUTH": 0x130, "BTN_EAST": 0x131, "BTN_C": 0x132, "BTN_NORTH": 0x133,
             "BTN_WEST": 0x134, "BTN_Z": 0x135, "BTN_TL": 0x136, "BTN_TR": 0x137,
             "BTN_TL2": 0x138, "BTN_TR2": 0x139, "BTN_SELECT": 0x13A, "BTN_START": 0x13B,
             "BTN_MODE": 0x13C, "BTN_THUMBL": 0x13D, "BTN_THUMBR": 0x13E,
             "BTN_DPAD_UP": 0x220, "BTN_DPAD_DOWN": 0x221, "BTN_DPAD_LEFT": 0x222,
             "BTN_DPAD_RIGHT": 0x223}  # fmt: skip
"""Gamepad buttons by their linux/input-event-codes.h names (EV_KEY codes)."""

SPACEMOUSE_AXES = ("tx", "ty", "tz", "rx", "ry", "rz")
"""SpaceMouse raw axes in its HID frame: translations, then rotations (see devices.py)."""
SPACEMOUSE_BUTTONS = ("left", "right", *(f"button{i}" for i in range(2, 32)))
"""SpaceMouse buttons by bit of the button report: bit 0 "left", bit 1 "right", then buttonN."""

_BINDING_KEYS = ("axis", "sign", "scale")
_GRIPPER_FIELDS = ("gripper_close", "gripper_open", "gripper_toggle")


@dataclass(frozen=True)
class AxisBinding:
    """How one raw input drives one motion axis of :attr:`DeviceState.twist`."""

    axis: str
    """Motion axis it drives, one of x, y, z, roll, pitch, yaw (the operator frame)."""
    sign: int = 1
    """+1 or -1: the raw input's positive direction is the axis's positive (+1) or negative."""
    scale: float = 1.0
    """Gain (> 0) on the normalised raw value; the summed twist is clipped to [-1, 1]."""

    def __post_init__(self) -> None:
        if self.axis not in TWIST_AXES:
            raise ValueError(f"axis={self.axis!r} is not a motion axis; use one of {TWIST_AXES}")
        if isinstance(self.sign, bool) or self.sign not in (1, -1):
            raise ValueError(f"sign={self.sign!r}: use 1 or -1 (-1 reverses the direction)")
        if not _is_number(self.scale) or not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale={self.scale!r}: use a finite number > 0")

    @property
    def index(self) -> int:
        """Index of :attr:`axis` in :data:`~handrail.control.teleop.TWIST_AXES`."""
        return TWIST_AXES.index(self.axis)

    @property
    def gain(self) -> float:
        """Signed gain: ``sign * scale``."""
        return self.sign * float(self.scale)


def _b(axis: str, sign: int = 1) -> AxisBinding:
    return AxisBinding(axis, sign)


_E = TeleopEvent


@dataclass(frozen=True)
class KeyboardMapping:
    """Terminal keyboard: keys drive axes while pressed (and repeating), or give commands."""

    device: ClassVar[str] = "keyboard"
    axes: dict[str, AxisBinding] = field(default_factory=lambda: {
        "w": _b("x"), "s": _b("x", -1), "a": _b("y"), "d": _b("y", -1),
        "r": _b("z"), "f": _b("z", -1), "up": _b("z"), "down": _b("z", -1),
        "left": _b("y"), "right": _b("y", -1), "l": _b("roll"), "j": _b("roll", -1),
        "i": _b("pitch"), "k": _b("pitch", -1), "q": _b("yaw"), "e": _b("yaw", -1),
    })  # fmt: skip
    """Motion keys: key name -> the axis it drives (by sign * scale) while held."""
    events: dict[str, TeleopEvent] = field(default_factory=lambda: {
        "space": _E.INTERVENE, "enter": _E.SUCCESS, "y": _E.SUCCESS, "n": _E.FAILURE,
        "x": _E.FAILURE, "backspace": _E.RERECORD, "z": _E.RERECORD, "p": _E.PAUSE,
        "esc": _E.END, ".": _E.END,
    })  # fmt: skip
    """Command keys: key name -> event (success, failure, end, rerecord, pause, intervene)."""
    gripper_close: tuple[str, ...] = ("c",)
    """Keys that close the gripper (+1); it stays closed until an open key."""
    gripper_open: tuple[str, ...] = ("o",)
    """Keys that open the gripper (-1); it stays open until a close key."""
    gripper_toggle: tuple[str, ...] = ()
    """Keys that switch the gripper between open and closed."""
    gripper_initial: float = -1.0
    """Gripper command reported before any gripper key (-1 open, +1 closed)."""
    key_hold_s: float = 0.6
    """A motion key drives its axis this long (s) after its last press or auto-repeat: longer
    than the terminal's first auto-repeat delay, so holding a key moves without gaps."""

    def __post_init__(self) -> None:
        problems = _normalise(self, KEYBOARD_KEYS, KEYBOARD_KEYS, _KEY_HINT)
        if not (_is_number(self.key_hold_s) and 0 < self.key_hold_s <= 5):
            problems.append(f"key_hold_s={self.key_hold_s!r}: use seconds in (0, 5], e.g. 0.6")
        _raise(self, problems)


@dataclass(frozen=True)
class GamepadMapping:
    """Gamepad (Linux evdev): sticks and d-pad drive axes, buttons give commands."""

    device: ClassVar[str] = "gamepad"
    axes: dict[str, AxisBinding] = field(default_factory=lambda: {
        "ABS_Y": _b("x", -1), "ABS_X": _b("y", -1), "ABS_RY": _b("z", -1),
        "ABS_RX": _b("yaw", -1), "ABS_HAT0Y": _b("pitch", -1), "ABS_HAT0X": _b("roll"),
    })  # fmt: skip
    """Axes: evdev axis name -> motion axis (evdev y axes grow downwards, hence the -1s)."""
    events: dict[str, TeleopEvent] = field(default_factory=lambda: {
        "BTN_SOUTH": _E.SUCCESS, "BTN_EAST": _E.FAILURE, "BTN_NORTH": _E.RERECORD,
        "BTN_WEST": _E.RERECORD, "BTN_START": _E.PAUSE, "BTN_SELECT": _E.END,
    })  # fmt: skip
    """Buttons that give an event when pressed: evdev button name -> event."""
    hold_to_intervene: str = "BTN_TL"
    """Button held to take over (reported as "intervene" in ``held``); "" for none."""
    gripper_toggle: tuple[str, ...] = ("BTN_TR",)
    """Buttons that switch the gripper between open and closed."""
    gripper_close: tuple[str, ...] = ()
    """Buttons that close the gripper (+1)."""
    gripper_open: tuple[str, ...] = ()
    """Buttons that open the gripper (-1)."""
    gripper_initial: float = -1.0
    """Gripper command reported before any gripper button (-1 open, +1 closed)."""
    dead_zone: float = 0.15
    """Deflection (of 1) read as zero, so a stick at rest does not drift; the rest is rescaled."""
    trigger_axes: tuple[str, ...] = ("ABS_Z", "ABS_RZ", "ABS_GAS", "ABS_BRAKE")
    """Axes that rest at their minimum (analogue triggers): read as 0..1, not -1..1."""

    def __post_init__(self) -> None:
        problems = _normalise(self, ABS_CODES, BTN_CODES, "names from linux/input-event-codes.h")
        problems += _hold_and_dead_zone(self)
        if isinstance(self.trigger_axes, list):
            object.__setattr__(self, "trigger_axes", tuple(self.trigger_axes))
        unknown = [a for a in self.trigger_axes if a not in ABS_CODES]
        if unknown:
            problems.append(f"trigger_axes: unknown axes {unknown} (valid: {', '.join(ABS_CODES)})")
        _raise(self, problems)


@dataclass(frozen=True)
class SpaceMouseMapping:
    """3Dconnexion SpaceMouse (hidraw): the cap's six axes, two (or more) buttons."""

    device: ClassVar[str] = "spacemouse"
    axes: dict[str, AxisBinding] = field(default_factory=lambda: {
        "ty": _b("x", -1), "tx": _b("y", -1), "tz": _b("z", -1),
        "ry": _b("roll", -1), "rx": _b("pitch", -1), "rz": _b("yaw", -1),
    })  # fmt: skip
    """Axes: HID axis (x right, y towards you, z down; rotations right-handed) -> motion axis."""
    events: dict[str, TeleopEvent] = field(default_factory=dict)
    """Buttons that give an event when pressed: button name -> event."""
    hold_to_intervene: str = "left"
    """Button held to take over (reported as "intervene" in ``held``); "" for none."""
    gripper_toggle: tuple[str, ...] = ("right",)
    """Buttons that switch the gripper between open and closed."""
    gripper_close: tuple[str, ...] = ()
    """Buttons that close the gripper (+1)."""
    gripper_open: tuple[str, ...] = ()
    """Buttons that open the gripper (-1)."""
    gripper_initial: float = -1.0
    """Gripper command reported before any gripper button (-1 open, +1 closed)."""
    dead_zone: float = 0.1
    """Deflection (of 1) read as zero, so a resting hand does not move the arm."""
    full_scale: float = 350.0
    """Raw HID value that counts as full deflection (the cap reports about -350..350)."""

    def __post_init__(self) -> None:
        problems = _normalise(self, SPACEMOUSE_AXES, SPACEMOUSE_BUTTONS, _SPACEMOUSE_HINT)
        problems += _hold_and_dead_zone(self)
        if not (_is_number(self.full_scale) and 1 <= self.full_scale <= 32767):
            problems.append(f"full_scale={self.full_scale!r}: use a raw count in [1, 32767]")
        _raise(self, problems)


DeviceMapping = KeyboardMapping | GamepadMapping | SpaceMouseMapping
"""A mapping of any device."""
MAPPINGS: dict[str, type[DeviceMapping]] = {
    "keyboard": KeyboardMapping,
    "gamepad": GamepadMapping,
    "spacemouse": SpaceMouseMapping,
}
"""Device kind -> its mapping class."""

_KEY_HINT = "letters a-z (lowercase), digits, punctuation, or " + ", ".join(NAMED_KEYS)
_SPACEMOUSE_HINT = "left, right, button2 ... button31"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _normalise(
    m: DeviceMapping, axis_inputs: Collection[str], buttons: Collection[str], hint: str
) -> list[str]:
    """Converts the TOML-shaped values of the fields every mapping has (tables, lists, event
    names), checks their input names (each input has one job) and returns every problem."""
    problems = _convert(m)
    axis_hint = hint if axis_inputs is buttons else ", ".join(axis_inputs)
    problems += [f"axes.{src}: unknown input {src!r} (valid: {axis_hint})"
                 for src in m.axes if src not in axis_inputs]  # fmt: skip
    jobs: dict[str, str] = {src: f"axes.{src}" for src in m.axes if src in buttons}
    hold = getattr(m, "hold_to_intervene", "")
    roles: list[tuple[str, tuple[str, ...]]] = [(f"events.{s}", (s,)) for s in m.events]
    roles.append(("hold_to_intervene", (hold,) if isinstance(hold, str) and hold else ()))
    roles += [(name, getattr(m, name)) for name in _GRIPPER_FIELDS]
    for role, inputs in roles:
        for src in inputs:
            if not isinstance(src, str) or src not in buttons:
                problems.append(f"{role}: unknown input {src!r} (valid: {hint})")
            elif src in jobs:
                problems.append(f"{src!r} is both {jobs[src]} and {role}: give it one job")
            jobs.setdefault(src, role)
    if not (_is_number(m.gripper_initial) and -1 <= m.gripper_initial <= 1):
        problems.append(f"gripper_initial={m.gripper_initial!r}: use -1 (open) .. 1 (closed)")
    return problems


def _convert(m: DeviceMapping) -> list[str]:
    """Axis tables to :class:`AxisBinding`, event names to :class:`TeleopEvent`, lists to
    tuples (in place: the mapping is frozen); the values that cannot be converted."""
    problems: list[str] = []
    axes: dict[str, AxisBinding] = {}
    if not isinstance(m.axes, Mapping):
        problems.append("axes must be a table of input = { axis = ..., sign = ..., scale = ... }")
    for src, binding in m.axes.items() if isinstance(m.axes, Mapping) else ():
        try:
            axes[src] = _binding(binding)
        except ValueError as err:
            problems.append(f"axes.{src}: {err}")
    events: dict[str, TeleopEvent] = {}
    if not isinstance(m.events, Mapping):
        problems.append('events must be a table of input = "event"')
    for src, event in m.events.items() if isinstance(m.events, Mapping) else ():
        try:
            events[src] = TeleopEvent(event)
        except (ValueError, TypeError):
            valid = ", ".join(e.value for e in TeleopEvent)
            problems.append(f"events.{src}: unknown event {event!r} (valid: {valid})")
    object.__setattr__(m, "axes", axes)
    object.__setattr__(m, "events", events)
    for name in _GRIPPER_FIELDS:
        value = getattr(m, name)
        if isinstance(value, str) or not isinstance(value, list | tuple):
            problems.append(f"{name}={value!r}: use a list of input names, or [] for none")
            value = ()
        object.__setattr__(m, name, tuple(value))
    return problems


def _binding(value: object) -> AxisBinding:
    if isinstance(value, AxisBinding):
        return value
    if not isinstance(value, Mapping):
        raise ValueError('use a table such as { axis = "x", sign = 1, scale = 1.0 }')
    unknown = sorted(set(value) - set(_BINDING_KEYS))
    if unknown or "axis" not in value:
        what = f"unknown keys {unknown}" if unknown else "missing axis"
        raise ValueError(f"{what}; valid keys: {', '.join(_BINDING_KEYS)}")
    return AxisBinding(**value)


def _hold_and_dead_zone(m: GamepadMapping | SpaceMouseMapping) -> list[str]:
    problems = []
    if not isinstance(m.hold_to_intervene, str):
        problems.append(f'hold_to_intervene={m.hold_to_intervene!r}: use a button name or ""')
    if not (_is_number(m.dead_zone) and 0 <= m.dead_zone < 1):
        problems.append(f"dead_zone={m.dead_zone!r}: use a fraction in [0, 1), e.g. 0.1")
    return problems


def _raise(m: DeviceMapping, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"{m.device} mapping: " + "; ".join(problems))


def default_mapping(device: str) -> DeviceMapping:
    """The default mapping of ``device`` ("keyboard", "gamepad" or "spacemouse")."""
    return _mapping_class(device)()


def _mapping_class(device: str) -> type[DeviceMapping]:
    if device not in MAPPINGS:
        raise ValueError(f"unknown teleop device {device!r}; choose one of {', '.join(DEVICES)}")
    return MAPPINGS[device]


def mapping_from_dict(
    data: Mapping[str, Any], device: str, where: str = "mapping"
) -> DeviceMapping:
    """The default mapping of ``device`` with the fields in ``data`` (parsed TOML) replaced.

    Raises:
        ValueError: an unknown key (the message lists the valid ones) or a bad value.
    """
    cls = _mapping_class(device)
    valid = [f.name for f in fields(cls)]
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise ValueError(
            f"{where}: unknown keys {unknown} for a {device} mapping; valid keys: {', '.join(valid)}"
        )
    try:
        return replace(cls(), **data)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


@overload
def load_mapping(path: str | os.PathLike[str], device: Literal["keyboard"]) -> KeyboardMapping: ...
@overload
def load_mapping(path: str | os.PathLike[str], device: Literal["gamepad"]) -> GamepadMapping: ...
@overload
def load_mapping(
    path: str | os.PathLike[str], device: Literal["spacemouse"]
) -> SpaceMouseMapping: ...
@overload
def load_mapping(path: str | os.PathLike[str], device: str) -> DeviceMapping: ...
def load_mapping(path: str | os.PathLike[str], device: str) -> DeviceMapping:
    """Reads a mapping TOML file: the default mapping of ``device``, overridden field by field.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not valid TOML, or has unknown keys or bad values.
    """
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{path}: not valid TOML: {err}") from None
    return mapping_from_dict(data, device, where=str(path))


def _field_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring, read from the class's source (empty if not available)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _key(name: str) -> str:
    bare = name and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)
    return name if bare else json.dumps(name)


def _value(value: object) -> str:
    if isinstance(value, TeleopEvent):
        return json.dumps(value.value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, AxisBinding):
        return f"{{ axis = {_value(value.axis)}, sign = {value.sign}, scale = {_value(float(value.scale))} }}"
    return str(value)


def mapping_to_toml(mapping: DeviceMapping) -> str:
    """The mapping as commented TOML that :func:`load_mapping` reads back to an equal mapping."""
    docs = _field_docs(type(mapping))
    lines = [
        f"# handrail teleop mapping for the {mapping.device}.",
        f"# Use it with: handrail teleop check --source {mapping.device} --mapping FILE",
        "# A key present here replaces that whole setting; a key left out keeps its default.",
        "# Motion axes (operator frame): x away from you, y to your left, z up; roll, pitch,",
        "# yaw about them, counter-clockwise seen from the axis tip is positive.",
    ]
    tables = []
    for f in fields(mapping):
        value = getattr(mapping, f.name)
        comment = ["", *("# " + line for line in textwrap.wrap(docs.get(f.name, ""), 94))]
        if isinstance(value, dict):
            body = [f"{_key(k)} = {_value(v)}" for k, v in value.items()]
            tables += [*comment, f"[{f.name}]", *body]
        else:
            lines += [*comment, f"{f.name} = {_value(value)}"]
    return "\n".join(lines + tables) + "\n"


def default_mapping_toml(device: str) -> str:
    """The default mapping of ``device`` as commented TOML (``handrail teleop map``)."""
    return mapping_to_toml(default_mapping(device))
