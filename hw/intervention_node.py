"""``intervention_node``: a person's teleop device, arbitrated, as commands for the actor.

It reads ``spacenav/twist``, ``spacenav/joy`` and ``joy`` (:class:`TopicDevice`), runs the
intervention :class:`~handrail.control.intervention.Arbiter` against the task's action layout at
the control rate, and publishes ``human/engaged`` (latched, on change), ``human/action`` (every
tick while engaged) and ``human/events`` (success, failure, end, rerecord). The actor node's
``RosHuman`` executes the action instead of the policy's while the person is engaged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped, Twist
from rclpy.node import Node
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Bool, Float32MultiArray, String

from handrail.control.intervention import Arbiter, ArbiterConfig
from handrail.control.teleop_topics import TopicDevice
from handrail.hw.mirrors import mirror
from handrail.hw.msgs import pose_of
from handrail.hw.ros_common import (
    COMMAND_QOS,
    LATCHED_QOS,
    STATE_QOS,
    NodeClock,
    declare_parameters,
    run_node,
)

__all__ = ["PARAMETERS", "InterventionNode", "main"]

PARAMETERS: dict[str, Any] = {
    "task": "pick_cube",
    "rate_hz": 10.0,
    "engage": "either",
    "deadband": 0.1,
    "release_after_s": 0.5,
    "operator_yaw_rad": 0.0,
    "device_timeout_s": 0.5,
    "gripper_max_m": 0.08,
}
"""Parameters (hw/INTERFACES.md); ``engage``, ``deadband``, ``release_after_s`` and
``operator_yaw_rad`` are those of ``ArbiterConfig``."""


class InterventionNode(Node):
    """The node; see the module doc."""

    def __init__(self) -> None:
        super().__init__("intervention_node")
        p = declare_parameters(self, PARAMETERS)
        self.clock = NodeClock(self)
        self.action = mirror(str(p["task"])).action
        self.arbiter = Arbiter(
            ArbiterConfig(
                engage=p["engage"],  # validated by ArbiterConfig
                deadband=float(p["deadband"]),
                release_after_s=float(p["release_after_s"]),
                operator_yaw_rad=float(p["operator_yaw_rad"]),
            ),
            self.action,
        )
        self.device = TopicDevice(stale_s=float(p["device_timeout_s"]))
        self.ee_quat: np.ndarray | None = None
        self.engaged = False
        self.pub_engaged = self.create_publisher(Bool, "human/engaged", LATCHED_QOS)
        self.pub_action = self.create_publisher(Float32MultiArray, "human/action", COMMAND_QOS)
        self.pub_events = self.create_publisher(String, "human/events", COMMAND_QOS)
        self.create_subscription(Twist, "spacenav/twist", self._on_twist, COMMAND_QOS)
        self.create_subscription(Joy, "spacenav/joy", self._on_spacenav_joy, COMMAND_QOS)
        self.create_subscription(Joy, "joy", self._on_joy, COMMAND_QOS)
        self.create_subscription(PoseStamped, "ee_pose", self._on_pose, STATE_QOS)
        self.create_subscription(JointState, "gripper_state", self._on_gripper, STATE_QOS)
        self.gripper_max_m = float(p["gripper_max_m"])
        self.gripper_cmd = -1.0
        self.create_timer(1.0 / float(p["rate_hz"]), self._tick)
        self.pub_engaged.publish(Bool(data=False))

    def _on_twist(self, msg: Twist) -> None:
        lin, ang = msg.linear, msg.angular
        self.device.on_spacenav_twist(
            (lin.x, lin.y, lin.z), (ang.x, ang.y, ang.z), self.clock.now()
        )

    def _on_spacenav_joy(self, msg: Joy) -> None:
        self.device.on_spacenav_buttons(list(msg.buttons))

    def _on_joy(self, msg: Joy) -> None:
        self.device.on_joy(list(msg.axes), list(msg.buttons), self.clock.now())

    def _on_pose(self, msg: PoseStamped) -> None:
        self.ee_quat = pose_of(msg)[1]

    def _on_gripper(self, msg: JointState) -> None:
        if len(msg.position):  # the measured opening as a command: a take-over keeps the grip
            opening = min(max(float(msg.position[0]) / self.gripper_max_m, 0.0), 1.0)
            self.gripper_cmd = 1.0 - 2.0 * opening

    def _tick(self) -> None:
        now = self.clock.now()
        state = self.device.state(now)
        # The policy's proposal is not known here: the arm at rest, the gripper as measured.
        idle = np.zeros(self.action.dim, np.float32)
        if self.action.gripper:
            idle[-1] = self.gripper_cmd
        decision = self.arbiter.decide(idle, state, now, self.ee_quat)
        engaged = self.arbiter.engaged
        if engaged != self.engaged:
            self.engaged = engaged
            self.pub_engaged.publish(Bool(data=engaged))
        if engaged:
            self.pub_action.publish(
                Float32MultiArray(data=decision.action.astype(np.float32).tolist())
            )
        for event in decision.events:
            self.pub_events.publish(String(data=event.value))


def main(args: list[str] | None = None) -> None:
    """Run ``intervention_node`` until interrupted."""
    run_node(InterventionNode, args)


if __name__ == "__main__":
    main()
