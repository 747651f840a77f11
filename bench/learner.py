"""``handrail bench learner``: handrail's SAC loop side by side with SBX and SB3.

Every measurement runs in a fresh Python process pinned (``os.sched_setaffinity``, before JAX
or torch are imported) to the same CPU set, and torch gets one intra-op thread per pinned CPU
(``torch.set_num_threads``, see below). JAX (handrail and SBX) sizes its CPU thread pool from the
affinity mask. So all three learners see exactly the same cores; torch additionally gets
``--torch-threads`` intra-op threads (default 1: on a shared 2-core machine torch with 2
threads collapses, 1 is steadier, see REFERENCE.md).

Same network sizes (actor and critics ``hidden``), same batch, 2 critics, no LayerNorm for the
head-to-head rows; random warm-up, then one env step + ``utd`` gradient steps per env step
(SB3/SBX: ``train_freq=1, gradient_steps=utd``; note SB3/SBX update the actor at every
gradient step, handrail once per block as RLPD does). The RLPD row is handrail with 10
LayerNorm critics, subset 2, UTD 20.

The last column is the matmul floor of each row: the update's matmul FLOPs (``update_gflop``)
at the rate this CPU reaches on one jitted (batch x width) @ (width x width) matmul, measured in
the same pinned setting. No implementation of the same update goes below it, so it bounds the
speed-up a learner can get from removing per-step overhead.

``--platform cuda`` runs the learners' math on the first GPU instead (JAX for handrail and SBX,
torch for SB3; the envs still step on the pinned CPUs); the floor is then the GPU's rate at the
same matmul size, which at these sizes is set by kernel launches, not by FLOPs.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from handrail.bench.learner_report import (
    print_table,
    replay_bytes_lines,
)

if TYPE_CHECKING:  # the peers, imported when they run
    import sbx
    import stable_baselines3

LEARNERS = ("handrail", "sbx", "sb3")
"""Learners the bench knows."""
PLATFORMS = ("cpu", "cuda")
"""Where the learners compute (JAX's platform names)."""


PIXELS = ":pixels"
"""An env name ending so (``pick_cube:pixels``) adds the wrist and front cameras at 64x64 to the
task's state: handrail learns from them end to end with the encoder ``handrail train --pixels``
gives (:data:`~handrail.app.presets.PIXELS`), SB3 with its ``MultiInputPolicy`` (a NatureCNN
per camera beside the state; SBX has no image policy)."""
CAMERAS: dict[str, Any] = {"cameras": ("front", "wrist"), "image_size": 64}


def _make_env(name: str, flatten: bool) -> Any:
    import gymnasium as gym

    from handrail.app.envs import make_env

    pixels = name.endswith(PIXELS)
    env = make_env(name.removesuffix(PIXELS), **(CAMERAS if pixels else {}))
    if flatten and not pixels and isinstance(env.observation_space, gym.spaces.Dict):
        env = gym.wrappers.FlattenObservation(env)
    return env


def _obs_spec(env: Any) -> Any:
    from handrail.learners.specs import ObsSpec

    return ObsSpec.from_space(env.observation_space, images=True)


def _dims(env: Any) -> dict[str, float]:
    """Flat observation and action sizes, as handrail's specs count them."""
    from handrail.learners.specs import ActionSpec

    return {
        "obs_dim": _obs_spec(env).dim,
        "action_dim": ActionSpec.from_space(env.action_space).dim,
    }


def _run_handrail(spec: dict[str, Any]) -> dict[str, float]:
    from handrail.learners.agents.sac import SAC, SACConfig
    from handrail.learners.learner import LoopConfig
    from handrail.learners.loop import AsyncTrainer, Trainer
    from handrail.learners.specs import ActionSpec

    env = _make_env(spec["env"], flatten=False)
    cfg = SACConfig(
        hidden_dims=tuple(spec["hidden"]),
        num_critics=spec["num_critics"],
        critic_subset=2,
        critic_layer_norm=spec["layer_norm"],
        utd=spec["utd"],
        batch_size=spec["batch"],
        **(_pixel_encoder(twice=spec["learner"] == "handrail-twice")
           if spec["env"].endswith(PIXELS) else {}),
    )  # fmt: skip
    sac = SAC(_obs_spec(env), ActionSpec.from_space(env.action_space), cfg)
    capacity = spec["warmup"] + spec["steps"] + 100
    loop = LoopConfig(warmup_steps=spec["warmup"], buffer_capacity=capacity)
    if spec["learner"] == "handrail-async":
        return _run_async(AsyncTrainer(env, sac, loop, seed=0), spec)
    trainer = Trainer(env, sac, loop, seed=0)
    trainer.run(spec["warmup"] + 3)  # warm-up plus the first updates (compilation)
    start = time.perf_counter()
    trainer.run(spec["steps"])
    seconds = time.perf_counter() - start
    update_ms = _update_only_ms(sac, trainer.state, max(10, spec["steps"] // spec["utd"]))
    return {"seconds": seconds, "update_only_ms": update_ms, **_dims(env)}


def _pixel_encoder(twice: bool = False) -> dict[str, Any]:
    """The image encoder of ``handrail train --pixels`` (its preset layer's ``image_*``);
    ``twice``: with the target encoder read and the actor's frames encoded again (RLPD's and
    SERL's accounting, ``--sac.no-image-encode-once``)."""
    from handrail.app.presets import PIXELS as LAYER

    encoder = {k: v for k, v in LAYER["sac"].items() if k.startswith("image_")}
    return {**encoder, "image_encode_once": False} if twice else encoder


def _run_async(trainer: Any, spec: dict[str, Any]) -> dict[str, float]:
    """The actor's env steps/s (it never waits), and the learner thread's updates/s from the
    same start until it has run every block owed for those steps."""
    trainer.run(spec["warmup"] + 3)
    while trainer.learner.version < 4:  # the learner thread compiles its first blocks
        time.sleep(0.05)
    start, version, updates = time.perf_counter(), trainer.learner.version, trainer.updates
    trainer.run(spec["steps"])
    seconds = time.perf_counter() - start
    while trainer.learner.version < version + spec["steps"]:
        time.sleep(0.005)
    learner_seconds = time.perf_counter() - start
    trainer.close()
    return {"seconds": seconds, "learner_seconds": learner_seconds,
            "updates": trainer.updates - updates, **_dims(trainer.actor.env)}  # fmt: skip


def _update_only_ms(sac: Any, state: Any, calls: int) -> float:
    """ms per gradient update of the jitted update block alone: no env, replay or acting.

    Timed as the best of 5 chunks of ``calls // 5`` calls.
    """
    import jax
    import numpy as np

    from handrail.learners.agents.losses import Batch

    cfg, rng = sac.config, np.random.default_rng(0)
    shape = (cfg.utd, cfg.batch_size)
    normal = lambda *dims: rng.normal(size=(*shape, *dims)).astype(np.float32)  # noqa: E731
    batch = jax.device_put(Batch(
        obs=normal(sac.obs_spec.dim), action=np.tanh(normal(sac.action_spec.dim)),
        reward=normal(), discount=np.full(shape, cfg.gamma, np.float32),
        next_obs=normal(sac.obs_spec.dim), online=np.ones(shape, bool),
    ))  # fmt: skip
    state, metrics = sac.update(state, batch)  # compiles
    jax.block_until_ready(metrics)
    best, chunk = float("inf"), max(1, calls // 5)
    for _ in range(5):  # the VM jitters by 30%; the low side is the generous one for a bound
        start = time.perf_counter()
        for _ in range(chunk):
            state, metrics = sac.update(state, batch)
        jax.block_until_ready(metrics)
        best = min(best, (time.perf_counter() - start) / chunk)
    return 1e3 * best / cfg.utd


def _run_peer(spec: dict[str, Any]) -> dict[str, float]:
    from stable_baselines3.common.callbacks import BaseCallback

    peer_sac: type[stable_baselines3.SAC] | type[sbx.SAC]  # one constructor, unrelated classes
    if spec["learner"] == "sb3":
        import torch
        from stable_baselines3 import SAC as Sb3SAC

        torch.set_num_threads(spec["torch_threads"])
        peer_sac, extra = Sb3SAC, {"device": spec.get("platform", "cpu")}
    else:
        from sbx import SAC as SbxSAC

        peer_sac, extra = SbxSAC, {}
    first, last = spec["warmup"] + 3, spec["warmup"] + 3 + spec["steps"]
    marks: dict[int, float] = {}

    class Clock(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps in (first, last):
                marks[self.num_timesteps] = time.perf_counter()
            return self.num_timesteps < last

    model = peer_sac(
        "MultiInputPolicy" if spec["env"].endswith(PIXELS) else "MlpPolicy",
        _make_env(spec["env"], flatten=True),
        learning_starts=spec["warmup"],
        batch_size=spec["batch"],
        train_freq=1,
        gradient_steps=spec["utd"],
        buffer_size=last + 100,
        policy_kwargs={"net_arch": list(spec["hidden"])},
        seed=0,
        verbose=0,
        **extra,
    )
    model.learn(total_timesteps=last + 10, callback=Clock())
    return {"seconds": marks[last] - marks[first], **_dims(model.get_env())}


def _mlp_gflop(dims: list[int], batch: int) -> float:
    return 2e-9 * batch * sum(a * b for a, b in itertools.pairwise(dims))


def update_gflop(spec: dict[str, Any], obs_dim: int, action_dim: int) -> float:
    """Matmul GFLOP of one gradient update (the floor no implementation can go under).

    A critic step is the forward and backward (twice the forward: weight and input gradients)
    of every critic, plus the target: the actor's forward on next_obs and 2 critics' forward.
    An actor step is the actor's forward and backward plus every critic's forward and input
    gradient. handrail runs one actor step per UTD block, SBX and SB3 one per gradient step.
    """
    critic = _mlp_gflop([obs_dim + action_dim, *spec["hidden"], 1], spec["batch"])
    actor = _mlp_gflop([obs_dim, *spec["hidden"], 2 * action_dim], spec["batch"])
    critic_step = 3 * spec["num_critics"] * critic + actor + 2 * critic
    actor_step = 3 * actor + 2 * spec["num_critics"] * critic
    per_block = spec["utd"] if spec["learner"].startswith("handrail") else 1
    return critic_step + actor_step / per_block


def _matmul_gflop_s(spec: dict[str, Any]) -> dict[str, float]:
    """Best jitted (batch x width) @ (width x width) float32 rate: the CPU's rate at this size."""
    import jax
    import jax.numpy as jnp

    width = max(spec["hidden"])
    x, w = jnp.ones((spec["batch"], width)), jnp.ones((width, width))
    matmul = jax.jit(lambda a, b: a @ b)
    matmul(x, w).block_until_ready()
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        for _ in range(50):
            out = matmul(x, w)
        out.block_until_ready()
        best = min(best, (time.perf_counter() - start) / 50)
    return {"gflop_s": 2e-9 * spec["batch"] * width * width / best}


def _worker(spec: dict[str, Any]) -> dict[str, float]:
    """Runs inside the pinned child process."""
    os.sched_setaffinity(0, spec["cpus"])
    if spec["learner"] == "matmul":
        return _matmul_gflop_s(spec)
    result = _run_handrail(spec) if spec["learner"].startswith("handrail") else _run_peer(spec)
    steps_per_s = spec["steps"] / result["seconds"]
    updates = result.get("updates", spec["steps"] * spec["utd"])
    updates_per_s = updates / result.get("learner_seconds", result["seconds"])
    extra = {"update_only_ms": result["update_only_ms"]} if "update_only_ms" in result else {}
    return {
        **extra,
        "gflop_per_update": update_gflop(spec, int(result["obs_dim"]), int(result["action_dim"])),
        "env_steps_per_s": steps_per_s,
        "ms_per_update": 1000.0 / updates_per_s,
        "updates_per_s": updates_per_s,
    }


def _measure(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "handrail.bench.learner", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "JAX_PLATFORMS": spec.get("platform", "cpu")},
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {**spec, "error": " / ".join(tail) or f"exit code {proc.returncode}"}
    return {**spec, **json.loads(lines[-1])}


def _sim_available() -> str | None:
    try:
        from handrail import sim
    except ImportError as err:
        return f"handrail.sim cannot be imported ({err})"
    if "pick_cube" not in sim.available_tasks():
        return "handrail.sim has no pick_cube task yet"
    return None


def _jobs(
    utds: tuple[int, ...], learners: tuple[str, ...], rlpd: bool, pixels: bool = False
) -> list[tuple[int, str, int, bool, str]]:
    """(utd, learner, critics, layer_norm, label) for every row of one env."""
    jobs = [(utd, lr, 2, False, lr) for utd in utds for lr in learners]
    if pixels:  # SBX has no image policy; the pixel rows are for the update, not the loop
        twice = [(utd, "handrail-twice", 2, False, "handrail, target encoder read (RLPD)")
                 for utd in utds if "handrail" in learners]  # fmt: skip
        return [job for job in jobs if job[1] != "sbx"] + twice
    if "handrail" in learners:  # the same learner with actor and learner in their own threads
        jobs += [(utd, "handrail-async", 2, False, "handrail async") for utd in utds]
    if rlpd:
        jobs.append((20, "handrail", 10, True, "handrail RLPD (10 LN critics)"))
    return jobs


def _best_of_rounds(
    base: dict[str, Any], jobs: list[tuple[int, str, int, bool, str]], steps: int, repeats: int
) -> list[dict[str, Any]]:
    """Each job's fastest round; rounds interleave the learners (fairer under shared load)."""
    best: dict[int, dict[str, Any]] = {}
    for round_ in range(repeats):
        for i, (utd, learner, critics, layer_norm, label) in enumerate(jobs):
            n = steps if utd == 1 else max(10, steps // 5)
            spec = {**base, "utd": utd, "learner": learner, "steps": n,
                    "num_critics": critics, "layer_norm": layer_norm, "label": label}  # fmt: skip
            row = _measure(spec)
            if row.get("env_steps_per_s", 0) > best.get(i, {}).get("env_steps_per_s", -1):
                best[i] = row
            print(f"  round {round_ + 1}: {base['env']} UTD {utd} {label}", file=sys.stderr)
    return [best[i] for i in range(len(jobs))]


def bench_learner(
    steps: int = 500,
    warmup: int = 1000,
    envs: tuple[str, ...] = ("HalfCheetah-v5", "pick_cube"),
    utds: tuple[int, ...] = (1, 20),
    learners: tuple[str, ...] = LEARNERS,
    rlpd: bool = True,
    hidden: tuple[int, ...] = (256, 256),
    batch: int = 256,
    cpus: tuple[int, ...] | None = None,
    torch_threads: int = 1,
    repeats: int = 1,
    out: Path | None = None,
    platform: str = "cpu",
) -> int:
    """Env steps/s after warm-up, ms per gradient update and ratios vs SBX and SB3.

    Args:
        steps: timed env steps per measurement (after warm-up and the first compiled updates);
            at UTD 20 a fifth of them is used (floor 10).
        warmup: random env steps before learning starts.
        envs: Gymnasium ids or handrail task names.
        utds: gradient steps per env step to compare.
        learners: any of handrail, sbx, sb3.
        rlpd: also measure handrail's RLPD configuration (10 LayerNorm critics, UTD 20).
        hidden: hidden widths of actor and critics (all learners).
        batch: minibatch size (all learners).
        cpus: CPU ids every measurement is pinned to; default: this process's affinity.
        torch_threads: torch intra-op threads for SB3 (inside the same pinned CPU set).
        repeats: rounds over all learners; each row reports its best round.
        out: optional JSON file for the rows.
        platform: where the learners compute: cpu, or cuda (the first GPU; needs JAX's CUDA
            build, ``pip install 'handrail[cuda]'``, and torch with CUDA for SB3).

    Returns:
        0, or 1 when a measurement failed.
    """
    unknown = set(learners) - set(LEARNERS)
    if unknown:
        raise ValueError(f"--learners: unknown {sorted(unknown)}; choose from {LEARNERS}")
    if platform not in PLATFORMS:
        raise ValueError(f"--platform {platform!r}: choose {' or '.join(PLATFORMS)}")
    cpus = tuple(sorted(os.sched_getaffinity(0))) if cpus is None else cpus
    base = {"warmup": warmup, "hidden": list(hidden), "batch": batch, "cpus": list(cpus),
            "torch_threads": torch_threads, "platform": platform}  # fmt: skip
    print(f"pinned to CPUs {list(cpus)}; torch threads = {torch_threads}; batch {batch}; "
          f"hidden {list(hidden)}; learners compute on {platform}")  # fmt: skip
    rows: list[dict[str, Any]] = []
    rate = _measure({**base, "learner": "matmul"})
    if "error" in rate:
        hint = (" (--platform cuda needs a GPU that JAX can see: pip install 'handrail[cuda]')"
                if platform == "cuda" else "")  # fmt: skip
        print(f"matmul rate: {rate['error']}{hint}", file=sys.stderr)
        return 1
    for env in envs:
        if env.removesuffix(PIXELS) == "pick_cube" and (why := _sim_available()):
            print(f"skipping pick_cube: {why}")
            continue
        jobs = _jobs(utds, learners, rlpd, pixels=env.endswith(PIXELS))
        rows.extend(_best_of_rounds({**base, "env": env}, jobs, steps, repeats))
    print_table(rows, rate)
    for line in replay_bytes_lines():
        print(line)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=2))
    return int(any("error" in r for r in rows))


if __name__ == "__main__":
    print(json.dumps(_worker(json.loads(sys.argv[1]))))
