"""``handrail launch FILE [name:=value ...]``: ROS 2 XML launch files without ``ros2 launch``.

The PyPI ROS 2 wheels have rclpy but not ``launch``/``launch_ros``. This runner reads a launch
file into a list of :class:`NodeLaunch` (:mod:`handrail.launch.ros.launch_xml`, which lists the
subset of the format it supports), builds each node's command with the ``--ros-args`` that
``ros2 launch`` passes (:func:`command`), and starts and supervises the processes
(:func:`run`): output prefixed with ``[name]``, SIGINT to each node in turn on Ctrl-C, the
others stopped when one fails.

``<param name= value=>`` values go into a generated parameter file per node, passed after the
``<param from=>`` files, so they win over them (``-p`` could not carry lists or keep ``"1.0"`` a
string).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from handrail.hw.nodes import NODES, PACKAGE, RCLPY_PARAMETERS, STACKS_SIGNAL, ros_missing
from handrail.launch.ros.launch_xml import LAUNCH_DIR, LaunchError, NodeLaunch, arguments, parse

__all__ = [
    "LAUNCH_DIR",
    "LaunchError",
    "NodeLaunch",
    "command",
    "declared_parameters",
    "parameters",
    "parse",
    "run",
    "wrapper_script",
]

WRAPPER_DIR = LAUNCH_DIR / "lib"
"""The scripts installed as ``lib/handrail/<exec>``, which ``ros2 launch`` runs for a node."""

_PREFIX = "[handrail launch]"


def parameters(node: NodeLaunch) -> dict[str, Any]:
    """Every parameter the node is given: the entries of its parameter files whose key matches
    its fully qualified name (``/**``, ``/**/name``, ``/ns/name``, ``*``), then its own ``param``s.
    """
    out: dict[str, Any] = {}
    for path in node.param_files:
        content = yaml.safe_load(path.read_text()) or {}
        for key, entry in content.items():
            if _name_matches(str(key), node.fqn) and isinstance(entry, dict):
                out.update(_flatten(entry.get("ros__parameters") or {}))
    return {**out, **node.params}


def _name_matches(pattern: str, fqn: str) -> bool:
    """rcl's rule: ``*`` matches one name token, ``**`` any number of them."""
    want, have = [p for p in pattern.split("/") if p], [p for p in fqn.split("/") if p]

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(have)
        if want[i] == "**":
            return any(match(i + 1, k) for k in range(j, len(have) + 1))
        return j < len(have) and want[i] in ("*", have[j]) and match(i + 1, j + 1)

    return match(0, 0)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML parameters as ROS 2 names them (``a: {b: 1}`` is ``a.b``)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def declared_parameters(exec_name: str) -> set[str]:
    """The parameters a handrail node declares: the keys of its module's ``PARAMETERS``, and
    those every rclpy node declares (``use_sim_time``).

    Imports the node's module (so rclpy and whatever else the node needs).

    Raises:
        LaunchError: ``exec_name`` is not in NODES, or its module has no ``PARAMETERS`` dict.
    """
    if exec_name not in NODES:
        raise LaunchError(f"{exec_name!r} is not a {PACKAGE} node; the nodes are {sorted(NODES)}")
    declared = getattr(importlib.import_module(NODES[exec_name]), "PARAMETERS", None)
    if not isinstance(declared, dict):
        raise LaunchError(f"{NODES[exec_name]} has no PARAMETERS dict; add one (hw/ros_common.py)")
    return set(declared) | RCLPY_PARAMETERS


def command(node: NodeLaunch, params_dir: Path) -> list[str]:
    """The process command of ``node``, with the ``--ros-args`` that ``ros2 launch`` passes.

    Args:
        node: the node.
        params_dir: where its ``<param name= value=>`` are written as a parameter file.

    Returns:
        ``[python, -m, module, *args, --ros-args, -r, __node:=NAME, -r, __ns:=/NS,
        --params-file, FILE, ..., -r, from:=to, ...]`` (a non-handrail node's executable in
        place of ``python -m module``; no ``__node``/``__ns`` when the file sets none).
    """
    program = [sys.executable, "-m", NODES[node.exec]] if node.pkg == PACKAGE else [node.program]
    cmd = [*program, *node.args, "--ros-args"]
    if node.name:
        cmd += ["-r", f"__node:={node.name}"]
    if node.namespace != "/":
        cmd += ["-r", f"__ns:={node.namespace}"]
    for path in node.param_files:
        cmd += ["--params-file", str(path)]
    if node.params:
        path = params_dir / (node.fqn.strip("/").replace("/", "__") + ".yaml")
        path.write_text(yaml.safe_dump({"/**": {"ros__parameters": node.params}}))
        cmd += ["--params-file", str(path)]
    for source, target in node.remaps:
        cmd += ["-r", f"{source}:={target}"]
    return cmd


