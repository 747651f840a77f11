"""Pure parsers of teleop devices' raw input: terminal bytes, evdev events, SpaceMouse reports.

Each parser is fed what the OS adapter (:mod:`handrail.control.device_io`) read and the reader's
clock time, and returns a :class:`~handrail.control.teleop.DeviceState` in the operator frame
(x away from you, y to your left, z up). No I/O, no global state, no clock of their own: every
rule is tested on constructed input. Mappings (and their TOML files) are in
:mod:`handrail.control.device_maps`; the defaults are:

Terminal keyboard (works over SSH; a terminal sends key presses and auto-repeats, never key
releases, so a motion key drives its axis for ``key_hold_s`` = 0.6 s after its last press or
repeat, and a command key fires once per press, its auto-repeats ignored: presses of one key
less than ``key_hold_s`` apart count as one):

=====================  =========================================================
key                    does
=====================  =========================================================
w / s                  x + / - (away from you / towards you)
a / d, left / right    y + / - (left / right)
r / f, up / down       z + / - (up / down)
q / e                  yaw + / - (counter-clockwise / clockwise seen from above)
i / k                  pitch + / - (tip the tool forward-down / back-up)
l / j                  roll + / - (tilt to the right / to the left)
c / o                  gripper close (+1) / open (-1); stays until the other key
space                  intervene: toggle taking over (a terminal cannot report a held key)
enter, y               success
n, x                   failure
backspace, z           rerecord
p                      pause
esc, .                 end
Ctrl-C                 KeyboardInterrupt, as always
=====================  =========================================================

Gamepad (Linux evdev, Xbox-style names; evdev y axes grow downwards):

=====================  =========================================================
input                  does
=====================  =========================================================
left stick             up/down: x + / -; left/right: y + / -
right stick            up/down: z + / -; left/right: yaw + / - (left is counter-clockwise)
d-pad                  up/down: pitch + / -; right/left: roll + / -
LB (BTN_TL), held      hold to intervene
RB (BTN_TR)            gripper toggle (open <-> closed)
A (BTN_SOUTH)          success
B (BTN_EAST)           failure
X / Y (BTN_NORTH, BTN_WEST)  rerecord (both: drivers disagree which code the "X" button sends)
Start                  pause
Select / Back          end
=====================  =========================================================

SpaceMouse (3Dconnexion, hidraw): the cap moves the arm the way the hand moves the cap: push it
away from you -> x +, push it left -> y +, lift it -> z +, twist it counter-clockwise seen from
above -> yaw +, tilt it to the right -> roll +, tip it forward-down -> pitch +. Left button held:
intervene; right button: gripper toggle.

SpaceMouse axis convention (checked in two sources): raw HID reports follow the USB HID
convention for a multi-axis controller (HID Usage Tables 1.x, section 4.2 "Axis Usages"): x to
the right, y towards the user, z down, rotations right-handed about those axes. PySpaceMouse's
documentation (``AxisConvention.HID``: "+x right, +y toward the user, +z down") and its
``apply_axis_convention`` (z up = -z_hid, y away = -y_hid, so yaw = -Rz) say so, and spacenavd's
default configuration (``cfgfile.c``: axis map {0, 2, 1, 3, 5, 4}, inversion {0, 1, 1, 0, 1, 1})
inverts raw y and z to get its y-up frame. Hence operator x = -ty, y = -tx, z = -tz, roll =
-ry, pitch = -rx, yaw = -rz (a proper rotation, so rotations map like translations).

Report formats: id 1 = tx, ty, tz (three little-endian int16, 7 bytes with the id); id 2 = rx,
ry, rz; id 3 = button bitmask (bit 0 left, bit 1 right); newer devices (SpaceMouse Wireless,
Compact, Pro Wireless) send id 1 with all six axes (13 bytes) and no id 2.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from handrail.control.device_maps import (
    ABS_CODES,
    BTN_CODES,
    SPACEMOUSE_AXES,
    SPACEMOUSE_BUTTONS,
    GamepadMapping,
    KeyboardMapping,
    SpaceMouseMapping,
)
from handrail.control.teleop import HOLD_TO_INTERVENE, DeviceState, TeleopEvent

ESC_TIMEOUT_S = 0.05
"""A lone ESC byte is the Esc key once no byte has followed it for this long (s); until then it
may be the start of an arrow key's escape sequence (ncurses' ESCDELAY, vim's ttimeout)."""


def dead_zone(value: float, zone: float) -> float:
    """``value`` with ``|value| <= zone`` read as 0 and the rest rescaled to keep [-1, 1] whole."""
    if abs(value) <= zone:
        return 0.0
    return math.copysign((abs(value) - zone) / (1.0 - zone), value)


