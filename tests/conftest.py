"""Test-wide settings: headless rendering and CPU JAX with no preallocation.

ROS 2 tests keep every DDS packet inside a private network namespace: the ``ros`` fixture runs a
Python script, and ``in_netns`` a command, in a fresh network namespace (``unshare -n``) whose
only interface is a loopback with multicast routed to it, with ``ROS_AUTOMATIC_DISCOVERY_RANGE``
set to LOCALHOST. Everything they start inherits the namespace (and a PID namespace, so nothing
outlives the test).

The suite runs on two pytest-xdist workers (the README's command). A test marked ``serial``
(every ROS 2 test, anything that paces on the wall clock) runs alone: it takes a file lock
exclusively while every other test holds it shared, so no other test loads the CPUs meanwhile.
"""

import fcntl
import json
import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

_SERIAL_PATHS = (
    "tests/hw/",
    "tests/launch/ros/",
    "tests/bench/test_ros.py",
    "tests/control/test_device_io.py",
)
"""Files whose tests pace, time out or age messages on the wall clock: they run alone."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(part in item.nodeid for part in _SERIAL_PATHS):
            item.add_marker(pytest.mark.serial)
    items[:] = _scheduled(items)


def _scheduled(items: list[pytest.Item]) -> list[pytest.Item]:
    """The order the workers take modules in (pyproject has ``--no-loadscope-reorder``): those
    with a ``slow`` test first, ``serial`` ones last, each group largest first.

    xdist's own order (largest first) left the one-test learning modules and the serial ones for
    the end, where a serial test waited for a long learning test to finish on the other worker
    and the last long test ran with the other worker idle.
    """
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(item.nodeid.split("::")[0], []).append(item)

    def rank(module: list[pytest.Item]) -> tuple[int, int]:
        def has(marker: str) -> bool:
            return any(item.get_closest_marker(marker) for item in module)

        return (2 if has("serial") else 0 if has("slow") else 1), -len(module)

    return [item for module in sorted(groups.values(), key=rank) for item in module]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under xdist: a ``serial`` test (setup, call and teardown) holds the run's lock
    exclusively, every other test shared."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # one process: nothing runs beside the test anyway
        yield
        return
    serial = item.get_closest_marker("serial") is not None
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"handrail-pytest-{run}.lock"
    with open(path, "a") as lock:  # closing the file releases the lock
        fcntl.flock(lock, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        yield


_NETNS_SETUP = "ip link set lo up && ip link set lo multicast on && ip route add 224.0.0.0/4 dev lo"


def netns_command(argv: list[str]) -> list[str]:
    """``argv`` wrapped to run in a private network namespace with multicast on loopback.

    It also gets a PID namespace of its own (``argv`` is its init): when it exits, or is
    killed on a timeout, the kernel kills every process it started, so a failed test leaves
    no nodes running.
    """
    isolate = ["-n", "-p", "--fork", "--kill-child", "--mount-proc"]
    unshare = ["unshare", *isolate] if os.geteuid() == 0 else ["unshare", "-r", *isolate]
    inner = f"{_NETNS_SETUP} && exec {shlex.join(argv)}"
    return [*unshare, "bash", "-c", inner]


def ros_env(domain_id: int = 0) -> dict[str, str]:
    """The environment for ROS processes inside the namespace."""
    env = dict(os.environ)
    env.update(
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_DOMAIN_ID=str(domain_id),
        RMW_IMPLEMENTATION="rmw_fastrtps_cpp",
        PYTHONUNBUFFERED="1",
        MUJOCO_GL=env.get("MUJOCO_GL", "egl"),
    )
    return env


RosRunner = Callable[..., Any]


def _text(output: bytes | str | None) -> str:
    """A timed-out subprocess's captured output (bytes even with ``text=True``)."""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


@pytest.fixture
def ros(tmp_path: Path) -> RosRunner:
    """Run ``code`` (a Python script body) in a private network namespace; return its JSON."""

    def run(code: str, timeout_s: float = 120.0) -> Any:
        script = tmp_path / "ros_script.py"
        script.write_text(textwrap.dedent(code))
        try:
            proc = subprocess.run(
                netns_command([sys.executable, str(script)]),
                cwd=tmp_path,
                env=ros_env(),
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as hung:  # say where it hung: the nodes' reports
            out, err = (_text(x) for x in (hung.stdout, hung.stderr))
            raise AssertionError(
                f"ROS script still running after {timeout_s} s:\n--- stdout\n{out[-4000:]}"
                f"\n--- stderr\n{err[-6000:]}"
            ) from None
        if proc.returncode != 0:
            raise AssertionError(
                f"ROS script failed (exit {proc.returncode}):\n--- stdout\n{proc.stdout[-4000:]}"
                f"\n--- stderr\n{proc.stderr[-6000:]}"
            )
        # Shown by pytest under "Captured stderr" when a later assertion fails: the launch's and
        # the nodes' own reports of what went wrong.
        sys.stderr.write(proc.stderr[-8000:])
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        assert lines, f"ROS script printed nothing; stderr:\n{proc.stderr[-4000:]}"
        return json.loads(lines[-1])

    return run


@pytest.fixture
def in_netns() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a command (argv) in a private network namespace; return the completed process."""

    def run(argv: list[str], timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(netns_command(argv), env=ros_env(), capture_output=True, text=True,
                              timeout=timeout_s)  # fmt: skip

    return run


@pytest.fixture
def nan_demo_store(tmp_path: Path) -> Path:
    """A `reach` demo store of two successful 3-step episodes; episode 1's last action is nan."""
    import numpy as np

    from handrail.app.envs import make_env
    from handrail.demos import create_store
    from handrail.demos.format import fields_from_space

    fields = fields_from_space(make_env("reach").observation_space)
    store = tmp_path / "nan_demos"
    with create_store(store, kind="demo", obs_fields=fields, action_dim=4, control_dt_s=0.1,
                      task="reach") as writer:  # fmt: skip
        obs = {f.name: np.zeros(f.shape, f.dtype) for f in fields}
        for episode in range(2):
            writer.begin_episode(seed=episode)
            for t in range(3):
                action = np.full(4, np.nan if (episode, t) == (1, 2) else 0.0, np.float32)
                writer.add_step(obs=obs, action=action, reward=0.0, terminated=t == 2,
                                truncated=False)  # fmt: skip
            writer.end_episode(final_obs=obs, success=True)
    return store
