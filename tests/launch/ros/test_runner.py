"""`handrail launch`: node commands, supervision of stand-in nodes, the CLI, the shipped launch
files and the ROS 2 package files (wrappers, package.xml)."""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import tomllib
import xml.etree.ElementTree as ET
from functools import partial
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from handrail.hw import nodes as hw_nodes
from handrail.launch import cli
from handrail.launch.ros import runner as ros_launch
from handrail.launch.ros.launch_xml import arguments
from handrail.launch.ros.runner import (
    LAUNCH_DIR,
    WRAPPER_DIR,
    LaunchError,
    NodeLaunch,
    command,
    declared_parameters,
    parameters,
    parse,
    run,
    wrapper_script,
    write_wrappers,
)

ROOT = Path(__file__).resolve().parents[3]
LAUNCH_FILES = sorted(LAUNCH_DIR.glob("*.launch.xml"))

# A stand-in node: `<mode> [mode args] --ros-args ...`. It prints its parameters (read from the
# --params-file files, as rclpy would) once ready, and "SIGINT" when it stops on one.
FAKE_NODE = """\
import json, signal, sys, time
from pathlib import Path
import yaml

argv = sys.argv[1:]
mode, ros = argv[: argv.index("--ros-args")], argv[argv.index("--ros-args") + 1 :]
files = [ros[i + 1] for i, a in enumerate(ros) if a == "--params-file"]
params = {}
for f in files:
    params.update(yaml.safe_load(Path(f).read_text())["/**"]["ros__parameters"])

def wait_for(path, lines=1):
    while not Path(path).exists() or len(Path(path).read_text().splitlines()) < lines:
        time.sleep(0.01)

def on_sigint(signum, frame):
    print("SIGINT", flush=True)
    sys.exit(0)

if mode[0] == "exit":  # exit CODE [AFTER_FILE [LINES]]
    if len(mode) > 2:
        wait_for(mode[2], int(mode[3]) if len(mode) > 3 else 1)
    print("bye", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    sys.exit(int(mode[1]))
if mode[0] == "count":  # count FILE: one line per start, then fail
    with open(mode[1], "a") as f:
        f.write("started\\n")
    sys.exit(1)
def on_sigint_slowly(signum, frame):  # slowstop STOPS_FILE READY_FILE: says when, exits 0.3 s on
    with open(stops, "a") as f:
        f.write(f"{json.dumps([params['name'], time.monotonic()])}\\n")
    time.sleep(0.3)
    sys.exit(0)

if mode[0] == "slowstop":
    signal.signal(signal.SIGINT, on_sigint_slowly)
    stops, mode = mode[1], [mode[0], *mode[2:]]
else:
    signal.signal(signal.SIGINT, signal.SIG_IGN if mode[0] == "stubborn" else on_sigint)
if mode[0] == "stubborn":  # as every handrail node does
    from handrail.hw.ros_common import print_stacks_on_request
    print_stacks_on_request()
print("ready " + json.dumps(params, sort_keys=True), flush=True)
if len(mode) > 1:  # sleep|stubborn READY_FILE
    with open(mode[1], "a") as f:  # one line per node: a launch can wait for several
        f.write("ready\\n")
end = time.monotonic() + 120  # never outlive a failed test for long
while time.monotonic() < end:
    time.sleep(0.02)
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """NODES["fake"] runs FAKE_NODE as a module (tmp_path is on the children's PYTHONPATH)."""
    (tmp_path / "handrail_fake_node.py").write_text(FAKE_NODE)
    monkeypatch.setitem(hw_nodes.NODES, "fake", "handrail_fake_node")
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    return tmp_path


def fake_node(name: str, *mode: str, **fields: Any) -> NodeLaunch:
    """A stand-in node in ``mode`` (see FAKE_NODE) whose output goes to the screen."""
    return NodeLaunch("handrail", "fake", name, args=list(mode), output="screen", **fields)


def read_lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


# ---- commands ------------------------------------------------------------------------------


def test_command_is_what_ros2_launch_passes(tmp_path: Path) -> None:
    node = NodeLaunch(
        "handrail",
        "safety_node",
        "safety",
        "/cell/arm1",
        params={"max_step_m": 0.05, "frame": "1.0", "box": [0.1, 0.2], "on": True, "n": 3},
        param_files=[Path("/etc/a.yaml"), Path("/etc/b.yaml")],
        remaps=[("target_pose", "/ctrl/target"), ("ee_pose", "pose")],
        args=["--extra"],
    )
    cmd = command(node, tmp_path)
    generated = tmp_path / "cell__arm1__safety.yaml"
    assert cmd == [
        sys.executable, "-m", "handrail.hw.safety_node", "--extra", "--ros-args",
        "-r", "__node:=safety", "-r", "__ns:=/cell/arm1",
        "--params-file", "/etc/a.yaml", "--params-file", "/etc/b.yaml",
        "--params-file", str(generated),
        "-r", "target_pose:=/ctrl/target", "-r", "ee_pose:=pose",
    ]  # fmt: skip
    # The generated file keeps every type: "1.0" stays a string, the list a list.
    assert yaml.safe_load(generated.read_text()) == {"/**": {"ros__parameters": node.params}}


def test_command_without_name_namespace_or_params_adds_nothing(tmp_path: Path) -> None:
    node = NodeLaunch("handrail", "reset_node")
    assert command(node, tmp_path) == [sys.executable, "-m", "handrail.hw.reset_node", "--ros-args"]
    assert list(tmp_path.iterdir()) == []
    foreign = NodeLaunch("joy", "joy_node", "joy", program="/opt/ros/lib/joy/joy_node")
    assert command(foreign, tmp_path) == [
        "/opt/ros/lib/joy/joy_node",
        "--ros-args",
        "-r",
        "__node:=joy",
    ]


def test_parameters_resolve_parameter_files_as_rclpy_does(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "/**:\n  ros__parameters: {everyone: 1, rate: 1.0}\n"
        "/**/safety:\n  ros__parameters: {limits: {step_m: 0.05}, rate: 2.0}\n"
        "/cell/safety:\n  ros__parameters: {exact: true}\n"
        "/other/safety:\n  ros__parameters: {wrong_ns: 1}\n"
        "/*/safety:\n  ros__parameters: {one_level: 1}\n"
        "reset_node:\n  ros__parameters: {not_me: 1}\n"
    )
    node = NodeLaunch(
        "handrail",
        "safety_node",
        "safety",
        "/cell",
        params={"rate": 3.0},
        param_files=[tmp_path / "a.yaml"],
    )
    assert parameters(node) == {
        "everyone": 1,
        "rate": 3.0,  # the launch file's own value wins over the files
        "limits.step_m": 0.05,
        "exact": True,
        "one_level": 1,
    }


def test_declared_parameters_are_the_node_modules_parameters(
    fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fake / "handrail_fake_declared.py").write_text(
        "PARAMETERS = {'task': 'reach', 'rate_hz': 10.0}\n"
    )
    (fake / "handrail_fake_undeclared.py").write_text("")
    monkeypatch.syspath_prepend(str(fake))
    monkeypatch.setitem(hw_nodes.NODES, "declared", "handrail_fake_declared")
    monkeypatch.setitem(hw_nodes.NODES, "undeclared", "handrail_fake_undeclared")
    assert declared_parameters("declared") == {"task", "rate_hz"} | hw_nodes.RCLPY_PARAMETERS
    with pytest.raises(LaunchError, match="has no PARAMETERS dict"):
        declared_parameters("undeclared")
    with pytest.raises(LaunchError, match="'nope' is not a handrail node"):
        declared_parameters("nope")


# ---- the shipped launch files and ROS 2 package files ----------------------------------------


def test_handrail_ships_its_launch_files() -> None:
    assert {"sim_robot.launch.xml", "robot.launch.xml"} <= {p.name for p in LAUNCH_FILES}


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=[p.name for p in LAUNCH_FILES])
def test_every_launch_file_parses_and_sets_only_declared_parameters(path: Path) -> None:
    """With its defaults and with each boolean argument flipped, so conditional nodes count."""
    runs = [{}] + [
        {name: "false" if default == "true" else "true"}
        for name, default, _ in arguments(path)
        if default in ("true", "false")
    ]
    seen = 0
    for args in runs:
        for node in parse(path, args):
            assert node.pkg == hw_nodes.PACKAGE and node.exec in hw_nodes.NODES, node
            undeclared = set(parameters(node)) - declared_parameters(node.exec)
            assert not undeclared, f"{path.name}: {node.label} does not declare {undeclared}"
            seen += 1
    assert seen > 0


