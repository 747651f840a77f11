"""``actor_node``: runs episodes on the arm over ROS 2, with a human who may take over, and
records every step.

The loop is handrail's :class:`~handrail.learners.actor.Actor` (the one the sim trainer uses)
over :class:`~handrail.control.takeover.InterventionEnv` around :class:`RosArmEnv`; the human is
:class:`RosHuman`, which reads ``human/*`` from ``intervention_node``. Every executed step goes to
its transition sinks: the Zarr store (``store``; committed per episode, so killing the node
loses at most the episode in progress) and the learner, if any. ``actor/status`` gets one JSON
line per episode.

Without a learner (``learner:=none``) the policy is ``expert`` (the task's scripted expert, for
rehearsing the stack) or a checkpoint folder of ``handrail train``. ``learner:=local`` trains in
this process beside the control loop (:mod:`handrail.hw.robot_learner`); ``learner:=ray`` feeds
the learner of a Ray cluster (``handrail learner``, at ``ray_address``) and acts with the params
it broadcasts: the node never waits for it, and steps it could not send yet are kept and sent
later (:mod:`handrail.learners.distributed`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import rclpy
from rclpy.duration import Duration
from rclpy.node import Node
from std_msgs.msg import Bool, Float32MultiArray, String

from handrail.control.intervention import Decision
from handrail.control.step import ActedBy
from handrail.control.takeover import InterventionEnv
from handrail.control.teleop import TeleopEvent
from handrail.hw.ros_common import (
    COMMAND_QOS,
    LATCHED_QOS,
    NodeClock,
    check_context,
    control_loop_process,
    declare_parameters,
    print_stacks_on_request,
)
from handrail.hw.ros_env import RosArmEnv, RosEnvConfig

if TYPE_CHECKING:  # JAX loads once the node has its parameters
    from handrail.hw.robot_learner import RobotLearner
    from handrail.learners.actor import Actor, EpisodeStats
    from handrail.learners.distributed.protocol import ActorService

__all__ = ["PARAMETERS", "RosHuman", "main"]

PARAMETERS: dict[str, Any] = {
    "task": "pick_cube",
    "policy": "expert",
    "store": "",
    "episodes": 0,
    "control_rate_hz": 10.0,
    "max_obs_age_s": 0.2,
    "first_obs_timeout_s": 10.0,
    "reset_timeout_s": 60.0,
    "seed": 0,
    "reset_service": "reset_node/reset",
    "human_timeout_s": 0.5,
    "learner": "none",
    "learner_config": "",
    "demos": "",
    "run_dir": "",
    "save_every": 10,
    "ray_address": "",
    "cameras": [],
    "image_size": 128,
    "reward": "task",
    "verdict_timeout_s": 5.0,
    "corrections": 0,
    "corrections_every": 1000,
}
"""Parameters (hw/INTERFACES.md). ``store`` "" records nothing; ``episodes`` 0 runs until stopped;
``learner`` "local" trains asynchronously beside the actor (``hw.robot_learner``; then
``learner_config``, ``run_dir`` and optionally ``demos`` are used and ``policy`` is not);
``learner`` "ray" feeds the learner on the Ray cluster at ``ray_address`` (``HOST:PORT``; the
agent and its settings come from that learner, ``policy`` is not used)."""


class RosHuman:
    """The person at ``intervention_node``: the :class:`~handrail.control.takeover.Human` protocol
    over ``human/engaged``, ``human/action`` and ``human/events``.

    The human acts while engaged and their newest action is younger than ``timeout_s``; a
    stale action (the device or node stopped) hands control back to the policy.
    """

    name = "ros"

    def __init__(self, node: Node, action_dim: int, timeout_s: float = 0.5) -> None:
        self.action_dim, self.timeout_s = action_dim, timeout_s
        self.clock = NodeClock(node)
        self._lock = threading.Lock()
        self._engaged = False
        self._action: tuple[np.ndarray, float] | None = None
        self._events: deque[TeleopEvent] = deque()
        node.create_subscription(Bool, "human/engaged", self._on_engaged, LATCHED_QOS)
        node.create_subscription(Float32MultiArray, "human/action", self._on_action, COMMAND_QOS)
        node.create_subscription(String, "human/events", self._on_event, COMMAND_QOS)

    def _on_engaged(self, msg: Bool) -> None:
        with self._lock:
            self._engaged = bool(msg.data)

    def _on_action(self, msg: Float32MultiArray) -> None:
        action = np.asarray(msg.data, np.float32)
        if action.shape == (self.action_dim,):
            with self._lock:
                self._action = (action, self.clock.now())

    def _on_event(self, msg: String) -> None:
        try:
            event = TeleopEvent(msg.data)
        except ValueError:
            return
        with self._lock:
            self._events.append(event)

    def reset(self, seed: int | None) -> None:
        """A new episode: forget events from the last one."""
        with self._lock:
            self._events.clear()

    def decide(self, obs: Any, policy_action: np.ndarray) -> Decision:
        """The human's action while they are engaged (and it is fresh), else the policy's."""
        with self._lock:
            events = tuple(self._events)
            self._events.clear()
            fresh = (
                self._action is not None and self.clock.now() - self._action[1] <= self.timeout_s
            )
            if self._engaged and fresh:
                assert self._action is not None
                return Decision(self._action[0].copy(), ActedBy.HUMAN, events)
        return Decision(np.asarray(policy_action, np.float32), ActedBy.POLICY, events)

    def verdict(self, timeout_s: float, env: RosArmEnv) -> bool:
        """The person's word on an episode a success classifier just ended: ``failure`` within
        ``timeout_s`` says the task did not succeed (False); ``success``, or nothing, accepts it.

        The arm holds where it is meanwhile (and the safety node's watchdog holds it too)."""
        env.hold()
        env.node.get_logger().info(
            f"the success classifier ended the episode: press failure within {timeout_s:g} s "
            "if the task did not succeed"
        )
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with self._lock:
                said = [e for e in self._events if e in (TeleopEvent.SUCCESS, TeleopEvent.FAILURE)]
                self._events.clear()
            if said:
                return said[-1] is TeleopEvent.SUCCESS
            check_context(env.node.context, "the person's verdict")
            time.sleep(0.02)
        return True

    def wait_ready(self) -> None:
        """The reset node waits for the operator; nothing to do here."""

    def close(self) -> None:
        """Nothing to release (the node owns the subscriptions)."""


def _policy(spec: str, task: str, seed: int) -> tuple[Any, ActedBy]:
    if spec == "expert":
        from handrail.sim import make_expert  # the scripted expert only, no physics

        return make_expert(task), ActedBy.SCRIPTED
    from handrail.learners.policies import load_run_policy

    return load_run_policy(Path(spec), "latest", seed=seed).policy, ActedBy.POLICY


def _recorder(store: str, env: RosArmEnv, task: str) -> Any:
    """The Zarr recorder of ``store`` (created if new, else appended to after a field check)."""
    from handrail.demos.format import fields_from_space
    from handrail.demos.recorder import EpisodeRecorder

    fields, width = fields_from_space(env.observation_space), env.mirror.action.dim
    if Path(store).exists():
        return EpisodeRecorder.append(store, obs_fields=fields, action_dim=width)
    return EpisodeRecorder.create(store, obs_fields=fields, action_dim=width, control_dt_s=env.period_s,
                                  task=task, kind="intervention", robot="ros_cartesian_pose")  # fmt: skip


class _NoLearner:
    """``learner:=none``: the actor alone."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    def step(self) -> EpisodeStats | None:
        return self.actor.step()

    def episode_ended(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


class _LocalLearner:
    """``learner:=local``: the asynchronous trainer of :mod:`handrail.hw.robot_learner`."""

    def __init__(self, learner: RobotLearner) -> None:
        self.learner = learner

    def step(self) -> EpisodeStats | None:
        stats = self.learner.trainer.step()  # raises if the learner thread failed
        return stats[0] if stats else None

    def episode_ended(self) -> dict[str, Any]:
        correction = self.learner.episode_ended()
        line: dict[str, Any] = {"updates": int(self.learner.trainer.learner.updates)}
        if correction is not None:
            line["correction"] = correction
        return line

    def close(self) -> None:
        self.learner.close()


class _RayLearner:
    """``learner:=ray``: an :class:`~handrail.learners.distributed.protocol.ActorService` that
    sends the steps to the learner of a Ray cluster and acts with the params it broadcasts."""

    def __init__(self, service: ActorService, node: Node) -> None:
        self.service, self.node = service, node

    def step(self) -> EpisodeStats | None:
        return self.service.step()  # never waits for the learner

    def episode_ended(self) -> dict[str, Any]:
        sender = self.service.sender
        counts = sender.stats
        return {"sender": {"taken": counts.taken, "dropped": counts.dropped,
                           "resent": counts.resent, "reconnects": counts.reconnects},
                "learner_steps": int(sender.learner_steps)}  # fmt: skip

    def close(self) -> None:
        import ray

        try:
            if not self.service.sender.drain(timeout_s=10):
                self.node.get_logger().warning(
                    "the learner did not acknowledge every step within 10 s: it lacks the rest "
                    f"(of {self.service.sender.stats.taken} steps taken)"
                )
        finally:
            ray.shutdown()


def _join_ray(p: dict[str, Any], env: InterventionEnv, sinks: list[Any], node: Node) -> _RayLearner:
    """Join the learner at ``ray_address``, register ``env`` with it and compile the policy."""
    from handrail.learners.distributed import ray_link

    address = str(p["ray_address"])
    if not address:
        raise ValueError(
            "learner:=ray needs ray_address (HOST:PORT of the Ray cluster the learner runs on, "
            "as handrail learner prints it)"
        )
    # Named by host and node: a node restarted under its name takes up its place.
    name = f"{socket.gethostname()}{node.get_fully_qualified_name()}"
    handle, sac, dist, warmup = _off_main_thread(
        node.context, ray_link.join_learner, address, option="ray_address"
    )
    try:
        service = ray_link.actor_service(env, handle, sac, dist, seed=int(p["seed"]), name=name,
                                         warmup_steps=warmup, sinks=sinks)  # fmt: skip
        _compile(service, env.observation_space, address)
    except BaseException:
        import ray

        ray.shutdown()
        raise
    return _RayLearner(service, node)


def _off_main_thread(context: Any, join: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``join(*args, **kwargs)`` in another thread. ``ray.init`` in the main thread replaces the
    SIGTERM handler (with ``sys.exit``), and rclpy's clean stop with it; elsewhere it leaves the
    handlers alone, and says so in a warning that is no news here.

    The wait ends with :class:`ContextShutdown` as soon as rclpy shuts down (SIGINT, SIGTERM):
    the joining thread is a daemon left behind (:func:`main` exits without joining threads).
    A Ctrl-C while a slow learner was being joined used to wait for that join to end, past
    ``handrail launch``'s SIGTERM, for minutes.
    """

    def keep(record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()

    done: Future[Any] = Future()

    def work() -> None:
        try:
            done.set_result(join(*args, **kwargs))
        except BaseException as err:  # handed to the waiting thread, which raises it
            done.set_exception(err)

    log = logging.getLogger("ray._private.worker")
    log.addFilter(keep)
    try:
        threading.Thread(target=work, name="join-learner", daemon=True).start()
        while True:
            try:
                return done.result(timeout=0.05)
            except FutureTimeout:
                check_context(context, "the Ray learner to answer")
    finally:
        log.removeFilter(keep)


def _compile(service: ActorService, space: Any, address: str, timeout_s: float = 30.0) -> None:
    """Fetch the learner's params and compile the policy before the first episode: tracing holds
    the GIL for seconds, and the control loop must keep its rate (its observations go stale)."""
    from handrail.hw.robot_learner import _example_obs

    end = time.monotonic() + timeout_s
    while service.params.params is None:
        if time.monotonic() > end:
            raise ValueError(f"ray_address {address}: the learner sent no params in {timeout_s} s")
        service.sender.poll()
        time.sleep(0.01)
    service.policy(_example_obs(space))


def _with_reward(p: dict[str, Any], ros_env: RosArmEnv, human: RosHuman) -> Any:
    """``ros_env`` with the reward of the ``reward`` parameter: the task's (itself), or a
    success classifier's (``classifier:PATH``), which ends episodes where it fires and asks the
    person for a verdict on each (``verdict_timeout_s`` > 0). The cameras stay in the
    observation (the store records them; the state learner leaves them out).

    Raises:
        ValueError: the parameter, the classifier or the corrections are unusable (one line).
    """
    spec, corrections = str(p["reward"]), int(p["corrections"])
    if corrections < 0 or int(p["corrections_every"]) < 1:
        raise ValueError("corrections must be >= 0 and corrections_every >= 1")
    if spec == "task":
        if corrections:
            raise ValueError("corrections:=N corrects a success classifier: give reward:=classifier:PATH "
                             "(a handrail reward train output), or leave corrections at 0")  # fmt: skip
        return ros_env
    from handrail.learners.agents.classifier import SuccessClassifier
    from handrail.learners.agents.learned_reward import CLASSIFIER_PREFIX, ClassifierReward

    if not spec.startswith(CLASSIFIER_PREFIX):
        raise ValueError(f"reward must be task or classifier:PATH; got {spec!r}")
    try:
        classifier = SuccessClassifier(spec.removeprefix(CLASSIFIER_PREFIX))
    except (OSError, ValueError) as exc:
        raise ValueError(f"reward:={spec}: {exc}") from exc
    missing = [c for c in classifier.cameras if c not in ros_env.config.cameras]
    if missing:
        raise ValueError(f"reward:={spec}: the classifier reads the cameras {list(classifier.cameras)}; "
                         f"add {missing} to the cameras parameter")  # fmt: skip
    timeout = float(p["verdict_timeout_s"])
    if corrections and timeout <= 0:
        raise ValueError("corrections:=N needs a person's verdict: set verdict_timeout_s > 0")
    verdict = (lambda: human.verdict(timeout, ros_env)) if timeout > 0 else None
    try:
        return ClassifierReward(ros_env, classifier, keep_cameras=True,
                                keep_false_positives=corrections > 0, verdict=verdict)  # fmt: skip
    except ValueError as exc:
        raise ValueError(f"reward:={spec}: {exc}") from exc


def _actor(
    p: dict[str, Any], ros_env: RosArmEnv, human: RosHuman, sinks: list[Any]
) -> _NoLearner | _LocalLearner | _RayLearner:
    """The actor (and its learner) for the ``learner`` and ``policy`` parameters."""
    from handrail.learners.actor import Actor

    if p["learner"] == "local":
        from handrail.hw.robot_learner import RobotLearner

        if not (p["learner_config"] and p["run_dir"]):
            raise ValueError(
                "learner:=local needs learner_config (a handrail train run's config.json) and run_dir"
            )
        env = InterventionEnv(_with_reward(p, ros_env, human), human)
        log = ros_env.node.get_logger()
        learner = RobotLearner(env, str(p["learner_config"]), str(p["run_dir"]), seed=int(p["seed"]),
                               demos=str(p["demos"]), sinks=sinks, save_every=int(p["save_every"]),
                               ignore_obs_keys=ros_env.config.cameras,
                               corrections=int(p["corrections"]),
                               corrections_every=int(p["corrections_every"]),
                               say=lambda text: log.info(f"reward: {text}"))  # fmt: skip
        return _LocalLearner(learner)
    if p["reward"] != "task" or int(p["corrections"]):
        raise ValueError(
            f"reward:={p['reward']} and corrections:={p['corrections']}: a success classifier's "
            "reward and its corrections are learned beside the arm: they need learner:=local"
        )
    if p["learner"] == "ray":
        return _join_ray(p, InterventionEnv(ros_env, human), sinks, ros_env.node)
    if p["learner"] != "none":
        raise ValueError(f"learner must be none, local or ray; got {p['learner']!r}")
    policy, acted_by = _policy(str(p["policy"]), str(p["task"]), int(p["seed"]))
    env = InterventionEnv(ros_env, human, policy_acted_by=acted_by)
    return _NoLearner(Actor(env, policy, seed=int(p["seed"]), sinks=sinks, acted_by=acted_by))


def run(args: list[str] | None = None) -> int:
    """Run the actor until ``episodes`` ended or it is interrupted; return the exit code."""
    control_loop_process()
    print_stacks_on_request()
    rclpy.init(args=args)
    node = Node("actor_node")
    try:
        p = declare_parameters(node, PARAMETERS)
        config = RosEnvConfig(
            control_rate_hz=float(p["control_rate_hz"]),
            max_obs_age_s=float(p["max_obs_age_s"]),
            first_obs_timeout_s=float(p["first_obs_timeout_s"]),
            reset_timeout_s=float(p["reset_timeout_s"]),
            reset_service=str(p["reset_service"]),
            cameras=tuple(str(c) for c in p["cameras"] if c),
            image_size=int(p["image_size"]),
        )
    except (ValueError, TypeError) as err:  # a parameter of the wrong type, or out of range
        print(f"error: {err}", file=sys.stderr)
        rclpy.shutdown()
        return 2
    status = node.create_publisher(String, "actor/status", LATCHED_QOS)
    env = RosArmEnv(str(p["task"]), config, node=node)
    human = RosHuman(env.node, env.mirror.action.dim, float(p["human_timeout_s"]))
    sinks: list[Any] = [_recorder(str(p["store"]), env, str(p["task"]))] if p["store"] else []
    learner = None
    code = 0
    try:
        learner = _actor(p, env, human, sinks)
        episodes, done = int(p["episodes"]), 0
        while rclpy.ok() and (episodes == 0 or done < episodes):
            stats = learner.step()
            if stats is None:
                continue
            line = {"episode": done, "return": stats.return_, "length": stats.length,
                    "success": bool(stats.success), "human_steps": stats.human_steps,
                    "seconds": round(env.clock.now() - env.episode_start, 3)}  # fmt: skip
            done += 1
            line.update(learner.episode_ended())
            status.publish(String(data=json.dumps(line)))
            node.get_logger().info(f"episode {line['episode']}: {line}")
    except KeyboardInterrupt:
        pass
    except Exception as err:
        # A failed publish after SIGINT shut the context down mid-step is a normal stop. Any
        # other error is the node's last word, naming the cause; the arm is held.
        if node.context.ok():
            node.get_logger().error(f"actor stopped: {err}")
            env.hold()
            code = 1
    finally:
        # A second Ctrl-C (ros2 launch sends SIGINT, then more) must not cut the final commits.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if node.context.ok():
            # The last episode's status must reach its subscribers before the node goes: a
            # reliable message still unacknowledged when its writer is destroyed is lost.
            status.wait_for_all_acked(Duration(seconds=2.0))
        if learner is not None:
            learner.close()
        for sink in sinks:
            sink.close()
        env.close()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return code


def main(args: list[str] | None = None) -> None:
    """Run ``actor_node``; exit without tearing down the learner's native threads.

    Everything is saved and closed when :func:`run` returns; a normal interpreter exit would
    then stop JAX's threads mid-call and abort the process.
    """
    code = run(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
