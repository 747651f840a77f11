"""Teleop device parsers and mappings, on constructed input in each device's documented format."""

from __future__ import annotations

import struct
import tomllib
from pathlib import Path

import numpy as np
import pytest

from handrail.control.device_maps import (
    DEVICES,
    AxisBinding,
    GamepadMapping,
    KeyboardMapping,
    SpaceMouseMapping,
    default_mapping,
    default_mapping_toml,
    load_mapping,
    mapping_from_dict,
    mapping_to_toml,
)
from handrail.control.devices import (
    EV_ABS,
    EV_KEY,
    EV_SYN,
    SYN_DROPPED,
    SYN_REPORT,
    GamepadParser,
    KeyboardParser,
    SpaceMouseParser,
    dead_zone,
    decode_keys,
    parse_input_events,
)
from handrail.control.teleop import HOLD_TO_INTERVENE, TWIST_AXES, TeleopEvent

AXIS = {name: i for i, name in enumerate(TWIST_AXES)}


def only(axis: str, sign: float) -> np.ndarray:
    twist = np.zeros(6)
    twist[AXIS[axis]] = sign
    return twist


# ------------------------------------------------------------------------------ mappings


@pytest.mark.parametrize("device", DEVICES)
def test_default_mapping_round_trips_through_toml(device: str, tmp_path: Path) -> None:
    path = tmp_path / "map.toml"
    path.write_text(default_mapping_toml(device))
    assert load_mapping(path, device) == default_mapping(device)


def test_a_changed_mapping_round_trips_too() -> None:
    m = GamepadMapping(
        axes={"ABS_RZ": AxisBinding("z", 1, 0.5), "ABS_Z": AxisBinding("z", -1, 0.5)},
        hold_to_intervene="",
        gripper_close=("BTN_TR2",),
        gripper_open=("BTN_TL2",),
        gripper_toggle=(),
        dead_zone=0.0,
    )
    assert mapping_from_dict(tomllib.loads(mapping_to_toml(m)), "gamepad") == m


def test_file_overrides_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text('key_hold_s = 0.9\n[axes]\nw = { axis = "z" }\n')
    m = load_mapping(path, "keyboard")
    assert m.key_hold_s == 0.9
    assert m.axes == {"w": AxisBinding("z", 1, 1.0)}  # a table replaces the whole field
    assert m.events == KeyboardMapping().events  # fields left out keep their default


def test_unknown_key_lists_the_valid_keys(tmp_path: Path) -> None:
    path = tmp_path / "pad.toml"
    path.write_text("deadzone = 0.2\n")
    with pytest.raises(ValueError, match=r"unknown keys \['deadzone'\].*valid keys: .*dead_zone"):
        load_mapping(path, "gamepad")


@pytest.mark.parametrize(
    ("device", "data", "message"),
    [
        ("keyboard", {"axes": {"w": {"axis": "x", "sgn": 1}}}, r"axes\.w: unknown keys \['sgn'\]"),
        ("keyboard", {"axes": {"w": {"axis": "forward"}}}, r"axes\.w: axis='forward'.*roll"),
        ("keyboard", {"axes": {"w": {"axis": "x", "sign": 0}}}, r"axes\.w: sign=0: use 1 or -1"),
        ("keyboard", {"axes": {"w": {"axis": "x", "scale": -2}}}, r"axes\.w: scale=-2"),
        ("keyboard", {"axes": {"W": {"axis": "x"}}}, r"unknown input 'W'.*lowercase"),
        ("keyboard", {"events": {"g": "win"}}, r"events\.g: unknown event 'win'.*success"),
        ("keyboard", {"gripper_close": ["w"]}, r"'w' is both axes\.w and gripper_close"),
        ("keyboard", {"gripper_open": "o"}, r"gripper_open='o': use a list"),
        ("keyboard", {"key_hold_s": "0.6"}, r"key_hold_s='0.6'"),
        ("gamepad", {"axes": {"ABS_Q": {"axis": "x"}}}, r"axes\.ABS_Q: unknown input.*ABS_RX"),
        ("gamepad", {"hold_to_intervene": "BTN_SOUTH"}, r"'BTN_SOUTH' is both events"),
        ("gamepad", {"dead_zone": 1.0}, r"dead_zone=1.0"),
        ("spacemouse", {"gripper_toggle": ["middle"]}, r"unknown input 'middle'.*button2"),
        ("spacemouse", {"full_scale": 0}, r"full_scale=0"),
    ],
)
def test_bad_mapping_values_name_the_key_and_the_fix(
    device: str, data: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        mapping_from_dict(data, device)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("axes = [\n")
    with pytest.raises(ValueError, match=r"broken\.toml: not valid TOML"):
        load_mapping(path, "spacemouse")


def test_unknown_device_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="keyboard, gamepad, spacemouse"):
        default_mapping("joystick")


