"""The `handrail` command table and dispatcher."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

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
    module = importlib.import_module(f"handrail.launch.{module_name}")
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
