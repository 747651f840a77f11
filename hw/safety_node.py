"""``safety_node``: every motion command to the arm goes through here (hw/INTERFACES.md).

The decisions are :class:`handrail.control.safety_gate.SafetyGate`'s (e-stop latch, state
check, recovery, command checks, safety filter, watchdog); this node only feeds it the measured
pose, the commands, its ticks and its clock, publishes what it returns on
``target_pose``/``gripper_command``, reports every clip, hold and refusal on ``safety_events``
(one line each) and whether commands are forwarded on ``safety_ready``.

Nothing the arm's side does may hold this node up: it publishes in Fast DDS's asynchronous mode,
so a hung driver (a full shared-memory queue, a reader that stopped acknowledging) delays the
messages to the driver, never the node's callbacks, its refusals or its watchdog.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from std_msgs.msg import Bool, Float64, String
from std_srvs.srv import SetBool

from handrail.control.safety import SIM_ARM_LIMITS, SafetyLimits
from handrail.control.safety_gate import GateDecision, SafetyGate
from handrail.hw.msgs import pose_msg, pose_of
from handrail.hw.ros_common import COMMAND_QOS, LATCHED_QOS, STATE_QOS, declare_parameters, run_node

__all__ = ["PARAMETERS", "TICK_S", "SafetyNode", "main"]

PARAMETERS: dict[str, Any] = {
    "workspace_low_m": list(SIM_ARM_LIMITS.workspace_low_m),
    "workspace_high_m": list(SIM_ARM_LIMITS.workspace_high_m),
    "braking_margin_m": SIM_ARM_LIMITS.braking_margin_m,
    "max_step_m": SIM_ARM_LIMITS.max_step_m,
    "max_rot_step_rad": SIM_ARM_LIMITS.max_rot_step_rad,
    "max_tilt_rad": SIM_ARM_LIMITS.max_tilt_rad,
    "max_yaw_rad": SIM_ARM_LIMITS.max_yaw_rad,
    "gripper_max_m": SIM_ARM_LIMITS.gripper_max_m,
    "watchdog_s": 0.5,
    "state_timeout_s": 0.5,
    "frame_id": "base",
}
"""Parameters; the limits default to the simulated arm's (``handrail.control.safety.SIM_ARM_LIMITS``)."""

TICK_S = 0.02
"""Period (s) of the deadline checks: the pose going stale, the watchdog, ``safety_ready``."""


class SafetyNode(Node):
    """The node; see the module doc."""

    def __init__(self) -> None:
        super().__init__("safety_node")
        p = declare_parameters(self, PARAMETERS)
        limits = SafetyLimits(
            workspace_low_m=tuple(p["workspace_low_m"]),
            workspace_high_m=tuple(p["workspace_high_m"]),
            max_step_m=p["max_step_m"],
            max_rot_step_rad=p["max_rot_step_rad"],
            max_tilt_rad=p["max_tilt_rad"],
            max_yaw_rad=p["max_yaw_rad"],
            braking_margin_m=p["braking_margin_m"],
            gripper_max_m=p["gripper_max_m"],
        )
        self.frame = str(p["frame_id"])
        self.gate = SafetyGate(
            limits, p["watchdog_s"], p["state_timeout_s"], self.frame, stall_s=5 * TICK_S
        )
        self.pub_target = self.create_publisher(PoseStamped, "target_pose", COMMAND_QOS)
        self.pub_gripper = self.create_publisher(Float64, "gripper_command", COMMAND_QOS)
        self.pub_estop = self.create_publisher(Bool, "estop", LATCHED_QOS)
        self.pub_events = self.create_publisher(String, "safety_events", LATCHED_QOS)
        self.pub_ready = self.create_publisher(Bool, "safety_ready", LATCHED_QOS)
        self.create_subscription(PoseStamped, "ee_pose", self._on_state, STATE_QOS)
        self.create_subscription(PoseStamped, "cmd/target_pose", self._on_command, COMMAND_QOS)
        self.create_subscription(Float64, "cmd/gripper", self._on_gripper, COMMAND_QOS)
        self.create_subscription(Bool, "estop_trigger", self._on_estop_topic, COMMAND_QOS)
        self.create_service(SetBool, "~/estop", self._on_estop_service)
        self.create_timer(TICK_S, self._tick)
        self._logged = ""
        self.ready = False
        self.pub_estop.publish(Bool(data=False))
        self.pub_ready.publish(Bool(data=False))

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_state(self, msg: PoseStamped) -> None:
        pos, quat = pose_of(msg)
        self.gate.on_state(pos, quat, self._now())

    def _on_command(self, msg: PoseStamped) -> None:
        pos, quat = pose_of(msg)
        self._send(self.gate.command(pos, quat, self._now(), msg.header.frame_id))

    def _on_gripper(self, msg: Float64) -> None:
        decision = self.gate.gripper(msg.data)
        if decision.opening_m is not None:
            self.pub_gripper.publish(Float64(data=decision.opening_m))
        if decision.reason:
            self._event(decision.reason)

    def _on_estop_topic(self, msg: Bool) -> None:
        if msg.data:
            self._estop(True)

    def _on_estop_service(
        self, request: SetBool.Request, response: SetBool.Response
    ) -> SetBool.Response:
        self._estop(bool(request.data))
        response.success = True
        response.message = (
            "e-stop latched: all motion stopped" if request.data else "e-stop cleared"
        )
        return response

    def _estop(self, stop: bool) -> None:
        was = self.gate.estopped
        decision = self.gate.estop(stop)
        if decision.send:
            self._publish(decision)
        if stop != was:
            self.pub_estop.publish(Bool(data=stop))
            self._event("estop latched" if stop else "estop cleared")
        self._update_ready()

    def _tick(self) -> None:
        self._send(self.gate.tick(self._now()))
        self._update_ready()

    def _update_ready(self) -> None:
        ready = self.gate.ready(self._now())
        if ready != self.ready:
            self.ready = ready
            self.pub_ready.publish(Bool(data=ready))

    def _send(self, decision: GateDecision) -> None:
        if decision.send:
            self._publish(decision)
        if decision.reason:
            self._event(decision.reason)

    def _publish(self, decision: GateDecision) -> None:
        assert decision.pos_m is not None and decision.quat_wxyz is not None
        t = self.get_clock().now().to_msg()
        self.pub_target.publish(
            pose_msg(np.asarray(decision.pos_m), np.asarray(decision.quat_wxyz), self.frame, t)
        )

    def _event(self, text: str) -> None:
        """One line on ``safety_events`` per event; the log gets a line when the kind of event
        changes (the same refusal, its age growing, is logged once)."""
        self.pub_events.publish(String(data=text))
        kind = re.sub(r"-?\d+(\.\d+)?", "#", text)
        if kind != self._logged and not text.startswith("clipped"):
            self._logged = kind
            self.get_logger().warn(text)


def main(args: list[str] | None = None) -> None:
    """Run ``safety_node`` until interrupted."""
    # Fast DDS sends from its own thread: a publish to a hung driver cannot block this node
    # (rclpy holds the GIL while it publishes, so no Python thread could take over).
    os.environ["RMW_FASTRTPS_PUBLICATION_MODE"] = "ASYNCHRONOUS"
    run_node(SafetyNode, args)


if __name__ == "__main__":
    main()