def test_wrapper_scripts_match_nodes() -> None:
    """`ros2 launch` runs lib/handrail/<exec>; regenerate with ros_launch.write_wrappers()."""
    assert sorted(p.name for p in WRAPPER_DIR.iterdir()) == sorted(hw_nodes.NODES)
    for exec_name, module in hw_nodes.NODES.items():
        path = WRAPPER_DIR / exec_name
        assert path.read_text() == wrapper_script(exec_name)
        assert f"-m {module} " in path.read_text()
        assert path.stat().st_mode & 0o111 == 0o111, f"{path} is not executable"


def test_a_wrapper_runs_its_prefixs_python_else_python3_on_path(tmp_path: Path) -> None:
    # ros2 launch runs <prefix>/lib/handrail/<exec> from a shell whose python3 is ROS's, not
    # the virtual environment's where handrail is installed.
    def fake_python(path: Path, name: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'#!/bin/sh\necho {name} "$@"\n')
        path.chmod(0o755)

    prefix = tmp_path / "venv"
    write_wrappers(prefix / "lib" / "handrail")
    fake_python(tmp_path / "path" / "python3", "path-python")
    env = {"PATH": f"{tmp_path / 'path'}:/usr/bin:/bin"}
    wrapper = prefix / "lib" / "handrail" / "sim_robot"
    run = partial(subprocess.run, capture_output=True, text=True, env=env, check=True)
    out = run([str(wrapper), "--ros-args", "-p", "task:=reach"]).stdout
    assert out == "path-python -m handrail.hw.sim_robot --ros-args -p task:=reach\n"
    fake_python(prefix / "bin" / "python3", "venv-python")
    assert run([str(wrapper), "x"]).stdout == "venv-python -m handrail.hw.sim_robot x\n"
    link = tmp_path / "elsewhere" / "sim_robot"  # a symlink to the wrapper finds the same prefix
    link.parent.mkdir()
    link.symlink_to(wrapper)
    assert run([str(link)]).stdout == "venv-python -m handrail.hw.sim_robot\n"