def test_dead_zone_zeroes_small_values_and_keeps_the_range_whole() -> None:
    assert dead_zone(0.09, 0.1) == 0.0
    assert dead_zone(-0.55, 0.1) == pytest.approx(-0.5)
    assert dead_zone(1.0, 0.1) == 1.0


# ------------------------------------------------------------------------------ keyboard


def test_decode_keys_names_keys_and_escape_sequences() -> None:
    data = b"wS \r\n\x7f.\x1b[A\x1bOB\x1b[5~\x1b[6~\x1b[1;5C\x1b[15~\xc3\xa9\x1bq"
    keys, rest = decode_keys(data)
    assert keys == ["w", "s", "space", "enter", "enter", "backspace", ".", "up", "down",
                    "pageup", "pagedown", "right", "q"]  # fmt: skip
    assert rest == b""


def test_decode_keys_keeps_an_incomplete_sequence_for_later() -> None:
    assert decode_keys(b"a\x1b[") == (["a"], b"\x1b[")
    assert decode_keys(b"\x1b") == ([], b"\x1b")
    assert decode_keys(b"\x1b\x1b[A") == (["esc", "up"], b"")


def test_ctrl_c_raises_keyboard_interrupt() -> None:
    with pytest.raises(KeyboardInterrupt):
        KeyboardParser().update(b"w\x03", 0.0)


@pytest.mark.parametrize(
    ("data", "axis", "sign"),
    [(b"w", "x", 1), (b"s", "x", -1), (b"a", "y", 1), (b"d", "y", -1), (b"r", "z", 1),
     (b"f", "z", -1), (b"\x1b[A", "z", 1), (b"\x1b[B", "z", -1), (b"\x1b[D", "y", 1),
     (b"\x1b[C", "y", -1), (b"q", "yaw", 1), (b"e", "yaw", -1), (b"i", "pitch", 1),
     (b"k", "pitch", -1), (b"l", "roll", 1), (b"j", "roll", -1)],
)  # fmt: skip
def test_default_motion_keys(data: bytes, axis: str, sign: int) -> None:
    np.testing.assert_array_equal(KeyboardParser().update(data, 0.0).twist, only(axis, sign))


def test_a_key_drives_its_axis_for_key_hold_s_after_its_last_press() -> None:
    kb = KeyboardParser(KeyboardMapping(key_hold_s=0.6))
    assert kb.update(b"w", 10.0).twist[0] == 1.0
    assert kb.update(b"", 10.59).twist[0] == 1.0
    assert kb.update(b"", 10.61).twist[0] == 0.0


def test_holding_a_key_through_auto_repeat_moves_without_gaps() -> None:
    kb = KeyboardParser()
    # The terminal's first repeat comes ~0.5 s after the press, then every ~33 ms.
    presses = [0.0, 0.5, *np.arange(0.533, 2.0, 0.033)]
    t, seen = 0.0, []
    for press in [*presses, None]:
        until = press if press is not None else presses[-1] + 1.0
        while t < until:
            seen.append((t, kb.update(b"", t).twist[0]))
            t = round(t + 0.01, 3)
        if press is not None:
            kb.update(b"w", press)
    moving = [x for t, x in seen if t <= presses[-1]]
    assert min(moving) == 1.0  # never a gap while the key repeats
    assert [x for t, x in seen if t >= presses[-1] + 0.61] == [0.0] * 39


