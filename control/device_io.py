"""Thin OS adapters for the teleop devices: the terminal, evdev gamepads, hidraw SpaceMice.

Each adapter reads what is waiting without blocking (``select`` with a zero timeout) and hands
it to its pure parser in :mod:`handrail.control.devices`. Finding the devices, and explaining
why one cannot be read, is :mod:`handrail.control.device_discovery`.

A device that goes away while in use (unplugged, terminal hung up) reads as at rest with no
button held from then on (``connected`` turns False): a person who is gone lets go.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import select
import struct
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Self

from handrail.control.device_discovery import (
    Candidate,
    DeviceNotFound,
    find_gamepad,
    find_spacemouse,
    list_hidraw_devices,
    list_input_devices,
    open_node,
)
from handrail.control.device_maps import (
    ABS_CODES,
    BTN_CODES,
    DEVICES,
    GamepadMapping,
    KeyboardMapping,
    SpaceMouseMapping,
    load_mapping,
)
from handrail.control.devices import GamepadParser, KeyboardParser, SpaceMouseParser
from handrail.control.teleop import DeviceState, TeleopDevice

__all__ = ["DeviceNotFound", "EvdevGamepad", "HidrawSpaceMouse", "TerminalKeyboard", "open_device"]

_ABSINFO = struct.Struct("6i")  # value, minimum, maximum, fuzz, flat, resolution


def _ioc_read(nr: int, size: int) -> int:
    """Linux ``_IOR('E', nr, size)``: an evdev ioctl that reads ``size`` bytes."""
    return (2 << 30) | (size << 16) | (ord("E") << 8) | nr


def _drain(fd: int, size: int, limit: int = 256) -> tuple[list[bytes], bool]:
    """The reads waiting on ``fd`` (each read's bytes), and False if the device went away."""
    chunks: list[bytes] = []
    for _ in range(limit):  # bounded: a flooding device cannot stall the control loop
        if not select.select([fd], [], [], 0)[0]:
            break
        try:
            chunk = os.read(fd, size)
        except BlockingIOError:
            break
        except OSError:  # ENODEV: unplugged; EIO: terminal hung up
            return chunks, False
        if not chunk:  # end of a file or pipe: nothing more for now
            break
        chunks.append(chunk)
    return chunks, True


class TerminalKeyboard:
    """The keyboard of the terminal this process runs in (also over ``ssh -t``).

    The terminal is put in cbreak mode (no echo, no line buffering; Ctrl-C still interrupts)
    until :meth:`close`. Input is polled with ``select``: the file stays blocking, since
    O_NONBLOCK on stdin would also make the terminal's output non-blocking.
    """

    name = "keyboard"

    def __init__(
        self,
        stream: IO[Any] | int | None = None,
        mapping: KeyboardMapping | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """
        Args:
            stream: the terminal (a file with ``fileno()``, or a descriptor); default stdin.
            mapping: the key mapping (default: :class:`KeyboardMapping`).
            clock: time source (s) for key-hold timing.

        Raises:
            DeviceNotFound: the stream is not a terminal.
        """
        stream = sys.stdin if stream is None else stream
        self.fd = stream if isinstance(stream, int) else stream.fileno()
        if not os.isatty(self.fd):
            raise DeviceNotFound(
                "the keyboard device reads a terminal, but this program's input is not one "
                "(a pipe, a file or a service). Run it in a terminal, or over SSH with a "
                "terminal: ssh -t HOST handrail ..."
            )
        self.parser = KeyboardParser(mapping)
        self.clock = clock
        self.connected = True
        self._saved: list[Any] | None = termios.tcgetattr(self.fd)
        mode = termios.tcgetattr(self.fd)
        mode[3] &= ~(termios.ECHO | termios.ICANON)  # lflag; ISIG stays: Ctrl-C interrupts
        mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
        termios.tcsetattr(self.fd, termios.TCSANOW, mode)

    def read(self) -> DeviceState:
        """The keys pressed since the previous read, as a device state. Never blocks."""
        chunks, self.connected = _drain(self.fd, 1024) if self.connected else ([], False)
        return self.parser.update(b"".join(chunks), self.clock())

    def close(self) -> None:
        """Restores the terminal's mode (idempotent)."""
        if self._saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NodeReader:
    """A device node, or a descriptor given in its place, read without blocking."""

    def __init__(
        self,
        fd: int | None,
        path: Path | None,
        what: str,
        candidates: Callable[[], list[Candidate]],
        clock: Callable[[], float],
    ) -> None:
        self.clock, self.connected, self._owned, self.path = clock, True, fd is None, path
        self.fd: int | None = fd if fd is not None else open_node(path or Path(), what, candidates)

    def _read(self, size: int) -> list[bytes]:
        """The reads waiting (each at most ``size`` bytes); ``connected`` turns False for good
        when the device goes away."""
        if not self.connected or self.fd is None:
            return []
        chunks, self.connected = _drain(self.fd, size)
        return chunks

    def close(self) -> None:
        """Closes the device node if this adapter opened it (idempotent)."""
        if self.fd is not None and self._owned:
            os.close(self.fd)
        self.fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EvdevGamepad(_NodeReader):
    """A gamepad read through its Linux event device (/dev/input/eventN)."""

    name = "gamepad"

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        fd: int | None = None,
        mapping: GamepadMapping | None = None,
        clock: Callable[[], float] = time.monotonic,
        dev_root: str | Path = "/dev",
        sys_root: str | Path = "/sys",
    ) -> None:
        """
        Args:
            path: the event device; None: the first gamepad found (:func:`find_gamepad`).
            fd: an open descriptor (a pipe, a file) to read instead; it stays the caller's.
            mapping: the gamepad mapping (default: :class:`GamepadMapping`).
            clock: time source (s) for the state's timestamp.
            dev_root: where /dev is (for discovery).
            sys_root: where /sys is (for discovery).

        Raises:
            DeviceNotFound: no gamepad, or it cannot be read (the message says how to fix it).
        """
        if path is None and fd is None:
            path = find_gamepad(dev_root, sys_root)
        node = None if path is None else Path(path)
        found = functools.partial(list_input_devices, dev_root, sys_root)
        super().__init__(fd, node, "gamepad", found, clock)
        self.device_name = (
            self._ioctl(_ioc_read(0x06, 256), 256).split(b"\0")[0].decode(errors="replace")
        )
        mapping = mapping or GamepadMapping()
        ranges = {}
        for name in (*mapping.axes, *mapping.trigger_axes):
            info = self._absinfo(ABS_CODES[name])
            if info is not None:
                ranges[ABS_CODES[name]] = (info[1], info[2])
        self.parser = GamepadParser(mapping, ranges)

    def _ioctl(self, request: int, size: int) -> bytes:
        """An evdev ioctl's answer; empty when the fd is no event device (a pipe, a file)."""
        try:
            return fcntl.ioctl(self.fd, request, bytes(size)) if self.fd is not None else b""
        except OSError:
            return b""

    def _absinfo(self, code: int) -> tuple[int, ...] | None:
        """The axis's (value, min, max, fuzz, flat, resolution), via EVIOCGABS."""
        info = self._ioctl(_ioc_read(0x40 + code, _ABSINFO.size), _ABSINFO.size)
        return _ABSINFO.unpack(info) if info else None

    def _resync(self) -> None:
        """Re-reads axes and held buttons after the kernel dropped events (SYN_DROPPED)."""
        for code in self.parser.ranges:
            info = self._absinfo(code)
            if info is not None:
                self.parser.set_axis(code, info[0])
        keys = int.from_bytes(self._ioctl(_ioc_read(0x18, 96), 96), "little")  # EVIOCGKEY
        self.parser.sync_buttons(code for code in BTN_CODES.values() if keys >> code & 1)

    def read(self) -> DeviceState:
        """The gamepad's state, with the button events since the previous read. Never blocks."""
        data = b"".join(self._read(64 * 24))
        if not self.connected:
            self.parser.release_all()
        state = self.parser.update(data, self.clock())
        if self.parser.resync_needed:
            self._resync()
        return state


class HidrawSpaceMouse(_NodeReader):
    """A 3Dconnexion SpaceMouse read through its hidraw node (/dev/hidrawN)."""

    name = "spacemouse"

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        fd: int | None = None,
        mapping: SpaceMouseMapping | None = None,
        clock: Callable[[], float] = time.monotonic,
        dev_root: str | Path = "/dev",
        sys_root: str | Path = "/sys",
    ) -> None:
        """
        Args:
            path: the hidraw node; None: the first SpaceMouse found (:func:`find_spacemouse`).
            fd: an open descriptor to read instead (it stays the caller's); each read must
                return one report, as hidraw does (and a SOCK_SEQPACKET socket).
            mapping: the SpaceMouse mapping (default: :class:`SpaceMouseMapping`).
            clock: time source (s) for the state's timestamp.
            dev_root: where /dev is (for discovery).
            sys_root: where /sys is (for discovery).

        Raises:
            DeviceNotFound: no SpaceMouse, or it cannot be read (the message says how to fix it).
        """
        if path is None and fd is None:
            path = find_spacemouse(dev_root, sys_root)
        node = None if path is None else Path(path)
        found = functools.partial(list_hidraw_devices, dev_root, sys_root)
        super().__init__(fd, node, "SpaceMouse", found, clock)
        self.parser = SpaceMouseParser(mapping)

    def read(self) -> DeviceState:
        """The cap's state, with the button events since the previous read. Never blocks."""
        reports = self._read(64)
        if not self.connected:
            self.parser.release_all()
        return self.parser.update(reports, self.clock())


