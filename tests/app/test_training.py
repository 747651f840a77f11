"""`handrail train`'s run folder: one run per folder, a resume that fails changes nothing, damaged
checkpoint files, a full disk and Ctrl-C each end in one line saying what is kept and what to do,
and a recording run killed at random points stores every trained episode exactly once."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from handrail.app import training
from handrail.app.config import TrainConfig, preset
from handrail.launch import cli


@pytest.fixture(scope="module", autouse=True)
def _one_sac_per_config() -> Iterator[None]:
    """Every run of this file with the same specs and config gets the same SAC object, so its
    jitted functions compile once for the file, not once per run (a SAC is pure: sharing one
    changes no result)."""
    from handrail.learners.agents import sac

    built: dict[str, Any] = {}
    original = sac.SAC

    def shared(obs_spec: Any, action_spec: Any, config: Any, pairs: Any = ()) -> Any:
        key = repr((obs_spec, action_spec, config, pairs))
        if key not in built:
            built[key] = original(obs_spec, action_spec, config, pairs=pairs)
        return built[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sac, "SAC", shared)
        yield


def tiny(run_dir: Path | None, **overrides: Any) -> TrainConfig:
    """reach with 20-step episodes, an evaluation (and a checkpoint) every 40 steps."""
    base: dict[str, Any] = dict(steps=120, eval_every=40, eval_episodes=1, run_dir=run_dir,
                                progress=False, expert_demos=0, env_kwargs=("episode_steps=20",))  # fmt: skip
    return preset("reach", sac={"hidden_dims": (32, 32), "batch_size": 32, "utd": 1},
                  loop={"warmup_steps": 30}, **{**base, **overrides})  # fmt: skip


def tiny_argv(run_dir: Path, *more: str) -> list[str]:
    """``handrail train`` with :func:`tiny`'s settings."""
    return ["train", "--task", "reach", "--steps", "120", "--eval-every", "40", "--eval-episodes",
            "1", "--no-progress", "--expert-demos", "0", "--env-kwargs", "episode_steps=20",
            "--sac.hidden-dims", "32", "32", "--sac.batch-size", "32", "--sac.utd", "1",
            "--loop.warmup-steps", "30", "--run-dir", str(run_dir), *more]  # fmt: skip


def _records(run: Path, kind: str) -> list[dict[str, Any]]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def _digest(folder: Path) -> str:
    """Every file's path and bytes under ``folder`` (links followed)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


def _one_line(capsys: pytest.CaptureFixture[str], args: list[str], code: int = 2) -> str:
    try:
        assert cli.main(args) == code
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C ended the command with a KeyboardInterrupt traceback")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line or "interrupted" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of 120 steps that recorded its 6 episodes into ``<run>_store``."""
    root = tmp_path_factory.mktemp("runs")
    assert training.train(tiny(root / "run", record=root / "run_store")) == 0
    return root / "run"


@pytest.fixture
def run_copy(recorded_run: Path, tmp_path: Path) -> Path:
    """A copy of the recorded run whose store is a copy too (its config.json points at it)."""
    run = tmp_path / "run"
    shutil.copytree(recorded_run, run, symlinks=True)
    shutil.copytree(recorded_run.parent / "run_store", tmp_path / "store")
    saved = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**saved, "record": str(tmp_path / "store")}))
    return run


# ---------------------------------------------------------------- one run per folder


def test_a_new_run_never_writes_into_an_existing_folder(
    recorded_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _digest(recorded_run)
    line = _one_line(capsys, ["train", "--task", "reach", "--run-dir", str(recorded_run)])
    assert f"--run-dir {recorded_run} already exists" in line and "--resume" in line
    assert _digest(recorded_run) == before  # its checkpoint, config and metrics as they were


def test_runs_started_in_the_same_second_get_a_folder_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    same = tmp_path / "runs" / "reach-jax-s0-20250101-000000"
    monkeypatch.setattr(training, "default_run_dir", lambda cfg: same)
    assert training.train(tiny(None, steps=20)) == 0
    assert training.train(tiny(None, steps=20, seed=1)) == 0
    seeds = [json.loads((p / "config.json").read_text())["seed"] for p in (same, Path(f"{same}-2"))]
    assert seeds == [0, 1]
    assert [r["env_steps"] for r in _records(same, "episode")] == [20]  # not the second run's


def test_a_run_folder_that_cannot_be_created_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("in the way")
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o500)
    # root writes anywhere its permissions say no; the kernel's sysfs refuses root too
    writable = os.access(readonly, os.W_OK)
    for run in (tmp_path / "file" / "run", Path("/sys/handrail-run") if writable else readonly):
        line = _one_line(capsys, tiny_argv(run))
        assert f"cannot create the run folder {run}" in line and "--run-dir" in line
        assert not run.exists()