def test_the_newest_key_of_an_axis_wins_and_axes_combine() -> None:
    kb = KeyboardParser()
    kb.update(b"w", 0.0)
    np.testing.assert_array_equal(kb.update(b"s", 0.1).twist, only("x", -1))
    kb2 = KeyboardParser()
    np.testing.assert_array_equal(kb2.update(b"wa", 0.0).twist, only("x", 1) + only("y", 1))


def test_command_keys_fire_once_per_press_not_per_auto_repeat() -> None:
    kb = KeyboardParser()
    assert kb.update(b"\n", 0.0).events == (TeleopEvent.SUCCESS,)
    assert kb.update(b"", 0.1).events == ()
    assert kb.update(b"\n\n", 0.5).events == ()  # auto-repeat of the same key
    assert kb.update(b"\n", 2.0).events == (TeleopEvent.SUCCESS,)  # pressed again
    assert kb.update(b"xzp.", 3.0).events == (TeleopEvent.FAILURE, TeleopEvent.RERECORD,
                                              TeleopEvent.PAUSE, TeleopEvent.END)  # fmt: skip


def test_space_toggles_intervention_as_an_event() -> None:
    state = KeyboardParser().update(b" ", 0.0)
    assert state.events == (TeleopEvent.INTERVENE,)
    assert state.held == frozenset()  # a terminal cannot report a held key


def test_gripper_keys_set_a_state_that_persists() -> None:
    kb = KeyboardParser()
    assert kb.update(b"", 0.0).gripper == -1.0  # open until told otherwise
    assert kb.update(b"c", 1.0).gripper == 1.0
    assert kb.update(b"", 9.0).gripper == 1.0
    assert kb.update(b"o", 10.0).gripper == -1.0


def test_a_lone_esc_ends_after_the_escape_timeout_but_a_split_arrow_does_not() -> None:
    kb = KeyboardParser()
    assert kb.update(b"\x1b", 0.0).events == ()
    assert kb.update(b"", 0.1).events == (TeleopEvent.END,)
    arrow = KeyboardParser()
    arrow.update(b"\x1b", 0.0)
    state = arrow.update(b"[A", 0.01)
    assert state.events == ()
    assert state.twist[AXIS["z"]] == 1.0


# ------------------------------------------------------------------------------- gamepad


def ev(kind: int, code: int, value: int, t: float = 0.0) -> bytes:
    return struct.pack("llHHi", int(t), int(t % 1 * 1e6), kind, code, value)


ABS_X, ABS_Y, ABS_Z, ABS_RX, ABS_RY, ABS_RZ, HAT_X, HAT_Y = 0, 1, 2, 3, 4, 5, 0x10, 0x11
BTN_SOUTH, BTN_EAST, BTN_NORTH, BTN_TL, BTN_TR, BTN_START = 0x130, 0x131, 0x133, 0x136, 0x137, 0x13B
SYN = ev(EV_SYN, SYN_REPORT, 0)


def test_parse_input_events_reads_whole_records_and_keeps_the_tail() -> None:
    data = ev(EV_ABS, ABS_X, -123, 5.25) + ev(EV_KEY, BTN_SOUTH, 1) + SYN
    events, rest = parse_input_events(data + data[:10])
    assert [(e.type, e.code, e.value) for e in events] == [
        (EV_ABS, ABS_X, -123), (EV_KEY, BTN_SOUTH, 1), (EV_SYN, SYN_REPORT, 0)]  # fmt: skip
    assert events[0].time_s == pytest.approx(5.25)
    assert rest == data[:10]


@pytest.mark.parametrize(
    ("code", "raw", "axis", "sign"),
    [(ABS_Y, -32768, "x", 1), (ABS_Y, 32767, "x", -1), (ABS_X, -32768, "y", 1),
     (ABS_X, 32767, "y", -1), (ABS_RY, -32768, "z", 1), (ABS_RX, -32768, "yaw", 1),
     (HAT_Y, -1, "pitch", 1), (HAT_X, 1, "roll", 1)],
)  # fmt: skip
def test_default_gamepad_axes(code: int, raw: int, axis: str, sign: int) -> None:
    twist = GamepadParser().update(ev(EV_ABS, code, raw) + SYN, 0.0).twist
    np.testing.assert_allclose(twist, only(axis, sign), atol=1e-4)


