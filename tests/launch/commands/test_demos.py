"""`handrail demos ...` end to end through the CLI entry point (store in: conftest's `recorded`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.demos import open_store
from handrail.launch import cli
from handrail.launch.commands import demos as demos_cmd


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


def test_demos_export_and_import_mcap(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store goes out as ROS 2 messages and comes back the same; a foreign file is one line."""
    from mcap.writer import Writer

    bag, back = tmp_path / "d.mcap", tmp_path / "back"
    assert cli.main(["demos", "export", str(recorded), "--format", "mcap", "--out", str(bag)]) == 0
    assert cli.main(["demos", "import", str(bag), "--format", "mcap", "--out", str(back)]) == 0
    a, b = open_store(recorded).load(), open_store(back).load()
    np.testing.assert_array_equal(a.episode_lengths, b.episode_lengths)
    for name in ("action", "timestamp", "terminated", "truncated", "reward"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for key in a.obs:
        np.testing.assert_array_equal(a.obs[key], b.obs[key], err_msg=key)
    with (tmp_path / "empty.mcap").open("wb") as f:  # valid MCAP, no handrail record, no topics
        writer = Writer(f)
        writer.start(profile="ros2")
        writer.finish()
    capsys.readouterr()
    args = ["--format", "mcap", "--out", str(tmp_path / "x")]
    assert cli.main(["demos", "import", str(tmp_path / "empty.mcap"), *args]) == 2
    err = capsys.readouterr().err
    assert "lacks ee_pose, gripper_state, action or cmd/target_pose" in err
    assert err.strip().endswith("Topics present: none")


def episode_rows(out: str) -> dict[int, list[str]]:
    """The per-episode table of `demos info` output: episode id -> its other columns."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["episode", "steps"])
    return {int(ln.split()[0]): ln.split()[1:] for ln in lines[start + 1 :] if ln.strip()}


def test_info_lists_who_acted_per_episode(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail.demos.ops import iter_store_episodes, store_meta, write_store

    reader = open_store(recorded)
    eps = [ep for _, ep in iter_store_episodes(reader)]
    n = [ep.num_steps for ep in eps]
    eps[0].intervention = (np.arange(n[0]) < 4).astype(np.int8)  # a human for 4 steps, then policy
    eps[1].intervention = np.zeros(n[1], np.int8)  # the policy alone
    # eps[2] stays as recorded: the scripted expert throughout
    write_store(tmp_path / "s", store_meta(reader), eps)
    assert cli.main(["demos", "info", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    ok = [("yes" if ep.success else "no") for ep in eps]
    assert episode_rows(out) == {
        0: [str(n[0]), "4", "0", f"{400 / n[0]:.1f}%", ok[0]],
        1: [str(n[1]), "0", "0", "0.0%", ok[1]],
        2: [str(n[2]), "0", str(n[2]), "0.0%", ok[2]],
    }
    assert f"{400 / sum(n):.1f}% (4 steps by a human)" in out
    assert cli.main(["demos", "info", str(tmp_path / "s"), "--episodes", "2"]) == 0
    assert list(episode_rows(capsys.readouterr().out)) == [2]


def test_info_of_an_imported_store_has_no_interventions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """diffusion_policy buffers say nothing of who acted: the import is all policy steps."""
    import zarr

    root = zarr.open_group(str(tmp_path / "dp.zarr"), mode="w", zarr_format=2)
    data = root.create_group("data")
    data.create_array("state", data=np.zeros((7, 3), np.float32))
    data.create_array("action", data=np.ones((7, 2), np.float32))
    root.create_group("meta").create_array("episode_ends", data=np.array([3, 7], np.int64))
    store = tmp_path / "s"
    args = ["--format", "diffusion_policy", "--out", str(store), "--control-dt-s", "0.1"]
    assert cli.main(["demos", "import", str(tmp_path / "dp.zarr"), *args]) == 0
    capsys.readouterr()
    assert cli.main(["demos", "info", str(store)]) == 0
    out = capsys.readouterr().out
    assert episode_rows(out) == {0: ["3", "0", "0", "0.0%", "no"], 1: ["4", "0", "0", "0.0%", "no"]}
    assert "0.0% (0 steps by a human)" in out


def test_info_of_a_large_store_lists_episodes_on_request(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail.demos.ops import iter_store_episodes, store_meta, write_store

    reader = open_store(recorded)
    (ep,) = [ep for _, ep in iter_store_episodes(reader, episodes=[0])]
    count = demos_cmd.INFO_LISTS_UP_TO + 1
    write_store(tmp_path / "big", store_meta(reader), [ep] * count)
    assert cli.main(["demos", "info", str(tmp_path / "big")]) == 0
    out = capsys.readouterr().out
    assert f"per episode: {count} episodes; list them with --episodes 0-{count - 1}" in out
    assert "scripted" not in out  # no table unasked
    assert cli.main(["demos", "info", str(tmp_path / "big"), "--episodes", f"3,{count - 1}"]) == 0
    assert list(episode_rows(capsys.readouterr().out)) == [3, count - 1]
    assert cli.main(["demos", "info", str(tmp_path / "big"), "--episodes", f"{count}"]) == 2
    assert f"[{count}] not in" in capsys.readouterr().err


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
    from handrail.launch.commands import common as demos_common
    from handrail.launch.commands import record as record_cmd
    from handrail.launch.commands import replay as replay_cmd

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
        target = cli.COMMANDS[("demos", name.rstrip("_"))].target
        assert target == f"handrail.launch.commands.demos:{name}"


def _store_with_nan(recorded: Path, path: Path) -> Path:
    """A copy of ``recorded`` whose episode 1 holds a nan observation (written as it is, as an
    older handrail or another Zarr writer could have)."""
    from handrail.demos import create_store
    from handrail.demos.ops import iter_store_episodes, store_meta, write_episode

    reader = open_store(recorded)
    meta = store_meta(reader)
    eps = [ep for _, ep in iter_store_episodes(reader)]
    eps[1].obs["goal"][2, 0] = np.nan
    with create_store(path, kind=meta.kind, obs_fields=list(meta.obs_fields),
                      action_dim=meta.action_dim, control_dt_s=meta.control_dt_s,
                      task=meta.task) as writer:  # fmt: skip
        for ep in eps:
            write_episode(writer, ep)
    return path


def test_nan_in_a_store_stops_filter_and_merge_with_one_line(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _store_with_nan(recorded, tmp_path / "bad")
    out = tmp_path / "out"
    for argv in (["filter", str(bad)], ["merge", str(recorded), str(bad)]):
        assert cli.main(["demos", *argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{bad}: 1 episode(s) hold nan or inf" in err
        assert "episode 1: obs 'goal' is nan at step 2" in err
        assert err.endswith(f"handrail demos filter {bad} --out {bad}-finite --episodes 0,2")
        assert not out.exists()
    # the fix it names works, and the merge of the result then does too: a failed merge left
    # nothing at --out that the rerun would trip over
    assert (
        cli.main(["demos", "filter", str(bad), "--out", f"{bad}-finite", "--episodes", "0,2"]) == 0
    )
    assert cli.main(["demos", "merge", str(recorded), f"{bad}-finite", "--out", str(out)]) == 0
    assert open_store(out).num_episodes == 5


def test_an_existing_out_names_the_overwrite_flag(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    for argv in (
        ["merge", str(recorded), str(recorded)],
        ["filter", str(recorded)],
        ["export", str(recorded), "--format", "lerobot"],
        ["import", str(recorded), "--format", "lerobot"],
    ):
        assert cli.main(["demos", *argv, "--out", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith(
            f"error: --out {target} already exists: pass --overwrite to replace it, or choose "
            "another --out"
        ), err
        assert "overwrite=True" not in err and "open_writer" not in err
    for argv in (["filter", str(recorded)], ["export", str(recorded), "--format", "lerobot"]):
        assert cli.main(["demos", *argv, "--out", str(target), "--overwrite"]) == 2
        assert "refusing to replace" in capsys.readouterr().err  # not a store, not an export
    assert cli.main(["demos", "export", str(recorded), "--format", "robomimic", "--out",
                     str(target), "--overwrite"]) == 2  # fmt: skip
    assert "is a folder; this export writes one file" in capsys.readouterr().err
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]


def test_ctrl_c_during_merge_leaves_out_as_it_was(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from handrail.demos import ops

    real = ops.iter_store_episodes

    def interrupted(reader, **filters):
        for k, item in enumerate(real(reader, **filters)):
            if k == 2:
                raise KeyboardInterrupt  # Ctrl-C while the third episode is copied
            yield item

    monkeypatch.setattr(ops, "iter_store_episodes", interrupted)
    out = tmp_path / "m"
    assert cli.main(["demos", "merge", str(recorded), str(recorded), "--out", str(out)]) == 130
    assert f"interrupted; nothing was written to {out}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no store, no hidden partial folder


def test_importing_nan_is_refused_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import zarr

    root = zarr.open_group(str(tmp_path / "dp.zarr"), mode="w", zarr_format=2)
    data = root.create_group("data")
    data.create_array("state", data=np.zeros((7, 3), np.float32))
    action = np.ones((7, 2), np.float32)
    action[4, 1] = np.inf
    data.create_array("action", data=action)
    root.create_group("meta").create_array("episode_ends", data=np.array([3, 7], np.int64))
    store = tmp_path / "s"
    args = ["--format", "diffusion_policy", "--out", str(store), "--control-dt-s", "0.1"]
    assert cli.main(["demos", "import", str(tmp_path / "dp.zarr"), *args]) == 2
    err = capsys.readouterr().err
    assert "episode 1 of the input: action is inf at step 1" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dp.zarr"]


def test_writing_into_a_read_only_folder_is_one_line(recorded: Path, tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    locked = tmp_path / "ro"
    shutil.copytree(recorded, locked / "s")
    for p in [locked, *locked.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    cmd = [sys.executable, "-m", "handrail.launch.cli", "demos"]
    if os.geteuid() == 0:  # root writes anywhere: drop the capabilities that let it
        caps = "-dac_override,-dac_read_search"
        cmd = ["setpriv", "--bounding-set", caps, "--inh-caps", caps, *cmd]
    try:
        for argv, where in (
            (["filter", str(recorded), "--out", str(locked / "new")], locked),
            (
                ["filter", str(locked / "s"), "--out", str(locked / "s"), "--overwrite"],
                locked / "s",
            ),
        ):
            proc = subprocess.run([*cmd, *argv], capture_output=True, text=True, timeout=120)
            assert proc.returncode == 2, proc.stderr
            assert proc.stderr.strip() == (
                f"handrail demos filter: error: cannot write {where}: Permission denied; use a "
                "folder you can write to, or get write access to it"
            )
        assert sorted(p.name for p in locked.iterdir()) == ["s"]
        assert open_store(locked / "s").num_episodes == 3
    finally:
        for p in [locked, *locked.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
