"""Finding teleop devices, and saying what was found when the one sought is not there.

Discovery reads sysfs (names, ids and capabilities are world-readable), so an error can list the
devices there are even when a device node itself is not readable, and it says how to make it
readable (the udev rule and the groups). Every function takes the ``/dev`` and ``/sys`` roots
as arguments, so tests build a fake tree.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from handrail.control.device_maps import BTN_CODES

UDEV_RULES = """\
# /etc/udev/rules.d/99-handrail.rules
# 3Dconnexion SpaceMouse (read through /dev/hidraw*)
KERNEL=="hidraw*", ATTRS{idVendor}=="256f", MODE="0660", GROUP="plugdev"
KERNEL=="hidraw*", ATTRS{idVendor}=="046d", ATTRS{idProduct}=="c6*", MODE="0660", GROUP="plugdev"
# gamepads (read through /dev/input/event*)
SUBSYSTEM=="input", KERNEL=="event*", ENV{ID_INPUT_JOYSTICK}=="1", MODE="0660", GROUP="input"
"""
"""udev rules that let members of plugdev (SpaceMouse) and input (gamepads) read the devices."""

PERMISSION_HELP = (
    "To let your user read it, put these rules in /etc/udev/rules.d/99-handrail.rules:\n"
    + UDEV_RULES
    + "then run:\n"
    "  sudo usermod -aG input,plugdev $USER   # then log out and in again\n"
    "  sudo udevadm control --reload-rules && sudo udevadm trigger\n"
    "(on distributions without a plugdev group, create it: sudo groupadd plugdev)"
)
"""How to fix a device node the user cannot read."""

_LONG_BITS = 8 * struct.calcsize("l")
_GAMEPAD_WORDS = ("gamepad", "controller", "joystick", "xbox", "dualshock", "dualsense")


class DeviceNotFound(RuntimeError):
    """A teleop device is missing or cannot be read; the message says what was found instead
    and how to fix it."""


@dataclass(frozen=True)
class Candidate:
    """A device node found by discovery."""

    path: Path
    """Its node under /dev."""
    name: str
    """Its name as the kernel reports it."""
    matches: bool
    """Whether it looks like the device sought."""

    def __str__(self) -> str:
        return f"{self.path} ({self.name or 'no name'})"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _bits(text: str) -> int:
    """A sysfs capability bitmask (hex words, most significant first) as one integer."""
    value = 0
    for word in text.split():
        value = (value << _LONG_BITS) | int(word, 16)
    return value


def _number(name: str) -> int:
    digits = "".join(c for c in name if c.isdigit())
    return int(digits) if digits else -1


def list_input_devices(
    dev_root: str | Path = "/dev", sys_root: str | Path = "/sys"
) -> list[Candidate]:
    """Every /dev/input/event* node, with ``matches`` set for those that look like a gamepad
    (a gamepad or joystick button in their capabilities, or a gamepad-like name)."""
    found = []
    nodes = sorted(Path(dev_root, "input").glob("event*"), key=lambda p: _number(p.name))
    for node in nodes:
        info = Path(sys_root, "class", "input", node.name, "device")
        name = _read_text(info / "name")
        keys = _bits(_read_text(info / "capabilities" / "key") or "0")
        axes = _bits(_read_text(info / "capabilities" / "abs") or "0")
        pad = keys >> BTN_CODES["BTN_SOUTH"] & 1 or (
            keys >> BTN_CODES["BTN_TRIGGER"] & 1 and axes & 1
        )
        found.append(
            Candidate(node, name, bool(pad) or any(w in name.lower() for w in _GAMEPAD_WORDS))
        )
    return found


def find_gamepad(dev_root: str | Path = "/dev", sys_root: str | Path = "/sys") -> Path:
    """The first gamepad: a udev ``/dev/input/by-id/*-event-joystick`` link, else the first
    event device that looks like one.

    Raises:
        DeviceNotFound: none; the message lists the event devices there are.
    """
    links = sorted(Path(dev_root, "input", "by-id").glob("*-event-joystick"))
    if links:
        return links[0].resolve()
    candidates = list_input_devices(dev_root, sys_root)
    for candidate in candidates:
        if candidate.matches:
            return candidate.path
    raise DeviceNotFound(
        "no gamepad found. " + _found("/dev/input/event*", candidates) + "\nPlug it in (USB, or "
        "pair it over Bluetooth), check it with `cat /proc/bus/input/devices`, or name its "
        "node with --device /dev/input/eventN. If the node is there but hidden from you:\n"
        + PERMISSION_HELP
    )


def list_hidraw_devices(
    dev_root: str | Path = "/dev", sys_root: str | Path = "/sys"
) -> list[Candidate]:
    """Every hidraw node, with ``matches`` set for 3Dconnexion devices (USB vendor 0x256f, or
    Logitech 0x046d products 0xc6xx, the older 3Dconnexion ones)."""
    found = []
    entries = sorted(
        Path(sys_root, "class", "hidraw").glob("hidraw*"), key=lambda p: _number(p.name)
    )
    for entry in entries:
        uevent = dict(
            line.split("=", 1)
            for line in _read_text(entry / "device" / "uevent").splitlines()
            if "=" in line
        )
        parts = uevent.get("HID_ID", "0:0:0").split(":")
        vendor, product = (int(p, 16) for p in parts[1:3]) if len(parts) == 3 else (0, 0)
        matches = vendor == 0x256F or (vendor == 0x046D and product >> 8 == 0xC6)
        name = uevent.get("HID_NAME", "") + (f" [{vendor:04x}:{product:04x}]" if vendor else "")
        found.append(Candidate(Path(dev_root, entry.name), name, matches))
    return found


def find_spacemouse(dev_root: str | Path = "/dev", sys_root: str | Path = "/sys") -> Path:
    """The first SpaceMouse's hidraw node.

    Raises:
        DeviceNotFound: none; the message lists the hidraw devices there are.
    """
    candidates = list_hidraw_devices(dev_root, sys_root)
    for candidate in candidates:
        if candidate.matches:
            return candidate.path
    raise DeviceNotFound(
        "no 3Dconnexion SpaceMouse found. " + _found("/dev/hidraw*", candidates) + "\nPlug it in "
        "(a wireless one: its USB receiver), check it with `lsusb | grep -i -e 256f -e 046d:c6`, "
        "or name its node with --device /dev/hidrawN. Stop spacenavd if it holds the device. If "
        "the node is there but hidden from you:\n" + PERMISSION_HELP
    )


def _found(pattern: str, candidates: list[Candidate]) -> str:
    if not candidates:
        return f"There are no {pattern} devices."
    return f"Found {pattern}: " + "; ".join(str(c) for c in candidates) + "."


def open_node(path: str | Path, what: str, candidates: Callable[[], list[Candidate]]) -> int:
    """Opens a device node for non-blocking reads, or raises :class:`DeviceNotFound` saying
    why not (and, for a node the user may not read, how to fix that)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except PermissionError:
        raise DeviceNotFound(
            f"cannot read the {what} at {path}: permission denied.\n" + PERMISSION_HELP
        ) from None
    except OSError as err:
        found = candidates()
        pattern = "/dev/hidraw*" if what == "SpaceMouse" else "/dev/input/event*"
        raise DeviceNotFound(
            f"cannot open the {what} at {path}: {err.strerror}. {_found(pattern, found)}"
        ) from None