@dataclass
class _Process:
    """One node under supervision; ``proc`` is None before its start and between respawns."""

    node: NodeLaunch
    cmd: list[str]
    proc: subprocess.Popen[bytes] | None = None
    respawn_at: float | None = None
    threads: list[threading.Thread] = field(default_factory=list)

    def running(self) -> bool:
        """Whether its process is started and has not exited."""
        return self.proc is not None and self.proc.poll() is None


class _Supervisor:
    """Starts the nodes, forwards their output, and stops them all (see :func:`run`)."""

    def __init__(self, processes: list[_Process], stop_timeout_s: float) -> None:
        self.processes = processes
        self.stop_timeout_s = stop_timeout_s
        self.signals: list[str] = []  # SIGINT/SIGTERM/SIGHUP received: the first stops, more hurry
        self.failed = False
        self.lock = threading.Lock()
        self.logs: dict[str, IO[bytes]] = {}
        self.log_dir: Path | None = None
        # Python nodes behind a pipe would buffer their output for minutes.
        self.env = {"PYTHONUNBUFFERED": "1", **os.environ}

    def run(self) -> int:
        handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled} if main else {}
        try:
            if all(self._start(p) for p in self.processes):
                self._supervise()
        finally:
            self._stop_all()
            for sig, handler in previous.items():
                if handler is not None:
                    signal.signal(sig, handler)
            for thread in (t for p in self.processes for t in p.threads):
                thread.join(timeout=1.0)  # a grandchild may hold the pipe open
            for log in self.logs.values():
                log.close()
        return 1 if self.failed else 0

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signal.Signals(signum).name)  # reported by the main loop, not here

    def _report(self, text: str) -> None:
        with self.lock:
            print(f"{_PREFIX} {text}", file=sys.stderr, flush=True)

    def _start(self, p: _Process) -> bool:
        p.respawn_at = None
        try:
            # Its own process group: a terminal's Ctrl-C reaches only this runner, which then
            # sends each node exactly one SIGINT (as ros2 launch's nodes get theirs).
            p.proc = subprocess.Popen(
                p.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=self.env, process_group=0,
            )  # fmt: skip
        except OSError as err:
            self._report(f"{p.node.label} could not start: {err} ({shlex.join(p.cmd)})")
            self.failed = True
            return False
        self._report(f"{p.node.label} started with pid {p.proc.pid}")
        output = p.node.output  # ROS 2: "log" sends stdout to the log file only
        for stream, screen, on_screen in (
            (p.proc.stdout, sys.stdout, output != "log"),
            (p.proc.stderr, sys.stderr, True),
        ):
            log = self._log(p.node) if output != "screen" else None
            thread = threading.Thread(
                target=self._forward, args=(p.node.label, stream, screen if on_screen else None, log),
                daemon=True,
            )  # fmt: skip
            thread.start()
            p.threads.append(thread)
        return True

    def _log(self, node: NodeLaunch) -> IO[bytes]:
        """The node's log file (one per fully qualified name, opened once, kept across respawns)."""
        if node.fqn not in self.logs:
            if self.log_dir is None:
                base = os.environ.get("ROS_LOG_DIR") or ros_home() / "log"
                stamp = time.strftime("%Y-%m-%d-%H-%M-%S")
                self.log_dir = Path(base, f"handrail_launch_{stamp}_{os.getpid()}")
                self.log_dir.mkdir(parents=True, exist_ok=True)
                self._report(f"log files are in {self.log_dir}")
            name = node.fqn.strip("/").replace("/", "__")
            self.logs[node.fqn] = (self.log_dir / f"{name}.log").open("ab")
        return self.logs[node.fqn]

    def _forward(
        self, label: str, stream: IO[bytes] | None, screen: IO[str] | None, log: IO[bytes] | None
    ) -> None:
        assert stream is not None
        with stream:
            for line in iter(stream.readline, b""):
                with self.lock:
                    if screen is not None:
                        text = line.decode(errors="replace").rstrip("\r\n")
                        screen.write(f"[{label}] {text}\n")
                        screen.flush()
                    if log is not None:
                        log.write(line)
                        log.flush()

    def _supervise(self) -> None:
        """Poll the nodes until all have exited, one has failed, or a signal came."""
        while not self.signals:
            running = False
            for p in self.processes:
                if p.proc is None:
                    due = p.respawn_at is not None and time.monotonic() >= p.respawn_at
                    if due and not self._start(p):
                        return
                    running = running or p.respawn_at is not None
                    continue
                code = p.proc.poll()
                if code is None:
                    running = True
                elif p.node.respawn:
                    self._report(f"{p.node.label} exited with code {code}; respawning it")
                    p.proc, p.respawn_at = None, time.monotonic() + p.node.respawn_delay_s
                    running = True
                else:
                    p.proc = None
                    if code == 0:
                        self._report(f"{p.node.label} finished cleanly")
                        continue
                    self._report(f"{p.node.label} exited with code {code}: stopping the others")
                    self.failed = True
                    return
            if not running:
                return
            time.sleep(0.05)

    def _stop_all(self) -> None:
        """SIGINT each running node in turn, the last started first, and wait up to the timeout
        for it to exit before the next (at once after another signal); then SIGTERM, then
        SIGKILL, those still running after the timeout. Exits other than 0 or SIGINT's (-2, 130)
        fail.

        In turn, because Fast DDS can deadlock a process deleting its participant while others
        delete theirs (eProsima/Fast-DDS#6193): all nodes SIGINTed at once hung 4 of 22 stops
        of sim_robot.launch.xml under load, each one inside rclpy's ``destroy_node`` or the
        interpreter's exit. The last started first: the nodes that command the arm stop before
        the safety node and the driver they command, which keep holding it until then.
        """
        if self.signals:
            self._report(f"{self.signals[0]} received: stopping every node")
        for p in self.processes:
            p.respawn_at = None
        last = {id(p): signal.SIGINT for p in self.processes}
        hurry = False
        for p in reversed(self.processes):
            if p.running():
                self._signal(p, signal.SIGINT)
                hurry = hurry or not self._wait([p])
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in self.processes if p.running()]
            if not alive:
                break
            if sig == signal.SIGTERM:
                self._print_stacks([p for p in alive if p.node.pkg == PACKAGE])
                alive = [p for p in alive if p.running()]
            for p in alive:
                self._report(f"{p.node.label} is still running: sending {sig.name}")
                self.failed = True
                last[id(p)] = sig
                self._signal(p, sig)
            self._wait(alive)
        for p in self.processes:
            code = None if p.proc is None else p.proc.wait()
            if (
                code not in (None, 0, -signal.SIGINT, 128 + signal.SIGINT)
                and last[id(p)] == signal.SIGINT
            ):
                self._report(f"{p.node.label} exited with code {code} while stopping")
                self.failed = True

    @staticmethod
    def _signal(p: _Process, sig: signal.Signals) -> None:
        assert p.proc is not None
        with contextlib.suppress(ProcessLookupError):  # its group, as Ctrl-C would
            os.killpg(p.proc.pid, sig)

    def _wait(self, procs: list[_Process]) -> bool:
        """Wait up to the stop timeout for ``procs`` to exit; False when another signal to the
        launcher cut the wait short (stop waiting, hurry)."""
        signals, deadline = len(self.signals), time.monotonic() + self.stop_timeout_s
        while any(p.running() for p in procs):
            if len(self.signals) > signals:
                return False
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        return True

    def _print_stacks(self, stuck: list[_Process]) -> None:
        """Have each handrail node that outlived its SIGINT print its threads' stacks (their
        lines come through as the node's output), so the log says where it hung."""
        for p in stuck:
            assert p.proc is not None
            self._report(f"{p.node.label} did not stop on SIGINT: where its threads are")
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.proc.pid, STACKS_SIGNAL)
        if stuck:
            time.sleep(STACKS_WAIT_S)


