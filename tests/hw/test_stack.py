"""The whole sim_robot.launch.xml stack, started with `handrail launch` over real ROS 2 in a
private network namespace: episodes, interventions, the store, e-stop, watchdog, crashes."""

import pytest

# Shared by the scripts below: start the stack, a client node, helpers. Runs inside the netns.
PRELUDE = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import numpy as np
import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, DurabilityPolicy, HistoryPolicy
from geometry_msgs.msg import PoseStamped, Twist
from sensor_msgs.msg import Joy
from std_msgs.msg import String
from std_srvs.srv import SetBool

HANDRAIL = str(Path(sys.executable).with_name("handrail"))
LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
COMMAND = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
STATE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)

def launch(*args):
    return subprocess.Popen([HANDRAIL, "launch", "sim_robot.launch.xml", *args], start_new_session=True)

# These tests check recording and crash safety, not timing: on a loaded two-CPU machine sim_robot's
# 100 Hz publisher can pause past the 0.2 s default and the actor rightly stops on the stale
# observation (tests/hw/test_nodes.py checks that stop). Allow a pause a loaded machine makes.
LOADED_MACHINE_OBS_AGE = "max_obs_age_s:=1.0"

def stop(proc):
    os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(30)

rclpy.init()
node = Node("test_client")
status, events, poses = [], [], []
node.create_subscription(String, "actor/status", lambda m: status.append(json.loads(m.data)), LATCHED)
node.create_subscription(String, "safety_events", lambda m: events.append(m.data), LATCHED)
node.create_subscription(PoseStamped, "ee_pose", lambda m: poses.append((time.monotonic(), m.pose.position)), STATE)

def wait_actor_exit(timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if subprocess.run(["pgrep", "-f", "handrail.hw.actor_node"], capture_output=True).returncode:
            return True
        time.sleep(0.2)
    return False

def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.01)

def spin_until(cond, timeout):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    return cond()
"""


def test_actor_runs_the_expert_records_episodes_and_a_persons_intervention(ros, tmp_path):
    store = tmp_path / "store"
    out = ros(
        PRELUDE
        + rf'''
stack = launch("store:={store}", "episodes:=3", LOADED_MACHINE_OBS_AGE)
twist = node.create_publisher(Twist, "spacenav/twist", COMMAND)
buttons = node.create_publisher(Joy, "spacenav/joy", COMMAND)
from std_msgs.msg import Bool
success = []
node.create_subscription(Bool, "success", lambda m: success.append(m.data), LATCHED)
assert spin_until(lambda: len(status) >= 1, 90), "no episode finished"
# Into the second episode: the world reset clears the success flag, then the actor steps. (A
# fixed wait was too short under load: the reset took longer and the push fell into it.)
assert spin_until(lambda: success and not success[-1], 60), "the world was not reset"
spin(0.5)
for _ in range(20):  # hold the SpaceMouse button and push the cap up for 2 s (>= 8 steps under load)
    msg = Twist()
    msg.linear.z = 1.0
    twist.publish(msg)
    buttons.publish(Joy(buttons=[1, 0]))
    spin(0.1)
buttons.publish(Joy(buttons=[0, 0]))
twist.publish(Twist())
assert spin_until(lambda: len(status) >= 3, 90), status
assert wait_actor_exit(30)  # episodes:=3 reached: the actor commits and exits by itself
code = stop(stack)
import handrail.demos
data = handrail.demos.open_store("{store}").load()
ep = data.episode_starts[1], data.episode_starts[1] + data.episode_lengths[1]
human = data.intervention[ep[0]:ep[1]] == 1
print(json.dumps({{
    "status": status, "episodes": data.num_episodes, "success": [r.success for r in data.records],
    "human_steps": int(human.sum()), "other_human": int((data.intervention == 1).sum() - human.sum()),
    "human_z": data.action[ep[0]:ep[1]][human, 2].tolist(), "code": code,
    "scripted": int((data.intervention == 2).sum()), "steps": int(data.num_steps),
}}))
'''
    )
    assert [s["success"] for s in out["status"]] == [True, True, True]
    assert out["episodes"] == 3 and out["success"] == [True, True, True]
    assert out["status"][1]["human_steps"] == out["human_steps"] >= 5
    assert out["other_human"] == 0
    # The person's upward push was executed and stored; after the button is released the person
    # keeps control, still, for the arbiter's release time (0.5 s).
    assert sum(z > 0.5 for z in out["human_z"]) >= 8 and min(out["human_z"]) >= 0.0
    assert out["scripted"] == out["steps"] - out["human_steps"]  # the expert acted otherwise
    assert out["code"] == 0


def test_estop_stops_motion_within_a_control_period_and_the_watchdog_holds_a_stalled_actor(ros):
    out = ros(
        PRELUDE
        + r"""
