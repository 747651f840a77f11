"""EpisodeRecorder: Steps in, the same episodes out; a crash loses only the unfinished episode.

Episode contents are generated from the episode's seed, so a checker rebuilds what any
committed episode must hold from its record alone (also for episodes a killed subprocess wrote).
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from handrail.control.step import ActedBy, Step
from handrail.demos import (
    EpisodeData,
    EpisodeRecorder,
    FieldMismatchError,
    FieldSpec,
    create_store,
    open_store,
)
from handrail.demos.ops import validate_store

# Shared by the tests and the recording subprocess (kept as source text so that the subprocess
# needs nothing but handrail): the Steps of an episode are a function of its seed.
GEN_SRC = """
import numpy as np
from handrail.control.step import ActedBy, Step
from handrail.demos import FieldSpec

FIELDS = [FieldSpec("cam", "uint8", (6, 6, 3)), FieldSpec("state", "float32", (3,), "m")]
ACTION_DIM = 2


def make_steps(seed, acted_by, success, *, end="truncated", stamped=True, episode_seed=-1):
    rng = np.random.default_rng(seed)
    n = len(acted_by)
    cam = rng.integers(0, 256, (n + 1, 6, 6, 3), dtype=np.uint8)
    state = rng.standard_normal((n + 1, 3)).astype(np.float32)
    action = rng.uniform(-1, 1, (n, ACTION_DIM)).astype(np.float32)
    proposal = rng.uniform(-1, 1, (n, ACTION_DIM)).astype(np.float32)
    reward = rng.standard_normal(n).astype(np.float32)
    steps = []
    for t in range(n):
        who, last = ActedBy(acted_by[t]), t == n - 1
        steps.append(Step(
            obs={"cam": cam[t], "state": state[t]}, action=action[t], reward=float(reward[t]),
            next_obs={"cam": cam[t + 1], "state": state[t + 1]},
            terminated=last and end == "terminated", truncated=last and end == "truncated",
            success=success[t], policy_action=None if who is ActedBy.POLICY else proposal[t],
            acted_by=who, timestamp=1.7e9 + seed + 0.05 * t if stamped else 0.0,
            episode_seed=seed if episode_seed == -1 else episode_seed))
    return steps


def gen_episode(seed):
    rng = np.random.default_rng([seed, 1])
    n = int(rng.integers(2, 40))
    acted_by = rng.choice(3, n, p=[0.6, 0.3, 0.1])
    success = [None if s < 0.1 else bool(s > 0.8) for s in rng.random(n)]
    return make_steps(seed, acted_by, success, end=("terminated", "truncated")[seed % 2])
"""
G: dict = {}
exec(GEN_SRC, G)
FIELDS: list[FieldSpec] = G["FIELDS"]

RECORD_SCRIPT = (
    GEN_SRC
    + """
import sys
from handrail.demos import EpisodeRecorder
path, base = sys.argv[1], int(sys.argv[2])
with EpisodeRecorder.append(path, obs_fields=FIELDS, action_dim=ACTION_DIM) as rec:
    print("recording", flush=True)
    for i in range(10**6):
        for step in gen_episode(base + i):
            rec.add(step)
        print(base + i, flush=True)  # the recorder took the episode's last step: it is finished