STACKS_WAIT_S = 0.5
"""How long the stacks a stuck node prints are given to come through before its SIGTERM."""


def ros_home() -> Path:
    """ROS 2's folder for logs and state: ``$ROS_HOME``, else ``~/.ros``."""
    return Path(os.environ.get("ROS_HOME") or Path.home() / ".ros")


def print_params_dir(file: Path, args: dict[str, str]) -> Path:
    """Where ``--print`` writes the parameter files its commands name: one folder per launch
    file and arguments under ``ROS_HOME``, named by their digest, so it is reused by the same
    request and never a temporary folder left behind."""
    key = repr((str(file.resolve()), sorted(args.items()))).encode()
    return ros_home() / "handrail_launch" / f"{file.name}-{hashlib.sha1(key).hexdigest()[:12]}"


def run(nodes: list[NodeLaunch], stop_timeout_s: float = 5.0) -> int:
    """Start every node and supervise them until they exit or the launch is stopped.

    Their output lines are prefixed with ``[name]`` (``output="log"`` nodes write stdout to a log
    file instead, as in ROS 2). SIGINT, SIGTERM or SIGHUP stops the launch: each node gets
    SIGINT in turn, the last started first, and up to ``stop_timeout_s`` to exit before the
    next; those still running then print their stacks (handrail's nodes) and get SIGTERM, then
    SIGKILL, ``stop_timeout_s`` apart (another signal skips the waits). A node that exits with
    an error, unless it respawns, is reported and stops the others; one that exits cleanly
    leaves the others running.

    Returns:
        0 when every node exited cleanly (or on the SIGINT it was sent), else 1.
    """
    with tempfile.TemporaryDirectory(prefix="handrail-launch-") as tmp:
        processes = [_Process(node, command(node, Path(tmp))) for node in nodes]
        return _Supervisor(processes, stop_timeout_s).run()