class _Commands:
    """What pressing a button or command key does: events, gripper commands, toggles."""

    def __init__(self, m: KeyboardMapping | GamepadMapping | SpaceMouseMapping) -> None:
        self.m = m
        self.gripper = float(m.gripper_initial)
        self.events: list[TeleopEvent] = []

    def press(self, name: str) -> None:
        if name in self.m.events:
            self.events.append(self.m.events[name])
        if name in self.m.gripper_close:
            self.gripper = 1.0
        elif name in self.m.gripper_open:
            self.gripper = -1.0
        elif name in self.m.gripper_toggle:
            self.gripper = -1.0 if self.gripper > 0 else 1.0

    def state(self, twist: np.ndarray, held: frozenset[str], now_s: float) -> DeviceState:
        """The state with the events since the previous call (then forgotten)."""
        events, self.events = tuple(self.events), []
        return DeviceState(twist=twist, gripper=self.gripper, held=held, events=events,
                           timestamp_s=now_s)  # fmt: skip


# ------------------------------------------------------------------------------- keyboard

_CSI_FINAL = {"A": "up", "B": "down", "C": "right", "D": "left", "H": "home", "F": "end"}
_CSI_TILDE = {1: "home", 2: "insert", 3: "delete", 4: "end", 5: "pageup", 6: "pagedown",
              7: "home", 8: "end"}  # fmt: skip
_CONTROL_KEYS = {0x0D: "enter", 0x0A: "enter", 0x09: "tab", 0x7F: "backspace", 0x08: "backspace",
                 0x20: "space"}  # fmt: skip


def _escape(data: bytes, i: int) -> tuple[str | None, int] | None:
    """The key of the escape sequence at ``data[i]`` (ESC) and where it ends; None when the
    sequence is incomplete. Unknown sequences give no key; ESC + a character (Alt) gives it."""
    if i + 1 >= len(data):
        return None
    kind = data[i + 1]
    if kind == ord("O"):  # SS3: application-mode cursor keys
        if i + 2 >= len(data):
            return None
        return _CSI_FINAL.get(chr(data[i + 2])), i + 3
    if not 0x20 < kind < 0x7F:  # ESC then a control byte (ESC, Ctrl-C, ...): a lone Esc
        return None, i + 1
    if kind != ord("["):  # Alt+key arrives as ESC + key: the key itself
        return _plain(kind), i + 2
    j = i + 2
    while j < len(data) and not 0x40 <= data[j] <= 0x7E:  # parameters, up to the final byte
        j += 1
    if j >= len(data):
        return None
    final, params = chr(data[j]), data[i + 2 : j].decode("ascii", "replace")
    if final == "~":
        first = params.split(";")[0]
        return (_CSI_TILDE.get(int(first)) if first.isdigit() else None), j + 1
    return _CSI_FINAL.get(final), j + 1  # modifiers (ESC [ 1 ; 5 A) are ignored


def _plain(byte: int) -> str | None:
    if byte in _CONTROL_KEYS:
        return _CONTROL_KEYS[byte]
    if 0x21 <= byte <= 0x7E:
        return chr(byte).lower()
    return None  # other control bytes and non-ASCII (UTF-8) bytes are no keys


def decode_keys(data: bytes) -> tuple[list[str], bytes]:
    """Key names in terminal input, and the incomplete escape sequence left at its end.

    Raises:
        KeyboardInterrupt: on Ctrl-C (0x03), for terminals in a mode that delivers it as a byte.
    """
    keys: list[str] = []
    i = 0
    while i < len(data):
        byte = data[i]
        if byte == 0x03:
            raise KeyboardInterrupt
        if byte != 0x1B:
            key, i = _plain(byte), i + 1
        else:
            found = _escape(data, i)
            if found is None:
                return keys, data[i:]
            key, i = found
            key = "esc" if key is None and data[i - 1] == 0x1B else key
        if key is not None:
            keys.append(key)
    return keys, b""


