"""What every node shares (hw/ros_common.py), without a ROS 2 graph."""

import gc
import os
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor

from handrail.hw.nodes import STACKS_SIGNAL
from handrail.hw.ros_common import _shut_down_by_signal, finish_callbacks, spin_until_shutdown


class Context:
    """A stand-in rclpy context that shuts down ``after_s`` from now (None: never)."""

    def __init__(self, after_s: float | None) -> None:
        self.end = None if after_s is None else time.monotonic() + after_s

    def ok(self) -> bool:
        return self.end is None or time.monotonic() < self.end


def test_an_error_while_rclpy_shuts_down_from_its_signal_thread_is_the_stop():
    # Seen while stopping safety_node with SIGINT (about 1 stop in 10): the signal interrupted
    # a message being taken, pybind11 raised "Unable to convert call argument '0'", and the
    # context was still ok because rclpy shuts it down from a thread of its own a moment later.
    # The node exited with code 1 and a traceback instead of 0.
    assert _shut_down_by_signal(Context(0.05))
    assert _shut_down_by_signal(Context(0.0))
    start = time.monotonic()
    assert not _shut_down_by_signal(Context(None), wait_s=0.1)  # a real fault is raised
    assert time.monotonic() - start < 1.0


def test_joining_a_learner_ends_when_rclpy_shuts_down_and_passes_its_result_or_error():
    # hw run beside two busy processes: a Ctrl-C while actor_node joined a slow Ray learner
    # waited for the join (its thread pool's shutdown), past launch's SIGTERM, for minutes.
    import threading

    import pytest

    from handrail.hw.actor_node import _off_main_thread
    from handrail.hw.ros_common import ContextShutdown

    never = threading.Event()
    start = time.monotonic()
    with pytest.raises(ContextShutdown, match="the Ray learner to answer"):
        _off_main_thread(Context(0.2), never.wait)
    assert time.monotonic() - start < 2.0
    assert _off_main_thread(Context(None), lambda a, b=0: a + b, 1, b=2) == 3

    def refuse(address, option):
        raise ValueError(f"{option} {address}: no learner there")

    with pytest.raises(ValueError, match=r"ray_address 1\.2\.3\.4:1: no learner there"):
        _off_main_thread(Context(None), refuse, "1.2.3.4:1", option="ray_address")
    main = threading.current_thread()
    assert all(t is main or t.daemon for t in threading.enumerate() if t.name == "join-learner")


def test_a_nodes_spin_ends_after_the_shutdown_even_if_nothing_wakes_its_wait():
    # CI: twice in one run an idle node stayed in rclpy's wait after SIGINT shut its context
    # down (the wake-up missed), until the stop watch killed it. An executor whose wait only
    # ever times out stands in for the missed wake.
    waits = []

    class Executor:
        def spin_once(self, timeout_sec=None):
            assert timeout_sec is not None, "an unbounded wait never sees the shutdown"
            waits.append(timeout_sec)
            time.sleep(timeout_sec)

    start = time.monotonic()
    spin_until_shutdown(Executor(), Context(0.3), poll_s=0.05)
    assert time.monotonic() - start < 0.6 and all(w == 0.05 for w in waits) and len(waits) >= 4


def test_a_node_prints_its_stacks_on_request_even_while_a_native_call_holds_the_gil():
    # What `handrail launch` relies on to say where a node that will not stop is stuck: the
    # main thread is in one long C call that never releases the GIL, as a blocked publish is.
    script = (
        "import sys\n"
        "from handrail.hw.ros_common import print_stacks_on_request\n"
        "print_stacks_on_request()\n"
        "print('ready', flush=True)\n"
        "def stuck():\n"
        "    return sum(range(10**13))\n"
        "stuck()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        time.sleep(0.3)  # well inside the sum
        os.kill(proc.pid, STACKS_SIGNAL)
        time.sleep(0.5)
        assert proc.poll() is None  # it goes on running
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    assert "most recent call first" in err, err
    assert "line 6 in stuck" in err and "line 7 in <module>" in err, err


def test_callbacks_still_running_at_the_stop_are_waited_for_and_their_errors_read(capfd):
    # rclpy's MultiThreadedExecutor keeps its thread pool in `_executor` and the callbacks it
    # submitted in `_futures`, and waits for neither when it shuts down: a callback the node's
    # destruction then failed printed "The following exception was never retrieved" at exit.
    from rclpy.task import Task

    def fails_late():
        time.sleep(0.3)
        raise RuntimeError("cannot use Destroyable because destruction was requested")

    async def queued_handler():  # what rclpy's executor queues: a coroutine, awaited once run
        raise RuntimeError("the context is shut down")

    pool = ThreadPoolExecutor(1)
    running, queued = Task(fails_late), Task(queued_handler)
    pool.submit(running)
    pool.submit(queued)
    executor = types.SimpleNamespace(_executor=pool, _futures=[running, queued])
    errors = finish_callbacks(executor)
    assert running.done() and queued.done()  # the queued one too: no coroutine left unawaited
    assert [str(e) for e in errors] == [
        "cannot use Destroyable because destruction was requested",
        "the context is shut down",
    ]
    del running, queued, executor, errors
    gc.collect()
    err = capfd.readouterr().err
    assert "never retrieved" not in err and "never awaited" not in err, err
    assert finish_callbacks(types.SimpleNamespace()) == []  # a single-threaded executor
