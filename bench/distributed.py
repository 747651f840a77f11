"""``handrail bench distributed``: what Ray costs, how env throughput grows with actors, how fast
a learner comes back, and how stale the actors' params are.

Every figure is measured on one task's preset (reach: UTD 8, 128x128 critics) with the learner's
own settings, on a local Ray runtime (loopback, token), side by side with the one-process
asynchronous trainer (``--loop.mode async``: the same learner, the same UTD, a thread instead of
a process):

- **overhead at 1 actor**: env steps/s and updates/s until ``--steps`` steps are collected and
  every update block they are owed has run, Ray against ``--loop.mode async``;
- **scaling**: total env steps/s with 1, 2 and 4 sim actors, at the preset's UTD and at UTD 1
  (a learner 8x cheaper per step), to show where the learner becomes the bottleneck;
- **learner restart**: seconds from killing the learner until an actor has reconnected to the
  restored one and acts on params fetched from it;
- **params staleness**: at every fetch, how many versions and how many seconds of broadcasts the
  params an actor acted with were behind (p50/p99 over all fetches of the 2-actor run).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro


@dataclass(frozen=True)
class BenchDistributedConfig:
    """Options of ``handrail bench distributed``."""

    task: str = "reach"
    """Task whose preset (SAC and loop settings) every run uses."""
    steps: int = 3_000
    """Env steps per run (warm-up included)."""
    actors: tuple[int, ...] = (1, 2, 4)
    """Actor counts of the scaling rows."""
    out: Path = Path("runs/bench-distributed")
    """Folder for the results (results.json, table.md)."""


def _setup(task: str) -> tuple[Any, Any, Any, Any]:
    from handrail.app.config import preset
    from handrail.app.distributed import _agent
    from handrail.app.envs import learner_specs, make_env

    cfg = preset(task)
    env = make_env(task, **cfg.env)
    sac, _ = _agent(cfg, learner_specs(env, cfg), None)
    return cfg, env, sac, functools.partial(make_env, task, **cfg.env)


def _async_run(cfg: Any, make: Any, sac: Any, steps: int) -> dict[str, float]:
    """The one-process asynchronous trainer: steps/s and updates/s until caught up."""
    from handrail.learners.loop import AsyncTrainer

    trainer = AsyncTrainer(make(), sac, cfg.loop, seed=0)
    trainer.learner.compile()
    start = time.perf_counter()
    trainer.run(steps)
    owed = steps - max(cfg.loop.warmup_steps, 1) + 1
    while trainer.learner.version < owed:
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    trainer.close()
    return {"env_steps_s": steps / seconds, "updates_s": trainer.learner.updates / seconds,
            "seconds": seconds}  # fmt: skip


def _ray_run(cfg: Any, make: Any, sac: Any, env: Any, steps: int, actors: int,
             utd: int | None = None) -> dict[str, Any]:  # fmt: skip
    """N env actors and the learner on Ray: steps/s, updates/s and the staleness they saw."""
    import ray

    from handrail.app.distributed import LEARNER_NAME
    from handrail.learners.agents.sac import SAC
    from handrail.learners.distributed import ray_link
    from handrail.learners.distributed.protocol import env_signature

    if utd is not None:
        sac = SAC(sac.obs_spec, sac.action_spec, dataclasses.replace(sac.config, utd=utd))
    learner = ray_link.start_learner(LEARNER_NAME, sac, cfg.loop, cfg.dist, seed=0,
                                     signature=env_signature(env))  # fmt: skip
    ray.get(learner.stats.remote())
    handles = [ray_link.start_env_actor(f"actor-{i}", make, sac, cfg.dist, LEARNER_NAME,
                                        seed=1_000_000 * (i + 1),
                                        warmup_steps=cfg.loop.warmup_steps // actors)
               for i in range(actors)]  # fmt: skip
    ray.get([h.pid.remote() for h in handles])  # every actor is up (its env made) first
    start = time.perf_counter()
    results = ray.get([h.run.remote(steps) for h in handles])
    ray.get(learner.wait_for.remote(steps, 600))
    seconds = time.perf_counter() - start
    stats = ray.get(learner.stats.remote())
    ray.get(learner.close.remote())
    for handle in [*handles, learner]:
        ray.kill(handle, no_restart=True)
    staleness = [s for r in results for s in r.staleness[1:]]  # the first fetch is the first
    return {"env_steps_s": stats["steps"] / seconds, "updates_s": stats["updates"] / seconds,
            "seconds": seconds, "steps": stats["steps"], "dropped": stats["dropped"],
            "staleness": staleness}  # fmt: skip


def _restart_run(cfg: Any, make: Any, sac: Any, env: Any, steps: int) -> float:
    """Seconds from killing the learner until an actor acts on params of the restored one."""
    import ray

    from handrail.app.distributed import LEARNER_NAME
    from handrail.learners.distributed import ray_link
    from handrail.learners.distributed.protocol import ActorService, env_signature

    folder = Path(tempfile.mkdtemp(prefix="handrail-bench-restart-"))
    dist = dataclasses.replace(cfg.dist, checkpoint_every=max(steps // 3, 1))
    learner = ray_link.start_learner(LEARNER_NAME, sac, cfg.loop, dist, seed=0, folder=folder,
                                     signature=env_signature(env))  # fmt: skip
    ray.get(learner.stats.remote())
    service = ActorService(make(), sac, dist, ray_link.link(learner), seed=1, name="timed",
                           warmup_steps=cfg.loop.warmup_steps)  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(10**9, stop.is_set), daemon=True)
    thread.start()
    sender = service.sender
    while sender.learner_steps < steps // 2:
        time.sleep(0.05)
    fetches = len(sender.stats.staleness)
    killed = time.perf_counter()
    ray.kill(learner, no_restart=False)
    while sender.stats.reconnects == 0 or len(sender.stats.staleness) <= fetches:
        if time.perf_counter() - killed > 300:
            raise RuntimeError("the learner did not come back within 300 s")
        time.sleep(0.01)
    seconds = time.perf_counter() - killed
    stop.set()
    thread.join(timeout=60)
    ray.kill(learner, no_restart=True)
    return seconds


def _percentiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def bench_distributed(config: Annotated[BenchDistributedConfig, tyro.conf.arg(name="")]) -> int:
    """Run the distributed benchmark; print the table and write it into ``--out``."""
    from handrail.app.distributed import ray_runtime

    cfg, env, sac, make = _setup(config.task)
    out: dict[str, Any] = {"task": config.task, "steps": config.steps, "utd": sac.config.utd,
                           "cpus": os.cpu_count()}  # fmt: skip
    print(f"bench distributed: --loop.mode async, {config.steps} steps", file=sys.stderr)
    out["async"] = _async_run(cfg, make, sac, config.steps)
    with ray_runtime(None, cpus=max(config.actors) + 2):
        rows = {}
        for utd in (None, 1):
            for n in config.actors:
                label = f"{n} actors, UTD {utd or sac.config.utd}"
                print(f"bench distributed: Ray, {label}", file=sys.stderr)
                rows[label] = _ray_run(cfg, make, sac, env, config.steps, n, utd)
        print("bench distributed: learner restart", file=sys.stderr)
        out["restart_s"] = _restart_run(cfg, make, sac, env, config.steps)
    out["ray"] = {k: {kk: vv for kk, vv in v.items() if kk != "staleness"} for k, v in rows.items()}
    two = rows.get(f"2 actors, UTD {sac.config.utd}") or next(iter(rows.values()))
    versions = [float(v) for v, _ in two["staleness"]]
    seconds = [1000.0 * s for _, s in two["staleness"]]
    out["staleness"] = {"versions_p50_p99": _percentiles(versions),
                        "ms_p50_p99": _percentiles(seconds), "fetches": len(versions)}  # fmt: skip
    table = _table(out)
    print(table)
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "results.json").write_text(json.dumps(out, indent=1))
    (config.out / "table.md").write_text(table + "\n")
    return 0


def _table(out: dict[str, Any]) -> str:
    base = out["async"]
    lines = [
        "| run | env steps/s | updates/s | vs --loop.mode async (env steps/s) |",
        "|---|---|---|---|",
        f"| --loop.mode async, UTD {out['utd']} | {base['env_steps_s']:.0f} | "
        f"{base['updates_s']:.0f} | 1.00x |",
    ]
    for label, row in out["ray"].items():
        ratio = row["env_steps_s"] / base["env_steps_s"]
        lines.append(f"| Ray, {label} | {row['env_steps_s']:.0f} | {row['updates_s']:.0f} | "
                     f"{ratio:.2f}x |")  # fmt: skip
    st = out["staleness"]
    lines += [
        "",
        f"learner restart: {out['restart_s']:.1f} s from the kill until an actor acts on the "
        "restored learner's params",
        f"params staleness at each fetch (2 actors, {st['fetches']} fetches): p50/p99 "
        f"{st['versions_p50_p99'][0]:.0f}/{st['versions_p50_p99'][1]:.0f} versions, "
        f"{st['ms_p50_p99'][0]:.0f}/{st['ms_p50_p99'][1]:.0f} ms",
    ]
    return "\n".join(lines)
