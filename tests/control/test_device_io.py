"""Teleop OS adapters: a pseudo-terminal, pipes and files of events, fake /dev and /sys trees."""

from __future__ import annotations

import errno
import os
import socket
import struct
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from handrail.control import device_io
from handrail.control.device_io import (
    DeviceNotFound,
    EvdevGamepad,
    HidrawSpaceMouse,
    TerminalKeyboard,
    open_device,
)
from handrail.control.teleop import HOLD_TO_INTERVENE, DeviceState, TeleopEvent


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def read_until(device: object, done: Callable[[DeviceState], bool]) -> DeviceState:
    """Reads until ``done`` (a pty delivers input after a short delay), at most 2 s."""
    deadline = time.monotonic() + 2.0
    events: list[TeleopEvent] = []
    while True:
        state = device.read()  # type: ignore[attr-defined]
        events += state.events
        state = DeviceState(state.twist, state.gripper, state.held, tuple(events))
        if done(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.01)


# ------------------------------------------------------------------------------ keyboard


@pytest.fixture
def pty() -> Iterator[tuple[int, int]]:
    master, slave = os.openpty()
    yield master, slave
    os.close(master)
    os.close(slave)


def test_keyboard_reads_keys_from_a_terminal(pty: tuple[int, int]) -> None:
    master, slave = pty
    clock = FakeClock()
    with TerminalKeyboard(slave, clock=clock) as kb:
        os.write(master, b"w\x1b[Ac")
        state = read_until(kb, lambda s: s.twist[2] > 0 and s.gripper == 1.0)
        assert list(state.twist) == [1.0, 0, 1.0, 0, 0, 0]
        assert state.gripper == 1.0
        clock.t += 1.0  # past key_hold_s without a repeat: the keys are let go
        assert not kb.read().twist.any()
        os.write(master, b"\r")
        assert read_until(kb, lambda s: bool(s.events)).events == (TeleopEvent.SUCCESS,)


def test_keyboard_sets_cbreak_and_restores_the_terminal(pty: tuple[int, int]) -> None:
    _, slave = pty
    before = termios.tcgetattr(slave)
    kb = TerminalKeyboard(slave)
    lflag = termios.tcgetattr(slave)[3]
    assert not lflag & termios.ICANON and not lflag & termios.ECHO
    assert lflag & termios.ISIG  # Ctrl-C still interrupts the program
    kb.close()
    kb.close()  # idempotent
    assert termios.tcgetattr(slave) == before


def test_keyboard_on_a_pipe_says_to_run_in_a_terminal() -> None:
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(DeviceNotFound, match=r"not one.*ssh -t"):
            TerminalKeyboard(read_end)
    finally:
        os.close(read_end)
        os.close(write_end)


# ------------------------------------------------------------------------------- gamepad


def ev(kind: int, code: int, value: int) -> bytes:
    return struct.pack("llHHi", 0, 0, kind, code, value)


EV_KEY, EV_ABS, SYN = 1, 3, struct.pack("llHHi", 0, 0, 0, 0, 0)


def test_gamepad_reads_events_from_a_pipe() -> None:
    read_end, write_end = os.pipe()
    clock = FakeClock()
    pad = EvdevGamepad(fd=read_end, clock=clock)
    try:
        os.write(write_end, ev(EV_ABS, 1, -32768) + ev(EV_KEY, 0x136, 1) + ev(EV_KEY, 0x130, 1))
        os.write(write_end, SYN + ev(EV_ABS, 0, 0)[:5])  # the tail of a write comes later
        state = pad.read()
        assert state.twist[0] == pytest.approx(1.0)
        assert HOLD_TO_INTERVENE in state.held
        assert state.events == (TeleopEvent.SUCCESS,)
        assert state.timestamp_s == 100.0
        assert pad.read().events == ()  # nothing new: never blocks, no event twice
        os.write(write_end, ev(EV_ABS, 0, 0)[5:] + ev(EV_KEY, 0x136, 0))
        assert HOLD_TO_INTERVENE not in pad.read().held
    finally:
        pad.close()
        os.close(read_end)
        os.close(write_end)


def test_gamepad_reads_a_file_of_events_with_a_mapping(tmp_path: Path) -> None:
    events = tmp_path / "events.bin"
    events.write_bytes(ev(EV_ABS, 1, -32768) + SYN)
    mapping = tmp_path / "pad.toml"
    mapping.write_text('[axes]\nABS_Y = { axis = "z", sign = -1 }\n')
    pad = open_device("gamepad", mapping, events)
    try:
        assert pad.read().twist[2] == pytest.approx(1.0)
        assert pad.read().twist[2] == pytest.approx(1.0)  # end of file: nothing new, no error
    finally:
        pad.close()


def test_a_gamepad_that_goes_away_reads_as_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    pad = EvdevGamepad(fd=read_end)
    try:
        os.write(write_end, ev(EV_ABS, 1, -32768) + ev(EV_KEY, 0x136, 1))
        assert HOLD_TO_INTERVENE in pad.read().held
        os.write(write_end, SYN)

        def unplugged(fd: int, n: int) -> bytes:
            raise OSError(errno.ENODEV, "No such device")

        monkeypatch.setattr(device_io.os, "read", unplugged)
        state = pad.read()
        assert not state.twist.any() and not state.held
        assert not pad.connected
    finally:
        os.close(read_end)
        os.close(write_end)


# ---------------------------------------------------------------------------- spacemouse


def test_spacemouse_reads_one_report_per_read() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        cap = HidrawSpaceMouse(fd=ours.fileno())
        theirs.send(struct.pack("<B3h", 1, 0, -350, 0))  # pushed away from you
        theirs.send(struct.pack("<B3h", 2, 0, 0, -350))  # twisted counter-clockwise
        theirs.send(b"\x03\x02\x00")  # right button: gripper toggle
        state = cap.read()
        assert state.twist[0] == pytest.approx(1.0) and state.twist[5] == pytest.approx(1.0)
        assert state.gripper == 1.0


def test_open_device_rejects_an_unknown_source() -> None:
    with pytest.raises(ValueError, match="choose one of keyboard, gamepad, spacemouse"):
        open_device("wiimote")
