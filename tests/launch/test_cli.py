"""The `handrail` command table and dispatcher."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from handrail.demos import errors
from handrail.launch import cli


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for key in cli.COMMANDS:
        assert " ".join(key) in out


def test_unknown_command_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_unknown_subcommand_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sim", "walk"]) == 2
    assert "unknown command 'sim walk'" in capsys.readouterr().err


@pytest.mark.parametrize("key", list(cli.COMMANDS))
def test_every_command_resolves_and_has_help(key: tuple[str, ...]) -> None:
    """Every table entry points at a real function, and `--help` documents its options."""
    module_name, func_name = cli.COMMANDS[key].target.split(":")
    module = importlib.import_module(module_name)
    assert callable(getattr(module, func_name))
    result = subprocess.run(
        [sys.executable, "-m", "handrail.launch.cli", *key, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: handrail " + " ".join(key) in result.stdout


def test_bad_config_value_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Validation errors from a command's config reach the user as one line and exit code 2."""
    assert cli.main(["sim", "rollout", "--task", "no_such_task", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("handrail sim rollout: error:")
    assert "no_such_task" in err
    assert "Traceback" not in err


def test_help_imports_no_jax_mujoco_or_zarr() -> None:
    """`handrail --help` (and the error handler) must stay fast: no heavy library is imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "handrail.launch.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "usage: handrail" in result.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "handrail.launch" in imported and "tyro" in imported  # the log is what we think
    heavy = {m for m in imported if m.split(".")[0] in ("jax", "mujoco", "zarr", "torch")}
    assert heavy == set()


def _one_error_line(err: str, command: str) -> str:
    """The error line of ``err``; asserts it is the only one and no traceback was printed."""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0] == err.splitlines()[-1], err
    assert errors[0].startswith(f"handrail {command}: error: ")
    return errors[0]


def test_damaged_demo_store_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`train --demos` opens the store outside the store commands' own error handling."""
    from handrail.demos import FieldSpec, create_store

    store = tmp_path / "demos.zarr"
    fields = [FieldSpec("obs", "float32", (3,))]
    with create_store(store, kind="demo", obs_fields=fields, action_dim=1, control_dt_s=0.05,
                      task="Pendulum-v1", durable=False):  # fmt: skip
        pass
    (store / "zarr.json").write_text('{"zarr_format": 3, "node_type": "gr')  # torn metadata
    argv = ["train", "--task", "Pendulum-v1", "--demos", str(store), "--steps", "10",
            "--run-dir", str(tmp_path / "run"), "--no-progress"]  # fmt: skip
    assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().err, "train")
    assert "not valid JSON" in line and str(store) in line


@pytest.mark.parametrize(
    "error",
    [
        errors.StoreLockedError("store s.zarr is locked by pid 123", pid=123),
        errors.StoreCorruptError("data/action: checksum mismatch"),
        errors.NotAStoreError("s.zarr: no zarr.json"),
        errors.StoreVersionError("format version 9; upgrade handrail"),
        errors.FieldMismatchError("'cam': store has uint8[16, 16, 3]"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_store_error_is_one_clear_line(
    error: errors.StoreError, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def command() -> int:
        raise error

    monkeypatch.setattr(cli, "_resolve", lambda _: lambda *args: command())
    assert cli.main(["train"]) == 2
    assert _one_error_line(capsys.readouterr().err, "train") == f"handrail train: error: {error}"
    monkeypatch.setenv("HANDRAIL_DEBUG", "1")
    with pytest.raises(type(error)):
        cli.main(["train"])


def test_a_bug_is_not_disguised_as_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def command() -> int:
        raise KeyError("internal")

    monkeypatch.setattr(cli, "_resolve", lambda _: lambda *args: command())
    with pytest.raises(KeyError):
        cli.main(["train"])


def test_a_user_error_keeps_its_notes_on_its_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A note says where a user's error came from (the base policy that raised it): without
    it, a ValueError raised inside the user's own code would be one line with no source."""

    def command() -> int:
        err = ValueError("operands could not be broadcast")
        err.add_note("(raised by the base policy mine:policy)")
        raise err

    monkeypatch.setattr(cli, "_resolve", lambda _: lambda *args: command())
    assert cli.main(["train"]) == 2
    assert _one_error_line(capsys.readouterr().err, "train") == (
        "handrail train: error: operands could not be broadcast "
        "(raised by the base policy mine:policy)"
    )
