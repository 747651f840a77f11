"""sim_robot over real ROS 2 (private network namespace), driven by a client that uses only
rclpy and standard messages as hw/INTERFACES.md describes them (no handrail imports)."""

from handrail.control.safety import SIM_ARM_LIMITS

CLIENT = r"""
import json, subprocess, sys, time
import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, DurabilityPolicy, HistoryPolicy
from geometry_msgs.msg import PoseStamped, WrenchStamped
from sensor_msgs.msg import JointState, Image
from std_msgs.msg import Bool
from std_srvs.srv import Trigger

robot = subprocess.Popen([sys.executable, "-m", "handrail.hw.sim_robot", "--ros-args",
                          "-p", "cameras:=['front']", "-p", "image_size:=32"])
STATE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
COMMAND = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
rclpy.init()
node = Node("interfaces_client")
latest = {}
def keep(name):
    return lambda msg: latest.__setitem__(name, msg)
for name, kind in [("ee_pose", PoseStamped), ("joint_states", JointState), ("gripper_state", JointState),
                   ("ee_wrench", WrenchStamped), ("objects/cube/pose", PoseStamped),
                   ("camera/front/image_raw", Image)]:
    node.create_subscription(kind, name, keep(name), STATE)
node.create_subscription(Bool, "success", keep("success"), LATCHED)
target = node.create_publisher(PoseStamped, "target_pose", COMMAND)
reset = node.create_client(Trigger, "sim_robot/reset_world")

def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.01)

def pos():
    p = latest["ee_pose"].pose.position
    return [p.x, p.y, p.z]

def follow(xyz, seconds):
    # Stream the target at 10 Hz, as a controller client does.
    for _ in range(int(seconds * 10)):
        msg = PoseStamped()
        msg.header.frame_id = "base"
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = xyz
        msg.pose.orientation.w, msg.pose.orientation.x = 0.0, 1.0
        target.publish(msg)
        spin(0.1)
    return pos()

deadline = time.monotonic() + 30
while len(latest) < 7 and time.monotonic() < deadline:
    spin(0.1)
out = {"topics": sorted(latest), "frame": latest["ee_pose"].header.frame_id,
       "joints": list(latest["joint_states"].name), "image": [latest["camera/front/image_raw"].height,
       latest["camera/front/image_raw"].encoding], "success": latest["success"].data}
out["reached"] = follow([0.45, 0.1, 0.25], 3.0)
out["clipped"] = follow([0.45, 0.1, -0.5], 3.0)      # below the table: z is clipped to the box
out["far"] = follow([2.0, 0.1, 0.25], 3.0)           # beyond the box: x is clipped to its wall
cube_before = latest["objects/cube/pose"].pose.position.x
reset.wait_for_service(timeout_sec=10)
future = reset.call_async(Trigger.Request())
rclpy.spin_until_future_complete(node, future, timeout_sec=10)
spin(0.5)
out["reset"] = future.result().message
out["cube_moved"] = abs(latest["objects/cube/pose"].pose.position.x - cube_before) > 1e-4
robot.send_signal(2)
out["exit"] = robot.wait(10)
print(json.dumps(out))
"""


def test_sim_robot_tracks_targets_and_clips_to_the_workspace(ros):
    out = ros(CLIENT)
    assert out["topics"] == sorted(
        ["ee_pose", "joint_states", "gripper_state", "ee_wrench", "objects/cube/pose",
         "camera/front/image_raw", "success"]
    )  # fmt: skip
    assert out["frame"] == "base" and out["image"] == [32, "rgb8"] and out["success"] is False
    assert out["joints"][:7] == [f"joint{i}" for i in range(1, 8)]
    reached = out["reached"]
    assert max(abs(a - b) for a, b in zip(reached, [0.45, 0.1, 0.25], strict=True)) < 0.01
    assert 0.0 <= out["clipped"][2] < 0.03  # held at the box floor (0.015 m), never below
    wall = SIM_ARM_LIMITS.target_high_m[0]  # the box shrunk by its braking margin
    assert wall - 0.05 < out["far"][0] <= SIM_ARM_LIMITS.workspace_high_m[0]  # at it, not beyond
    assert out["reset"].startswith("world reset with seed 1") and out["cube_moved"]
    assert out["exit"] == 0