def wrapper_script(exec_name: str) -> str:
    """The ``lib/handrail/<exec>`` script that ``ros2 launch`` runs for a handrail node.

    It runs the node with the Python of the prefix it is installed in (``<prefix>/bin/python3``:
    a virtual environment's, where handrail is), and with ``python3`` on PATH only when that
    prefix has none: ``ros2 launch`` starts it from a shell whose ``python3`` is ROS's.
    """
    return (
        "#!/bin/sh\n"
        "# Installed as <prefix>/lib/handrail/<exec>: run the node with <prefix>'s Python.\n"
        'py="$(dirname "$(readlink -f "$0")")/../../bin/python3"\n'
        '[ -x "$py" ] || py=python3\n'
        f'exec "$py" -m {NODES[exec_name]} "$@"\n'
    )


def write_wrappers(folder: Path = WRAPPER_DIR) -> None:
    """Write one executable :func:`wrapper_script` per NODES entry, removing stale ones."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.iterdir():
        if stale.name not in NODES:
            stale.unlink()
    for exec_name in NODES:
        (folder / exec_name).write_text(wrapper_script(exec_name))
        (folder / exec_name).chmod(0o755)


_HELP = """usage: handrail launch FILE [name:=value ...] [--print] [--show-args]

Start the nodes of a ROS 2 XML launch file as `ros2 launch` would, where it is not installed.
FILE is a path, or the name of one of handrail's launch files: {names}.

  name:=value   set one of the file's arguments (see --show-args)
  --print       print each node's command line instead of starting it (the parameter files
                they name are kept in $ROS_HOME/handrail_launch, default ~/.ros)
  --show-args   list the file's arguments with their defaults and descriptions"""


@dataclass(frozen=True)
class LaunchRequest:
    """What ``handrail launch`` was asked to do."""

    file: Path
    """The launch file."""
    args: dict[str, str]
    """The file's arguments given on the command line."""
    print_only: bool = False
    """Print the commands instead of starting them."""
    show_args: bool = False
    """List the file's arguments instead of starting it."""


def resolve(file: str) -> Path:
    """A launch file path, or the name (with or without ``.launch.xml``) of one of handrail's."""
    for path in (Path(file), LAUNCH_DIR / file, LAUNCH_DIR / f"{file}.launch.xml"):
        if path.is_file():
            return path
    names = sorted(p.name for p in LAUNCH_DIR.glob("*.launch.xml"))
    raise LaunchError(f"{file}: no such launch file; give a path or one of {names}")


def parse_argv(argv: list[str]) -> LaunchRequest | None:
    """``handrail launch``'s command line (None after printing the help)."""
    if not argv or "-h" in argv or "--help" in argv:
        names = ", ".join(sorted(p.name for p in LAUNCH_DIR.glob("*.launch.xml")))
        print(_HELP.format(names=names or "(none)"))
        return None
    flags = {"--print", "--show-args"}
    unknown = sorted({a for a in argv if a.startswith("-")} - flags)
    if unknown:
        raise LaunchError(f"unknown option {', '.join(unknown)}; see handrail launch --help")
    file, *rest = [a for a in argv if a not in flags]
    args = {}
    for item in rest:
        name, sep, value = item.partition(":=")
        if not sep or not name:
            raise LaunchError(f"launch arguments are name:=value, got {item!r}")
        args[name] = value
    return LaunchRequest(resolve(file), args, "--print" in argv, "--show-args" in argv)


def launch(request: LaunchRequest | None) -> int:
    """Run ``handrail launch`` and return its exit code."""
    if request is None:
        return 0
    if request.show_args:
        print("Arguments (pass arguments as '<name>:=<value>'):\n")
        for name, default, description in arguments(request.file):
            print(f"    '{name}':\n        {description or 'no description given'}")
            print(
                f"        (default: '{default}')\n"
                if default is not None
                else "        (required)\n"
            )
        return 0
    nodes = parse(request.file, request.args)
    if request.print_only:
        params_dir = print_params_dir(request.file, request.args)
        params_dir.mkdir(parents=True, exist_ok=True)
        for node in nodes:
            print(shlex.join(command(node, params_dir)))
        return 0
    if any(node.pkg == PACKAGE for node in nodes):
        problem = ros_missing()  # else every node would die with a traceback
        if problem:
            raise LaunchError(problem)
    return run(nodes)