class KeyboardParser:
    """Terminal key presses -> device state (see the module docstring for the default keys)."""

    def __init__(self, mapping: KeyboardMapping | None = None) -> None:
        self.mapping = mapping or KeyboardMapping()
        self._commands = _Commands(self.mapping)
        self._last_press: dict[str, float] = {}
        self._order: dict[str, int] = {}  # press order, to break ties within one read
        self._presses = itertools.count()
        self._pending = b""  # an escape sequence still arriving
        self._pending_since = 0.0

    def update(self, data: bytes, now_s: float) -> DeviceState:
        """Feeds the bytes read since the previous call; the state at ``now_s``."""
        keys: list[str] = []
        if self._pending and now_s - self._pending_since >= ESC_TIMEOUT_S:
            keys += ["esc"] if self._pending == b"\x1b" else []  # else: a torn sequence
            self._pending = b""
        if data:
            more, self._pending = decode_keys(self._pending + data)
            keys += more
            self._pending_since = now_s
        for key in keys:
            self._press(key, now_s)
        return self._commands.state(self._twist(now_s), frozenset(), now_s)

    def _press(self, key: str, now_s: float) -> None:
        # A press within key_hold_s of the previous one is the terminal's auto-repeat.
        repeat = now_s - self._last_press.get(key, -math.inf) < self.mapping.key_hold_s
        self._last_press[key] = now_s
        self._order[key] = next(self._presses)
        if key not in self.mapping.axes and not repeat:
            self._commands.press(key)

    def _twist(self, now_s: float) -> np.ndarray:
        twist = np.zeros(6)
        newest = [-1] * 6  # per axis, the newest active key wins (w, then s: s)
        for key, binding in self.mapping.axes.items():
            active = now_s - self._last_press.get(key, -math.inf) < self.mapping.key_hold_s
            if active and self._order[key] > newest[binding.index]:
                newest[binding.index] = self._order[key]
                twist[binding.index] = binding.gain
        return twist


# -------------------------------------------------------------------------------- gamepad

INPUT_EVENT = struct.Struct("llHHi")
"""Linux ``struct input_event`` (native: timeval seconds and microseconds as two longs, then
u16 type, u16 code, s32 value): 24 bytes on 64-bit Linux."""
EV_SYN, EV_KEY, EV_ABS = 0x00, 0x01, 0x03
SYN_REPORT, SYN_DROPPED = 0, 3
DEFAULT_ABS_RANGES: dict[int, tuple[int, int]] = {
    **dict.fromkeys((0x00, 0x01, 0x03, 0x04), (-32768, 32767)),  # sticks
    **dict.fromkeys((0x02, 0x05, 0x09, 0x0A), (0, 1023)),  # triggers (xpad: 0..255 on a 360)
    **dict.fromkeys((0x10, 0x11), (-1, 1)),  # d-pad
}
"""Axis ranges of an Xbox-style pad, used where the device's own (EVIOCGABS) are not known."""
_BTN_NAMES = {code: name for name, code in BTN_CODES.items()}


class InputEvent(NamedTuple):
    """One evdev event."""

    time_s: float
    """Kernel timestamp (s)."""
    type: int
    """EV_SYN, EV_KEY, EV_ABS, ..."""
    code: int
    """Axis or button code (linux/input-event-codes.h)."""
    value: int
    """Axis position, or 1 press / 0 release / 2 auto-repeat."""


def parse_input_events(data: bytes) -> tuple[list[InputEvent], bytes]:
    """Whole ``struct input_event`` records in ``data``, and the incomplete tail."""
    end = len(data) - len(data) % INPUT_EVENT.size
    events = [
        InputEvent(sec + usec * 1e-6, kind, code, value)
        for sec, usec, kind, code, value in INPUT_EVENT.iter_unpack(data[:end])
    ]
    return events, data[end:]