def test_axes_use_the_device_ranges_and_the_dead_zone() -> None:
    pad = GamepadParser(GamepadMapping(dead_zone=0.2), ranges={ABS_Y: (0, 255)})
    assert pad.update(ev(EV_ABS, ABS_Y, 0), 0.0).twist[0] == pytest.approx(1.0)
    assert pad.update(ev(EV_ABS, ABS_Y, 140), 0.0).twist[0] == 0.0  # inside the dead zone
    half = pad.update(ev(EV_ABS, ABS_Y, round(127.5 - 0.6 * 127.5)), 0.0).twist[0]
    assert half == pytest.approx(0.5, abs=0.01)  # 0.6 deflection, rescaled past 0.2


def test_triggers_read_from_their_minimum() -> None:
    m = GamepadMapping(axes={"ABS_RZ": AxisBinding("z"), "ABS_Z": AxisBinding("z", -1)})
    pad = GamepadParser(m, ranges={ABS_Z: (0, 255), ABS_RZ: (0, 255)})
    assert pad.update(ev(EV_ABS, ABS_Z, 0) + ev(EV_ABS, ABS_RZ, 0), 0.0).twist[2] == 0.0
    assert pad.update(ev(EV_ABS, ABS_RZ, 255), 0.0).twist[2] == pytest.approx(1.0)
    assert pad.update(ev(EV_ABS, ABS_Z, 255), 0.0).twist[2] == pytest.approx(0.0)


def test_buttons_fire_on_press_only() -> None:
    pad = GamepadParser()
    assert pad.update(ev(EV_KEY, BTN_SOUTH, 1) + SYN, 0.0).events == (TeleopEvent.SUCCESS,)
    assert pad.update(ev(EV_KEY, BTN_SOUTH, 2) + SYN, 0.1).events == ()  # auto-repeat
    assert pad.update(ev(EV_KEY, BTN_SOUTH, 0) + SYN, 0.2).events == ()  # release
    presses = ev(EV_KEY, BTN_EAST, 1) + ev(EV_KEY, BTN_NORTH, 1) + ev(EV_KEY, BTN_START, 1)
    events = pad.update(presses, 0.3).events
    assert events == (TeleopEvent.FAILURE, TeleopEvent.RERECORD, TeleopEvent.PAUSE)


def test_lb_held_is_hold_to_intervene() -> None:
    pad = GamepadParser()
    held = pad.update(ev(EV_KEY, BTN_TL, 1), 0.0).held
    assert HOLD_TO_INTERVENE in held and "BTN_TL" in held
    assert HOLD_TO_INTERVENE in pad.update(b"", 5.0).held  # still held
    assert HOLD_TO_INTERVENE not in pad.update(ev(EV_KEY, BTN_TL, 0), 6.0).held


def test_rb_toggles_the_gripper_on_each_press() -> None:
    pad = GamepadParser()
    assert pad.update(b"", 0.0).gripper == -1.0
    assert pad.update(ev(EV_KEY, BTN_TR, 1), 0.1).gripper == 1.0
    assert pad.update(ev(EV_KEY, BTN_TR, 2) + ev(EV_KEY, BTN_TR, 0), 0.2).gripper == 1.0
    assert pad.update(ev(EV_KEY, BTN_TR, 1), 0.3).gripper == -1.0


def test_an_event_split_across_reads_is_applied_once_whole() -> None:
    pad = GamepadParser()
    data = ev(EV_ABS, ABS_Y, -32768)
    assert pad.update(data[:7], 0.0).twist[0] == 0.0
    assert pad.update(data[7:], 0.0).twist[0] == pytest.approx(1.0)


