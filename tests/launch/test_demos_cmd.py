"""`handrail record|replay|demos ...` end to end through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.demos import open_store
from handrail.launch import cli
from handrail.launch.demos_cmd import parse_episodes


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three expert episodes of reach, recorded once for the module."""
    out = tmp_path_factory.mktemp("rec") / "reach"
    assert (
        cli.main(["record", "--task", "reach", "--episodes", "3", "--out", str(out), "--seed", "5"])
        == 0
    )
    return out


def test_record_stores_expert_episodes_with_seeds(recorded: Path) -> None:
    reader = open_store(recorded)
    assert reader.num_episodes == 3 and reader.attrs["kind"] == "demo"
    assert [r.seed for r in reader.episodes] == [5, 6, 7]
    assert all(r.task == "reach" for r in reader.episodes)
    assert set(np.unique(reader.load().intervention)) == {2}  # scripted


def test_replay_reproduces_recorded_observations(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    video = tmp_path / "r.mp4"
    assert cli.main(["replay", str(recorded), "--episodes", "0,2", "--video", str(video)]) == 0
    out = capsys.readouterr().out
    assert "ep 0" in out and "ep 2" in out and "ep 1 " not in out and "OK: 2 episodes" in out
    assert video.stat().st_size > 0


def test_replay_flags_drift_beyond_tolerance(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Wrong seeds replay from another start state: the drift check must fail."""
    from handrail.demos.ops import iter_store_episodes, store_meta, write_store

    reader = open_store(recorded)
    eps = [ep for _, ep in iter_store_episodes(reader, episodes=[0])]
    eps[0].seed = 999
    write_store(tmp_path / "bad", store_meta(reader), eps)
    assert cli.main(["replay", str(tmp_path / "bad")]) == 1
    assert "max abs error above" in capsys.readouterr().err


def test_record_ctrl_c_keeps_finished_episodes(tmp_path: Path, monkeypatch) -> None:
    from handrail import sim

    real = sim.make_expert
    calls = {"n": 0}

    def interrupting(task, env=None):
        expert = real(task, env)

        class Wrapped:
            def reset(self, seed=None):
                expert.reset(seed=seed)

            def __call__(self, obs):
                calls["n"] += 1
                if calls["n"] > 25:  # reach episodes take ~10 steps: stop inside the third
                    raise KeyboardInterrupt
                return expert(obs)

        return Wrapped()

    monkeypatch.setattr(sim, "make_expert", interrupting)
    out = tmp_path / "s"
    assert cli.main(["record", "--task", "reach", "--episodes", "5", "--out", str(out)]) == 130
    reader = open_store(out)
    assert 1 <= reader.num_episodes < 5
    assert reader.num_steps == sum(r.num_steps for r in reader.episodes)
    assert cli.main(["demos", "validate", str(out)]) == 0


def test_human_sources_and_on_robot_say_what_they_wait_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["record", "--task", "reach", "--source", "spacemouse", "--out", str(tmp_path / "x")]
    assert cli.main(args) == 2
    assert "interventions" in capsys.readouterr().err
    assert cli.main(["replay", str(tmp_path / "x"), "--on-robot"]) == 2
    err = capsys.readouterr().err
    assert "ROS 2" in err and "safety filter" in err


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
    with pytest.raises(ValueError, match="--episodes"):
        parse_episodes("1,x")
    assert parse_episodes("0,3,5-7") == [0, 3, 5, 6, 7]
    assert parse_episodes("") is None
