"""Ray as the transport between env actors and the learner (:mod:`handrail.learners.distributed`).

- :func:`link` turns a Ray actor handle into the ``call``/``ready``/``result``/``fetch``
  functions a :class:`~handrail.learners.distributed.StepSender` uses: calls never wait, replies
  are collected with ``ray.wait(timeout=0)``, params are fetched from the object store.
- :func:`start_learner` starts the learner as a named Ray actor that Ray restarts when it dies
  (it then loads its latest checkpoint); :func:`start_env_actor` starts a sim actor likewise.
- :class:`EnvWorker` is the sim env actor: it makes its env (``make_env``, a picklable
  callable from the application), finds the learner by name and runs the env loop.

Ray is imported inside the functions: nothing pays for it unless it is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from handrail.learners.agents.sac import SAC
from handrail.learners.distributed.protocol import ActorService, DistConfig, SenderStats

NAMESPACE = "handrail"
"""The Ray namespace handrail's named actors live in."""


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
    options = {"name": name, "namespace": NAMESPACE, "max_restarts": -1, "max_task_retries": 0,
               "max_concurrency": 16, "num_cpus": 0}  # fmt: skip
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
    """

    def __init__(self, make_env: Callable[[], Any], sac: SAC, dist: DistConfig,
                 learner_name: str, *, seed: int, name: str, success_key: str = "success",
                 warmup_steps: int = 0) -> None:  # fmt: skip
        import ray

        self.env = make_env()
        handle = ray.get_actor(learner_name, namespace=NAMESPACE)
        self.service = ActorService(self.env, sac, dist, link(handle), seed=seed, name=name,
                                    success_key=success_key, warmup_steps=warmup_steps)  # fmt: skip

    def run(self, until_steps: int) -> SenderStats:
        """Step until the learner holds ``until_steps`` steps; what the sender counted."""
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
