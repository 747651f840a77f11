"""`handrail teleop map|check`."""

from __future__ import annotations

import functools
import struct
import tomllib
from pathlib import Path

import pytest

from handrail.control import device_io
from handrail.control.device_maps import DEVICES, default_mapping, mapping_from_dict
from handrail.control.teleop import DeviceState
from handrail.launch import cli
from handrail.launch.commands.teleop import status_line


@pytest.mark.parametrize("source", DEVICES)
def test_map_prints_the_default_mapping(source: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["teleop", "map", "--source", source]) == 0
    printed = tomllib.loads(capsys.readouterr().out)
    assert mapping_from_dict(printed, source) == default_mapping(source)


def test_check_without_a_device_says_what_was_found_and_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "dev" / "input").mkdir(parents=True)
    roots = {"dev_root": tmp_path / "dev", "sys_root": tmp_path / "sys"}
    monkeypatch.setattr(device_io, "open_device", functools.partial(device_io.open_device, **roots))
    assert cli.main(["teleop", "check", "--source", "gamepad"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("handrail teleop check: error: no gamepad found.")
    assert "There are no /dev/input/event* devices." in err
    assert "99-handrail.rules" in err and "sudo usermod -aG input" in err


def test_check_shows_the_state_of_a_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.bin"  # left stick pushed up, then A pressed
    events.write_bytes(
        struct.pack("llHHi", 0, 0, 3, 1, -32768) + struct.pack("llHHi", 0, 0, 1, 0x130, 1)
    )
    argv = ["teleop", "check", "--source", "gamepad", "--device", str(events), "--seconds", "0.1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "events:success  x[  |##] y[  |  ]" in out


def test_status_line_draws_bars_gripper_held_and_events() -> None:
    state = DeviceState(twist=[-1.0, 0.5, 0, 0, 0, 0], gripper=1.0, held=frozenset({"intervene"}))
    line = status_line(state, ["pause", "success"])
    assert line.startswith("grip:closed held:intervene events:pause,success  ")
    assert line.endswith("x[##|  ] y[  |# ] z[  |  ] R[  |  ] P[  |  ] Y[  |  ]")
