"""What a ROS 2 arm must look like to stand in for a sim task: spaces and observation recipes.

A :class:`TaskMirror` says how :class:`~handrail.hw.ros_env.RosArmEnv` rebuilds a sim task's
observation from the arm profile's topics (``ee_pose``, ``ee_twist``, ``gripper_state``) and the
object poses perception publishes (``objects/<name>/pose``), and which action layout, episode
length and termination rule the task has. Pure NumPy: the hardware path needs no MuJoCo. A test
checks every mirror against its sim task (same spaces, same observation from the same state).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from handrail.control.spaces import ActionConfig
from handrail.control.transforms import yaw_between

__all__ = ["MIRRORS", "ObsTerm", "TaskMirror", "mirror"]

PROPRIO_DIM = 14
"""ee_pos_m (3), ee_quat_wxyz (4), ee_linvel_m_s (3), ee_angvel_rad_s (3), gripper_opening_m (1):
the layout of ``handrail.sim.base.PROPRIO_LAYOUT``."""

DM_PER_M = 10.0
"""Relative positions are observed in decimetres (``handrail.sim.base.offset_dm``)."""

TCP = "tcp"
"""The name of the tool centre point in :class:`ObsTerm` (not an object)."""

Pose = tuple[NDArray[np.float64], NDArray[np.float64]]


@dataclass(frozen=True)
class ObsTerm:
    """One observation key computed from poses.

    ``pose``: the object's position and quaternion (7); ``position``: its position (3);
    ``offset_dm``: ``(of - origin)`` positions in decimetres (3), ``origin`` an object or tcp;
    ``yaw_rad``: the yaw turn from ``origin``'s heading to ``of``'s, wrapped into
    ``[-period/2, period/2)`` (1), ``origin`` an object.
    """

    key: str
    kind: Literal["pose", "position", "offset_dm", "yaw_rad"]
    of: str
    origin: str = TCP
    period_rad: float = 2 * np.pi
    """``yaw_rad`` only: the turn after which ``of`` looks the same (pi/2 for a square part)."""

    @property
    def size(self) -> int:
        """Length of the observation vector."""
        return {"pose": 7, "yaw_rad": 1}.get(self.kind, 3)


@dataclass(frozen=True)
class TaskMirror:
    """A sim task's interface, as an arm over ROS 2 reproduces it."""

    task: str
    objects: tuple[str, ...]
    """The ``objects/<name>/pose`` topics the observation needs."""
    terms: tuple[ObsTerm, ...]
    """The task's observation keys (besides ``proprio``), in the sim task's order."""
    action: ActionConfig = field(default_factory=ActionConfig)
    episode_steps: int = 100
    terminate_on_success: bool = True

    def observe(
        self, proprio: NDArray[np.float32], poses: Mapping[str, Pose]
    ) -> dict[str, NDArray[np.float32]]:
        """The task's observation dict from the proprio vector and the objects' poses.

        Raises:
            KeyError: an object the observation needs has no pose (names the missing ones).
        """
        missing = [name for name in self.objects if name not in poses]
        if missing:
            raise KeyError(f"no pose for object(s) {missing} of task {self.task!r}")
        tcp = np.asarray(proprio[:3], np.float64)
        obs: dict[str, NDArray[np.float32]] = {"proprio": np.asarray(proprio, np.float32)}
        for term in self.terms:
            pos, quat = poses[term.of]
            if term.kind == "pose":
                value = np.concatenate([pos, quat])
            elif term.kind == "position":
                value = np.asarray(pos, np.float64)
            elif term.kind == "yaw_rad":
                value = np.array([yaw_between(quat, poses[term.origin][1], term.period_rad)])
            else:
                origin = tcp if term.origin == TCP else np.asarray(poses[term.origin][0])
                value = (np.asarray(pos, np.float64) - origin) * DM_PER_M
            obs[term.key] = value.astype(np.float32)
        return obs


MIRRORS: dict[str, TaskMirror] = {
    "reach": TaskMirror(
        "reach",
        ("goal",),
        (ObsTerm("goal", "position", "goal"), ObsTerm("goal_from_tcp_dm", "offset_dm", "goal")),
        episode_steps=50,
    ),
    "pick_cube": TaskMirror(
        "pick_cube",
        ("cube",),
        (ObsTerm("object", "pose", "cube"), ObsTerm("cube_from_tcp_dm", "offset_dm", "cube")),
        action=ActionConfig(rotation="yaw"),
    ),
    "push": TaskMirror(
        "push",
        ("puck", "goal"),
        (
            ObsTerm("object", "position", "puck"),
            ObsTerm("goal", "position", "goal"),
            ObsTerm("puck_from_tcp_dm", "offset_dm", "puck"),
            ObsTerm("goal_from_puck_dm", "offset_dm", "goal", "puck"),
        ),
    ),
    "peg_insert": TaskMirror(
        "peg_insert",
        ("peg", "hole"),
        (
            ObsTerm("peg", "pose", "peg"),
            ObsTerm("hole", "pose", "hole"),
            ObsTerm("entry_from_tip_dm", "offset_dm", "hole", "peg"),
            ObsTerm("hole_yaw_from_peg_rad", "yaw_rad", "hole", "peg", period_rad=np.pi / 2),
        ),
        action=ActionConfig(rotation="yaw", gripper=False),
    ),
}
"""The sim tasks an arm over ROS 2 can stand in for."""


def mirror(task: str) -> TaskMirror:
    """The mirror of ``task``; a clear error lists the tasks that have one."""
    try:
        return MIRRORS[task]
    except KeyError:
        raise ValueError(
            f"task {task!r} has no ROS 2 mirror; choose one of {sorted(MIRRORS)} "
            "(add a TaskMirror to hw/mirrors.py for a new task)"
        ) from None
