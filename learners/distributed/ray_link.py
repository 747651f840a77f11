"""Ray as the transport between env actors and the learner (:mod:`handrail.learners.distributed`).

- :func:`link` turns a Ray actor handle into the ``call``/``ready``/``result``/``fetch``
  functions a :class:`~handrail.learners.distributed.StepSender` uses: calls never wait, replies
  are collected with ``ray.wait(timeout=0)``, params are fetched from the object store.
- :func:`start_learner` starts the learner as a named Ray actor that Ray restarts when it dies
  (it then loads its latest checkpoint); :func:`start_env_actor` starts a sim actor likewise.
- :class:`EnvWorker` is the sim env actor: it makes its env (``make_env``, a picklable
  callable from the application), finds the learner by name and runs the env loop.
- :func:`join_learner` joins a running cluster from outside it (token authentication, one-line
  errors) and finds its learner; :func:`actor_service` then registers an env with it. ``handrail
  actor`` and ``actor_node learner:=ray`` (a robot's env) start so.

Ray is imported inside the functions: nothing pays for it unless it is used.
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

from handrail.learners.agents.sac import SAC
from handrail.learners.distributed.protocol import ActorService, DistConfig, SenderStats

NAMESPACE = "handrail"
"""The Ray namespace handrail's named actors live in."""
LEARNER_NAME = "learner"
"""The learner's Ray actor name (in the ``handrail`` namespace): one learner per cluster."""
MIN_RAY = (2, 52)
"""Token authentication came with Ray 2.52."""


def ray_version_problem(version: str) -> str:
    """Why this Ray is too old ("" when it is new enough)."""
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts >= MIN_RAY:
        return ""
    return (f"Ray {version} is older than {MIN_RAY[0]}.{MIN_RAY[1]} (token authentication): "
            "pip install 'handrail[ray]'")  # fmt: skip


def import_ray() -> Any:
    """The ``ray`` module, imported asking for token authentication (``RAY_AUTH_MODE=token``,
    which Ray reads when it is imported); a one-line error when it is missing or too old."""
    if "ray" in sys.modules and os.environ.get("RAY_AUTH_MODE") is None:
        raise ValueError("Ray was imported before handrail could ask for its token "
                         "authentication: set RAY_AUTH_MODE=token in the environment")  # fmt: skip
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    try:
        import ray
    except ImportError:
        raise ValueError("--actors, handrail learner, handrail actor and actor_node learner:=ray "
                         "need Ray: pip install 'handrail[ray]'") from None  # fmt: skip
    problem = ray_version_problem(ray.__version__)
    if problem:
        raise ValueError(problem)
    return ray


