"""What every handrail ROS 2 node shares: QoS profiles, parameter declaration, the main loop.

Node modules (``hw/<name>.py``) follow one shape so the launch runner and the tests can treat
them alike: a module-level ``PARAMETERS`` dict (every parameter the node declares, with its
default; launch files may set only these), a small ``rclpy.node.Node`` subclass, and
``main(args=None)`` that runs it until SIGINT/SIGTERM. ``NODES`` in :mod:`handrail.hw.nodes`
lists them by executable name.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import (
    ExternalShutdownException,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
)
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from handrail.hw.nodes import RCLPY_PARAMETERS, STACKS_SIGNAL

__all__ = [
    "COMMAND_QOS",
    "LATCHED_QOS",
    "STATE_QOS",
    "ContextShutdown",
    "NodeClock",
    "call_service",
    "check_context",
    "control_loop_process",
    "declare_parameters",
    "finish_callbacks",
    "init_rclpy",
    "print_stacks_on_request",
    "run_node",
    "watch_the_stop",
]

STATE_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)
"""High-rate state: the newest sample is all that matters (hw/INTERFACES.md, QoS ``state``)."""

COMMAND_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
"""Targets sent to the arm (QoS ``command``)."""

LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
"""State a late subscriber must still get: e-stop, success, events (QoS ``latched``)."""


GIL_SWITCH_INTERVAL_S = 0.0005
"""How long a thread may hold the GIL while another waits, in a control-loop process."""


def control_loop_process() -> None:
    """Tune this interpreter for a control loop that shares it with a learner thread.

    Python hands the GIL to a waiting thread only every ``sys.getswitchinterval()`` (5 ms by
    default), so a control loop that wakes for its deadline while the learner thread runs Python
    waits up to that long: that was most of the loop's p99 jitter. 0.5 ms bounds it.
    """
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


class ContextShutdown(RuntimeError):
    """The node is stopping: rclpy shut down (SIGINT, SIGTERM) while something waited."""


def check_context(context: Any, waiting_for: str) -> None:
    """Raise :class:`ContextShutdown` if rclpy's ``context`` has shut down: every wait in the
    nodes polls this, so none of them holds up a node's exit."""
    if not context.ok():
        raise ContextShutdown(
            f"rclpy shut down (SIGINT or SIGTERM) while waiting for {waiting_for}"
        )