def test_events_after_syn_dropped_are_discarded_until_syn_report() -> None:
    pad = GamepadParser()
    dropped = ev(EV_SYN, SYN_DROPPED, 0) + ev(EV_ABS, ABS_Y, -32768) + ev(EV_KEY, BTN_SOUTH, 1)
    state = pad.update(dropped + SYN + ev(EV_ABS, ABS_X, -32768), 0.0)
    assert state.events == ()
    np.testing.assert_allclose(state.twist, only("y", 1), atol=1e-4)
    assert pad.resync_needed


# ---------------------------------------------------------------------------- spacemouse

# The raw HID frame of a SpaceMouse (HID Usage Tables section 4.2; PySpaceMouse's
# AxisConvention.HID; spacenavd inverts y and z of it): x right, y towards the user, z down,
# rotations right-handed about those axes. Each gesture, as the raw report it produces:
GESTURES = {
    "push away from you": ("ty", -1, "x"),
    "pull towards you": ("ty", 1, "x-"),
    "push left": ("tx", -1, "y"),
    "lift the cap": ("tz", -1, "z"),
    "press the cap down": ("tz", 1, "z-"),
    "twist counter-clockwise seen from above": ("rz", -1, "yaw"),
    "tilt to the right": ("ry", -1, "roll"),  # about the away (-y) axis: the left side goes up
    "tip forward-down": ("rx", -1, "pitch"),  # about the left (-x) axis: the front goes down
}
RAW = ("tx", "ty", "tz", "rx", "ry", "rz")


def reports(values: dict[str, int]) -> tuple[bytes, bytes]:
    """The classic pair of reports: id 1 translation, id 2 rotation (int16 little-endian)."""
    v = [values.get(name, 0) for name in RAW]
    return struct.pack("<B3h", 1, *v[:3]), struct.pack("<B3h", 2, *v[3:])


@pytest.mark.parametrize("gesture", list(GESTURES))
def test_spacemouse_gestures_move_the_operator_frame_the_same_way(gesture: str) -> None:
    raw, sign, expected = GESTURES[gesture]
    state = SpaceMouseParser().update(reports({raw: 300 * sign}), 0.0)
    axis, want = expected.rstrip("-"), -1 if expected.endswith("-") else 1
    assert np.sign(state.twist[AXIS[axis]]) == want
    assert np.count_nonzero(state.twist) == 1


def test_six_axis_report_of_newer_devices() -> None:
    report = struct.pack("<B6h", 1, 0, -350, 0, 0, 0, 175)
    state = SpaceMouseParser(SpaceMouseMapping(dead_zone=0.0)).update([report], 0.0)
    np.testing.assert_allclose(state.twist, only("x", 1.0) + only("yaw", -0.5))


def test_spacemouse_full_scale_clip_and_dead_zone() -> None:
    sm = SpaceMouseParser(SpaceMouseMapping(full_scale=350.0, dead_zone=0.1))
    assert sm.update(reports({"ty": -700}), 0.0).twist[0] == 1.0
    assert sm.update(reports({"ty": -30}), 0.0).twist[0] == 0.0
    assert sm.update(reports({"ty": 0}), 0.0).twist[0] == 0.0  # the cap let go


def test_spacemouse_buttons_hold_and_toggle() -> None:
    sm = SpaceMouseParser()
    left, right, none = b"\x03\x01\x00", b"\x03\x02\x00", b"\x03\x00\x00"
    state = sm.update([left], 0.0)
    assert HOLD_TO_INTERVENE in state.held and state.gripper == -1.0
    state = sm.update([none, right], 0.1)
    assert HOLD_TO_INTERVENE not in state.held and state.gripper == 1.0
    assert sm.update([right, right], 0.2).gripper == 1.0  # still held: no new press
    assert sm.update([none, right], 0.3).gripper == -1.0


def test_spacemouse_button_events_and_unknown_reports() -> None:
    sm = SpaceMouseParser(SpaceMouseMapping(events={"button2": "success"}))
    state = sm.update([b"\x17\x64", b"\x03\x04\x00", b"\x03\x04\x00"], 0.0)  # 0x17: battery
    assert state.events == (TeleopEvent.SUCCESS,)
    assert "button2" in state.held