def check_address(address: str, timeout_s: float = 3.0, *, option: str = "--ray-address") -> None:
    """Fail in one line when nothing listens at ``HOST:PORT`` (before Ray waits a minute); the
    line names ``option``, the setting the address was given in."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{option} {address!r}: give HOST:PORT of the cluster's head, "
                         "e.g. 127.0.0.1:6379")  # fmt: skip
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ValueError(
            f"{option} {address}: nothing answers there ({exc.strerror or exc}); start the "
            "cluster first (ray start --head, or handrail learner), or check the address and "
            "that an SSH tunnel to it is up"
        ) from None


def join_cluster(address: str, *, option: str = "--ray-address") -> Any:
    """Join the Ray cluster whose head is at ``address`` (``HOST:PORT``), in handrail's
    namespace, with token authentication; the ``ray`` module. Errors are one line naming
    ``option``."""
    ray = import_ray()
    check_address(address, option=option)
    try:
        ray.init(address=address, namespace=NAMESPACE, configure_logging=False)
    except (ConnectionError, RuntimeError) as exc:
        raise ValueError(_join_problem(address, exc, option)) from None
    return ray


def _join_problem(address: str, exc: Exception, option: str) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "version" in text.lower():
        return (f"{option} {address}: the cluster runs another Ray or Python version than "
                f"this machine ({text}); install the same versions on every machine")  # fmt: skip
    if "auth" in text.lower() or "token" in text.lower():
        return (f"{option} {address}: the cluster asks for its token ({text}); copy the "
                "head's ~/.ray/auth_token here or set RAY_AUTH_TOKEN")  # fmt: skip
    return f"{option} {address}: cannot join the cluster ({text})"


def join_learner(
    address: str, *, option: str = "--ray-address"
) -> tuple[Any, SAC, DistConfig, int]:
    """Join the cluster at ``address`` and find its learner: ``(handle, agent, batching settings,
    warm-up steps)``. The caller leaves the cluster with ``ray.shutdown()``; on an error this
    leaves it (one line naming ``option``)."""
    ray = join_cluster(address, option=option)
    try:
        try:
            handle = ray.get_actor(LEARNER_NAME, namespace=NAMESPACE)
        except ValueError:
            raise ValueError(f"{option} {address}: no handrail learner runs on that cluster; "
                             "start one with handrail learner or handrail train --actors N") from None  # fmt: skip
        sac, dist, warmup = cast(tuple[SAC, DistConfig, int], ray.get(handle.agent.remote()))
    except BaseException:
        ray.shutdown()
        raise
    return handle, sac, dist, warmup


def actor_service(env: Any, handle: Any, sac: SAC, dist: DistConfig, *, seed: int, name: str,
                  success_key: str = "success", warmup_steps: int = 0,
                  sinks: Sequence[Any] = ()) -> ActorService:  # fmt: skip
    """``env`` registered as an actor of the learner behind ``handle`` (see
    :class:`ActorService`); a learner that refuses it (other spaces, too many actors) raises a
    one-line ValueError saying why."""
    import ray

    try:
        return ActorService(env, sac, dist, link(handle), seed=seed, name=name,
                            success_key=success_key, warmup_steps=warmup_steps, sinks=sinks)  # fmt: skip
    except ray.exceptions.RayTaskError as exc:  # the learner refused it: say why
        raise ValueError(str(exc.cause) if exc.cause else str(exc)) from None


def link(handle: Any) -> dict[str, Callable[..., Any]]:
    """The learner link of a Ray actor handle (see :class:`StepSender`)."""
    import ray

    def call(method: str, *args: Any) -> Any:
        return getattr(handle, method).remote(*args)

    def ready(futures: list[Any]) -> list[Any]:
        if not futures:
            return []
        done, _ = ray.wait(list(futures), num_returns=len(futures), timeout=0)
        return list(done)

    return {"call": call, "ready": ready, "result": ray.get, "fetch": ray.get}


def start_learner(name: str, *args: Any, **kwargs: Any) -> Any:
    """The learner as a named Ray actor (``LearnerService(*args, **kwargs)``), restarted by
    Ray whenever it dies; its calls run in threads beside its update thread."""
    import ray

    from handrail.learners.distributed.protocol import LearnerService

    remote = ray.remote(LearnerService)
    # Ray limits a worker that reserves no CPU to one OpenMP thread; the learner's math may use
    # every core of its machine, as in one process.
    threads = {"OMP_NUM_THREADS": str(os.cpu_count() or 1)}
    options = {"name": name, "namespace": NAMESPACE, "max_restarts": -1, "max_task_retries": 0,
               "max_concurrency": 16, "num_cpus": 0,
               "runtime_env": {"env_vars": threads}}  # fmt: skip
    return remote.options(**options).remote(*args, put=ray.put, **kwargs)


class EnvWorker:
    """A sim env actor (one Ray actor process): see :class:`ActorService`.

    Args:
        make_env: builds the env in this process.
        sac: the agent.
        dist: batching settings.
        learner_name: the learner's Ray actor name.
        seed: this actor's episode seeds start here.
        name: this actor's name at the learner (a restarted actor keeps it).
        success_key: info key of the success flag.
        warmup_steps: random steps before the policy acts.
        resume_steps: a process Ray restarts steps on by itself until the learner holds this
            many steps, without waiting for a ``run`` call: the caller's ``run`` that the old
            process was serving may never report its death.
    """

    def __init__(self, make_env: Callable[[], Any], sac: SAC, dist: DistConfig,
                 learner_name: str, *, seed: int, name: str, success_key: str = "success",
                 warmup_steps: int = 0, resume_steps: int | None = None) -> None:  # fmt: skip
        import ray

        self.env = make_env()
        handle = ray.get_actor(learner_name, namespace=NAMESPACE)
        self.service = ActorService(self.env, sac, dist, link(handle), seed=seed, name=name,
                                    success_key=success_key, warmup_steps=warmup_steps)  # fmt: skip
        self._resumed: concurrent.futures.Future[SenderStats] | None = None
        if resume_steps is not None and ray.get_runtime_context().was_current_actor_reconstructed:
            pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="handrail-actor")
            self._resumed = pool.submit(self.service.run, resume_steps)

    def run(self, until_steps: int) -> SenderStats:
        """Step until the learner holds ``until_steps`` steps; what the sender counted (in a
        restarted process that resumed by itself: waits for that)."""
        if self._resumed is not None:
            return self._resumed.result()
        return self.service.run(until_steps)

    def pid(self) -> int:
        """This actor's process id (tests kill it)."""
        import os

        return os.getpid()


def start_env_actor(name: str, *args: Any, **kwargs: Any) -> Any:
    """An :class:`EnvWorker` as a named Ray actor, restarted by Ray whenever it dies."""
    import ray

    remote = ray.remote(EnvWorker)
    options = {"name": name, "namespace": NAMESPACE, "max_restarts": -1, "max_task_retries": 0,
               "num_cpus": 0}  # fmt: skip
    return remote.options(**options).remote(*args, name=name, **kwargs)


class EvalWorker:
    """Evaluations in an actor of their own, so they never pause data collection.

    Args:
        make_env: builds the evaluation env in this process.
        sac: the agent (its deterministic policy is evaluated).
        seed: evaluation episodes are reset with ``seed + i``.
        success_key: info key of the success flag.
    """

    def __init__(self, make_env: Callable[[], Any], sac: SAC, *, seed: int,
                 success_key: str = "success") -> None:  # fmt: skip
        self.env, self.sac, self.seed, self.success_key = make_env(), sac, seed, success_key

    def evaluate(self, params: list[Any], episodes: int, video: bool = False) -> Any:
        """Evaluate the params behind ``[reference]`` over ``episodes`` episodes."""
        import functools

        import ray

        from handrail.learners.actor import LearnedPolicy
        from handrail.learners.checkpoint import StaticParams
        from handrail.learners.evaluation import evaluate

        make = functools.partial(self.sac.make_policy, deterministic=True)
        source = StaticParams(ray.get(params[0]))
        policy = LearnedPolicy(make, source, self.sac.obs_spec, self.sac.action_spec,
                               seed=self.seed)  # fmt: skip
        return evaluate(self.env, policy, episodes, self.seed, video=video,
                        success_key=self.success_key)  # fmt: skip


def start_eval_actor(*args: Any, **kwargs: Any) -> Any:
    """An :class:`EvalWorker` as a Ray actor."""
    import ray

    return ray.remote(EvalWorker).options(num_cpus=0, max_restarts=-1).remote(*args, **kwargs)
