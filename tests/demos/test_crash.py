"""Crash safety: a fault at every commit-protocol step, random SIGKILLs, a concurrent reader.

After any crash: every committed episode reads back identical, no uncommitted row is visible,
and appending works again. Episode contents are generated from the episode's seed, so a checker
can rebuild what any episode must hold from its record alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from handrail.demos import StoreError, create_store, open_store, open_writer
from handrail.demos.commit import COMMIT_POINTS

# Shared by the test and the writer subprocess: the content of an episode is a function of its
# seed. Kept as source text so the subprocess needs nothing but handrail.demos.
GEN_SRC = """
import numpy as np
from handrail.demos import FieldSpec

FIELDS = [FieldSpec("state", "float32", (5,), "m"), FieldSpec("cam", "uint8", (8, 8, 3))]
ACTION_DIM = 2


def gen_episode(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400 if seed < 1000 else 150))  # shorter for the SIGKILL writers
    obs = {"state": rng.standard_normal((n + 1, 5)).astype(np.float32),
           "cam": rng.integers(0, 256, (n + 1, 8, 8, 3), dtype=np.uint8)}
    return {"n": n, "obs": obs, "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            "intervention": (rng.random(n) < 0.2).astype(np.int8),
            "reward": rng.standard_normal(n).astype(np.float32), "success": bool(seed % 2)}


def write_episode(writer, seed, wait=True):
    ep = gen_episode(seed)
    writer.begin_episode(seed=seed)
    for t in range(ep["n"]):
        writer.add_step(obs={k: v[t] for k, v in ep["obs"].items()}, action=ep["action"][t],
                        intervention=int(ep["intervention"][t]), reward=float(ep["reward"][t]),
                        terminated=False, truncated=t == ep["n"] - 1, timestamp=float(t))
    writer.end_episode(final_obs={k: v[ep["n"]] for k, v in ep["obs"].items()},
                       success=ep["success"], wait=wait)
    return ep
"""
G: dict = {}
exec(GEN_SRC, G)

WRITER_SCRIPT = (
    GEN_SRC
    + """
import json, sys, time
from handrail.demos import StoreLockedError, open_writer
path, mode, base = sys.argv[1], sys.argv[2], int(sys.argv[3])
while True:  # started early (imports overlap the previous writer), waits for its death
    try:
        writer = open_writer(path, recover=mode)
        break
    except StoreLockedError:
        time.sleep(0.005)
print(json.dumps(writer.recovery), flush=True)
for i in range(10**6):
    write_episode(writer, base + i, wait=i % 3 != 0)