"""
)


def _create(path: Path, **kwargs: object) -> EpisodeRecorder:
    return EpisodeRecorder.create(
        path, obs_fields=FIELDS, action_dim=2, control_dt_s=0.05, task="pick_cube", **kwargs
    )


def _assert_episode(data: EpisodeData, i: int, steps: list[Step]) -> None:
    """Episode ``i`` of ``data`` holds exactly ``steps``, committed whole."""
    rec, start, n = data.records[i], int(data.episode_starts[i]), int(data.episode_lengths[i])
    assert n == len(steps) and not rec.recovered
    rows = slice(start, start + n)
    for name in ("cam", "state"):
        np.testing.assert_array_equal(data.obs[name][rows], np.stack([s.obs[name] for s in steps]))
        np.testing.assert_array_equal(data.final_obs[name][i], steps[-1].next_obs[name])
    np.testing.assert_array_equal(data.action[rows], np.stack([s.action for s in steps]))
    np.testing.assert_array_equal(data.policy_action[rows], np.stack([s.proposed for s in steps]))
    np.testing.assert_array_equal(data.intervention[rows], [int(s.acted_by) for s in steps])
    np.testing.assert_array_equal(data.reward[rows], np.float32([s.reward for s in steps]))
    np.testing.assert_array_equal(data.terminated[rows], [s.terminated for s in steps])
    np.testing.assert_array_equal(data.truncated[rows], [s.truncated for s in steps])
    stamped = [s.timestamp > 0 for s in steps]
    np.testing.assert_array_equal(
        data.timestamp[rows][stamped], [s.timestamp for s in steps if s.timestamp > 0]
    )
    assert rec.seed == steps[0].episode_seed
    assert rec.success == any(s.success for s in steps)  # success: true at any step
    assert rec.num_intervened == sum(s.acted_by is not ActedBy.POLICY for s in steps)


def test_episodes_read_back_as_recorded(tmp_path: Path) -> None:
    path = tmp_path / "s"
    episodes = [
        G["make_steps"](11, [0] * 5, [False, False, False, True, True], end="terminated"),
        # a human takes over twice; success flickers on in the middle and is off at the end
        G["make_steps"](12, [0, 1, 1, 0, 1, 0, 0], [False, False, True, True, False, False, False]),
        G["make_steps"](13, [2, 2, 0], [None, None, None]),  # the env reports no success flag
        G["make_steps"](14, [1, 0], [False, False], stamped=False, episode_seed=None),
    ]
    with _create(path) as rec:
        for steps in episodes:
            assert not rec.episode_open
            for step in steps:
                rec.add(step)
        rec.flush()
        assert rec.num_episodes == 4
    reader = open_store(path)
    data = reader.load()
    assert data.num_episodes == 4 and reader.attrs["kind"] == "rollout"
    for i, steps in enumerate(episodes):
        _assert_episode(data, i, steps)
    assert [r.success for r in data.records] == [True, True, False, False]
    assert [r.seed for r in data.records] == [11, 12, 13, None]
    assert [r.task for r in data.records] == ["pick_cube"] * 4
    assert np.all(data.timestamp[-2:] > 1e9)  # unmeasured (0.0) steps get the recording time
    assert validate_store(path) == []


def test_a_discarded_episode_leaves_no_trace(tmp_path: Path) -> None:
    """A person's "record again": the open episode is thrown away, the next one commits."""
    path = tmp_path / "s"
    kept = G["make_steps"](22, [1, 1, 1], [False, False, True], end="terminated")
    with _create(path) as rec:
        rec.discard()  # between episodes: nothing to drop
        for step in G["make_steps"](21, [1] * 6, [False] * 6)[:4]:
            rec.add(step)
        assert rec.episode_open
        rec.discard()
        assert not rec.episode_open
        for step in kept:
            rec.add(step)
        rec.flush()
    data = open_store(path).load()
    assert data.num_episodes == 1
    _assert_episode(data, 0, kept)
    assert validate_store(path) == []


def test_kind_is_stored_and_checked(tmp_path: Path) -> None:
    with _create(tmp_path / "i", kind="intervention") as rec:
        for step in G["gen_episode"](3):
            rec.add(step)
    assert open_store(tmp_path / "i").attrs["kind"] == "intervention"
    with pytest.raises(ValueError, match="kind='teleop' must be one of"):
        _create(tmp_path / "bad", kind="teleop")
    assert not (tmp_path / "bad").exists()