stack = launch("actor:=false")
target = node.create_publisher(PoseStamped, "cmd/target_pose", COMMAND)
estop = node.create_client(SetBool, "safety_node/estop")
assert spin_until(lambda: len(poses) > 10, 60)

def command(x, seconds):
    for _ in range(int(seconds * 10)):
        msg = PoseStamped()
        msg.header.frame_id = "base"
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = x, 0.0, 0.3
        msg.pose.orientation.x = 1.0
        target.publish(msg)
        spin(0.1)

def moved_after(t0, skip, until=float("inf")):
    after = [p for t, p in poses if t0 + skip < t < until]
    if len(after) < 2:
        return 0.0
    return float(np.hypot(after[-1].x - after[0].x, after[-1].z - after[0].z))

# Moving towards x = 0.65 at the step limit. Under load the safety node may see its first pose
# (or this client's commands) seconds after this client does: command until the arm moves, and
# latch the e-stop while it does (a fixed wait let a slowed client see it arrive and brake first).
assert estop.wait_for_service(timeout_sec=10)
t_start = time.monotonic()
while moved_after(time.monotonic() - 0.4, 0) < 0.015 and time.monotonic() < t_start + 30:
    command(0.65, 0.1)
t_stop = time.monotonic()
moving = moved_after(t_stop - 0.4, 0, t_stop)
future = estop.call_async(SetBool.Request(data=True))
rclpy.spin_until_future_complete(node, future, timeout_sec=5)
# Under load the reply can take longer than a control period: the clock starts when the
# safety node has answered (it latches before it answers), not when this client asked.
t_latched = time.monotonic()
command(0.3, 1.0)  # commands during the e-stop are dropped
estop_moved = moved_after(t_latched, 0.1)
future = estop.call_async(SetBool.Request(data=False))
rclpy.spin_until_future_complete(node, future, timeout_sec=5)
t_clear = time.monotonic()
command(0.4, 0.5)  # moving again, then the "actor" stalls
t_stall = time.monotonic()
resumed = moved_after(t_clear, 0, t_stall)
spin(1.5)
stall_moved = moved_after(t_stall, 0.6)  # the watchdog (0.5 s) held the arm where it was
code = stop(stack)
print(json.dumps({"moving": moving, "estop_moved": estop_moved, "resumed": resumed,
                  "stall_moved": stall_moved, "events": events,
                  "estop_reply": future.result().message, "code": code}))
"""
    )
    # The arm moved before the e-stop and after it was cleared (else the stops prove nothing).
    assert out["moving"] > 0.01 and out["resumed"] > 0.01, out
    assert out["estop_moved"] < 0.003  # metres, from one control period after the stop
    assert out["stall_moved"] < 0.003
    assert "estop latched" in out["events"]
    assert "estop cleared" in out["events"]
    assert any(e.startswith("hold: watchdog") for e in out["events"])
    assert out["code"] == 0


def test_a_faster_than_real_time_stack_runs_every_node_on_simulated_time(ros, capsys):
    # real_time_factor 2.5 + use_sim_time: sim_robot publishes /clock and every other node
    # paces, ages messages and times out on it, so the same episodes take less wall time.
    out = ros(
        PRELUDE
        + r"""
