"""Finding teleop devices on a fake /dev and /sys tree, and the errors when there are none."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from handrail.control import device_discovery
from handrail.control.device_discovery import DeviceNotFound, find_gamepad, find_spacemouse
from handrail.control.device_io import EvdevGamepad, HidrawSpaceMouse, open_device

UDEV_LINE = 'KERNEL=="hidraw*", ATTRS{idVendor}=="256f", MODE="0660", GROUP="plugdev"'


def fake_input(tmp_path: Path, devices: dict[str, tuple[str, set[int]]]) -> tuple[Path, Path]:
    """A /dev and /sys tree with event devices: node name -> (name, key codes it has)."""
    dev, sys_ = tmp_path / "dev", tmp_path / "sys"
    (dev / "input").mkdir(parents=True)
    for node, (name, keys) in devices.items():
        (dev / "input" / node).write_bytes(b"")
        info = sys_ / "class" / "input" / node / "device"
        (info / "capabilities").mkdir(parents=True)
        (info / "name").write_text(name + "\n")
        bits = sum(1 << k for k in keys)
        words = [f"{bits >> (64 * i) & (2**64 - 1):x}" for i in reversed(range(12))]
        (info / "capabilities" / "key").write_text(" ".join(words) + "\n")
        (info / "capabilities" / "abs").write_text("3\n")
    return dev, sys_


def test_no_gamepad_names_what_was_found_and_how_to_fix_access(tmp_path: Path) -> None:
    dev, sys_ = fake_input(tmp_path, {"event0": ("AT Translated Set 2 keyboard", {30, 31}),
                                      "event2": ("Logitech USB Mouse", {0x110})})  # fmt: skip
    with pytest.raises(DeviceNotFound) as err:
        find_gamepad(dev, sys_)
    message = str(err.value)
    assert f"{dev}/input/event0 (AT Translated Set 2 keyboard)" in message
    assert "Logitech USB Mouse" in message
    assert UDEV_LINE in message and "sudo usermod -aG input" in message
    assert "sudo udevadm control --reload-rules && sudo udevadm trigger" in message


def test_no_event_devices_at_all_says_so(tmp_path: Path) -> None:
    dev, sys_ = fake_input(tmp_path, {})
    with pytest.raises(DeviceNotFound, match=r"no /dev/input/event\* devices"):
        EvdevGamepad(dev_root=dev, sys_root=sys_)


def test_a_gamepad_is_found_by_its_buttons_or_its_udev_link(tmp_path: Path) -> None:
    dev, sys_ = fake_input(tmp_path, {"event1": ("Sleep Button", {142}),
                                      "event11": ("Generic X-Box pad", {0x130, 0x131}),
                                      "event9": ("Unnamed", {0x130})})  # fmt: skip
    assert find_gamepad(dev, sys_) == dev / "input" / "event9"  # numeric order
    (dev / "input" / "by-id").mkdir()
    (dev / "input" / "by-id" / "usb-Pad-event-joystick").symlink_to("../event11")
    assert find_gamepad(dev, sys_) == (dev / "input" / "event11").resolve()


def fake_hidraw(tmp_path: Path, devices: dict[str, tuple[str, str]]) -> tuple[Path, Path]:
    """A /dev and /sys tree with hidraw nodes: node -> (HID_ID, HID_NAME)."""
    dev, sys_ = tmp_path / "dev", tmp_path / "sys"
    dev.mkdir()
    (sys_ / "class" / "hidraw").mkdir(parents=True)
    for node, (hid_id, name) in devices.items():
        (dev / node).write_bytes(b"")
        info = sys_ / "class" / "hidraw" / node / "device"
        info.mkdir(parents=True)
        (info / "uevent").write_text(f"DRIVER=hid-generic\nHID_ID={hid_id}\nHID_NAME={name}\n")
    return dev, sys_


def test_spacemouse_discovery_by_vendor(tmp_path: Path) -> None:
    dev, sys_ = fake_hidraw(tmp_path, {"hidraw0": ("0003:0000046D:0000C52B", "Logitech Receiver"),
                                       "hidraw3": ("0003:0000256F:0000C635", "3Dconnexion SpaceMouse Compact"),
                                       "hidraw5": ("0003:0000046D:0000C626", "3Dconnexion SpaceNavigator")})  # fmt: skip
    assert find_spacemouse(dev, sys_) == dev / "hidraw3"
    os.remove(sys_ / "class" / "hidraw" / "hidraw3" / "device" / "uevent")
    assert find_spacemouse(dev, sys_) == dev / "hidraw5"  # the older Logitech-made one


def test_no_spacemouse_lists_the_hidraw_devices(tmp_path: Path) -> None:
    dev, sys_ = fake_hidraw(tmp_path, {"hidraw0": ("0003:0000046D:0000C52B", "Logitech Receiver")})
    with pytest.raises(DeviceNotFound) as err:
        open_device("spacemouse", dev_root=dev, sys_root=sys_)
    assert f"{dev}/hidraw0 (Logitech Receiver [046d:c52b])" in str(err.value)
    assert UDEV_LINE in str(err.value)


def test_an_unreadable_node_gives_the_udev_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev, sys_ = fake_hidraw(tmp_path, {"hidraw3": ("0003:0000256F:0000C635", "SpaceMouse")})

    def denied(path: object, flags: int) -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(device_discovery.os, "open", denied)
    with pytest.raises(DeviceNotFound) as err:
        HidrawSpaceMouse(dev_root=dev, sys_root=sys_)
    message = str(err.value)
    assert f"cannot read the SpaceMouse at {dev}/hidraw3: permission denied" in message
    assert "/etc/udev/rules.d/99-handrail.rules" in message and UDEV_LINE in message


def test_a_missing_node_names_what_is_there(tmp_path: Path) -> None:
    dev, sys_ = fake_input(tmp_path, {"event4": ("Xbox Wireless Controller", {0x130})})
    with pytest.raises(DeviceNotFound, match=r"event7: No such file.*event4 \(Xbox Wireless"):
        open_device("gamepad", None, dev / "input" / "event7", dev_root=dev, sys_root=sys_)