class NodeClock:
    """Seconds on a node's clock: ``sim_robot``'s ``/clock`` when the node runs with
    ``use_sim_time:=true``, else the monotonic wall clock.

    Everything that paces or ages (the control period, observation age, a person's quiet time,
    reset deadlines) reads this clock, so a stack on simulated time behaves at any
    ``real_time_factor`` exactly as it does in real time. Timeouts that detect a peer that is not
    there at all (no arm, no reset service) stay on the wall clock: simulated time does not
    advance when the simulator is missing.
    """

    def __init__(self, node: Node) -> None:
        self.sim = bool(node.get_parameter("use_sim_time").value)
        self._clock = node.get_clock()
        self._context = node.context

    def now(self) -> float:
        """Seconds (an arbitrary origin on the wall clock; simulated time on ``/clock``)."""
        if self.sim:
            return self._clock.now().nanoseconds * 1e-9
        return time.monotonic()

    def sleep_until(self, t: float, stall_s: float = 5.0) -> float:
        """Sleep until ``t`` on this clock and return how late it woke (s).

        On the wall clock: a coarse sleep, then a short spin (sub-millisecond lateness). On
        simulated time: polls ``/clock`` (its resolution is ``sim_robot``'s state period) and
        raises :class:`TimeoutError` when simulated time stops for ``stall_s`` of wall time.
        Raises :class:`ContextShutdown` within 50 ms of rclpy shutting down (SIGINT, SIGTERM),
        so a callback that waits (a reset homing the arm) never holds the node's exit.
        """
        if not self.sim:
            while True:
                check_context(self._context, "the clock")
                left = t - time.monotonic()
                if left <= 0:
                    return -left
                time.sleep(min(left - 0.001, 0.05) if left > 0.002 else 0)
        last, last_wall = self.now(), time.monotonic()
        while True:
            check_context(self._context, "the clock")
            now = self.now()
            if now >= t:
                return now - t
            if now != last:
                last, last_wall = now, time.monotonic()
            elif time.monotonic() - last_wall > stall_s:
                raise TimeoutError(
                    f"simulated time (/clock) stood still at {now:.3f} s for {stall_s} s of wall "
                    "time: is sim_robot running? (use_sim_time:=true needs /clock, which sim_robot "
                    "publishes when its real_time_factor is not 1)"
                )
            time.sleep(0.0005)

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` on this clock."""
        self.sleep_until(self.now() + seconds)


def call_service(node: Node, client: Any, timeout_s: float) -> Any:
    """Call a ``Trigger``-like service and wait for its answer from any thread.

    Returns the response, or ``None`` when none came within ``timeout_s``. Raises
    :class:`ContextShutdown` within 50 ms of rclpy shutting down (SIGINT, SIGTERM): a waiting
    caller never holds up the node's exit. The caller waits for the service to exist first.
    """
    done = threading.Event()
    future = client.call_async(client.srv_type.Request())
    future.add_done_callback(lambda _: done.set())
    deadline = time.monotonic() + timeout_s
    while not done.wait(0.05):
        check_context(node.context, repr(client.srv_name))
        if time.monotonic() > deadline:
            return None
    return future.result()


def declare_parameters(node: Node, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Declare every parameter of ``parameters`` (name -> default) and return their values.

    Values set on the command line or in a parameter file override the defaults. A parameter the
    node does not declare is an error (rclpy would silently ignore it). An empty list default
    declares a list of strings.
    """
    overrides = set(getattr(node, "_parameter_overrides", {}))  # from --ros-args and files
    unknown = sorted(overrides - set(parameters) - RCLPY_PARAMETERS)
    if unknown:
        # rclpy ignores overrides a node never declares: a typo in a parameter file (a workspace
        # limit, say) would silently leave the default in force. Refuse instead.
        raise ValueError(
            f"{node.get_name()}: unknown parameter(s) {unknown}; it declares {sorted(parameters)}"
        )
    values = {}
    lenient = ParameterDescriptor(dynamic_typing=True)  # 2 for a float: the node converts it
    for name, default in parameters.items():
        if isinstance(default, list) and not default:
            # rclpy types an empty list as a byte array: an empty default is a string list.
            node.declare_parameter(name, Parameter.Type.STRING_ARRAY)
            if name not in overrides:
                node.set_parameters([Parameter(name, Parameter.Type.STRING_ARRAY, [])])
        else:
            node.declare_parameter(name, default, lenient)
        values[name] = node.get_parameter(name).value
    return values


def init_rclpy(args: list[str] | None = None) -> None:
    """``rclpy.init`` with SIGINT turned into a shutdown only, never a ``KeyboardInterrupt``.

    rclpy's handler shuts the contexts down from a thread of its own and then calls Python's
    handler, whose default raises ``KeyboardInterrupt`` wherever the main thread happens to be.
    Raised between a lock's acquire and the ``with`` block that releases it (CPython cannot
    guard that gap), it leaves the lock held: CI saw an idle ``reset_node`` hang on exit, its
    executor's worker threads each waiting on the thread pool's semaphore lock the interrupted
    main thread had taken. A Python handler that does nothing leaves the stop to rclpy's
    shutdown, which every spin and wait here already ends on.
    """
    signal.signal(signal.SIGINT, _ignore_in_python)
    print_stacks_on_request()
    rclpy.init(args=args)


def print_stacks_on_request() -> None:
    """Print every thread's stack to stderr on :data:`~handrail.hw.nodes.STACKS_SIGNAL`, and go
    on running: how ``handrail launch`` learns where a node that will not stop is stuck."""
    faulthandler.register(STACKS_SIGNAL, all_threads=True, chain=False)


def _ignore_in_python(signum: int, frame: Any) -> None:
    """Python's half of SIGINT: nothing (rclpy's half shuts the contexts down)."""


def _shut_down_by_signal(context: Any, wait_s: float = 0.5) -> bool:
    """Whether rclpy's context is shut down, or is within ``wait_s``: rclpy's signal handler
    shuts contexts down from a thread of its own, and the interrupted call (a message being
    taken, as pybind11 reports it: "Unable to convert call argument") can fail first."""
    end = time.monotonic() + wait_s
    while context.ok():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


SPIN_POLL_S = 0.1
"""The longest a node's spin waits before it looks at its context again (:func:`spin_until_shutdown`)."""


def run_node(factory: Callable[[], Node], args: list[str] | None = None, threads: int = 1) -> None:
    """Init rclpy, build the node, spin it until SIGINT/SIGTERM, then shut down cleanly.

    Args:
        factory: builds the node (called after ``rclpy.init``).
        args: command-line arguments (``--ros-args ...``); default ``sys.argv``.
        threads: executor threads: 1 (a single-threaded executor) unless a callback waits for
            other callbacks (a service that waits on topics). rclpy's multi-threaded executor
            cost a node about 30% of a CPU at 100 Hz of state messages.
    """
    init_rclpy(args)
    try:
        node = factory()
    except (ValueError, TypeError) as err:  # bad parameters: one clear line, not a traceback
        print(f"error: {err}", file=sys.stderr)
        rclpy.shutdown()
        raise SystemExit(2) from None
    executor = (
        SingleThreadedExecutor() if threads == 1 else MultiThreadedExecutor(num_threads=threads)
    )
    executor.add_node(node)
    watch_the_stop(node.context, STOP_GRACE_S)
    # rclpy's own handlers turn SIGINT and SIGTERM into a shutdown: the spin ends.
    try:
        spin_until_shutdown(executor, node.context)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if not _shut_down_by_signal(node.context):
            raise
        # rclpy's SIGINT/SIGTERM handler shut the context down while a callback ran, and the
        # callback's next ROS call (a publish) failed: that is the stop asked for, not a fault.
    finally:
        close = getattr(node, "close", None)
        if callable(close):
            close()
        executor.shutdown(timeout_sec=STOP_GRACE_S)
        finish_callbacks(executor)
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


def finish_callbacks(executor: Any) -> list[BaseException]:
    """Wait for the callbacks a multi-threaded executor still runs, and read what they raised.

    rclpy's ``MultiThreadedExecutor.shutdown`` neither waits for its thread pool nor reads the
    errors of the callbacks that finish after the last spin: the node's destruction then failed
    them ("cannot use Destroyable because destruction was requested") and each printed "The
    following exception was never retrieved" as the process exited (``reset_node``, on most
    stops). After a stop, such an error is the stop's own; they are returned, not raised.
    Callbacks still queued run too (cancelled, each left a coroutine never awaited, and a
    warning at exit): on the shut-down context their ROS calls fail at once. A single-threaded
    executor has none left.
    """
    pool = getattr(executor, "_executor", None)
    if isinstance(pool, ThreadPoolExecutor):
        pool.shutdown(wait=True)
    done = [task for task in getattr(executor, "_futures", ()) if task.done()]
    return [error for error in (task.exception() for task in done) if error is not None]


def spin_until_shutdown(executor: Any, context: Any, poll_s: float = SPIN_POLL_S) -> None:
    """Spin ``executor`` until ``context`` shuts down, waiting at most ``poll_s`` at a time.

    ``executor.spin()`` waits without a timeout and relies on the shutdown waking it. CI saw
    that wake missed under load (twice in one run): an idle node's main thread stayed in
    rclpy's wait after SIGINT had shut the context down, until ``watch_the_stop`` ended it
    with code 1 (``sim_robot exited with code 1 while stopping``). Before, Python's
    KeyboardInterrupt broke that wait; :func:`init_rclpy` no longer lets it (it left locks
    held). A bounded wait checks the context again at least every ``poll_s``.
    """
    while context.ok():
        executor.spin_once(timeout_sec=poll_s)


STOP_GRACE_S = 4.0
"""How long a node may take to exit once rclpy shut down; :func:`watch_the_stop` ends it after.
Shorter than ``handrail launch``'s 5 s before it escalates to SIGTERM."""


def watch_the_stop(context: Any, grace_s: float = STOP_GRACE_S) -> None:
    """Once ``context`` shuts down (SIGINT, SIGTERM), give the process ``grace_s`` to exit; past
    that, print every thread's stack to stderr and exit with code 1.

    A node stuck in its teardown ignores SIGTERM too: rclpy's handler only shuts down a context
    that is already down. ``handrail launch`` then had to SIGKILL it (CI saw this once from an
    idle ``reset_node``), with nothing saying where it hung. The dump is faulthandler's, from a
    native thread that needs no Python lock, so it fires even if the hang holds one.
    """

    def watch() -> None:
        while context.ok():
            time.sleep(0.1)
        faulthandler.dump_traceback_later(grace_s, exit=True)

    threading.Thread(target=watch, name="stop-watch", daemon=True).start()
