"""Actors and learner on a real local Ray runtime (loopback only, token required): faults,
counts, bad input. The protocol without Ray: tests/learners/test_distributed.py."""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import pytest

from handrail.app.config import preset
from handrail.app.distributed import LEARNER_NAME, check_address, ray_runtime
from handrail.app.envs import make_env
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.distributed import ray_link
from handrail.learners.distributed.protocol import DistConfig, env_signature
from handrail.learners.learner import LoopConfig
from handrail.learners.specs import ActionSpec, ObsSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_killed_actor_and_learner_come_back_and_every_step_counts_once(tmp_path: Path) -> None:
    env = make_env("reach")
    sac = SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
              SACConfig.cpu(hidden_dims=(32, 32), batch_size=32, utd=1))  # fmt: skip
    loop = LoopConfig(warmup_steps=100, normalize_obs=False)
    dist = DistConfig(send_every=8, checkpoint_every=300, max_lead=50)
    total = 1500
    with ray_runtime(None, cpus=2) as address:
        import ray  # after ray_runtime: it asks for token authentication before Ray loads

        assert address.startswith("127.0.0.1:")  # loopback only
        learner = ray_link.start_learner(LEARNER_NAME, sac, loop, dist, seed=0, folder=tmp_path,
                                         signature=env_signature(env))  # fmt: skip
        ray.get(learner.stats.remote())
        make = functools.partial(make_env, "reach")
        actors = [ray_link.start_env_actor(f"actor-{i}", make, sac, dist, LEARNER_NAME,
                                           seed=1000 * i, warmup_steps=50) for i in range(2)]  # fmt: skip
        runs = {a.run.remote(total): a for a in actors}

        def steps() -> int:
            return ray.get(learner.stats.remote(), timeout=60)["steps"]

        def wait_until(n: int) -> None:
            end = time.monotonic() + 240
            while time.monotonic() < end:
                try:
                    if steps() >= n:
                        return
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    pass
                time.sleep(0.2)
            raise AssertionError(f"the learner never reached {n} steps")

        wait_until(400)
        ray.kill(actors[0], no_restart=False)  # Ray restarts it; its run call fails
        wait_until(700)  # past a checkpoint (300 steps apart)
        ray.kill(learner, no_restart=False)  # restarts from its latest checkpoint
        time.sleep(1.0)
        wait_until(total)
        stats = []
        for future, actor in runs.items():
            try:
                stats.append(ray.get(future))
            except ray.exceptions.RayActorError:  # the killed actor: run it on to the end
                stats.append(ray.get(actor.run.remote(total)))
        ray.get(learner.wait_for.remote(total, 120))
        final = ray.get(learner.stats.remote())
        ray.get(learner.close.remote())
    assert final["steps"] >= total
    acked = sum(r["acked"] for r in final["actors"].values())
    # Every step the learner holds was acknowledged once, and nothing was dropped silently:
    # steps taken = held + counted as dropped (lost with the learner after its checkpoint and
    # no longer held by the actor) + the killed actor's steps that never left it.
    assert final["steps"] == acked - final["dropped"]
    assert [s.reconnects for s in stats].count(0) <= 1  # the live actor found the learner back
    events = [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").open()]
    assert "actor actor-0 restarted as 0" in events
    assert any(e.startswith("learner restored from its checkpoint at") for e in events)


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


def test_two_actors_train_reach_as_local_training_does_with_an_actor_killed(tmp_path: Path) -> None:
    """reach's preset with two env actors on Ray reaches the 90% that local training reaches
    (tests/learners/test_learning.py), though one actor is killed mid-run (Ray restarts it)."""
    import threading

    from handrail.app.training import train

    config = preset("reach", actors=2, run_dir=tmp_path / "run", stop_at_success=0.9,
                    progress=False, steps=8_000, seed=0, eval_every=1_000, eval_episodes=20)  # fmt: skip
    killed: list[int] = []

    def kill_an_actor() -> None:  # once the run is under way: the driver must restart it
        metrics = tmp_path / "run" / "metrics.jsonl"
        end = time.monotonic() + 300
        while time.monotonic() < end and not killed:
            if metrics.exists() and '"episode"' in metrics.read_text():
                import ray  # loaded by train's runtime by now (which asks for token auth)

                ray.kill(ray.get_actor("actor-0", namespace=ray_link.NAMESPACE), no_restart=False)
                killed.append(1)
            time.sleep(0.5)

    thread = threading.Thread(target=kill_an_actor, daemon=True)
    thread.start()
    assert train(config) == 0
    thread.join(timeout=5)
    assert killed
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    evals = [r for r in map(json.loads, lines) if r["kind"] == "eval"]
    best = max(r["success_rate"] for r in evals)
    assert best >= 0.9, f"reach on 2 actors: best eval {best:.0%} by {evals[-1]['env_steps']} steps"
    events = [json.loads(line)["event"] for line in (tmp_path / "run" / "events.jsonl").open()]
    assert "actor-0 died; Ray restarted it, and it goes on" in events
    assert "actor actor-0 restarted as 0" in events
    assert (tmp_path / "run" / "checkpoints" / "best" / "state.msgpack").is_file()