class GamepadParser:
    """Evdev events of a gamepad -> device state (see the module docstring for the defaults)."""

    def __init__(
        self,
        mapping: GamepadMapping | None = None,
        ranges: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        """
        Args:
            mapping: the gamepad mapping (default: :class:`GamepadMapping`).
            ranges: axis code -> (min, max) raw values, from the device's absinfo (EVIOCGABS);
                axes not given use :data:`DEFAULT_ABS_RANGES`.
        """
        self.mapping = mapping or GamepadMapping()
        self.ranges = {**DEFAULT_ABS_RANGES, **(ranges or {})}
        self._commands = _Commands(self.mapping)
        self._triggers = {ABS_CODES[name] for name in self.mapping.trigger_axes}
        self._axes = {ABS_CODES[name]: b for name, b in self.mapping.axes.items()}
        self._values: dict[int, float] = {}
        self._held: set[int] = set()
        self._tail = b""
        self._dropping = False
        self.resync_needed = False
        """Events were lost (SYN_DROPPED): the reader should re-read the device's state."""

    def update(self, data: bytes, now_s: float) -> DeviceState:
        """Feeds raw bytes read from the event device; the state at ``now_s``."""
        events, self._tail = parse_input_events(self._tail + data)
        for event in events:
            self.apply(event)
        return self.state(now_s)

    def apply(self, event: InputEvent) -> None:
        """Applies one event (a SYN_DROPPED discards events up to the next SYN_REPORT)."""
        if event.type == EV_SYN:
            if event.code == SYN_DROPPED:
                self._dropping = self.resync_needed = True
            elif event.code == SYN_REPORT:
                self._dropping = False
        elif self._dropping:
            return
        elif event.type == EV_ABS:
            self.set_axis(event.code, event.value)
        elif event.type == EV_KEY and event.value == 1 and event.code not in self._held:
            self._held.add(event.code)  # a press; 2 (auto-repeat) changes nothing
            self._commands.press(_BTN_NAMES.get(event.code, f"KEY_{event.code:#x}"))
        elif event.type == EV_KEY and event.value == 0:
            self._held.discard(event.code)

    def set_axis(self, code: int, raw: int) -> None:
        """Sets an axis from its raw value, normalised by its range."""
        lo, hi = self.ranges.get(code, (-1, 1))
        if hi <= lo:
            value = 0.0
        elif code in self._triggers:
            value = (raw - lo) / (hi - lo)
        else:
            value = (raw - (lo + hi) / 2) / ((hi - lo) / 2)
        self._values[code] = min(max(value, -1.0), 1.0)

    def sync_buttons(self, held: Iterable[int]) -> None:
        """Sets the held buttons after lost events (no press events fire)."""
        self._held = set(held)
        self.resync_needed = False

    def release_all(self) -> None:
        """Centres every axis and releases every button (the device went away)."""
        self._values.clear()
        self._held.clear()

    def state(self, now_s: float) -> DeviceState:
        """The state at ``now_s`` with the events since the previous state."""
        twist = np.zeros(6)
        for code, binding in self._axes.items():
            value = dead_zone(self._values.get(code, 0.0), self.mapping.dead_zone)
            twist[binding.index] += binding.gain * value
        held = {_BTN_NAMES.get(code, f"KEY_{code:#x}") for code in self._held}
        if self.mapping.hold_to_intervene in held:
            held.add(HOLD_TO_INTERVENE)
        return self._commands.state(twist, frozenset(held), now_s)


# ----------------------------------------------------------------------------- spacemouse

_SIX_AXES = struct.Struct("<6h")
_THREE_AXES = struct.Struct("<3h")


class SpaceMouseParser:
    """SpaceMouse HID reports -> device state (see the module docstring for the frame)."""

    def __init__(self, mapping: SpaceMouseMapping | None = None) -> None:
        self.mapping = mapping or SpaceMouseMapping()
        self._commands = _Commands(self.mapping)
        self._raw = dict.fromkeys(SPACEMOUSE_AXES, 0)
        self._buttons = 0

    def update(self, reports: Iterable[bytes], now_s: float) -> DeviceState:
        """Feeds the reports read since the previous call (one per hidraw read)."""
        for report in reports:
            self.apply(report)
        return self.state(now_s)

    def apply(self, report: bytes) -> None:
        """Applies one report (report id first); unknown reports are ignored."""
        if not report:
            return
        if report[0] == 1 and len(report) >= 1 + _SIX_AXES.size:
            self._raw.update(zip(SPACEMOUSE_AXES, _SIX_AXES.unpack_from(report, 1), strict=True))
        elif report[0] in (1, 2) and len(report) >= 1 + _THREE_AXES.size:
            names = SPACEMOUSE_AXES[:3] if report[0] == 1 else SPACEMOUSE_AXES[3:]
            self._raw.update(zip(names, _THREE_AXES.unpack_from(report, 1), strict=True))
        elif report[0] == 3 and len(report) >= 2:
            mask = int.from_bytes(report[1:5], "little")
            pressed = mask & ~self._buttons
            self._buttons = mask
            for bit, name in enumerate(SPACEMOUSE_BUTTONS):
                if pressed >> bit & 1:
                    self._commands.press(name)

    def release_all(self) -> None:
        """Centres the cap and releases every button (the device went away)."""
        self._raw = dict.fromkeys(SPACEMOUSE_AXES, 0)
        self._buttons = 0

    def state(self, now_s: float) -> DeviceState:
        """The state at ``now_s`` with the events since the previous state."""
        m = self.mapping
        twist = np.zeros(6)
        for name, binding in m.axes.items():
            value = min(max(self._raw[name] / m.full_scale, -1.0), 1.0)
            twist[binding.index] += binding.gain * dead_zone(value, m.dead_zone)
        held = {n for bit, n in enumerate(SPACEMOUSE_BUTTONS) if self._buttons >> bit & 1}
        if m.hold_to_intervene in held:
            held.add(HOLD_TO_INTERVENE)
        return self._commands.state(twist, frozenset(held), now_s)
