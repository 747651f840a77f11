"""`handrail record` end to end through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.demos import open_store
from handrail.launch import cli


def test_record_stores_expert_episodes_with_seeds(recorded: Path) -> None:
    reader = open_store(recorded)
    assert reader.num_episodes == 3 and reader.attrs["kind"] == "demo"
    assert [r.seed for r in reader.episodes] == [5, 6, 7]
    assert all(r.task == "reach" for r in reader.episodes)
    assert set(np.unique(reader.load().intervention)) == {2}  # scripted


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


class ScriptedDevice:
    """A person's device, read by read: a list of states (then at rest)."""

    name = "scripted"

    def __init__(self, states: list) -> None:
        self.states, self.closed = list(states), False

    def read(self):
        from handrail.control.teleop import DeviceState

        return self.states.pop(0) if self.states else DeviceState()

    def close(self) -> None:
        self.closed = True


def test_a_person_records_demos_marks_success_and_records_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail.app import human
    from handrail.control.teleop import DeviceState, TeleopEvent

    start, push = (
        DeviceState(events=(TeleopEvent.INTERVENE,)),
        DeviceState(twist=[1, 0, 0, 0, 0, 0]),
    )

    def ev(event: TeleopEvent) -> DeviceState:
        return DeviceState(twist=[1, 0, 0, 0, 0, 0], events=(event,))

    device = ScriptedDevice([
        start, push, push, ev(TeleopEvent.SUCCESS),  # episode 0: marked a success
        start, push, ev(TeleopEvent.RERECORD),  # thrown away
        start, push, push, push, ev(TeleopEvent.END),  # ended without a verdict
    ])  # fmt: skip
    opened = []
    monkeypatch.setattr(
        human, "open_device", lambda source, mapping: opened.append(source) or device
    )
    out = tmp_path / "teleop"
    args = [
        "record",
        "--task",
        "reach",
        "--source",
        "gamepad",
        "--episodes",
        "2",
        "--out",
        str(out),
    ]
    assert cli.main(args) == 0
    assert opened == ["gamepad"] and device.closed
    data = open_store(out).load()
    assert data.num_episodes == 2 and list(data.episode_lengths) == [3, 4]
    assert [r.success for r in data.records] == [True, False]
    assert [r.seed for r in data.records] == [0, 2]  # seed 1 was recorded again as seed 2
    assert set(np.unique(data.intervention)) == {1}  # the person acted every step
    assert np.all(data.action[:, 0] == 1.0)  # full deflection away = full step along base x
    assert bool(data.terminated[2]) and bool(data.truncated[-1])
    assert "recording it again" in capsys.readouterr().out
    assert cli.main(["demos", "validate", str(out)]) == 0


def test_recording_with_a_device_needs_an_arm_task(tmp_path: Path, capsys) -> None:
    args = [
        "record",
        "--task",
        "HalfCheetah-v5",
        "--source",
        "keyboard",
        "--out",
        str(tmp_path / "x"),
    ]
    assert cli.main(args) == 2
    assert "valid tasks" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_recording_into_an_existing_store_names_the_command_flags(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    out = tmp_path / "s"
    shutil.copytree(recorded, out)
    assert cli.main(["record", "--task", "reach", "--episodes", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"handrail record: error: --out {out} already exists: pass --append to add episodes "
        "to it, --overwrite to replace it, or choose another --out"
    )
    assert open_store(out).num_episodes == 3
    missing = tmp_path / "missing"
    argv = ["record", "--task", "reach", "--episodes", "1", "--out", str(missing), "--append"]
    assert cli.main(argv) == 2
    assert "does not exist: drop --append to create it" in capsys.readouterr().err
    assert not missing.exists()


def test_a_full_disk_while_recording_is_one_line_and_keeps_the_committed_episodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno
    import json

    import zarr.storage._local as zarr_local

    real_put, chunks = zarr_local._put, [0]

    def put(path, value, exclusive=False):  # chunk files fail once ~3 episodes are on disk
        if "/c/" in Path(path).as_posix():
            chunks[0] += 1
            if chunks[0] > 60:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_put(path, value, exclusive)

    monkeypatch.setattr(zarr_local, "_put", put)
    out = tmp_path / "s"
    assert cli.main(["record", "--task", "reach", "--episodes", "30", "--out", str(out)]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "handrail record" in ln]
    kept = open_store(out).num_episodes
    assert len(lines) == 1 and lines[0].startswith("handrail record: error:"), lines
    assert "the disk is full" in lines[0] and f"it keeps the {kept} episodes" in lines[0]
    assert "record more with --append" in lines[0] and 1 <= kept < 30
    shapes = {p.parent.name: json.loads(p.read_text()).get("shape") for p in out.rglob("zarr.json")}
    assert shapes["action"] == [open_store(out).num_steps, 4]  # cut back to the committed rows
    assert shapes["episode_ends"] == [kept]
    monkeypatch.setattr(zarr_local, "_put", real_put)  # space freed
    argv = ["record", "--task", "reach", "--episodes", "1", "--out", str(out), "--append"]
    assert cli.main(argv) == 0
    assert open_store(out).num_episodes == kept + 1
    assert cli.main(["demos", "validate", str(out)]) == 0


def test_noise_perturbs_what_the_arm_executes_seeded_and_keeps_the_experts_own_action(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DART-style recording: the same seeds give the same noisy episodes; the arm executes the
    expert's action plus noise (from the first step, whose observation is the same as without
    noise), never out of the action space, and the store keeps the expert's own action as the
    proposed one."""
    stores = []
    for name in ("a", "b"):
        out = tmp_path / name
        argv = ["record", "--task", "reach", "--episodes", "3", "--seed", "5", "--noise", "0.3",
                "--out", str(out)]  # fmt: skip
        assert cli.main(argv) == 0
        stores.append(open_store(out).load())
    assert "3 episodes of reach" in capsys.readouterr().out
    noisy, again, clean = stores[0], stores[1], open_store(recorded).load()
    np.testing.assert_array_equal(noisy.action, again.action)
    assert [r.seed for r in open_store(tmp_path / "a").episodes] == [5, 6, 7]
    np.testing.assert_array_equal(noisy.obs["proprio"][0], clean.obs["proprio"][0])
    np.testing.assert_allclose(noisy.policy_action[0], clean.action[0], atol=1e-6)
    moved = np.abs(noisy.action - noisy.policy_action).max(axis=1)
    assert (moved > 0.05).mean() > 0.9  # four dimensions of N(0, 0.3^2) per step
    assert np.all(np.abs(noisy.action) <= 1.0)
    np.testing.assert_array_equal(clean.action, clean.policy_action)  # no noise: one action


def test_noise_must_be_a_standard_deviation_for_the_scripted_expert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "x")
    assert cli.main(["record", "--task", "reach", "--noise", "-0.1", "--out", out]) == 2
    assert "--noise must be >= 0 (a standard deviation), got -0.1" in capsys.readouterr().err
    argv = ["record", "--task", "reach", "--noise", "0.1", "--source", "keyboard", "--out", out]
    assert cli.main(argv) == 2
    assert "a person at a keyboard records as they act" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