"""
)


def _new_store(path: Path) -> None:
    create_store(
        path, kind="rollout", obs_fields=G["FIELDS"], action_dim=2, control_dt_s=0.05, task="t"
    ).close()


def _check_store(path: Path, verified: int = 0) -> int:
    """Every committed episode (from ``verified`` on) equals its regenerated content."""
    reader = open_store(path)
    data = reader.load(episodes=range(verified, reader.num_episodes))
    assert data.num_steps == sum(r.num_steps for r in data.records)
    for i, rec in enumerate(data.records):
        ep = G["gen_episode"](rec.seed)
        s, n = data.episode_starts[i], data.episode_lengths[i]
        if rec.recovered:  # kept up to the last stored step, then cut: a prefix, truncated
            assert 1 <= n < ep["n"] and data.truncated[s + n - 1] and not rec.success
        else:
            assert n == ep["n"] and rec.success == ep["success"]
            np.testing.assert_array_equal(data.final_obs["state"][i], ep["obs"]["state"][n])
        for name in ("state", "cam"):
            np.testing.assert_array_equal(data.obs[name][s : s + n], ep["obs"][name][:n])
        np.testing.assert_array_equal(data.action[s : s + n], ep["action"][:n])
        np.testing.assert_array_equal(data.reward[s : s + n], ep["reward"][:n])
        assert rec.num_intervened == int(np.count_nonzero(ep["intervention"][:n]))
        assert rec.num_intervened == int(np.count_nonzero(data.intervention[s : s + n]))
    return reader.num_episodes


class Injected(Exception):
    pass


@pytest.mark.parametrize("recover", ["drop", "truncate"])
@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_fault_at_each_commit_point(tmp_path: Path, point: str, recover: str) -> None:
    path = tmp_path / "s"
    _new_store(path)
    w = open_writer(path)
    G["write_episode"](w, 1)
    G["write_episode"](w, 2)
    seed = next(s for s in range(100, 1000) if G["gen_episode"](s)["n"] > 300)
    ep = G["gen_episode"](seed)  # long enough that one full block is written early
    w.begin_episode(seed=seed)
    for t in range(300):
        w.add_step(
            obs={k: v[t] for k, v in ep["obs"].items()},
            action=ep["action"][t],
            intervention=int(ep["intervention"][t]),
            reward=float(ep["reward"][t]),
            terminated=False,
            truncated=False,
            timestamp=float(t),
        )
    w.flush()  # the first full block (256 rows) is on disk, uncommitted

    def hook(name: str) -> None:
        if name == point:
            raise Injected(name)

    w.fault_hook = hook
    with pytest.raises(StoreError, match="Injected"):
        w.end_episode(final_obs={k: v[300] for k, v in ep["obs"].items()}, success=True)
    w._crash()  # die here: no cleanup, no trim
    committed = COMMIT_POINTS.index(point) > COMMIT_POINTS.index("replace_record")
    reader = open_store(path)
    assert reader.num_episodes == (3 if committed else 2)
    raw = zarr.open_array(path / "data/action", mode="r").shape[0]
    assert raw >= 300 + reader.episodes[0].num_steps  # uncommitted rows exist on disk, unseen
    if committed:
        assert reader.episodes[2].num_steps == 300 and reader.episodes[2].seed == seed
    else:
        assert _check_store(path) == 2
    w2 = open_writer(path, recover=recover)
    assert not list(path.rglob("*.handrail-tmp")) and not list(path.rglob("*.partial"))
    if committed:
        assert w2.recovery["action"] == "none"
    elif recover == "truncate":
        assert w2.recovery == {"action": "truncated", "episode": 2, "steps": 255}
        rec = open_store(path).episodes[2]
        assert rec.recovered and rec.num_steps == 255 and rec.seed == seed
    else:
        assert w2.recovery == {"action": "dropped", "episode": 2, "steps": 256}
    G["write_episode"](w2, 7)
    w2.close()
    reader = open_store(path)
    assert reader.episodes[-1].seed == 7
    assert zarr.open_array(path / "data/action", mode="r").shape[0] == reader.num_steps
    if not committed:
        _check_store(path)


def _start_writer(path: Path, script: Path, mode: str, base: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), str(path), mode, str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_episodes(path: Path, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while open_store(path).num_episodes < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_random_sigkills_lose_nothing_committed(tmp_path: Path) -> None:
    path, script = tmp_path / "s", tmp_path / "writer.py"
    script.write_text(WRITER_SCRIPT)
    _new_store(path)
    rng = np.random.default_rng(0)
    verified, recoveries = 0, []
    nxt = _start_writer(path, script, "drop", base=1000)
    for k in range(20):
        proc = nxt
        line = proc.stdout.readline()  # the writer has recovered and holds the lock
        if k < 19:  # the next writer imports meanwhile, then waits for the lock
            nxt = _start_writer(path, script, ("drop", "truncate")[(k + 1) % 2], 1000 * (k + 2))
        assert line, proc.stderr.read()
        recoveries.append(json.loads(line)["action"])
        _wait_for_episodes(path, verified + 1, timeout_s=10.0)  # progress in every round
        time.sleep(float(rng.uniform(0.0, 0.3)))  # then die anywhere in the protocol
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        reader = open_store(path)  # committed data only, even with the tail left behind
        assert reader.num_episodes >= verified
        verified = _check_store(path, verified)
    with open_writer(path, recover="truncate") as w:  # appending works after all that
        kept = w.recovery["action"] == "truncated"
        G["write_episode"](w, 99)
    assert _check_store(path) == verified + kept + 1  # all of it, checked once more
    assert set(recoveries) <= {"none", "dropped", "truncated"}
    assert open_store(path).num_episodes >= 21


def test_reader_in_another_process_sees_only_committed_data(tmp_path: Path) -> None:
    path, script = tmp_path / "s", tmp_path / "writer.py"
    script.write_text(WRITER_SCRIPT)
    _new_store(path)
    proc = _start_writer(path, script, "drop", base=5000)
    try:
        assert proc.stdout.readline()
        deadline, seen, checks = time.monotonic() + 3.0, 0, 0
        while time.monotonic() < deadline:
            reader = open_store(path)
            assert reader.num_episodes >= seen
            seen = _check_store(path, max(0, seen - 1))  # newest episodes, re-read each time
            checks += 1
        assert seen > 0 and checks > 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert os.path.exists(path / "zarr.json")
