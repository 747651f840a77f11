"""Actors and learner on a real local Ray runtime (loopback only, token required): faults,
counts, bad input. The protocol without Ray: tests/learners/test_distributed.py."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from handrail.app.config import preset
from handrail.learners.distributed.protocol import DistConfig
from handrail.learners.distributed.ray_link import check_address

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_an_unreachable_address_fails_in_one_line_before_any_work() -> None:
    with pytest.raises(ValueError, match=r"--ray-address 127.0.0.1:9: nothing answers there"):
        check_address("127.0.0.1:9")
    with pytest.raises(ValueError, match="give HOST:PORT"):
        check_address("localhost")


def test_train_with_actors_refuses_options_it_cannot_take(tmp_path: Path) -> None:
    from handrail.app.training import train

    config = preset("reach", actors=2, human="simulated", run_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="--actors 2: not with --human simulated"):
        train(config)
    assert not (tmp_path / "run").exists()


def test_two_actors_train_reach_as_local_training_does_though_actor_and_learner_die(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reach's preset with two env actors on Ray reaches the 90% that local training reaches
    (tests/learners/test_learning.py), though an actor and then the learner are killed mid-run:
    Ray restarts both, the learner from its checkpoint, and the actors find it back. Every step
    the learner holds was acknowledged once; what it lost and the actors no longer held is
    counted as dropped. (The protocol's cases one by one: tests/learners/test_distributed.py.)"""
    import threading

    from handrail.app.training import train

    # Ray's processes share a compilation cache: the learner Ray restarts loads its update step
    # instead of compiling it again while the actors wait (this process's JAX is already set up).
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax_cache"))
    # The first evaluation comes after both kills (the learner dies past 1,200 steps): with
    # each actor on its own episodes, 1,000 steps were once enough to stop before it.
    config = preset("reach", actors=2, run_dir=tmp_path / "run", stop_at_success=0.9,
                    progress=False, steps=8_000, seed=0, eval_every=2_000, eval_episodes=20,
                    dist=DistConfig(checkpoint_every=500))  # fmt: skip
    killed: list[str] = []
    events_path = tmp_path / "run" / "events.jsonl"

    def pid_of(prefix: str) -> int | None:  # the event log names each process
        lines = events_path.read_text().splitlines() if events_path.exists() else []
        found = [json.loads(line)["event"] for line in lines]
        match = [e for e in found if e.startswith(prefix) and "(pid " in e]
        return int(match[-1].split("(pid ")[1].split()[0]) if match else None

    def killer() -> None:  # SIGKILL, as a crash or an OOM kill would
        metrics = tmp_path / "run" / "metrics.jsonl"
        end = time.monotonic() + 600
        while time.monotonic() < end and len(killed) < 2:
            steps = max((json.loads(line)["env_steps"] for line in metrics.open()
                         if '"episode"' in line), default=0) if metrics.exists() else 0  # fmt: skip
            if not killed and steps > 0 and (pid := pid_of("actor actor-0 ")):
                os.kill(pid, signal.SIGKILL)
                killed.append(f"actor-0 after {steps} steps")
            elif len(killed) == 1 and steps > 1_200 and (pid := pid_of("learner ")):
                os.kill(pid, signal.SIGKILL)  # past two learner checkpoints
                killed.append(f"the learner after {steps} steps")
            time.sleep(0.5)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    assert train(config) == 0
    thread.join(timeout=5)
    assert len(killed) == 2, killed
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evals = [r for r in records if r["kind"] == "eval"]
    best = max(r["success_rate"] for r in evals)
    assert best >= 0.9, f"reach on 2 actors: best eval {best:.0%} by {evals[-1]['env_steps']} steps"
    final = [r for r in records if r["kind"] == "distributed"][-1]
    assert final["env_steps"] == sum(final["actors"].values()) - final["dropped"]
    events = [json.loads(line)["event"] for line in (tmp_path / "run" / "events.jsonl").open()]
    assert "actor-0 died; Ray restarted it, and it goes on" in events
    assert any(e.startswith("actor actor-0 restarted as") for e in events)
    assert any(e.startswith("learner restored from its checkpoint at") for e in events)
    assert (tmp_path / "run" / "checkpoints" / "best" / "state.msgpack").is_file()
