"""``safety_node``: every motion command to the arm goes through here (hw/INTERFACES.md).

The decisions are :class:`handrail.control.safety_gate.SafetyGate`'s (e-stop latch, start-up
check, safety filter, watchdog); this node only feeds it the measured pose, the commands and its
clock, publishes what it returns on ``target_pose``/``gripper_command``, and reports every
clip, hold and refusal on ``safety_events``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from std_msgs.msg import Bool, Float64, String
from std_srvs.srv import SetBool

from handrail.control.safety import SafetyLimits
from handrail.control.safety_gate import GateDecision, SafetyGate
from handrail.hw.msgs import pose_msg, pose_of
from handrail.hw.ros_common import COMMAND_QOS, LATCHED_QOS, STATE_QOS, declare_parameters, run_node

__all__ = ["PARAMETERS", "SafetyNode", "main"]

_SIM_ARM = SafetyLimits(
    workspace_low_m=(0.25, -0.35, 0.015),
    workspace_high_m=(0.75, 0.35, 0.6),
    max_step_m=0.05,
    max_rot_step_rad=0.3,
    max_tilt_rad=0.6,
    max_yaw_rad=3.141592653589793,
)

PARAMETERS: dict[str, Any] = {
    "workspace_low_m": list(_SIM_ARM.workspace_low_m),
    "workspace_high_m": list(_SIM_ARM.workspace_high_m),
    "max_step_m": _SIM_ARM.max_step_m,
    "max_rot_step_rad": _SIM_ARM.max_rot_step_rad,
    "max_tilt_rad": _SIM_ARM.max_tilt_rad,
    "max_yaw_rad": _SIM_ARM.max_yaw_rad,
    "watchdog_s": 0.5,
    "state_timeout_s": 0.5,
    "frame_id": "base",
}
"""Parameters; the limits default to the simulated arm's (``handrail.sim.base.default_safety``)."""


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
        )
        self.gate = SafetyGate(limits, p["watchdog_s"], p["state_timeout_s"])
        self.frame = str(p["frame_id"])
        self.pub_target = self.create_publisher(PoseStamped, "target_pose", COMMAND_QOS)
        self.pub_gripper = self.create_publisher(Float64, "gripper_command", COMMAND_QOS)
        self.pub_estop = self.create_publisher(Bool, "estop", LATCHED_QOS)
        self.pub_events = self.create_publisher(String, "safety_events", LATCHED_QOS)
        self.create_subscription(PoseStamped, "ee_pose", self._on_state, STATE_QOS)
        self.create_subscription(PoseStamped, "cmd/target_pose", self._on_command, COMMAND_QOS)
        self.create_subscription(Float64, "cmd/gripper", self._on_gripper, COMMAND_QOS)
        self.create_subscription(Bool, "estop_trigger", self._on_estop_topic, COMMAND_QOS)
        self.create_service(SetBool, "~/estop", self._on_estop_service)
        self.create_timer(0.02, self._tick)
        self.pub_estop.publish(Bool(data=False))
        self._last_reason = ""

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_state(self, msg: PoseStamped) -> None:
        pos, quat = pose_of(msg)
        self.gate.on_state(pos, quat, self._now())

    def _on_command(self, msg: PoseStamped) -> None:
        pos, quat = pose_of(msg)
        self._send(self.gate.command(pos, quat, self._now()))

    def _on_gripper(self, msg: Float64) -> None:
        if self.gate.gripper_allowed():
            self.pub_gripper.publish(msg)

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

    def _tick(self) -> None:
        decision = self.gate.tick(self._now())
        if decision.send:
            self._send(decision)

    def _send(self, decision: GateDecision) -> None:
        if decision.send:
            self._publish(decision)
        if decision.reason and decision.reason != self._last_reason:
            self._event(decision.reason)  # one line per change, not one per command
        self._last_reason = decision.reason

    def _publish(self, decision: GateDecision) -> None:
        assert decision.pos_m is not None and decision.quat_wxyz is not None
        t = self.get_clock().now().to_msg()
        self.pub_target.publish(
            pose_msg(np.asarray(decision.pos_m), np.asarray(decision.quat_wxyz), self.frame, t)
        )

    def _event(self, text: str) -> None:
        self.get_logger().warn(text) if text.startswith(("refused", "hold", "estop")) else None
        self.pub_events.publish(String(data=text))


def main(args: list[str] | None = None) -> None:
    """Run ``safety_node`` until interrupted."""
    run_node(SafetyNode, args)


if __name__ == "__main__":
    main()