def test_bad_steps_are_refused_before_anything_is_staged(tmp_path: Path) -> None:
    path = tmp_path / "s"
    steps = G["gen_episode"](5)
    first, last = steps[0], steps[-1]
    with _create(path) as rec:
        with pytest.raises(ValueError, match=r"episode_seed=-3 must be None or an int"):
            rec.add(dataclasses.replace(first, episode_seed=-3))
        assert not rec.episode_open  # the bad first step began nothing
        rec.add(first)
        with pytest.raises(ValueError, match=r"Step.obs is missing field 'cam'.*build the"):
            rec.add(dataclasses.replace(first, obs={"state": first.obs["state"]}))
        with pytest.raises(TypeError, match=r"Step.obs\['cam'\] has dtype float64.*FieldSpec"):
            rec.add(dataclasses.replace(first, obs={**first.obs, "cam": np.zeros((6, 6, 3))}))
        with pytest.raises(ValueError, match=r"Step.obs\['state'\] has shape \(4,\)"):
            rec.add(dataclasses.replace(first, obs={**first.obs, "state": np.zeros(4, "f4")}))
        with pytest.raises(ValueError, match=r"Step.action has shape \(3,\).*width 2"):
            rec.add(dataclasses.replace(first, action=np.zeros(3, np.float32)))
        with pytest.raises(ValueError, match=r"Step.policy_action has shape \(1,\)"):
            rec.add(dataclasses.replace(first, policy_action=np.zeros(1, np.float32)))
        with pytest.raises(ValueError, match=r"Step\.reward is nan"):
            rec.add(dataclasses.replace(first, reward=float("nan")))
        with pytest.raises(ValueError, match="actor_id=0 and got a step from actor_id=1"):
            rec.add(dataclasses.replace(first, actor_id=1))
        for step in steps[1:-1]:
            rec.add(step)
        with pytest.raises(ValueError, match=r"Step\.next_obs is missing field 'state'"):
            rec.add(dataclasses.replace(last, next_obs={"cam": last.next_obs["cam"]}))
        assert rec.episode_open  # the refused last step neither added a row nor ended it
        rec.add(last)
    data = open_store(path).load()
    assert data.num_episodes == 1
    _assert_episode(data, 0, steps)
    assert validate_store(path) == []


def test_appending_with_other_fields_fails_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _create(path) as rec:
        for step in G["gen_episode"](1):
            rec.add(step)
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    other_dtype = [FIELDS[0], FieldSpec("state", "float64", (3,), "m")]
    with pytest.raises(FieldMismatchError, match=r"'state': store has float32\[3\], expected"):
        EpisodeRecorder.append(path, obs_fields=other_dtype)
    with pytest.raises(FieldMismatchError, match=r"missing field 'depth'.*EpisodeRecorder\.create"):
        EpisodeRecorder.append(path, obs_fields=[*FIELDS, FieldSpec("depth", "float32", (4, 4))])
    with pytest.raises(FieldMismatchError, match="actions of width 2, the steps will carry 7"):
        EpisodeRecorder.append(path, obs_fields=FIELDS, action_dim=7)
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == before
    with EpisodeRecorder.append(path, obs_fields=FIELDS, action_dim=2, task="push") as rec:
        for step in G["gen_episode"](2):  # no lock was left behind: appending works
            rec.add(step)
    data = open_store(path).load()
    _assert_episode(data, 0, G["gen_episode"](1))
    _assert_episode(data, 1, G["gen_episode"](2))
    assert [r.task for r in data.records] == ["pick_cube", "push"]


def test_add_only_stages_and_the_background_thread_writes(tmp_path: Path) -> None:
    path = tmp_path / "s"
    writer = create_store(
        path, kind="rollout", obs_fields=FIELDS, action_dim=2, control_dt_s=0.05, task="t"
    )
    main, gate, seen = threading.current_thread(), threading.Event(), []

    def hold_the_flusher(point: str) -> None:
        seen.append((point, threading.current_thread()))
        if threading.current_thread() is not main and not gate.wait(timeout=30):
            gate.set()  # a recorder that waits for the disk in add is stuck here: fail once

    writer.fault_hook = hold_the_flusher  # called before every disk write of the flusher
    steps = G["make_steps"](7, [0, 1] * 150, [False] * 300)  # longer than one staging block
    with EpisodeRecorder(writer) as rec:
        for step in steps:
            rec.add(step)  # returns although the flusher cannot write anything
        assert not rec.episode_open
        assert zarr.open_array(path / "data/action", mode="r").shape[0] == 0  # no row on disk
        assert open_store(path).num_episodes == 0
        gate.set()
        rec.flush()
        assert rec.num_episodes == 1
    assert seen and all(thread is not main for _, thread in seen), seen
    assert {"write_data", "write_meta"} <= {point for point, _ in seen}
    _assert_episode(open_store(path).load(), 0, steps)


