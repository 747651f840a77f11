"""`handrail demos ...` end to end through the CLI entry point (store in: conftest's `recorded`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.demos import open_store
from handrail.launch import cli, demos_cmd


def test_demos_commands_end_to_end(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["demos", "info", str(recorded)]) == 0
    assert "success rate" in capsys.readouterr().out
    assert cli.main(["demos", "validate", str(recorded)]) == 0
    sub = tmp_path / "sub"
    assert cli.main(["demos", "filter", str(recorded), "--out", str(sub), "--episodes", "1"]) == 0
    assert open_store(sub).num_episodes == 1
    merged = tmp_path / "m"
    assert cli.main(["demos", "merge", str(recorded), str(sub), "--out", str(merged)]) == 0
    assert open_store(merged).num_episodes == 4
    for fmt, target in (("robomimic", tmp_path / "d.hdf5"), ("lerobot", tmp_path / "lr")):
        assert (
            cli.main(["demos", "export", str(merged), "--format", fmt, "--out", str(target)]) == 0
        )
        back = tmp_path / f"back_{fmt}"
        assert cli.main(["demos", "import", str(target), "--format", fmt, "--out", str(back)]) == 0
        np.testing.assert_array_equal(
            open_store(back).load().action, open_store(merged).load().action
        )
    info = json.loads((tmp_path / "lr/meta/info.json").read_text())
    assert info["total_episodes"] == 4


def test_validate_exits_non_zero_on_a_damaged_chunk(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    copy = tmp_path / "damaged"
    shutil.copytree(recorded, copy)
    chunk = sorted(
        p for p in (copy / "data/action").rglob("*") if p.is_file() and p.name != "zarr.json"
    )[0]
    chunk.write_bytes(chunk.read_bytes()[:-7])
    assert cli.main(["demos", "validate", str(copy)]) == 1
    assert "problem" in capsys.readouterr().err


def test_bad_input_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demos", "info", str(tmp_path)]) == 2
    assert "not a handrail episode store" in capsys.readouterr().err


def test_record_and_replay_names_stay_importable_from_demos_cmd() -> None:
    """Code written against the single-module demos_cmd keeps working after the split."""
    from handrail.launch import demos_common, record_cmd, replay_cmd

    homes = {
        demos_common: ("CAMERAS", "StorePath", "parse_episodes"),
        record_cmd: ("HUMAN_SOURCES", "RecordConfig", "fields_from_space", "record"),
        replay_cmd: ("ReplayConfig", "env_overrides", "replay"),
    }
    moved = {name for names in homes.values() for name in names}
    own = {"export", "filter_", "import_", "info", "merge", "validate"}  # the demos commands
    assert set(demos_cmd.__all__) == moved | own
    for home, names in homes.items():
        for name in names:
            assert getattr(demos_cmd, name) is getattr(home, name), name
    for name in own:  # what `handrail demos <name>` runs
        assert cli.COMMANDS[("demos", name.rstrip("_"))].target == f"demos_cmd:{name}"
