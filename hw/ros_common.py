"""What every handrail ROS 2 node shares: QoS profiles, parameter declaration, the main loop.

Node modules (``hw/<name>.py``) follow one shape so the launch runner and the tests can treat
them alike: a module-level ``PARAMETERS`` dict (every parameter the node declares, with its
default; launch files may set only these), a small ``rclpy.node.Node`` subclass, and
``main(args=None)`` that runs it until SIGINT/SIGTERM. ``NODES`` in :mod:`handrail.hw.nodes`
lists them by executable name.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import (
    ExternalShutdownException,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
)
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

__all__ = [
    "COMMAND_QOS",
    "LATCHED_QOS",
    "STATE_QOS",
    "control_loop_process",
    "declare_parameters",
    "run_node",
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


def declare_parameters(node: Node, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Declare every parameter of ``parameters`` (name -> default) and return their values.

    Values set on the command line or in a parameter file override the defaults. A parameter the
    node does not declare is an error (rclpy would silently ignore it).
    """
    overrides = set(getattr(node, "_parameter_overrides", {}))  # from --ros-args and files
    unknown = sorted(
        overrides - set(parameters) - {"use_sim_time", "start_type_description_service"}
    )
    if unknown:
        # rclpy ignores overrides a node never declares: a typo in a parameter file (a workspace
        # limit, say) would silently leave the default in force. Refuse instead.
        raise ValueError(
            f"{node.get_name()}: unknown parameter(s) {unknown}; it declares {sorted(parameters)}"
        )
    values = {}
    lenient = ParameterDescriptor(dynamic_typing=True)  # 2 for a float: the node converts it
    for name, default in parameters.items():
        node.declare_parameter(name, default, lenient)
        values[name] = node.get_parameter(name).value
    return values


def run_node(factory: Callable[[], Node], args: list[str] | None = None, threads: int = 1) -> None:
    """Init rclpy, build the node, spin it until SIGINT/SIGTERM, then shut down cleanly.

    Args:
        factory: builds the node (called after ``rclpy.init``).
        args: command-line arguments (``--ros-args ...``); default ``sys.argv``.
        threads: executor threads: 1 (a single-threaded executor) unless a callback waits for
            other callbacks (a service that waits on topics). rclpy's multi-threaded executor
            cost a node about 30% of a CPU at 100 Hz of state messages.
    """
    rclpy.init(args=args)
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
    # rclpy's own handlers turn SIGINT and SIGTERM into a shutdown: spin() returns.
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        close = getattr(node, "close", None)
        if callable(close):
            close()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