def test_keyboard_interrupt_loses_only_the_unfinished_episode(tmp_path: Path) -> None:
    path = tmp_path / "s"
    done = [G["gen_episode"](s) for s in (21, 22)]
    cut = G["gen_episode"](23)
    with pytest.raises(KeyboardInterrupt), _create(path) as rec:
        for step in done[0] + done[1] + cut[: len(cut) // 2]:
            rec.add(step)
        assert rec.episode_open
        raise KeyboardInterrupt
    data = open_store(path).load()
    assert data.num_episodes == 2
    for i, steps in enumerate(done):
        _assert_episode(data, i, steps)
    assert validate_store(path) == []
    with EpisodeRecorder.append(path, obs_fields=FIELDS) as rec:  # the lock was released
        assert rec.num_episodes == 2


def _wait_for_episodes(path: Path, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while open_store(path).num_episodes < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_sigkill_while_recording_keeps_every_committed_episode_whole(tmp_path: Path) -> None:
    path, script = tmp_path / "s", tmp_path / "record.py"
    script.write_text(RECORD_SCRIPT)
    _create(path).close()
    delays = np.random.default_rng(0).uniform(0.0, 0.3, size=6)
    committed = 0
    for k, delay in enumerate(delays):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(path), str(1000 * (k + 1))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            if line == "recording\n":  # it has opened the store (and recovered it)
                _wait_for_episodes(path, committed + 1, timeout_s=30.0)  # progress every round
                time.sleep(float(delay))  # then die anywhere: in add, in a write, in a commit
        finally:
            proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate()
        assert line == "recording\n" and proc.returncode == -signal.SIGKILL, err
        assert validate_store(path) == []
        data = open_store(path).load()
        assert data.num_episodes > committed
        for i in range(committed, data.num_episodes):  # whole, and as generated from the seed
            _assert_episode(data, i, G["gen_episode"](data.records[i].seed))
        committed = data.num_episodes
    with EpisodeRecorder.append(path, obs_fields=FIELDS) as rec:  # recovers, then appends
        for step in G["gen_episode"](99):
            rec.add(step)
    data = open_store(path).load()
    assert data.num_episodes == committed + 1
    _assert_episode(data, committed, G["gen_episode"](99))
    assert validate_store(path) == []


def test_sigkill_loses_at_most_the_last_finished_episode(tmp_path: Path) -> None:
    """Killed at random points, a recording loses its unfinished episode and at most one
    finished one (the recorder lets no more than one finished episode wait for its commit)."""
    path, script = tmp_path / "s", tmp_path / "count.py"
    script.write_text(RECORD_SCRIPT)
    _create(path).close()
    delays = np.random.default_rng(1).uniform(0.2, 1.0, size=6)
    lost = []
    for k, delay in enumerate(delays):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(path), str(1000 * (k + 1))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            ready = proc.stdout.readline() if proc.stdout else ""
            time.sleep(float(delay))  # episodes of 2..40 steps finish far faster than commits
        finally:
            proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate()
        assert ready == "recording\n", err
        finished = {int(line) for line in out.split()}
        committed = {r.seed for r in open_store(path).episodes}
        assert finished, "no episode finished before the kill"
        lost.append(len(finished - committed))
    assert max(lost) <= 1, lost
    assert validate_store(path) == []