def test_package_xml_is_the_ament_python_package_handrail() -> None:
    root = ET.parse(LAUNCH_DIR / "package.xml").getroot()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert root.get("format") == "3"
    assert root.findtext("name") == hw_nodes.PACKAGE
    assert root.findtext("version") == version
    assert root.findtext("export/build_type") == "ament_python"
    assert (LAUNCH_DIR / "resource" / hw_nodes.PACKAGE).read_bytes() == b""


# ---- supervision -----------------------------------------------------------------------------


def test_a_failing_node_is_reported_and_stops_the_others(
    fake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ready = fake / "ready"
    nodes = [
        fake_node("sleeper", "sleep", str(ready), params={"task": "reach", "rate": 1.5}),
        fake_node("failer", "exit", "3", str(ready)),
    ]
    assert run(nodes, stop_timeout_s=20.0) == 1
    out, err = capsys.readouterr()
    assert '[sleeper] ready {"rate": 1.5, "task": "reach"}' in out  # read its parameter file
    assert "[failer] bye" in out and "[failer] to stderr" in err
    assert "failer exited with code 3: stopping the others" in err
    assert "[sleeper] SIGINT" in out  # stopped by SIGINT, as ros2 launch does
    assert "sleeper" not in err.split("stopping the others")[1]  # and that was a clean stop


def test_nodes_that_finish_cleanly_end_the_launch_with_0(
    fake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run([fake_node("a", "exit", "0"), fake_node("b", "exit", "0")]) == 0
    err = capsys.readouterr().err
    assert "a finished cleanly" in err and "b finished cleanly" in err


def test_a_node_that_ignores_sigint_gets_sigterm_and_fails_the_launch(
    fake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ready = fake / "ready"
    nodes = [
        fake_node("stubborn", "stubborn", str(ready)),
        fake_node("failer", "exit", "1", str(ready)),
    ]
    assert run(nodes, stop_timeout_s=0.5) == 1
    err = capsys.readouterr().err
    assert "stubborn is still running: sending SIGTERM" in err
    # before the SIGTERM, the stuck node said where it was: its main thread's stack, in its loop
    before = err.split("stubborn is still running")[0]
    assert "stubborn did not stop on SIGINT: where its threads are" in before
    assert re.search(
        r"\[stubborn\] (Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\)", before
    ), err
    assert re.search(
        r"\[stubborn\]   File .*handrail_fake_node\.py\", line \d+ in <module>", before
    )


def test_nodes_stop_in_turn_the_last_started_first(fake: Path) -> None:
    # Fast DDS can deadlock participants deleted at once (it hung 4 of 22 stops of the stack);
    # and the nodes that command the arm go before the safety node and driver they command.
    ready, stops = fake / "ready", fake / "stops"
    nodes = [fake_node(n, "slowstop", str(stops), str(ready), params={"name": n}) for n in "abc"]
    assert run([*nodes, fake_node("failer", "exit", "1", str(ready), "3")], stop_timeout_s=20) == 1
    order = [json.loads(line) for line in stops.read_text().splitlines()]
    assert [name for name, _ in order] == ["c", "b", "a"]
    # each SIGINT came after the node before it had exited (0.3 s after its own SIGINT)
    assert all(t1 - t0 >= 0.3 for (_, t0), (_, t1) in itertools.pairwise(order))


def test_a_respawning_node_is_restarted_until_the_launch_stops(
    fake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    starts = fake / "starts"
    nodes = [
        fake_node("flaky", "count", str(starts), respawn=True, respawn_delay_s=0.05),
        fake_node("judge", "exit", "4", str(starts), "3"),  # fails once flaky started 3 times
    ]
    assert run(nodes, stop_timeout_s=20.0) == 1
    err = capsys.readouterr().err
    assert len(starts.read_text().splitlines()) >= 3
    assert "flaky exited with code 1; respawning it" in err
    assert "judge exited with code 4" in err and "flaky exited with code 1: stopping" not in err


def test_output_log_sends_stdout_to_the_log_file_only(
    fake: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ROS_LOG_DIR", str(fake / "logs"))
    assert run([NodeLaunch("handrail", "fake", "quiet", args=["exit", "0"], output="log")]) == 0
    out, err = capsys.readouterr()
    assert "bye" not in out and "[quiet] to stderr" in err
    (log,) = (fake / "logs").glob("handrail_launch_*/quiet.log")
    # stdout and stderr are two pipes read by two threads: the log holds both, in either order.
    assert sorted(log.read_text().splitlines()) == ["bye", "to stderr"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_runner_stops_every_node_with_sigint(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """The CLI end to end, with stand-ins installed as another ROS 2 package's executables."""
    exe = tmp_path / "prefix" / "lib" / "fakepkg" / "fake"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"#!{sys.executable}\n{FAKE_NODE}")
    exe.chmod(0o755)
    launch_file = tmp_path / "two.launch.xml"
    launch_file.write_text(
        """<launch><arg name="ns" default="cell"/><group><push-ros-namespace namespace="$(var ns)"/>
        <node pkg="fakepkg" exec="fake" name="a" output="screen" args="sleep"/>
        <node pkg="fakepkg" exec="fake" name="b" output="screen" args="sleep"/></group></launch>"""
    )
    env = {**os.environ, "AMENT_PREFIX_PATH": str(tmp_path / "prefix")}
    argv = [sys.executable, "-m", "handrail.launch.cli", "launch", str(launch_file), "ns:=arm"]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    reader = threading.Thread(target=read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    out, deadline = [], time.monotonic() + 60
    while sum(line.endswith("ready {}\n") for line in out) < 2 and time.monotonic() < deadline:
        try:
            out.append(lines.get(timeout=1))
        except queue.Empty:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    proc.send_signal(sig)
    proc.wait(timeout=60)
    reader.join(timeout=10)  # to the end of the runner's output
    err = proc.stderr.read() if proc.stderr else ""
    while not lines.empty():
        out.append(lines.get())
    assert proc.returncode == 0, err
    assert {"[a] SIGINT\n", "[b] SIGINT\n"} <= set(out), out
    assert f"{sig.name} received: stopping every node" in err


# ---- the command line ------------------------------------------------------------------------


def test_print_shows_each_nodes_command_for_a_bare_file_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        cli.main(["launch", "sim_robot.launch.xml", "--print", "task:=reach", "actor:=false"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in lines]
    assert [c[:3] for c in commands] == [
        [sys.executable, "-m", hw_nodes.NODES[name]]
        for name in ("sim_robot", "safety_node", "reset_node", "intervention_node")
    ]
    files = [c[i + 1] for c in commands for i, a in enumerate(c) if a == "--params-file"]
    assert str(LAUNCH_DIR / "sim_robot.yaml") in files
    sim_params = yaml.safe_load(Path(commands[0][-1]).read_text())["/**"]["ros__parameters"]
    assert sim_params["task"] == "reach" and sim_params["real_time_factor"] == 1.0


def test_print_without_the_extension_matches_the_parsed_nodes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["launch", "robot", "--print"]) == 0
    lines = capsys.readouterr().out.splitlines()
    nodes = parse(LAUNCH_DIR / "robot.launch.xml")
    assert [shlex.split(line)[2] for line in lines] == [hw_nodes.NODES[n.exec] for n in nodes]


def test_show_args_lists_names_defaults_and_descriptions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["launch", "sim_robot.launch.xml", "--show-args"]) == 0
    out = capsys.readouterr().out
    for name, default, description in arguments(LAUNCH_DIR / "sim_robot.launch.xml"):
        assert f"    '{name}':\n        {description}\n        (default: '{default}')" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["launch", "nope.launch.xml"],
            "nope.launch.xml: no such launch file; give a path or one of",
        ),
        (["launch", "sim_robot.launch.xml", "tsk:=reach"], "no argument named tsk"),
        (["launch", "sim_robot.launch.xml", "task=reach"], "launch arguments are name:=value"),
        (["launch", "sim_robot.launch.xml", "--dry-run"], "unknown option --dry-run"),
    ],
)
def test_bad_command_lines_are_one_clear_line(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("handrail launch: error:") and words in err and err.count("\n") == 1, err


def test_help_lists_the_packaged_launch_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["launch", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: handrail launch FILE") and "sim_robot.launch.xml" in out
    assert ros_launch.resolve("sim_robot") == LAUNCH_DIR / "sim_robot.launch.xml"


def test_print_leaves_no_temporary_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 36: every --print left a handrail-launch-* folder in /tmp.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    monkeypatch.setenv("ROS_HOME", str(tmp_path / "ros"))
    printed = []
    for _ in range(2):
        assert cli.main(["launch", "sim_robot", "--print", "task:=reach"]) == 0
        printed.append(capsys.readouterr().out)
    assert list(scratch.iterdir()) == []
    assert printed[0] == printed[1]  # the same request reuses its files
    files = [Path(a) for line in printed[0].splitlines() for a in shlex.split(line)
             if a.endswith(".yaml") and not a.startswith(str(LAUNCH_DIR))]  # fmt: skip
    assert files and all(f.is_file() and (tmp_path / "ros") in f.parents for f in files)
    assert yaml.safe_load(files[0].read_text())["/**"]["ros__parameters"]["task"] == "reach"


def test_launch_without_ros_says_in_one_line_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 36: without the ros extra every node died with a ModuleNotFoundError traceback.
    monkeypatch.setitem(sys.modules, "rclpy", None)  # import rclpy: ModuleNotFoundError

    def started(*args: object, **kwargs: object) -> int:
        raise AssertionError("no node may start without ROS 2")

    monkeypatch.setattr(ros_launch, "run", started)
    assert cli.main(["launch", "sim_robot.launch.xml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("handrail launch: error: ROS 2's Python packages are missing")
    assert "pip install 'handrail[ros]'" in err and "source ROS 2" in err
    assert err.count("\n") == 1, err
