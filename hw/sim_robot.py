"""``sim_robot``: a MuJoCo task world behind the same ROS 2 interfaces as a real arm.

It publishes the ``cartesian_pose`` arm profile (joint states, end-effector pose, twist and
wrench, gripper state, optional camera images), the task objects' poses as a stand-in for
perception, and the task's success flag as a stand-in for a success detector; it follows
``target_pose`` through the sim's operational-space controller, which is what a Cartesian
impedance controller does on a real arm (hw/INTERFACES.md lists every name).

Physics runs in its own thread, ``physics_dt_s`` at a time, paced to the wall clock times
``real_time_factor`` (0: as fast as the CPU allows). Whenever it is not exactly real time it
publishes ``/clock``, so the other nodes run on simulated time with ``use_sim_time:=true``.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import mujoco
import numpy as np
import rclpy
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64
from std_srvs.srv import Trigger

from handrail.control.safety import SIM_ARM_LIMITS
from handrail.hw.msgs import pose_msg, pose_of, stamp
from handrail.hw.ros_common import COMMAND_QOS, LATCHED_QOS, STATE_QOS, declare_parameters, run_node
from handrail.sim import make
from handrail.sim.arm import ARM_JOINTS, CAMERAS, FINGER_JOINTS, TCP_SITE
from handrail.sim.base import ArmEnv

__all__ = ["PARAMETERS", "SimRobot", "main"]

PARAMETERS: dict[str, Any] = {
    "task": "pick_cube",
    "seed": 0,
    "state_rate_hz": 100.0,
    "real_time_factor": 1.0,
    "cameras": [],
    "image_size": 128,
    "camera_rate_hz": 10.0,
    "watchdog_s": 0.5,
    "frame_id": "base",
}
"""Parameters (hw/INTERFACES.md); ``cameras`` is a list of names, empty for none."""


class SimRobot(Node):
    """The node; see the module doc."""

    def __init__(self) -> None:
        super().__init__("sim_robot")
        self.p = declare_parameters(self, PARAMETERS)
        cameras = tuple(str(c) for c in self.p["cameras"] if c)
        unknown = sorted(set(cameras) - set(CAMERAS))
        if unknown:
            raise ValueError(f"cameras {unknown} are not the arm's; it has {list(CAMERAS)}")
        env = make(
            self.p["task"], cameras=(), image_size=int(self.p["image_size"]), safety=SIM_ARM_LIMITS
        ).unwrapped  # the robot's box, as safety_node's
        if not isinstance(env, ArmEnv):
            raise ValueError(f"task {self.p['task']!r} is not an arm task")
        self.env = env
        self.frame = str(self.p["frame_id"])
        rtf = float(self.p["real_time_factor"])
        if rtf < 0 or not math.isfinite(rtf):
            raise ValueError(f"real_time_factor must be >= 0 (0: as fast as possible); got {rtf}")
        self.rtf = rtf
        self.sim_clock = rtf != 1.0
        self.dt = self.env.config.physics_dt_s
        self.steps_per_tick = max(1, round(1.0 / (float(self.p["state_rate_hz"]) * self.dt)))
        tick_s = self.steps_per_tick * self.dt  # one state publication
        self.camera_every = max(1, round(1.0 / (float(self.p["camera_rate_hz"]) * tick_s)))
        self.lock = threading.Lock()
        self.resets = 0
        self.sim_time = 0.0
        self.last_target_time = -math.inf
        self.holding = True
        self.success = False
        self.env.reset(seed=int(self.p["seed"]))
        self._sensor_setup()
        self.pub_joints = self.create_publisher(JointState, "joint_states", STATE_QOS)
        self.pub_pose = self.create_publisher(PoseStamped, "ee_pose", STATE_QOS)
        self.pub_twist = self.create_publisher(TwistStamped, "ee_twist", STATE_QOS)
        self.pub_wrench = self.create_publisher(WrenchStamped, "ee_wrench", STATE_QOS)
        self.pub_gripper = self.create_publisher(JointState, "gripper_state", STATE_QOS)
        self.pub_success = self.create_publisher(Bool, "success", LATCHED_QOS)
        self.pub_objects = {
            name: self.create_publisher(PoseStamped, f"objects/{name}/pose", STATE_QOS)
            for name in self.env.object_poses()
        }
        self.pub_clock = self.create_publisher(Clock, "/clock", 10) if self.sim_clock else None
        self.cameras = {
            cam: self.create_publisher(Image, f"camera/{cam}/image_raw", STATE_QOS)
            for cam in cameras
        }
        self.renderer: mujoco.Renderer | None = (
            None  # made in the physics thread (GL contexts are per thread)
        )
        self.create_subscription(PoseStamped, "target_pose", self._on_target, COMMAND_QOS)
        self.create_subscription(Float64, "gripper_command", self._on_gripper, COMMAND_QOS)
        self.create_service(Trigger, "~/reset_world", self._on_reset)
        self.running = True
        self.thread = threading.Thread(
            target=self._physics_loop, name="sim_robot physics", daemon=True
        )
        self.thread.start()
        self.get_logger().info(
            f"sim_robot: task {self.p['task']}, state at {self.p['state_rate_hz']} Hz, "
            f"real-time factor {rtf or 'max'}, cameras {list(cameras) or 'none'}"
        )

    def _sensor_setup(self) -> None:
        """The hand body (wrench is the contact force on it) and the ids published."""
        m = self.env.model
        self.hand_body = int(m.site_bodyid[m.site(TCP_SITE).id])
        self.joint_names = [*ARM_JOINTS, *FINGER_JOINTS]

    # ----- commands ---------------------------------------------------------------------------
    def _on_target(self, msg: PoseStamped) -> None:
        pos, quat = pose_of(msg)
        with self.lock:
            self.env.command_pose(pos, quat)
            self.last_target_time = self.sim_time
            self.holding = False

    def _on_gripper(self, msg: Float64) -> None:
        with self.lock:
            self.env.command_gripper(float(msg.data))

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        seed = int(self.get_parameter("seed").value) + self.resets + 1
        with self.lock:
            self.env.reset(seed=seed)
            self.resets += 1
            self.holding = True
        response.success, response.message = True, f"world reset with seed {seed}"
        return response

    # ----- physics ----------------------------------------------------------------------------
    def _physics_loop(self) -> None:
        try:
            self._run_physics()
        except Exception:
            if self.running and rclpy.ok():
                raise
            # shutting down: rclpy's SIGINT handler invalidated the context mid-publish
        finally:
            if self.renderer is not None:
                self.renderer.close()

    def _run_physics(self) -> None:
        start_wall, tick = time.monotonic(), 0
        last_success_pub = -math.inf
        while self.running:
            with self.lock:
                self._watchdog()
                self.env.advance(self.steps_per_tick)
                self.sim_time += self.steps_per_tick * self.dt
                tick += 1
                now = self.sim_time if self.sim_clock else time.time()
                t = stamp(now)
                if self.pub_clock is not None:
                    self.pub_clock.publish(Clock(clock=t))
                self._publish_state(t)
                success = bool(self.env.is_success())
                if self.cameras and tick % self.camera_every == 0:
                    self._publish_images(t)
            if success != self.success or self.sim_time - last_success_pub >= 1.0:
                self.success, last_success_pub = success, self.sim_time
                self.pub_success.publish(Bool(data=success))
            if self.rtf > 0:
                delay = start_wall + self.sim_time / self.rtf - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

    def _watchdog(self) -> None:
        """No target for ``watchdog_s``: hold the pose the arm is at (once)."""
        if not self.holding and self.sim_time - self.last_target_time > float(self.p["watchdog_s"]):
            self.env.command_pose(self.env.ee_pos, self.env.ee_quat)
            self.holding = True

    def _publish_state(self, t: Time) -> None:
        env, state = self.env, self.env.arm_state()
        proprio = state["proprio"]
        js = JointState(name=self.joint_names)
        js.header.stamp = t
        js.position = state["joint_pos_rad"].tolist()
        js.velocity = state["joint_vel_rad_s"].tolist()
        js.effort = state["joint_effort_nm"].tolist()
        self.pub_joints.publish(js)
        self.pub_pose.publish(pose_msg(proprio[:3], proprio[3:7], self.frame, t))
        tw = TwistStamped()
        tw.header.frame_id, tw.header.stamp = self.frame, t
        tw.twist.linear.x, tw.twist.linear.y, tw.twist.linear.z = (float(v) for v in proprio[7:10])
        tw.twist.angular.x, tw.twist.angular.y, tw.twist.angular.z = (
            float(v) for v in proprio[10:13]
        )
        self.pub_twist.publish(tw)
        self.pub_wrench.publish(self._wrench(t))
        gs = JointState(name=["gripper"], position=[float(proprio[13])])
        gs.velocity = [float(state["gripper_vel_m_s"][0])]
        gs.header.stamp = t
        self.pub_gripper.publish(gs)
        for name, (pos, quat) in env.object_poses().items():
            self.pub_objects[name].publish(pose_msg(pos, quat, self.frame, t))

    def _wrench(self, t: Time) -> WrenchStamped:
        """Contact force and torque (about the tcp) that the hand and fingers exert, base frame."""
        m, d = self.env.model, self.env.data
        force, torque, f6 = np.zeros(3), np.zeros(3), np.zeros(6)
        tcp = self.env.ee_pos
        for i in range(d.ncon):
            con = d.contact[i]
            b1, b2 = m.geom_bodyid[con.geom1], m.geom_bodyid[con.geom2]
            sign = 1.0 if self._on_hand(b1) else -1.0 if self._on_hand(b2) else 0.0
            if sign == 0.0:
                continue
            mujoco.mj_contactForce(m, d, i, f6)
            world = con.frame.reshape(3, 3).T @ f6[:3] * sign  # force on geom2 from geom1
            force += world
            torque += np.cross(con.pos - tcp, world)
        msg = WrenchStamped()
        msg.header.frame_id, msg.header.stamp = self.frame, t
        msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = (float(v) for v in force)
        msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = (float(v) for v in torque)
        return msg

    def _on_hand(self, body: int) -> bool:
        """Whether ``body`` is the hand or a finger (descends from the hand body)."""
        parents = self.env.model.body_parentid
        while body > 0:
            if body == self.hand_body:
                return True
            body = int(parents[body])
        return False

    def _publish_images(self, t: Time) -> None:
        if self.renderer is None:
            size = int(self.p["image_size"])
            self.renderer = mujoco.Renderer(self.env.model, size, size)
        for cam, pub in self.cameras.items():
            self.renderer.update_scene(self.env.data, camera=cam)
            pixels = self.renderer.render()
            img = Image(
                height=pixels.shape[0],
                width=pixels.shape[1],
                encoding="rgb8",
                step=pixels.shape[1] * 3,
            )
            img.header.stamp, img.header.frame_id = t, f"camera_{cam}"
            img.data = pixels.tobytes()
            pub.publish(img)

    def close(self) -> None:
        """Stop the physics thread (which frees its renderer: GL contexts are per thread)."""
        self.running = False
        self.thread.join(timeout=2.0)


def main(args: list[str] | None = None) -> None:
    """Run ``sim_robot`` until interrupted."""
    run_node(SimRobot, args)


if __name__ == "__main__":
    main()
