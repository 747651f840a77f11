"""``RosArmEnv``: a Gymnasium env over ROS 2, with the spaces of the sim task it mirrors.

Each ``step(action)`` decodes the normalised action exactly as the sim task does (target =
previous target + increment), runs it through the safety filter against the measured pose,
publishes it on ``cmd/target_pose`` / ``cmd/gripper`` (so it also passes ``safety_node``), waits
for the next control period and builds the observation from the newest messages of the arm
profile and ``objects/<name>/pose`` (hw/INTERFACES.md). A message older than ``max_obs_age_s``
holds the arm and raises :class:`StaleObservationError`: a policy never acts on stale state.
``info["timing"]`` reports the period, its jitter, the observation's age and the
observation-to-command latency of the step.

The env owns an rclpy node spun by a background executor (rclpy must be initialised), so
messages arrive while the caller computes the next action. Periods and ages are on the node's
clock: with ``use_sim_time:=true`` on ``sim_robot``'s ``/clock``, so a faster-than-real-time sim
runs the same episodes in less wall time; the waits for a first message or a reset service stay
on the wall clock.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from gymnasium import spaces
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64
from std_srvs.srv import Trigger

from handrail.control.safety import SIM_ARM_LIMITS, SafetyFilter, SafetyLimits
from handrail.control.spaces import decode_action
from handrail.control.transforms import quat_mul_floats, rotvec_to_quat_floats
from handrail.hw.mirrors import PROPRIO_DIM, TaskMirror, mirror
from handrail.hw.msgs import pose_msg, pose_of
from handrail.hw.ros_common import (
    COMMAND_QOS,
    LATCHED_QOS,
    STATE_QOS,
    NodeClock,
    call_service,
    check_context,
    spin_until_shutdown,
)

__all__ = ["RosArmEnv", "RosEnvConfig", "StaleObservationError"]


class StaleObservationError(RuntimeError):
    """An observation the env needs is missing or older than its age limit (the arm is held)."""


@dataclass(frozen=True)
class RosEnvConfig:
    """How the env talks to the arm."""

    control_rate_hz: float = 10.0
    """Env steps per second (the sim tasks' 10 Hz)."""
    max_obs_age_s: float = 0.2
    """An observation message older than this (s) at the end of a step is stale."""
    reset_service: str = "reset_node/reset"
    """std_srvs/Trigger called by reset(); "" to reset by holding the current pose only."""
    reset_timeout_s: float = 60.0
    """How long reset() waits for the reset service (s)."""
    first_obs_timeout_s: float = 10.0
    """How long reset() waits for every observation topic (s)."""
    gripper_max_m: float = 0.08
    """Opening (m) of the gripper command -1 (fully open); +1 is 0 (closed)."""
    safety: SafetyLimits = SIM_ARM_LIMITS
    """Limits of the env-side filter (safety_node applies its own as well)."""
    frame_id: str = "base"
    """Frame of the commands (``header.frame_id``); safety_node refuses any other."""
    cameras: tuple[str, ...] = ()
    """Camera observations (``camera/<name>/image_raw``, rgb8), e.g. ("front",)."""
    image_size: int = 128
    """Height and width (px) of the camera images the arm publishes."""

    def __post_init__(self) -> None:
        for name in ("control_rate_hz", "max_obs_age_s", "reset_timeout_s", "first_obs_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"RosEnvConfig.{name} must be a positive number; got {value!r}")


class RosArmEnv(gymnasium.Env):
    """A sim task's interface on an arm over ROS 2 (see the module doc).

    Args:
        task: the sim task mirrored (a name of ``hw.mirrors.MIRRORS``) or a :class:`TaskMirror`.
        config: rates, age limits, services.
        node_name: name of the env's rclpy node (when ``node`` is not given).
        node: an existing node to use (the env spins it from a thread of its own).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (Gymnasium's own type)

    def __init__(
        self,
        task: str | TaskMirror,
        config: RosEnvConfig | None = None,
        node_name: str = "ros_arm_env",
        node: Node | None = None,
    ):
        self.mirror = mirror(task) if isinstance(task, str) else task
        self.config = config or RosEnvConfig()
        self.period_s = 1.0 / self.config.control_rate_hz
        act = self.mirror.action
        self.action_space = spaces.Box(-1.0, 1.0, (act.dim,), np.float32)
        obs_spaces: dict[str, spaces.Space] = {
            "proprio": spaces.Box(-np.inf, np.inf, (PROPRIO_DIM,), np.float32)
        }
        for term in self.mirror.terms:
            obs_spaces[term.key] = spaces.Box(-np.inf, np.inf, (term.size,), np.float32)
        size = self.config.image_size
        for cam in self.config.cameras:
            obs_spaces[cam] = spaces.Box(0, 255, (size, size, 3), np.uint8)
        self.observation_space = spaces.Dict(obs_spaces)
        self.filter = SafetyFilter(self.config.safety)
        self.node = node if node is not None else Node(node_name)
        self._own_node = node is None
        self.clock = NodeClock(self.node)
        """Paces steps and ages messages (simulated time with ``use_sim_time:=true``)."""
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[Any, float]] = {}  # topic -> (message, receipt time)
        self._subscribe(PoseStamped, "ee_pose")
        self._subscribe(TwistStamped, "ee_twist")
        self._subscribe(JointState, "gripper_state")
        for name in self.mirror.objects:
            self._subscribe(PoseStamped, f"objects/{name}/pose")
        for cam in self.config.cameras:
            self._subscribe(Image, f"camera/{cam}/image_raw")
        self.node.create_subscription(
            Bool, "success", lambda m: self._store("success", m), LATCHED_QOS
        )
        self.node.create_subscription(Bool, "estop", lambda m: self._store("estop", m), LATCHED_QOS)
        self.pub_target = self.node.create_publisher(PoseStamped, "cmd/target_pose", COMMAND_QOS)
        self.pub_gripper = self.node.create_publisher(Float64, "cmd/gripper", COMMAND_QOS)
        self.reset_client = (
            self.node.create_client(Trigger, self.config.reset_service)
            if self.config.reset_service
            else None
        )
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self.node)
        self._closing = False
        self._spin = threading.Thread(target=self._spin_until_closed, name=f"{node_name} spin",
                                      daemon=True)  # fmt: skip
        self._spin.start()
        self._target: tuple[tuple[float, ...], tuple[float, ...]] | None = None
        self._steps = 0
        self._next_t = 0.0
        self._obs_t = 0.0
        self.episode_start = 0.0
        """When the last reset() ended, on :attr:`clock`."""

    # ----- messages ---------------------------------------------------------------------------
    def _subscribe(self, msg_type: type, topic: str) -> None:
        self.node.create_subscription(msg_type, topic, lambda m: self._store(topic, m), STATE_QOS)

    def _store(self, topic: str, msg: Any) -> None:
        with self._lock:
            self._latest[topic] = (msg, self.clock.now())

    def _required(self) -> list[str]:
        return [
            "ee_pose",
            "ee_twist",
            "gripper_state",
            *(f"objects/{n}/pose" for n in self.mirror.objects),
            *(f"camera/{c}/image_raw" for c in self.config.cameras),
        ]

    def _snapshot(self, newer_than: float = -math.inf) -> tuple[dict[str, Any], float] | str:
        """The newest message of each required topic and the oldest receipt time, or a problem."""
        now = self.clock.now()
        with self._lock:
            latest = dict(self._latest)
        missing = [t for t in self._required() if t not in latest or latest[t][1] <= newer_than]
        if missing:
            return f"no message yet on {missing}"
        stale = {
            t: now - latest[t][1]
            for t in self._required()
            if now - latest[t][1] > self.config.max_obs_age_s
        }
        if stale:
            ages = ", ".join(f"{t} {age:.3f} s" for t, age in stale.items())
            return f"stale observation (limit {self.config.max_obs_age_s} s): {ages}"
        return {t: latest[t][0] for t in self._required()}, min(
            latest[t][1] for t in self._required()
        )

    def _observation(self, msgs: dict[str, Any]) -> dict[str, np.ndarray]:
        pos, quat = pose_of(msgs["ee_pose"])
        if quat[1] < 0:  # the sim's sign convention: near the gripper-down (0, 1, 0, 0)
            quat = -quat
        tw = msgs["ee_twist"].twist
        grip = msgs["gripper_state"]
        proprio = np.array(
            [*pos, *quat, tw.linear.x, tw.linear.y, tw.linear.z, tw.angular.x, tw.angular.y, tw.angular.z,
             grip.position[0] if len(grip.position) else math.nan],
            np.float32,
        )  # fmt: skip
        poses = {n: pose_of(msgs[f"objects/{n}/pose"]) for n in self.mirror.objects}
        obs = self.mirror.observe(proprio, poses)
        for cam in self.config.cameras:
            obs[cam] = self._image(cam, msgs[f"camera/{cam}/image_raw"])
        return obs

    def _image(self, cam: str, msg: Image) -> np.ndarray:
        size = self.config.image_size
        if msg.encoding != "rgb8" or (msg.height, msg.width) != (size, size):
            raise ValueError(
                f"camera/{cam}/image_raw is {msg.encoding} {msg.height}x{msg.width}; the env needs "
                f"rgb8 {size}x{size} (set the arm's image size, or RosEnvConfig.image_size)"
            )
        return np.frombuffer(bytes(msg.data), np.uint8).reshape(size, size, 3).copy()

    def _flag(self, topic: str) -> bool:
        with self._lock:
            entry = self._latest.get(topic)
        return bool(entry and entry[0].data)

    # ----- commands ---------------------------------------------------------------------------
    def _publish(self, pos: Any, quat: Any) -> None:
        t = self.node.get_clock().now().to_msg()
        self.pub_target.publish(
            pose_msg(np.asarray(pos), np.asarray(quat), self.config.frame_id, t)
        )

    def hold(self) -> None:
        """Command the measured pose (if any): the arm stops where it is."""
        with self._lock:
            entry = self._latest.get("ee_pose")
        if entry is not None:
            self._publish(*pose_of(entry[0]))

    def _wait_for_obs(self, newer_than: float, timeout_s: float) -> tuple[dict[str, Any], float]:
        deadline = time.monotonic() + timeout_s
        while True:
            snap = self._snapshot(newer_than)
            if not isinstance(snap, str):
                return snap
            check_context(self.node.context, "observations")
            if time.monotonic() > deadline:
                raise StaleObservationError(
                    f"{snap} after waiting {timeout_s} s: is the arm driver (or sim_robot) running, and "
                    "in the same ROS domain and namespace? (`ros2 topic list` shows what is there)"
                )
            time.sleep(0.002)

    # ----- Gymnasium API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the scene through the reset service, then wait for fresh observations."""
        super().reset(seed=seed)
        if self.reset_client is not None:
            self._call_reset()
        msgs, obs_t = self._wait_for_obs(self.clock.now(), self.config.first_obs_timeout_s)
        obs = self._observation(msgs)
        pos, quat = pose_of(msgs["ee_pose"])
        self._target = (tuple(pos.tolist()), tuple(quat.tolist()))
        self._steps = 0
        self._obs_t = obs_t
        self.episode_start = self.clock.now()
        self._next_t = self.episode_start + self.period_s
        return obs, {"success": self._flag("success")}

    def _call_reset(self) -> None:
        assert self.reset_client is not None
        name, timeout = self.config.reset_service, self.config.reset_timeout_s
        if not self.reset_client.wait_for_service(timeout_sec=min(timeout, 10.0)):
            raise TimeoutError(
                f"reset service {name!r} is not available: start reset_node (see hw/INTERFACES.md)"
            )
        result = call_service(self.node, self.reset_client, timeout)
        if result is None:
            raise TimeoutError(f"reset service {name!r} did not answer within {timeout} s")
        if not result.success:
            raise RuntimeError(f"reset failed: {result.message}")

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Command one action, wait for the next control period, observe."""
        if self._target is None:
            raise RuntimeError("call reset() before step()")
        if self._flag("estop"):
            raise RuntimeError(
                "the e-stop is latched: clear it (safety_node/estop, SetBool false) and reset()"
            )
        latency = self.clock.now() - self._obs_t
        with self._lock:
            measured = pose_of(self._latest["ee_pose"][0])
        cmd = decode_action(action, self.mirror.action, measured[1])
        tpos, tquat = self._target
        tquat = quat_mul_floats(rotvec_to_quat_floats(*cmd.delta_rotvec_rad.tolist()), tquat)
        wanted = tuple(float(a + b) for a, b in zip(tpos, cmd.delta_pos_m.tolist(), strict=True))
        pos, quat, report = self.filter.filter(measured[0], measured[1], wanted, tquat)
        self._target = (tuple(np.asarray(pos).tolist()), tuple(np.asarray(quat).tolist()))
        self._publish(pos, quat)
        if self.mirror.action.gripper and math.isfinite(cmd.gripper):
            opening = self.config.gripper_max_m * (1.0 - min(max(cmd.gripper, -1.0), 1.0)) / 2.0
            self.pub_gripper.publish(Float64(data=opening))
        try:
            jitter = self.clock.sleep_until(self._next_t)
        except TimeoutError as err:
            self.hold()
            raise StaleObservationError(f"{err}; the arm is held at its measured pose") from None
        self._next_t += self.period_s
        if self._next_t < self.clock.now():  # fell a whole period behind: restart the schedule
            self._next_t = self.clock.now() + self.period_s
        snap = self._snapshot()
        if isinstance(snap, str):
            self.hold()
            raise StaleObservationError(f"{snap}; the arm is held at its measured pose")
        msgs, self._obs_t = snap
        obs = self._observation(msgs)
        self._steps += 1
        success = self._flag("success")
        terminated = success and self.mirror.terminate_on_success
        truncated = self._steps >= self.mirror.episode_steps
        timing = {
            "jitter_s": jitter,
            "obs_age_s": self.clock.now() - self._obs_t,
            "command_latency_s": latency,
        }
        info = {
            "success": success,
            "is_success": success,
            "timing": timing,
            "safety": report.as_dict(),
        }
        return obs, float(success), terminated, truncated, info

    def _spin_until_closed(self) -> None:
        """Spin the node; an executor shut down by :meth:`close` mid-spin, or rclpy's context by
        SIGINT/SIGTERM (the next wait set fails), is the requested stop; any other error is
        not."""
        try:
            spin_until_shutdown(self._executor, self.node.context)
        except Exception:
            if not self._closing and self.node.context.ok():
                raise

    def close(self) -> None:
        """Stop spinning and destroy the node."""
        self._closing = True
        self._executor.shutdown(timeout_sec=1.0)
        self._spin.join(timeout=2.0)
        if self._own_node:
            self.node.destroy_node()