def test_a_resume_of_a_run_another_process_writes_is_refused(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail.learners.runlog import RunDir

    before = _digest(run_copy)
    with RunDir(run_copy, tensorboard=False):  # the run, still training
        line = _one_line(capsys, ["train", "--resume", str(run_copy)])
    assert f"{run_copy} is in use by another process" in line
    assert _digest(run_copy) == before


# ---------------------------------------------------------------- a resume that fails


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES = {
    "replay.npz": ("checkpoints/latest/replay.npz", _truncate),
    "state.msgpack": ("checkpoints/latest/learner/state.msgpack", _truncate),
    "trainer.json": ("checkpoints/latest/trainer.json", lambda p: p.write_text("\x00garbage")),
    "checkpoint config.json": ("checkpoints/latest/learner/config.json",
                               lambda p: p.write_text("")),
    "record.json": ("checkpoints/latest/record.json", lambda p: p.write_text("{")),
    "record.json count": ("checkpoints/latest/record.json", lambda p: p.write_text("{}")),
    "run config.json": ("config.json", lambda p: p.write_text("not json")),
}  # fmt: skip


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_checkpoint_file_is_named_and_the_resume_changes_nothing(
    run_copy: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Truncated replay or learner state, garbage JSON: one line naming the file and what to do;
    the run folder (config.json included) and the store are as they were."""
    relative, spoil = DAMAGES[damage]
    spoil(run_copy / relative)
    store = run_copy.parent / "store"
    before = (_digest(run_copy), _digest(store))
    line = _one_line(capsys, ["train", "--resume", str(run_copy), "--steps", "200"])
    assert str(run_copy / relative) in line, line
    assert "start afresh with another --run-dir" in line
    if damage != "run config.json":
        assert f"Its best policy is in {run_copy / 'checkpoints' / 'best'}" in line
    assert (_digest(run_copy), _digest(store)) == before


def test_a_run_or_checkpoint_of_a_newer_handrail_says_upgrade(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta_path = run_copy / "checkpoints/latest/learner/config.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "format_version": 2}))
    line = _one_line(capsys, ["train", "--resume", str(run_copy)])
    assert str(meta_path) in line and "newer handrail" in line and "upgrade handrail" in line
    config = json.loads((run_copy / "config.json").read_text())
    (run_copy / "config.json").write_text(json.dumps({**config, "a_later_field": 1}))
    line = _one_line(capsys, ["train", "--resume", str(run_copy)])
    assert "a_later_field" in line and "Upgrade handrail" in line


def test_demos_at_a_missing_path_say_it_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing, run = tmp_path / "nothing", tmp_path / "run"
    line = _one_line(capsys, ["train", "--task", "reach", "--demos", str(missing),
                              "--run-dir", str(run)])  # fmt: skip
    assert f"--demos {missing}: no such file or folder" in line and "zarr.json" not in line
    assert not run.exists()


def test_a_resume_never_drops_another_runs_episodes_from_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run A records into S, run B appends its own episodes to S, then A is resumed: the
    episodes after A's checkpoint are not A's, so nothing is dropped and it says why."""
    from handrail.demos import open_store
    from handrail.learners.evaluation import run_seed

    store = tmp_path / "shared"
    assert training.train(tiny(tmp_path / "a", steps=40, record=store)) == 0
    assert training.train(tiny(tmp_path / "b", steps=40, seed=7, record=store)) == 0
    line = _one_line(capsys, ["train", "--resume", str(tmp_path / "a"), "--steps", "80"])
    b = run_seed(7)  # seed 7's episodes: far from seed 0's
    assert (
        "after the 2 episodes it held at the checkpoint it holds 2 that this run did not "
        f"record (seeds [{b}, {b + 1}]"
        in line
        and "Nothing was dropped" in line
    )
    assert [r.seed for r in open_store(store).episodes] == [0, 1, b, b + 1]


def test_a_checkpoint_without_the_stores_count_resumes_and_says_so(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint saved before checkpoints said how many episodes the store held."""
    (run_copy / "checkpoints/latest/record.json").unlink()
    assert cli.main(["train", "--resume", str(run_copy)]) == 0
    assert "the checkpoint does not say how many episodes the store held" in capsys.readouterr().err


# ---------------------------------------------------------------- a full disk, Ctrl-C


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail.learners.loop import Trainer

    save_into = Trainer.save_into

    def full_at_the_second_save(self: Trainer, path: Path) -> None:
        if self.env_steps > 0:
            (path / "replay.npz").write_bytes(b"half a replay")
            raise OSError(errno.ENOSPC, "No space left on device")
        save_into(self, path)

    monkeypatch.setattr(Trainer, "save_into", full_at_the_second_save)
    run = tmp_path / "run"
    line = _one_line(capsys, tiny_argv(run))
    assert "No space left on device" in line and "free some space" in line
    assert f"kept: the checkpoint {run / 'checkpoints' / 'latest'} at env step 0" in line
    checkpoints = run / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted(
        ["latest", (checkpoints / "latest").resolve().name]
    )  # the failed save's folder is gone
    assert json.loads((checkpoints / "latest/trainer.json").read_text())["actor"]["env_steps"] == 0


def _sigint_at(monkeypatch: pytest.MonkeyPatch, env_steps: int, times: int) -> None:
    """Ctrl-C ``times`` times when the trainer reaches ``env_steps``."""
    from handrail.learners.loop import Trainer

    step = Trainer.step

    def step_and_interrupt(self: Trainer) -> Any:
        if self.env_steps == env_steps:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)
        return step(self)

    monkeypatch.setattr(Trainer, "step", step_and_interrupt)


def test_a_second_ctrl_c_is_one_line_naming_the_kept_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _sigint_at(monkeypatch, 50, times=2)
    run = tmp_path / "run"
    line = _one_line(capsys, tiny_argv(run), code=130)
    latest = run / "checkpoints" / "latest"
    assert f"interrupted; kept: the checkpoint {latest} at env step 40" in line
    assert f"--resume {run}" in line


def test_ctrl_c_during_the_first_evaluation_saves_there_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from handrail.learners import evaluation

    evaluate = evaluation.evaluate

    def interrupted_evaluation(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", interrupted_evaluation)
    run = tmp_path / "run"
    assert training.train(tiny(run)) == 0
    assert [r["env_steps"] for r in _records(run, "eval")] == [40]
    counters = json.loads((run / "checkpoints/latest/trainer.json").read_text())
    assert counters["actor"]["env_steps"] == 40
    monkeypatch.setattr(evaluation, "evaluate", evaluate)
    assert training.train(dataclasses.replace(tiny(run), resume=run)) == 0
    assert [r["env_steps"] for r in _records(run, "episode")] == [20, 40, 60, 80, 100, 120]


# ---------------------------------------------------------------- a recording run killed


class _Killed(BaseException):
    """Stands for a SIGKILL: raised at a random step or save, with the store left as a killed
    process leaves it (no episode committed after it, nothing trimmed)."""


def _kill_points(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Kill the run at its ``at``-th event (an env step, or a checkpoint save half written)."""
    from handrail.demos.recorder import EpisodeRecorder
    from handrail.learners.loop import Trainer

    plan = {"at": -1, "events": 0}
    step, save, close = Trainer.step, training.save_trainer, EpisodeRecorder.close

    def event() -> None:
        plan["events"] += 1
        if plan["events"] == plan["at"]:
            raise _Killed

    def killable_step(self: Trainer) -> Any:
        event()
        return step(self)

    def killable_save(trainer: Any, recorder: Any, folder: Path, **kwargs: Any) -> None:
        save(trainer, recorder, folder, **kwargs)
        event()  # every file written, the checkpoint not switched to yet

    def close_as_killed(self: EpisodeRecorder) -> None:
        if plan["events"] == plan["at"]:
            self._writer._crash()  # the writer's own stand-in for a kill
        else:
            close(self)

    monkeypatch.setattr(Trainer, "step", killable_step)
    monkeypatch.setattr(training, "save_trainer", killable_save)
    monkeypatch.setattr(EpisodeRecorder, "close", close_as_killed)
    return plan


@pytest.mark.slow
def test_a_recording_run_killed_at_random_points_stores_each_trained_episode_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 kills at random steps and saves, each followed by --resume: the store then holds the
    episodes an uninterrupted run records (same seeds, same actions), none twice, and the run's
    metrics log each once; the store validates."""
    from handrail.demos import open_store
    from handrail.demos.ops import validate_store

    steps = 200
    assert training.train(tiny(tmp_path / "ref", steps=steps, record=tmp_path / "ref_store")) == 0
    plan = _kill_points(monkeypatch)
    run, store = tmp_path / "run", tmp_path / "store"
    config = tiny(run, steps=steps, record=store)
    rng = np.random.default_rng(0)
    kills, resume = 0, False
    while kills < 20:
        done = 0
        if resume:
            counters = json.loads((run / "checkpoints/latest/trainer.json").read_text())
            done = counters["actor"]["env_steps"]
        # At least this many events are left: each step, and a save at the end.
        plan.update(at=int(rng.integers(1, steps - done + 2)), events=0)
        with pytest.raises(_Killed):
            training.train(dataclasses.replace(config, resume=run) if resume else config)
        kills, resume = kills + 1, True
    plan.update(at=-1, events=0)
    assert training.train(dataclasses.replace(config, resume=run)) == 0

    want, got = open_store(tmp_path / "ref_store"), open_store(store)
    assert got.num_episodes == want.num_episodes == steps // 20
    seeds = [r.seed for r in got.episodes]
    assert seeds == [r.seed for r in want.episodes] and len(set(seeds)) == len(seeds)
    mine, theirs = got.load(), want.load()
    assert np.array_equal(mine.action, theirs.action)
    assert np.array_equal(mine.reward, theirs.reward)
    assert [r["env_steps"] for r in _records(run, "episode")] == list(range(20, steps + 1, 20))
    assert validate_store(store) == []
