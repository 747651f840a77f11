"""What every node shares (hw/ros_common.py), without a ROS 2 graph."""

import time

from handrail.hw.ros_common import _shut_down_by_signal


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
