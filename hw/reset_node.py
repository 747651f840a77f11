"""``reset_node``: the ``~/reset`` service that brings the arm and the scene back for an episode.

The sequence is :class:`handrail.control.reset.ResetSequence` (the world reset on
``sim_robot``, then home through the safety node, then an operator's confirmation when asked
for); this node feeds it the measured pose, the safety node's latched ``estop`` and the clock,
and publishes its targets on ``cmd/target_pose``. A failed phase fails the service with the
sequence's message; a latched e-stop fails it at once. A successful answer says where the arm
measured at the end, after everything that moved it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from std_msgs.msg import Bool, Float64
from std_srvs.srv import Trigger

from handrail.control.reset import ResetConfig, ResetSequence
from handrail.hw.msgs import pose_msg, pose_of
from handrail.hw.ros_common import (
    COMMAND_QOS,
    LATCHED_QOS,
    STATE_QOS,
    ContextShutdown,
    NodeClock,
    call_service,
    declare_parameters,
    run_node,
)

__all__ = ["PARAMETERS", "ResetNode", "main"]

_DEFAULT = ResetConfig()

PARAMETERS: dict[str, Any] = {
    "home_pose": [*_DEFAULT.home_pos_m, *_DEFAULT.home_quat_wxyz],
    "home_offset_m": _DEFAULT.home_offset_m,
    "tolerance_m": _DEFAULT.tolerance_m,
    "timeout_s": _DEFAULT.home_timeout_s,
    "wait_for_operator": False,
    "operator_timeout_s": _DEFAULT.operator_timeout_s,
    "reset_world_service": "sim_robot/reset_world",
    "gripper_open_m": 0.08,
    "seed": 0,
    "command_rate_hz": 20.0,
    "frame_id": "base",
}
"""Parameters (hw/INTERFACES.md); ``home_pose`` is x y z qw qx qy qz."""


class ResetNode(Node):
    """The node; see the module doc."""

    def __init__(self) -> None:
        super().__init__("reset_node")
        p = declare_parameters(self, PARAMETERS)
        self.clock = NodeClock(self)
        home = [float(v) for v in p["home_pose"]]
        if len(home) != 7:
            raise ValueError(f"home_pose must be 7 numbers (x y z qw qx qy qz); got {home}")
        world = str(p["reset_world_service"])
        self.config = ResetConfig(
            home_pos_m=(home[0], home[1], home[2]),
            home_quat_wxyz=(home[3], home[4], home[5], home[6]),
            home_offset_m=float(p["home_offset_m"]),
            tolerance_m=float(p["tolerance_m"]),
            home_timeout_s=float(p["timeout_s"]),
            world=bool(world),
            wait_for_operator=bool(p["wait_for_operator"]),
            operator_timeout_s=float(p["operator_timeout_s"]),
        )
        self.p = p
        self.sequence = ResetSequence(self.config)
        self.rng = np.random.default_rng(int(p["seed"]))
        self.busy = threading.Lock()
        self.measured: np.ndarray | None = None
        self.estopped = False
        group = ReentrantCallbackGroup()
        self.create_subscription(
            PoseStamped, "ee_pose", self._on_pose, STATE_QOS, callback_group=group
        )
        self.create_subscription(Bool, "estop", self._on_estop, LATCHED_QOS, callback_group=group)
        self.pub_target = self.create_publisher(PoseStamped, "cmd/target_pose", COMMAND_QOS)
        self.pub_gripper = self.create_publisher(Float64, "cmd/gripper", COMMAND_QOS)
        self.world = self.create_client(Trigger, world, callback_group=group) if world else None
        self.create_service(Trigger, "~/reset", self._on_reset, callback_group=group)
        self.create_service(Trigger, "~/confirm", self._on_confirm, callback_group=group)

    def _on_pose(self, msg: PoseStamped) -> None:
        self.measured = pose_of(msg)[0]

    def _on_estop(self, msg: Bool) -> None:
        self.estopped = bool(msg.data)

    def _on_confirm(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success = self.sequence.confirm()
        response.message = (
            "confirmed" if response.success else "no reset is waiting for a confirmation"
        )
        return response

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if not self.busy.acquire(blocking=False):
            response.success, response.message = False, "a reset is already running"
            return response
        try:
            response.success, response.message = self._run()
        except ContextShutdown:  # SIGINT/SIGTERM mid-reset: stop, nobody is left to answer
            return response
        finally:
            self.busy.release()
        if not response.success:
            self.get_logger().error(f"reset failed: {response.message}")
        return response

    def _run(self) -> tuple[bool, str]:
        period = 1.0 / float(self.p["command_rate_hz"])
        status = self.sequence.start(self.clock.now(), self.rng, self.estopped)
        world = ""
        while not self.sequence.finished:
            if status.phase == "world":
                ok, world = self._reset_world()
                self.measured = None  # the world reset moved the arm: wait for its new pose
                status = self.sequence.world_done(self.clock.now(), ok, world)
                continue
            if status.phase == "home":
                assert status.target_pos_m is not None and status.target_quat_wxyz is not None
                t = self.get_clock().now().to_msg()
                self.pub_target.publish(
                    pose_msg(
                        status.target_pos_m, status.target_quat_wxyz, str(self.p["frame_id"]), t
                    )
                )
                self.pub_gripper.publish(Float64(data=float(self.p["gripper_open_m"])))
            self.clock.sleep(period)
            status = self.sequence.update(self.clock.now(), self.measured, self.estopped)
        if self.sequence.phase == "failed":
            return False, self.sequence.message
        goal = ", ".join(f"{v:.3f}" for v in self.sequence.goal_m)
        at = "" if self.measured is None else ", ".join(f"{v:.3f}" for v in self.measured)
        return True, f"reset done: arm at ({at}) m, home ({goal}) m" + (
            f"; {world}" if world else ""
        )

    def _reset_world(self) -> tuple[bool, str]:
        assert self.world is not None
        if not self.world.wait_for_service(timeout_sec=self.config.world_timeout_s):
            return False, f"service {self.world.srv_name!r} is not available"
        result = call_service(self, self.world, self.config.world_timeout_s)
        return (bool(result.success), str(result.message)) if result else (False, "no answer")


def main(args: list[str] | None = None) -> None:
    """Run ``reset_node`` until interrupted."""
    run_node(ResetNode, args, threads=4)


if __name__ == "__main__":
    main()
