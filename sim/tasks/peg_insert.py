"""peg_insert: insert a held square peg into a square hole with about 2 mm clearance.

The peg (a box, ``2 * peg_half_width_m`` square) starts grasped between the closed fingers, its
top against the palm, so pushing it into the hole cannot slide it up the grasp; it is a free
body held by friction, not welded to the hand. The action has no gripper command by default
(``ActionConfig(rotation="yaw", gripper=False)``): the fingers stay closed, so a policy cannot
drop the peg. The hole is a square socket built from four walls on the table, placed at a random
position and yaw (it looks the same every quarter turn).

Contacts are set up so that ``clearance_m`` (total, hole width minus peg width) of 2 mm is stable
at the 2 ms physics step: the walls use stiff, hard contacts (``solref`` at twice the time step,
``solimp`` width 1 mm, contact margin 0) and are 12 mm thick, far more than the peg travels in
one physics step (< 1 mm at the safety limit's 0.5 m/s), so the peg can neither tunnel through
a wall nor sink through the rim. The walls set the peg-wall friction (0.3) by geom priority.

Observation keys: ``proprio``; ``peg`` (tip position (m) and quaternion w, x, y, z); ``hole``
(entry centre, i.e. the middle of the hole's top opening (m), and quaternion); and where to go
next: ``entry_from_tip_dm`` (the entry from the tip, dm) and ``hole_yaw_from_peg_rad`` (the yaw
turn that lines the peg up with the hole, in [-pi/4, pi/4)). The yaw key matters: from the
quaternions alone a network must learn a wrapped difference of headings, and behaviour cloning
on 10 scripted demos failed at it (0-10% success); on the two offset keys alone it succeeds.
Success: the tip is inside the hole's footprint and at least ``insert_depth_m`` below the entry;
it terminates the episode by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import mujoco
import numpy as np
from gymnasium import spaces

from handrail.control.spaces import ActionConfig
from handrail.control.transforms import quat_conj, quat_rotate, yaw_between, yaw_from_quat
from handrail.sim import arm
from handrail.sim.base import PROPRIO_SLICES, ArmEnv, SimConfig, TaskSpec, offset_dm
from handrail.sim.tasks._checks import check_region
from handrail.sim.tasks._peg_expert import PegInsertPlanner
from handrail.sim.tasks._tracking import TargetTracker

_PALM_Z_M = 0.06  # hand frame: bottom face of the palm box (see arm._gripper_xml)
_PALM_GAP_M = 0.001  # peg top to palm at reset
_WALL_M = 0.012  # wall thickness

HOLE_YAW_KEY = "hole_yaw_from_peg_rad"
"""Observation key of the turn that lines the peg up with the hole (:func:`hole_yaw_from_peg_rad`)."""


def hole_yaw_from_peg_rad(hole_quat: np.ndarray, peg_quat: np.ndarray) -> float:
    """The yaw turn (rad) that lines the square peg up with the square hole, in ``[-pi/4, pi/4)``:
    both look the same every quarter turn, so the smallest such turn is the one to make."""
    return yaw_between(hole_quat, peg_quat, np.pi / 2)


@dataclass(frozen=True)
class PegInsertConfig(SimConfig):
    """peg_insert: settings on top of :class:`SimConfig`."""

    episode_steps: int = 100
    """Time limit in env steps (10 s at 10 Hz)."""
    action: ActionConfig = field(
        default_factory=lambda: ActionConfig(rotation="yaw", gripper=False)
    )
    """xyz + yaw increments; no gripper command (the peg stays grasped)."""
    peg_half_width_m: float = 0.01
    """Half the side of the square peg (m)."""
    peg_below_tcp_m: float = 0.06
    """How far the peg tip sticks out below the tool centre point (m)."""
    peg_mass_kg: float = 0.05
    """Peg mass (kg)."""
    clearance_m: float = 0.002
    """Hole width minus peg width (m); 1 mm per side by default."""
    hole_depth_m: float = 0.04
    """Height of the hole's walls above the table (m)."""
    insert_depth_m: float = 0.02
    """Success when the tip is this far below the hole's entry, inside its footprint (m)."""
    hole_low_m: tuple[float, float] = (0.42, -0.15)
    """Lower xy corner of the region the hole's centre is drawn from (m)."""
    hole_high_m: tuple[float, float] = (0.62, 0.15)
    """Upper xy corner of the hole region (m)."""
    hole_yaw_range_rad: float = np.pi / 4
    """The hole's yaw is drawn uniformly from +- this (rad)."""
    reach_scale_1_m: float = 20.0
    """Dense reward: reach term 1 - tanh(reach_scale_1_m * tip-to-entry distance (m))."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.clearance_m <= 0:
            raise ValueError(
                f"clearance_m must be > 0 (hole width minus peg width, m) or the peg cannot fit; "
                f"got {self.clearance_m}. Use e.g. 0.002."
            )
        if not 0 < self.peg_half_width_m < 0.03:
            raise ValueError(
                f"peg_half_width_m must be in (0, 0.03) m so the gripper holds it; "
                f"got {self.peg_half_width_m}"
            )
        if not 0 < self.insert_depth_m < self.hole_depth_m:
            raise ValueError(
                f"insert_depth_m must be in (0, hole_depth_m={self.hole_depth_m}); "
                f"got {self.insert_depth_m}"
            )
        if not self.hole_depth_m + 0.005 < self.peg_below_tcp_m < 0.15:
            raise ValueError(
                "peg_below_tcp_m must exceed hole_depth_m + 5 mm (the fingers stay above the "
                f"walls) and be < 0.15 m; got {self.peg_below_tcp_m}"
            )
        if self.peg_mass_kg <= 0 or self.hole_yaw_range_rad < 0:
            raise ValueError("peg_mass_kg must be > 0 and hole_yaw_range_rad >= 0")
        check_region("hole", self.hole_low_m, self.hole_high_m, self.safety)


class PegInsertEnv(ArmEnv):
    """Insert the grasped peg into a randomly placed hole."""

    config_cls = PegInsertConfig
    config: PegInsertConfig

    @property
    def hole_half_width_m(self) -> float:
        """Half the inner width of the hole (m)."""
        return self.config.peg_half_width_m + self.config.clearance_m / 2

    def _peg_centre_in_hand_m(self) -> float:
        top = _PALM_Z_M + _PALM_GAP_M
        tip = arm.TCP_OFFSET_M + self.config.peg_below_tcp_m
        return (top + tip) / 2

    def scene_fragments(self) -> dict[str, str]:
        """A free square peg (with a tip site) and a mocap socket of four walls."""
        cfg = self.config
        a, h = cfg.peg_half_width_m, cfg.hole_depth_m / 2
        half_len = (arm.TCP_OFFSET_M + cfg.peg_below_tcp_m - _PALM_Z_M - _PALM_GAP_M) / 2
        w, t = self.hole_half_width_m, _WALL_M
        wall = (
            '<geom type="box" size="{sx} {sy} {h}" pos="{px} {py} {h}" priority="1"'
            ' friction="0.3 0.005 0.0001" solref="0.004 1" solimp="0.95 0.99 0.001"'
            ' rgba="0.2 0.45 0.8 1"/>'
        )
        walls = "".join(
            wall.format(sx=sx, sy=sy, px=px, py=py, h=h)
            for sx, sy, px, py in (
                (w + t, t / 2, 0, w + t / 2),
                (w + t, t / 2, 0, -w - t / 2),
                (t / 2, w, w + t / 2, 0),
                (t / 2, w, -w - t / 2, 0),
            )
        )
        return {
            "worldbody": f'<body name="peg" pos="0.3 0 0.4"><freejoint name="peg"/>'
            f'<geom name="peg" type="box" size="{a} {a} {half_len}" mass="{cfg.peg_mass_kg}"'
            ' friction="1 0.01 0.001" condim="4" solref="0.004 1" solimp="0.95 0.99 0.001"'
            f' rgba="0.9 0.75 0.2 1"/><site name="peg_tip" pos="0 0 {half_len}" size="0.003"'
            f' group="2"/></body><body name="hole" mocap="true" pos="0.5 0 0">{walls}</body>'
        }

    def task_spaces(self) -> dict[str, spaces.Box]:
        """Peg tip pose, hole entry pose, the entry relative to the tip (dm), and the turn that
        lines the peg up with the hole (rad)."""
        box = spaces.Box(-np.inf, np.inf, (7,), np.float32)
        offset = spaces.Box(-np.inf, np.inf, (3,), np.float32)
        yaw = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        return {"peg": box, "hole": box, "entry_from_tip_dm": offset, HOLE_YAW_KEY: yaw}

    def reset_task(self, rng: np.random.Generator) -> None:
        """Place the hole at random; put the peg between the closed fingers."""
        m, d, cfg = self.model, self.data, self.config
        mocap = m.body("hole").mocapid[0]
        xy = rng.uniform(cfg.hole_low_m, cfg.hole_high_m)
        yaw = rng.uniform(-cfg.hole_yaw_range_rad, cfg.hole_yaw_range_rad)
        d.mocap_pos[mocap] = (xy[0], xy[1], 0.0)
        d.mocap_quat[mocap] = (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        # Fingers just touching the peg's faces, commanded closed: they squeeze it.
        d.qpos[self._finger_qpos] = cfg.peg_half_width_m - 2e-4
        d.ctrl[self._fingers] = 0.0
        mujoco.mj_kinematics(m, d)
        hand = m.body(arm.HAND_BODY).id
        hand_quat = d.xquat[hand].copy()
        adr = m.joint("peg").qposadr[0]
        offset = quat_rotate(hand_quat, np.array([0.0, 0.0, self._peg_centre_in_hand_m()]))
        d.qpos[adr : adr + 3] = d.xpos[hand] + offset
        d.qpos[adr + 3 : adr + 7] = hand_quat

    def peg_tip(self) -> tuple[np.ndarray, np.ndarray]:
        """Peg tip position (m) and peg orientation (w, x, y, z)."""
        tip = self.data.site_xpos[self.model.site("peg_tip").id].copy()
        return tip, self.data.xquat[self.model.body("peg").id].copy()

    def hole_entry(self) -> tuple[np.ndarray, np.ndarray]:
        """Centre of the hole's top opening (m) and the hole's orientation (w, x, y, z)."""
        mocap = self.model.body("hole").mocapid[0]
        pos = self.data.mocap_pos[mocap] + np.array([0.0, 0.0, self.config.hole_depth_m])
        return pos, self.data.mocap_quat[mocap].copy()

    def task_obs(self) -> dict[str, np.ndarray]:
        """Peg tip pose, hole entry pose, and where to go next: the entry from the tip (dm) and
        the hole's yaw from the peg's (:func:`hole_yaw_from_peg_rad`)."""
        tip, entry = self.peg_tip(), self.hole_entry()
        return {"peg": np.concatenate(tip), "hole": np.concatenate(entry),
                "entry_from_tip_dm": offset_dm(entry[0], tip[0]),
                HOLE_YAW_KEY: np.array([hole_yaw_from_peg_rad(entry[1], tip[1])])}  # fmt: skip

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The peg's tip and the hole's entry."""
        return {"peg": self.peg_tip(), "hole": self.hole_entry()}

    def tip_in_hole_m(self) -> np.ndarray:
        """Tip position in the hole frame, origin at the entry centre (m; z < 0 is inside)."""
        tip, _ = self.peg_tip()
        entry, quat = self.hole_entry()
        return quat_rotate(quat_conj(quat), tip - entry)

    def is_success(self) -> bool:
        """Tip inside the footprint and at least ``insert_depth_m`` deep."""
        return peg_inserted(
            self.tip_in_hole_m(), self.hole_half_width_m, self.config.insert_depth_m
        )

    FAR_M: ClassVar[float] = 0.05
    """:meth:`failure`: a tip further than this beside the hole's centre is far from the socket."""

    def failure(self) -> str:
        """Where the tip stopped: far from the socket, down beside it (below the entry, off
        the hole), on its rim (off the hole, not below the entry) or over the hole, short of
        ``insert_depth_m``."""
        local = self.tip_in_hole_m()
        off = float(np.abs(local[:2]).max())
        if off <= self.hole_half_width_m:
            return "over the hole, not deep enough"
        if off > self.FAR_M:
            return "far from the socket"
        return "down beside the socket" if local[2] < 0.0 else "on the socket's rim"

    def dense_reward(self) -> float:
        """1 on success, else 0.5 * reach term + 0.5 * inserted fraction."""
        if self.is_success():
            return 1.0
        local = self.tip_in_hole_m()
        dist = float(np.hypot(np.linalg.norm(local[:2]), max(local[2], 0.0)))
        reach = 1.0 - np.tanh(self.config.reach_scale_1_m * dist)
        inside = bool(np.all(np.abs(local[:2]) <= self.hole_half_width_m))
        depth = np.clip(-local[2] / self.config.insert_depth_m, 0.0, 1.0) if inside else 0.0
        return float(0.5 * reach + 0.5 * depth)


