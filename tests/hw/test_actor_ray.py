"""``actor_node learner:=ray``: the sim_robot stack's actor feeds a learner on a local Ray runtime
(loopback, token required), all inside the private network namespace of the ``ros`` fixture."""

# It runs alone (a serial path, tests/conftest.py): beside CI's learning tests the stack's actor
# (ROS 2 nodes, a Ray runtime and a learner on two CPUs) did not finish its two episodes in
# 120 s, nor in 300 s beside two busy processes, where on an idle machine it takes under one. Its Ray runtime keeps its token in a home of its
# own, apart from another test's runtime (tests/app/test_distributed.py).


def test_the_actor_node_feeds_a_ray_learner_every_step_once(ros, tmp_path):
    folder = tmp_path / "learner"
    folder.mkdir()
    (tmp_path / "home").mkdir()
    out = ros(
        rf'''
import json, os, signal, socket, subprocess, sys, time
from pathlib import Path
os.environ["HOME"] = "{tmp_path / "home"}"  # Ray's token file (~/.ray), the nodes' logs (~/.ros)
import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, DurabilityPolicy, HistoryPolicy
from std_msgs.msg import String
from handrail.app.distributed import LEARNER_NAME, ray_runtime
from handrail.app.envs import make_env
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.distributed import ray_link
from handrail.learners.distributed.protocol import DistConfig, env_signature
from handrail.learners.learner import LoopConfig
from handrail.learners.specs import ActionSpec, ObsSpec

HANDRAIL = str(Path(sys.executable).with_name("handrail"))
LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)

# The learner as `handrail learner --task reach` builds it: from the sim task's env, whose spaces
# the node's RosArmEnv mirrors (hw/mirrors.py), so the learner checks the node's spaces against it.
env = make_env("reach")
sac = SAC(ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space),
          SACConfig.cpu(hidden_dims=(32, 32), batch_size=32, utd=1))
loop = LoopConfig(warmup_steps=20, normalize_obs=False)

def actor_running():
    return not subprocess.run(["pgrep", "-f", "handrail.hw.actor_node"], capture_output=True).returncode

rclpy.init()
node = Node("test_client")
status = []
node.create_subscription(String, "actor/status", lambda m: status.append(json.loads(m.data)), LATCHED)
with ray_runtime(None, cpus=2) as address:
    import ray  # after ray_runtime: it asks for token authentication before Ray loads

    learner = ray_link.start_learner(LEARNER_NAME, sac, loop, DistConfig(), seed=0,
                                     folder=Path("{folder}"), signature=env_signature(env))
    # The stack starts while the learner does (the node's first call waits for it). The
    # environment (RAY_AUTH_MODE=token) goes to the nodes; the age limit allows the pauses a
    # loaded two-CPU machine makes (tests/hw/test_stack.py).
    stack = subprocess.Popen([HANDRAIL, "launch", "sim_robot.launch.xml", "task:=reach", "episodes:=2",
                              "learner:=ray", f"ray_address:={{address}}", "max_obs_age_s:=1.0"],
                             start_new_session=True)
    end = time.monotonic() + 120
    started = False  # the actor's process was seen (it starts a few seconds after the launch)
    while time.monotonic() < end and stack.poll() is None and not (started and not actor_running()):
        rclpy.spin_once(node, timeout_sec=0.2)
        started = started or actor_running()
    # episodes:=2 reached: it sent its steps and left (the others go on until stopped)
    stopped = started and not actor_running() and stack.poll() is None
    for _ in range(10):
        rclpy.spin_once(node, timeout_sec=0.1)
    if stack.poll() is None:
        os.killpg(stack.pid, signal.SIGINT)
    code = stack.wait(30)
    stats = ray.get(learner.stats.remote())
    caught_up = ray.get(learner.wait_for.remote(stats["steps"], 60))
    stats = ray.get(learner.stats.remote())
    ray.get(learner.close.remote())
events = [json.loads(line)["event"] for line in Path("{folder}/events.jsonl").open()]
print(json.dumps({{"stopped": stopped, "code": code, "status": status, "events": events,
                  "host": socket.gethostname(), "caught_up": caught_up,
                  "steps": stats["steps"], "updates": stats["updates"], "dropped": stats["dropped"],
                  "actors": list(stats["actors"].values())}}))
''',
        timeout_s=240,
    )
    assert out["stopped"] and out["code"] == 0, out
    assert len(out["status"]) == 2, out["status"]
    actors = out["actors"]
    assert [a["name"] for a in actors] == [f"{out['host']}/actor_node"]
    registered = f"actor {out['host']}/actor_node registered as 0"
    assert any(e.startswith(registered) for e in out["events"]), out["events"]
    # Every step the node took reached the learner once: its counts, the learner's and the
    # episodes' lengths agree, and nothing was dropped.
    taken = out["status"][-1]["sender"]["taken"]
    assert taken == sum(s["length"] for s in out["status"]) == actors[0]["acked"] > 20
    assert out["steps"] == actors[0]["acked"] - out["dropped"] and out["dropped"] == 0
    assert actors[0]["episodes"] == 2
    assert out["caught_up"] and out["updates"] > 0  # it trained on them past its warm-up