from rosgraph_msgs.msg import Clock
clock = []
node.create_subscription(Clock, "/clock", lambda m: clock.append(
    (time.monotonic(), m.clock.sec + m.clock.nanosec * 1e-9)), 10)
# Ages count on the simulated clock: 2.5 s of it is the 1.0 s of wall time LOADED_MACHINE_OBS_AGE
# allows (0.2 s of simulated time, 80 ms of wall time, failed in CI: "stale observation ... 0.200 s").
# Six episodes, of which two are read: at 2.5x two episodes were over in 3 s, and once in CI this
# script's subscription matched the actor's status writer only after the actor had exited.
stack = launch("episodes:=6", "real_time_factor:=2.5", "use_sim_time:=true", "max_obs_age_s:=2.5")
def clock_now():
    # the newest /clock sample from after this call: under load this node may discover
    # sim_robot's /clock writer later than the actor's status writer (CI: clock was still empty
    # when the first status arrived)
    n = len(clock)
    assert spin_until(lambda: len(clock) > n, 30), "no /clock from sim_robot"
    return clock[-1]
assert spin_until(lambda: len(status) >= 1, 90), "no episode finished"
t0 = clock_now()
assert spin_until(lambda: len(status) >= 2, 90), status
t1 = clock_now()
assert wait_actor_exit(30)
code = stop(stack)
print(json.dumps({"status": status, "sim_s": t1[1] - t0[1], "wall_s": t1[0] - t0[0],
                  "code": code}))
