"""Checkpoints: round trip gives identical actions, clear errors, policy without training code."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import gymnasium as gym
import jax
import numpy as np
import pytest

from handrail.learners.agents.losses import Batch
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_policy,
    read_json,
    save_checkpoint,
    write_checkpoint_dir,
)
from handrail.learners.specs import ActionSpec, ObsSpec

SPACE = gym.spaces.Dict(
    {
        "proprio": gym.spaces.Box(-1, 1, (3,), np.float32),
        "goal": gym.spaces.Box(-1, 1, (2,), np.float32),
    }
)
ACTIONS = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
CONFIG = SACConfig(hidden_dims=(32, 32), num_critics=2, utd=1, batch_size=32)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[SAC, object, Path]:
    sac = SAC(ObsSpec.from_space(SPACE), ActionSpec.from_space(ACTIONS), CONFIG)
    state = sac.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    batch = Batch(
        obs=rng.normal(size=(1, 32, 5)).astype(np.float32),
        action=rng.uniform(-1, 1, (1, 32, 2)).astype(np.float32),
        reward=rng.normal(size=(1, 32)).astype(np.float32),
        discount=np.full((1, 32), 0.99, np.float32),
        next_obs=rng.normal(size=(1, 32, 5)).astype(np.float32),
        online=np.ones((1, 32), bool),
    )
    state, _ = sac.update(state, batch)
    path = save_checkpoint(
        tmp_path_factory.mktemp("ckpt") / "c", state, CONFIG, sac.obs_spec, sac.action_spec,
        extra={"env_steps": 123},
    )  # fmt: skip
    return sac, state, path


def test_round_trip_restores_state_exactly(trained) -> None:
    sac, state, path = trained
    loaded, extra = load_checkpoint(path, sac)
    assert extra == {"env_steps": 123}
    for a, b in zip(
        jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(loaded), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    obs = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)
    key = jax.random.PRNGKey(5)
    np.testing.assert_array_equal(sac.act(state, obs, key), sac.act(loaded, obs, key))


def test_files_are_msgpack_and_json_not_pickle(trained) -> None:
    _, _, path = trained
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "state.msgpack"]
    meta = json.loads((path / "config.json").read_text())
    assert meta["config"]["num_critics"] == 2
    assert set(meta["obs_spec"]["keys"]) == {"proprio", "goal"}
    assert not (path / "state.msgpack").read_bytes().startswith(b"\x80")  # pickle protocol tag


def test_load_policy_gives_the_same_env_actions(trained) -> None:
    sac, state, path = trained
    policy = load_policy(path, deterministic=True)
    obs = {"proprio": np.array([0.1, -0.2, 0.3]), "goal": np.array([0.5, 0.5])}
    expected = sac.action_spec.to_env(
        sac.act(state, sac.obs_spec.flatten(obs), jax.random.PRNGKey(0), deterministic=True)
    )
    action = policy(obs)
    np.testing.assert_allclose(action, expected, rtol=1e-6)
    assert action.shape == (2,) and -2.0 <= action[0] <= 2.0 and 0.0 <= action[1] <= 1.0
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    assert policy(batch).shape == (2, 2)


def test_other_config_is_a_clear_error_naming_fields(trained) -> None:
    _, _, path = trained
    other = SAC(
        ObsSpec.from_space(SPACE),
        ActionSpec.from_space(ACTIONS),
        SACConfig(hidden_dims=(64, 64), num_critics=2, utd=3, batch_size=32),
    )
    with pytest.raises(ValueError, match=r"config\.hidden_dims") as err:
        load_checkpoint(path, other)
    assert "config.utd" in str(err.value) and "num_critics" not in str(err.value)


def test_a_checkpoint_from_before_newer_config_fields_still_loads(tmp_path: Path, trained) -> None:
    """Fields added to SACConfig later (residual_scale, algorithm...) take their defaults."""
    import shutil

    sac, state, path = trained
    old = tmp_path / "old"
    shutil.copytree(path, old)
    meta = json.loads((old / "config.json").read_text())
    for name in ("residual_scale", "algorithm", "actor_delay_blocks", "intervention_bc_weight"):
        del meta["config"][name]
    (old / "config.json").write_text(json.dumps(meta))
    loaded, _ = load_checkpoint(old, sac)
    obs = np.zeros((1, 5), np.float32)
    key = jax.random.PRNGKey(0)
    np.testing.assert_array_equal(sac.act(state, obs, key), sac.act(loaded, obs, key))
    assert load_policy(old)({"proprio": np.zeros(3), "goal": np.zeros(2)}).shape == (2,)


def test_not_a_checkpoint_is_a_clear_error(tmp_path: Path, trained) -> None:
    sac, _, _ = trained
    with pytest.raises(ValueError, match="not a handrail checkpoint"):
        load_checkpoint(tmp_path, sac)


def test_a_damaged_or_newer_checkpoint_file_is_named(tmp_path: Path, trained) -> None:
    """Truncated state, garbage or empty config.json, a newer format: CheckpointError (a
    ValueError, so commands print one line) naming the file, never msgpack's or json's words
    alone."""
    sac, _, path = trained
    cases = {
        "state.msgpack": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
        "config.json": lambda p: p.write_text(""),
    }
    for name, spoil in cases.items():
        broken = tmp_path / name
        shutil.copytree(path, broken)
        spoil(broken / name)
        with pytest.raises(CheckpointError, match=rf"{broken / name} is damaged") as err:
            load_checkpoint(broken, sac)
        assert isinstance(err.value, ValueError)
    newer = tmp_path / "newer"
    shutil.copytree(path, newer)
    meta = json.loads((newer / "config.json").read_text())
    (newer / "config.json").write_text(json.dumps({**meta, "format_version": 2}))
    with pytest.raises(CheckpointError, match=r"written by a newer handrail.*upgrade handrail"):
        load_checkpoint(newer, sac)
    with pytest.raises(CheckpointError, match=rf"{tmp_path / 'none.json'} is missing"):
        read_json(tmp_path / "none.json")


# ---------------------------------------------------------------- atomic checkpoint folders


def test_checkpoint_dir_switches_generations_and_cleans_up(tmp_path: Path) -> None:
    link = tmp_path / "checkpoints" / "latest"
    first = write_checkpoint_dir(link, lambda p: (p / "x").write_text("1"))
    assert link.is_symlink() and (link / "x").read_text() == "1"
    (tmp_path / "checkpoints" / ".latest.000099").mkdir()  # a crashed attempt's leftovers
    second = write_checkpoint_dir(link, lambda p: (p / "x").write_text("2"))
    assert (link / "x").read_text() == "2" and second.name == ".latest.000100"
    assert not first.exists() and not (tmp_path / "checkpoints" / ".latest.000099").exists()

    def failing(path: Path) -> None:
        (path / "x").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_checkpoint_dir(link, failing)
    assert (link / "x").read_text() == "2"  # the link still points at the last whole save


def test_a_save_that_fails_leaves_nothing_of_it_behind(tmp_path: Path) -> None:
    """A full disk (or Ctrl-C) in the middle of a save: its folder and link are removed, the
    previous checkpoint is the one the link gives."""
    link = tmp_path / "checkpoints" / "latest"
    write_checkpoint_dir(link, lambda p: (p / "x").write_text("whole"))
    for error in (OSError(28, "No space left on device"), KeyboardInterrupt()):

        def failing(path: Path, error: BaseException = error) -> None:
            (path / "x").write_text("half")
            raise error

        with pytest.raises(type(error)):
            write_checkpoint_dir(link, failing)
        assert (link / "x").read_text() == "whole"
        assert sorted(p.name for p in link.parent.iterdir()) == [link.resolve().name, "latest"]


def test_a_plain_folder_from_an_older_layout_is_adopted(tmp_path: Path) -> None:
    link = tmp_path / "best"
    link.mkdir()
    (link / "x").write_text("old")
    write_checkpoint_dir(link, lambda p: (p / "x").write_text("new"))
    assert link.is_symlink() and (link / "x").read_text() == "new"


class _Crash(BaseException):
    """Stands for a SIGKILL at one call of a save: nothing after it runs."""


def test_a_crash_at_each_step_of_a_save_leaves_the_previous_or_the_new_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file write, fsync, symlink, replace and removal of ``write_checkpoint_dir`` in
    turn is where the process dies; the link always gives one whole save, and the next save
    succeeds and leaves no leftovers."""
    import types

    from handrail.learners import checkpoint as ckpt

    calls = {"n": 0, "crash_at": -1}

    def step(fn):
        def wrapped(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == calls["crash_at"]:
                raise _Crash
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(ckpt, "fsync_paths", step(ckpt.fsync_paths))
    monkeypatch.setattr(ckpt, "fsync_dir", step(ckpt.fsync_dir))
    fake_os = types.SimpleNamespace(
        **{k: getattr(os, k) for k in dir(os) if not k.startswith("__")}
    )
    fake_os.symlink, fake_os.replace = step(os.symlink), step(os.replace)
    monkeypatch.setattr(ckpt, "os", fake_os)
    monkeypatch.setattr(ckpt, "shutil", types.SimpleNamespace(rmtree=step(shutil.rmtree)))

    def fill(tag: str):
        def write(folder: Path) -> None:
            for name in ("a", "b"):
                step((folder / name).write_text)(tag)

        return write

    crashes = 0
    for crash_at in range(1, 100):
        root = tmp_path / f"k{crash_at}"
        link = root / "latest"
        write_checkpoint_dir(link, fill("first"))
        write_checkpoint_dir(link, fill("old"))  # a previous generation to clean up
        calls.update(n=0, crash_at=crash_at)
        try:
            write_checkpoint_dir(link, fill("new"))
        except _Crash:
            crashes += 1
        else:
            break
        finally:
            calls["crash_at"] = -1
        got = {(link / "a").read_text(), (link / "b").read_text()}
        assert got in ({"old"}, {"new"}), (crash_at, got)
        write_checkpoint_dir(link, fill("next"))
        assert (link / "a").read_text() == (link / "b").read_text() == "next"
        assert sorted(p.name for p in root.iterdir()) == sorted(["latest", link.resolve().name])
    assert crashes >= 8, crashes  # two writes, fsyncs, symlink, replace, removals


@pytest.mark.slow
def test_killing_a_saving_process_leaves_the_previous_or_the_new_checkpoint(
    tmp_path: Path,
) -> None:
    """20 SIGKILLs at random moments of a train-and-save loop (each child resumes from what the
    last one left): every time the checkpoint loads, and it is exactly the state an
    uninterrupted run had at its step count, never a mix of two saves. (Every step of a save
    is the crash point in turn in the test above; this one runs the whole path for real.)

    The children are forked from a zygote that has imported everything once, and share a
    persistent compilation cache (``_save_child.py``)."""
    import contextlib
    import signal
    import socket
    import subprocess
    import sys
    import time
    from typing import TextIO

    sys.path.insert(0, str(Path(__file__).parent))
    from _save_setup import make_trainer, state_digest

    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")  # fmt: skip
    folder = tmp_path / "run"
    folder.mkdir()
    control, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "_save_child.py"), str(folder),
         str(zygote_end.fileno())],
        env=env, pass_fds=[zygote_end.fileno()], start_new_session=True,
    )  # fmt: skip
    zygote_end.close()

    def fork(command: str) -> TextIO:  # a child of the zygote; the socket the test talks over
        mine, theirs = socket.socketpair()
        socket.send_fds(control, [command.encode()], [theirs.fileno()])
        theirs.close()
        channel = mine.makefile("rw")
        mine.close()  # the file holds it open
        return channel

    def go(channel: TextIO) -> int:  # waits until the child is built, then lets it go; its pid
        line = channel.readline()
        assert line.startswith("started "), f"a child said {line!r} (its traceback: stderr)"
        channel.write("go\n")
        channel.flush()
        return int(line.split()[1])

    rng = np.random.default_rng(0)
    seen: list[int] = []
    try:
        channel = fork("train")
        resumed = make_trainer()  # load() replaces all of its state, so one serves every check
        pid = go(channel)  # it has compiled: the next children find the cache filled
        # Two children build and compile ahead (a few seconds each) while one trains and saves.
        children = [channel, fork("train"), fork("train")]
        for i in range(20):
            assert channel.readline().strip() == "ready"
            if len(children) <= 20:  # the 20 train-and-save children, then the reference run
                children.append(fork("train" if len(children) < 20 else "reference"))
            time.sleep(float(rng.uniform(0.0, 0.6)))
            os.kill(pid, signal.SIGKILL)
            assert channel.read() == ""  # its socket closed: it is dead
            channel.close()
            resumed.load(folder / "latest")  # raises on a mixed or torn checkpoint
            seen.append(resumed.env_steps)
            assert resumed.env_steps % 10 == 0 and resumed.actor.at_episode_start
            if i < 19:
                channel = children[i + 1]
                pid = go(channel)  # only now may it read the folder
        with children[20] as reference:  # built meanwhile
            reference.write(f"{max(seen)}\n")
            reference.flush()
            steps, digest = reference.readline().split()
        assert int(steps) == resumed.env_steps  # the last save, the furthest
        assert state_digest(resumed) == digest
        assert seen == sorted(seen) and len(set(seen)) > 10  # progress between kills
    finally:
        control.close()  # the zygote leaves; a failure may have left children
        with contextlib.suppress(ProcessLookupError):
            os.killpg(zygote.pid, signal.SIGKILL)
        zygote.wait()