def peg_inserted(tip_in_hole_m: np.ndarray, half_width_m: float, depth_m: float) -> bool:
    """Whether a tip at ``tip_in_hole_m`` (hole frame, entry origin) counts as inserted."""
    local = np.asarray(tip_in_hole_m, dtype=np.float64)
    return bool(np.all(np.abs(local[:2]) <= half_width_m) and -local[2] >= depth_m)


class PegInsertExpert:
    """Align yaw and position above the hole, descend slowly, spiral-search on a jam.

    Reads only the observation (``proprio``, ``peg``, ``hole``); see :mod:`._peg_expert`.
    """

    YAW_TOL_RAD = 0.01

    def __init__(self, config: PegInsertConfig | None = None) -> None:
        self.config = config or PegInsertConfig()
        self.planner = PegInsertPlanner()
        self.tracker = TargetTracker(self.config)

    def reset(self, seed: int | None = None) -> None:
        """Start a new episode (deterministic: the seed is not needed)."""
        self.planner.reset()
        self.tracker.reset()

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Next action: a target a small step away from the current tool pose."""
        proprio = obs["proprio"].astype(np.float64)
        ee = proprio[PROPRIO_SLICES["ee_pos_m"]]
        ee_quat = proprio[PROPRIO_SLICES["ee_quat_wxyz"]]
        peg, hole = obs["peg"].astype(np.float64), obs["hole"].astype(np.float64)
        yaw_err = hole_yaw_from_peg_rad(hole[3:], peg[3:])
        if abs(yaw_err) > self.YAW_TOL_RAD and self.planner.phase == "align":
            delta = self.planner.hover_step(peg[:3], hole[:3])
        else:
            delta = self.planner(peg[:3], hole[:3])
        target_yaw = float(yaw_from_quat(ee_quat)) + yaw_err
        return self.tracker.action(proprio, ee + delta, target_yaw, gripper=1.0)


TASK = TaskSpec("peg_insert", PegInsertConfig, PegInsertEnv, PegInsertExpert)