"""
    )
    assert len(out["status"]) >= 2 and any(s["success"] for s in out["status"]), out["status"]
    for line in out["status"]:  # paced on simulated time: one 0.1 s control period per step
        # (on the wall clock it would be 0.25 s of simulated time per step at 2.5x). A step the
        # actor runs late on a busy CPU restarts its schedule, so allow a quarter more, not 2.5x.
        assert line["length"] * 0.1 - 0.01 <= line["seconds"] <= line["length"] * 0.125 + 0.15, line
    assert out["sim_s"] > 0 and out["wall_s"] > 0, out  # /clock ran while the actor did
    # every node stopped cleanly (CI once saw safety_node hang deleting its DDS entities when
    # the launch stopped them all at once), and no callback's error went unread at the stop
    assert out["code"] == 0
    err = capsys.readouterr().err
    assert "never retrieved" not in err and "never awaited" not in err


def test_killing_the_actor_mid_episode_loses_no_committed_episode(ros, tmp_path):
    store = tmp_path / "store"
    out = ros(
        PRELUDE
        + rf'''
stack = launch("store:={store}", "episodes:=0", LOADED_MACHINE_OBS_AGE)
assert spin_until(lambda: len(status) >= 2, 90), status
spin(1.0)  # mid-way through the third episode
actor = subprocess.run(["pgrep", "-f", "handrail.hw.actor_node"], capture_output=True, text=True)
os.kill(int(actor.stdout.split()[0]), signal.SIGKILL)
time.sleep(1.0)
stop(stack)
import handrail.demos
from handrail.demos.store import open_writer
open_writer("{store}").close()  # what the next writer does: recover after the crash
data = handrail.demos.open_store("{store}").load()
print(json.dumps({{"episodes": data.num_episodes, "lengths": data.episode_lengths.tolist(),
                   "status": status}}))
'''
    )
    assert out["episodes"] >= 2
    assert out["lengths"][:2] == [s["length"] for s in out["status"][:2]]


@pytest.mark.slow
def test_a_short_training_run_through_the_stack_improves_the_policy(ros, tmp_path):
    import dataclasses
    import json

    from handrail.learners.agents.sac import SACConfig
    from handrail.learners.learner import LoopConfig

    # The arm tasks' sparse-reward recipe (app/config.py), small, plus a BC term, and
    # a lower starting temperature: in 16 episodes the preset's 0.05 does not come down far
    # enough for the stochastic policy to succeed. The same run in sim (reach, sparse, 8 demos,
    # 800 env steps, 3 seeds): successes in the last 6 training episodes 1-2 at 0.05 (this test
    # failed twice so), 5-6 at 0.01.
    config = tmp_path / "config.json"
    sac = SACConfig(hidden_dims=(64, 64), batch_size=64, utd=4, gamma=0.95, init_temperature=0.01,
                    n_step=3, backup_entropy=False, entropy_rows="online", bc_weight=1.0)  # fmt: skip
    loop = LoopConfig(
        warmup_steps=100, buffer_capacity=20_000, intervention_capacity=1000, normalize_obs=False
    )  # raw inputs, as the arm tasks' presets
    config.write_text(json.dumps({"sac": sac.to_json(), "loop": dataclasses.asdict(loop)}))
    demos, run = tmp_path / "demos", tmp_path / "run"
    out = ros(
        PRELUDE
        + rf'''
stack = launch("task:=reach", "actor:=false")
def actor(*params):
    args = [p for kv in params for p in ("-p", kv)]
    # Everything shares two CPUs here, the learner's updates included: a looser age limit, and a
    # longer wait for the first observation (10 s once ran out under load).
    proc = subprocess.Popen([sys.executable, "-m", "handrail.hw.actor_node", "--ros-args", "-p", "task:=reach",
                             "-p", "max_obs_age_s:=1.0", "-p", "first_obs_timeout_s:=60.0", *args])
    spin_until(lambda: proc.poll() is not None, 400)  # keep reading actor/status meanwhile
    return proc.wait(10)
recorded = actor("store:={demos}", "episodes:=8")  # the scripted expert, through the stack
status.clear()
trained = actor("learner:=local", "learner_config:={config}", "run_dir:={run}", "demos:={demos}",
                "episodes:=16")
spin(1.0)
learned = [s["success"] for s in status if "updates" in s]
replayed = actor("policy:={run}", "episodes:=1")
code = stop(stack)
print(json.dumps({{"recorded": recorded, "trained": trained, "learned": learned, "replayed": replayed,
                  "counters": json.loads(Path("{run}/checkpoints/latest/trainer.json").read_text()),
                  "code": code}}))
''',
        timeout_s=600,
    )
    assert out["recorded"] == out["trained"] == out["replayed"] == 0
    learned = out["learned"]
    assert len(learned) == 16
    # Measured (2026-11-26, beside a 2-process bench): 0 of the first 8 episodes, 6 of the
    # last 8 (5 of the last 6).
    assert sum(learned[-6:]) >= sum(learned[:6]) + 3, learned
    assert out["counters"]["learner"]["updates"] > 0


@pytest.mark.slow
def test_actor_node_runs_a_pixel_policy_on_the_arms_camera_topics(ros, tmp_path):
    # A policy trained end to end on the front camera (--pixels, read at 8x8) runs on the stack:
    # actor_node reads camera/front/image_raw at the arm's 16x16, the policy resizes each frame,
    # and the store records the frames as the arm sent them.
    from pathlib import Path

    from handrail.launch import cli

    run, store = tmp_path / "run", tmp_path / "store"
    assert cli.main(["train", "--task", "pick_cube", "--pixels", "--pixels-size", "8",
                     "--env-kwargs", "cameras=('front',)", "image_size=16", "--steps", "120",
                     "--eval-every", "120", "--eval-episodes", "1", "--no-video", "--no-progress",
                     "--loop.warmup-steps", "100", "--sac.hidden-dims", "32", "32",
                     "--sac.batch-size", "32", "--sac.utd", "1", "--sac.image-channels", "8",
                     "--sac.image-strides", "2", "--sac.image-kernels", "3",
                     "--sac.image-features", "8",
                     "--run-dir", str(run)]) == 0  # fmt: skip
    params = tmp_path / "params.yaml"
    stock = Path(cli.__file__).parent / "ros" / "sim_robot.yaml"
    text = stock.read_text()
    for node in ("sim_robot", "actor_node"):  # the same camera for the arm and the actor
        text = text.replace(f"/**/{node}:\n  ros__parameters:\n",
                            f"/**/{node}:\n  ros__parameters:\n    cameras: [front]\n"
                            "    image_size: 16\n")  # fmt: skip
    params.write_text(text)
    out = ros(
        PRELUDE
        + rf'''
stack = launch("params:={params}", "policy:={run}", "store:={store}", "episodes:=2",
               LOADED_MACHINE_OBS_AGE)
assert spin_until(lambda: len(status) >= 2, 120), status
assert wait_actor_exit(30)
code = stop(stack)
import handrail.demos
got = handrail.demos.open_store("{store}")
data = got.load()
print(json.dumps({{"status": status, "code": code, "episodes": data.num_episodes,
                   "front": list(data.obs["front"].shape), "dtype": str(data.obs["front"].dtype),
                   "moving": bool(np.any(data.obs["front"][0] != data.obs["front"][-1]))}}))
'''
    )
    assert out["code"] == 0 and out["episodes"] == 2 and len(out["status"]) == 2
    assert out["front"][1:] == [16, 16, 3] and out["dtype"] == "uint8" and out["moving"]


@pytest.fixture(scope="module")
def eager_classifier(tmp_path_factory):
    """A tiny classifier of reach's front camera (16x16), trained by handrail reward train on
    recorded episodes, with its threshold at ~0: it fires on every frame. (classifier, meta)"""
    import json
    import shutil

    from handrail.launch import cli

    tmp_path = tmp_path_factory.mktemp("classifier")
    store, trained, clf = tmp_path / "demos", tmp_path / "trained", tmp_path / "eager"
    assert cli.main(["record", "--task", "reach", "--episodes", "6", "--cameras", "front",
                     "--image-size", "16", "--env-kwargs", "terminate_on_success=false",
                     "episode_steps=30", "--out", str(store)]) == 0  # fmt: skip
    assert cli.main(["label", str(store), "--from", "reward"]) == 0
    assert cli.main(["reward", "train", "--demos", str(store), "--out", str(trained),
                     "--no-progress", "--classifier.image-size", "16",
                     "--classifier.channels", "8", "8", "--classifier.strides", "2", "2",
                     "--classifier.features", "8", "--classifier.steps", "100",
                     "--classifier.eval-every", "50"]) == 0  # fmt: skip
    shutil.copytree(trained, clf)
    meta = json.loads((clf / "classifier.json").read_text())
    (clf / "classifier.json").write_text(json.dumps({**meta, "threshold": 1e-9}))
    return clf, meta


@pytest.mark.slow
def test_a_persons_no_on_an_episode_the_classifier_ended_retrains_it_on_the_arm(
    ros, tmp_path, eager_classifier
):
    # actor_node learns on a success classifier's reward (reward:=classifier:PATH) from the
    # arm's camera topic, asks the person after each episode the classifier ends, and a
    # `failure` on human/events makes it a false positive: the classifier is retrained between
    # episodes (corrections:=1) and the checkpoint keeps the correction.
    import dataclasses
    import json
    from pathlib import Path

    from handrail.launch import cli
    from handrail.learners.agents.sac import SACConfig
    from handrail.learners.learner import LoopConfig

    clf, meta = eager_classifier  # every episode ends at its first step
    config = tmp_path / "config.json"
    sac = SACConfig(hidden_dims=(32, 32), batch_size=32, utd=1)
    loop = LoopConfig(warmup_steps=10, buffer_capacity=1000, intervention_capacity=100)
    config.write_text(json.dumps({"sac": sac.to_json(), "loop": dataclasses.asdict(loop)}))
    params = tmp_path / "params.yaml"
    stock = Path(cli.__file__).parent / "ros" / "sim_robot.yaml"
    text = stock.read_text()
    for name in ("sim_robot", "actor_node"):  # the arm's camera, read by the actor
        text = text.replace(f"/**/{name}:\n  ros__parameters:\n",
                            f"/**/{name}:\n  ros__parameters:\n    cameras: [front]\n"
                            "    image_size: 16\n")  # fmt: skip
    params.write_text(text)
    run = tmp_path / "run"
    out = ros(
        PRELUDE
        + rf'''
say = node.create_publisher(String, "human/events", COMMAND)
stack = launch("params:={params}", "task:=reach", "actor:=false")
proc = subprocess.Popen([sys.executable, "-m", "handrail.hw.actor_node", "--ros-args",
                         "--params-file", "{params}", "-p", "task:=reach", "-p", "max_obs_age_s:=1.0",
                         "-p", "first_obs_timeout_s:=60.0", "-p", "learner:=local",
                         "-p", "learner_config:={config}", "-p", "run_dir:={run}", "-p", "episodes:=3",
                         "-p", "reward:=classifier:{clf}", "-p", "corrections:=1",
                         "-p", "corrections_every:=1", "-p", "verdict_timeout_s:=2.0"])
# The person says "not a success" now and then: a word in a verdict's window is taken.
end = time.monotonic() + 400
while proc.poll() is None and time.monotonic() < end:
    say.publish(String(data="failure"))
    spin(0.5)
code = proc.wait(10)
spin(1.0)
stop(stack)
latest = Path("{run}/checkpoints/latest/reward_classifier")
print(json.dumps({{"code": code, "status": status,
                   "saved": sorted(p.name for p in latest.iterdir()),
                   "state": json.loads((latest / "reward_state.json").read_text()),
                   "live": json.loads(Path("{run}/reward_classifier/classifier.json").read_text())}}))
''',
        timeout_s=500,
    )
    assert out["code"] == 0 and len(out["status"]) == 3, out["status"]
    made = [s["correction"] for s in out["status"] if "correction" in s]
    assert len(made) == 1 and made[0]["corrections"] == 1 and made[0]["threshold"] > 1e-3
    assert {"corrections.npz", "classifier.json", "reward_state.json"} <= set(out["saved"])
    stats = out["state"]["stats"]
    assert (
        stats["ended"] == 3 and stats["false_positives"] >= 1 and len(out["state"]["records"]) == 1
    )
    assert out["live"]["extra"]["corrected_from"] == str(clf)
    assert out["live"]["counts"]["train_episodes"] == meta["counts"]["train_episodes"] + 1


def test_bad_reward_parameters_of_the_actor_get_one_line(eager_classifier):
    from types import SimpleNamespace

    from handrail.hw.actor_node import PARAMETERS, _with_reward

    clf, _ = eager_classifier
    arm = SimpleNamespace(config=SimpleNamespace(cameras=()))

    def error(**given):
        with pytest.raises(ValueError) as caught:
            _with_reward({**PARAMETERS, **given}, arm, None)
        return str(caught.value)

    assert _with_reward(dict(PARAMETERS), arm, None) is arm  # the task's own reward
    assert "give reward:=classifier:PATH" in error(corrections=2)
    assert "must be task or classifier:PATH" in error(reward="success")
    assert "corrections_every >= 1" in error(corrections_every=0)
    assert "reward:=classifier:/nowhere:" in error(reward="classifier:/nowhere")
    assert "add ['front'] to the cameras parameter" in error(reward=f"classifier:{clf}")
    arm.config.cameras = ("front",)
    assert "set verdict_timeout_s > 0" in error(reward=f"classifier:{clf}", corrections=1,
                                                 verdict_timeout_s=0.0)  # fmt: skip
