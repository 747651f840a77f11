"""``handrail teleop check|map``: try a teleop device before training; print its mapping.

``check`` shows the device's live state on one line (the six motion axes as bars, the gripper,
the buttons held, the last events) so a person can see that the device is found, readable and
mapped the way they expect, before a run depends on it. ``map`` prints a device's default
mapping as commented TOML, to redirect into a file, edit and pass back with ``--mapping``.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from handrail.control import device_io
from handrail.control.device_maps import default_mapping_toml
from handrail.control.teleop import DeviceState

Source = Literal["keyboard", "gamepad", "spacemouse"]

BAR_CELLS = 2
"""Cells on each side of an axis bar (a full deflection fills one side)."""


def _bar(value: float) -> str:
    filled = round(min(abs(value), 1.0) * BAR_CELLS)
    blank = " " * BAR_CELLS
    left = " " * (BAR_CELLS - filled) + "#" * filled if value < 0 else blank
    right = "#" * filled + " " * (BAR_CELLS - filled) if value > 0 else blank
    return f"[{left}|{right}]"


LABELS = ("x", "y", "z", "R", "P", "Y")
"""Short names of the motion axes on the status line (R, P, Y: roll, pitch, yaw)."""


def status_line(state: DeviceState, recent_events: Iterable[str]) -> str:
    """One line describing ``state``: gripper, held buttons, recent events, then axis bars
    (short fields first, so that a narrow terminal cuts a bar rather than an event)."""
    grip = "-" if state.gripper is None else "closed" if state.gripper > 0 else "open"
    held = ",".join(sorted(state.held)) or "-"
    bars = " ".join(f"{name}{_bar(v)}" for name, v in zip(LABELS, state.twist, strict=True))
    return f"grip:{grip} held:{held} events:{','.join(recent_events) or '-'}  {bars}"


def check(
    source: Source,
    mapping: Path | None = None,
    device: str | None = None,
    seconds: float = 0.0,
    rate_hz: float = 20.0,
) -> int:
    """Show a teleop device's live state on one line until Ctrl-C.

    Args:
        source: the device: keyboard (this terminal), gamepad or spacemouse.
        mapping: a mapping TOML file (``handrail teleop map`` prints the default to edit).
        device: the node to read (/dev/input/eventN, /dev/hidrawN); default: the first found.
        seconds: stop after this long (s); 0: run until Ctrl-C.
        rate_hz: reads per second.
    """
    if rate_hz <= 0:
        raise ValueError(f"--rate-hz {rate_hz}: must be > 0")
    try:
        dev = device_io.open_device(source, mapping, device)
    except device_io.DeviceNotFound as err:
        print(f"handrail teleop check: error: {err}", file=sys.stderr)
        return 2
    live = sys.stdout.isatty()
    recent: deque[str] = deque(maxlen=3)
    shown = ""
    stop_at = time.monotonic() + seconds if seconds > 0 else float("inf")
    print(f"reading the {dev.name} (R, P, Y: roll, pitch, yaw); Ctrl-C to stop", file=sys.stderr)
    try:
        while time.monotonic() < stop_at:
            state = dev.read()
            recent.extend(event.value for event in state.events)
            line = status_line(state, recent)
            if not getattr(dev, "connected", True):
                line = "DISCONNECTED  " + line
            if live:  # redraw in place, cut to the terminal's width so it stays one line
                width = shutil.get_terminal_size().columns - 1
                sys.stdout.write("\r" + line[:width] + "\x1b[K")
                sys.stdout.flush()
            elif line != shown:
                print(line)
            shown = line
            time.sleep(1.0 / rate_hz)
    except KeyboardInterrupt:
        pass
    finally:
        dev.close()
        if live:
            sys.stdout.write("\n")
    return 0


def map_(source: Source) -> int:
    """Print a device's default mapping as TOML (redirect it into a file to edit it).

    Args:
        source: the device: keyboard, gamepad or spacemouse.
    """
    sys.stdout.write(default_mapping_toml(source))
    return 0