def open_device(
    source: str,
    mapping_path: str | os.PathLike[str] | None = None,
    device: str | os.PathLike[str] | None = None,
    *,
    dev_root: str | Path = "/dev",
    sys_root: str | Path = "/sys",
) -> TeleopDevice:
    """Opens the teleop device ``source`` with its mapping.

    Args:
        source: "keyboard" (this terminal), "gamepad" or "spacemouse".
        mapping_path: a mapping TOML file (``handrail teleop map`` prints the default); None:
            the default mapping.
        device: the gamepad's event device or the SpaceMouse's hidraw node; None: the first
            one found.
        dev_root: where /dev is (for discovery).
        sys_root: where /sys is (for discovery).

    Raises:
        ValueError: an unknown source, or a bad mapping file.
        DeviceNotFound: the device is missing or cannot be read.
    """
    if source not in DEVICES:
        raise ValueError(f"unknown teleop source {source!r}; choose one of {', '.join(DEVICES)}")
    if source == "keyboard":
        if device is not None:
            raise ValueError("the keyboard is this terminal's; --device is for gamepad/spacemouse")
        keys = None if mapping_path is None else load_mapping(mapping_path, "keyboard")
        return TerminalKeyboard(mapping=keys)
    if source == "gamepad":
        pad = None if mapping_path is None else load_mapping(mapping_path, "gamepad")
        return EvdevGamepad(device, mapping=pad, dev_root=dev_root, sys_root=sys_root)
    cap = None if mapping_path is None else load_mapping(mapping_path, "spacemouse")
    return HidrawSpaceMouse(device, mapping=cap, dev_root=dev_root, sys_root=sys_root)
