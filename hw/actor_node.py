"""``actor_node``: runs episodes on the arm over ROS 2, with a human who may take over, and
records every step.

The loop is handrail's :class:`~handrail.learners.actor.Actor` (the one the sim trainer uses)
over :class:`~handrail.control.takeover.InterventionEnv` around :class:`RosArmEnv`; the human is
:class:`RosHuman`, which reads ``human/*`` from ``intervention_node``. Every executed step goes to
its transition sinks: the Zarr store (``store``; committed per episode, so killing the node
loses at most the episode in progress) and, later, a learner. ``actor/status`` gets one JSON
line per episode.

The policy is ``expert`` (the task's scripted expert, for rehearsing the stack) or a checkpoint
folder of ``handrail train``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

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
    control_loop_process,
    declare_parameters,
)
from handrail.hw.ros_env import RosArmEnv, RosEnvConfig

__all__ = ["PARAMETERS", "RosHuman", "main"]

PARAMETERS: dict[str, Any] = {
    "task": "pick_cube",
    "policy": "expert",
    "store": "",
    "episodes": 0,
    "control_rate_hz": 10.0,
    "max_obs_age_s": 0.2,
    "seed": 0,
    "reset_service": "reset_node/reset",
    "human_timeout_s": 0.5,
    "learner": "none",
    "learner_config": "",
    "demos": "",
    "run_dir": "",
    "save_every": 10,
}
"""Parameters (hw/INTERFACES.md). ``store`` "" records nothing; ``episodes`` 0 runs until stopped;
``learner`` "local" trains asynchronously beside the actor (``hw.robot_learner``; then
``learner_config``, ``run_dir`` and optionally ``demos`` are used and ``policy`` is not)."""


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


def _actor(
    p: dict[str, Any], ros_env: RosArmEnv, human: RosHuman, sinks: list[Any]
) -> tuple[Any, Any]:
    """(actor, learner or None) for the ``learner`` and ``policy`` parameters."""
    from handrail.learners.actor import Actor

    if p["learner"] == "local":
        from handrail.hw.robot_learner import RobotLearner

        if not (p["learner_config"] and p["run_dir"]):
            raise ValueError(
                "learner:=local needs learner_config (a handrail train run's config.json) and run_dir"
            )
        env = InterventionEnv(ros_env, human)
        learner = RobotLearner(env, str(p["learner_config"]), str(p["run_dir"]), seed=int(p["seed"]),
                               demos=str(p["demos"]), sinks=sinks, save_every=int(p["save_every"]),
                               ignore_obs_keys=ros_env.config.cameras)  # fmt: skip
        return learner.actor, learner
    if p["learner"] != "none":
        raise ValueError(f"learner must be none or local; got {p['learner']!r}")
    policy, acted_by = _policy(str(p["policy"]), str(p["task"]), int(p["seed"]))
    env = InterventionEnv(ros_env, human, policy_acted_by=acted_by)
    return Actor(env, policy, seed=int(p["seed"]), sinks=sinks, acted_by=acted_by), None


def run(args: list[str] | None = None) -> int:
    """Run the actor until ``episodes`` ended or it is interrupted; return the exit code."""
    control_loop_process()
    rclpy.init(args=args)
    node = Node("actor_node")
    try:
        p = declare_parameters(node, PARAMETERS)
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        rclpy.shutdown()
        return 2
    status = node.create_publisher(String, "actor/status", LATCHED_QOS)
    config = RosEnvConfig(
        control_rate_hz=float(p["control_rate_hz"]),
        max_obs_age_s=float(p["max_obs_age_s"]),
        reset_service=str(p["reset_service"]),
    )
    env = RosArmEnv(str(p["task"]), config, node=node)
    human = RosHuman(env.node, env.mirror.action.dim, float(p["human_timeout_s"]))
    sinks: list[Any] = [_recorder(str(p["store"]), env, str(p["task"]))] if p["store"] else []
    learner = None
    code = 0
    try:
        actor, learner = _actor(p, env, human, sinks)
        episodes, done = int(p["episodes"]), 0
        while rclpy.ok() and (episodes == 0 or done < episodes):
            stats = actor.step() if learner is None else _learner_step(learner)
            if stats is None:
                continue
            line = {"episode": done, "return": stats.return_, "length": stats.length,
                    "success": bool(stats.success), "human_steps": stats.human_steps,
                    "seconds": round(env.clock.now() - env.episode_start, 3)}  # fmt: skip
            done += 1
            if learner is not None:
                learner.episode_ended()
                line["updates"] = int(learner.trainer.learner.updates)
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


def _learner_step(learner: Any) -> Any:
    stats = learner.trainer.step()  # raises if the learner thread failed
    return stats[0] if stats else None


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
