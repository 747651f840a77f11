"""A Franka Panda-like arm in MJCF, written here: no meshes, loads offline in milliseconds.

The kinematic chain follows the Panda's published modified (Craig) Denavit-Hartenberg
parameters, joint limits and home pose. Links are capsules, the hand is a box, and a parallel-jaw
gripper has two position-controlled slide fingers. The arm stands on a table whose top is the
plane ``z = 0`` of the world frame; the arm's base is at the world origin, so world and base
frames coincide.

Adding bodies for a task
------------------------
:func:`build_mjcf` assembles the model from strings. A task passes MJCF fragments that are
pasted verbatim into the scene::

    xml = build_mjcf(
        worldbody='<body name="cube" pos="0.5 0 0.02"><freejoint name="cube"/>'
                  '<geom type="box" size="0.02 0.02 0.02" rgba="0.8 0.2 0.2 1"/></body>',
        asset='<material name="red" rgba="0.8 0.2 0.2 1"/>',
    )
    model = load_model(xml)

Fragments go into ``<worldbody>``, ``<asset>``, ``<contact>`` and ``<sensor>`` respectively. Use
unique names; the arm's names are listed in :data:`ARM_JOINTS`, :data:`FINGER_JOINTS`,
:data:`TCP_SITE` and :data:`CAMERAS`. Any free joints a task adds must come after the arm in
``qpos`` (they do, because the arm is defined first).
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

# Panda modified DH parameters (a_{i-1} [m], d_i [m], alpha_{i-1} [rad]) for joints 1..7 and the
# flange, from Franka's published robot description.
PANDA_DH: tuple[tuple[float, float, float], ...] = (
    (0.0, 0.333, 0.0),
    (0.0, 0.0, -np.pi / 2),
    (0.0, 0.316, np.pi / 2),
    (0.0825, 0.0, np.pi / 2),
    (-0.0825, 0.384, -np.pi / 2),
    (0.0, 0.0, np.pi / 2),
    (0.088, 0.0, np.pi / 2),
    (0.0, 0.107, 0.0),  # flange
)
JOINT_LIMITS_RAD: tuple[tuple[float, float], ...] = (
    (-2.8973, 2.8973),
    (-1.7628, 1.7628),
    (-2.8973, 2.8973),
    (-3.0718, -0.0698),
    (-2.8973, 2.8973),
    (-0.0175, 3.7525),
    (-2.8973, 2.8973),
)
HOME_QPOS_RAD: tuple[float, ...] = (0.0, -np.pi / 4, 0.0, -3 * np.pi / 4, 0.0, np.pi / 2, np.pi / 4)
TORQUE_LIMITS_NM: tuple[float, ...] = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
TCP_OFFSET_M = 0.1034  # flange to the point between the fingertips
FINGER_MAX_M = 0.04  # travel of one finger; the gripper opens to 2 * FINGER_MAX_M
FINGER_FORCE_N = 70.0  # continuous grasp force of one finger

ARM_JOINTS: tuple[str, ...] = tuple(f"joint{i}" for i in range(1, 8))
FINGER_JOINTS: tuple[str, str] = ("finger_left", "finger_right")
TCP_SITE = "tcp"
HAND_BODY = "hand"
CAMERAS: tuple[str, str] = ("front", "wrist")

_LINK_RADIUS_M = (0.06, 0.06, 0.06, 0.055, 0.055, 0.05, 0.045)


def _fmt(values: np.ndarray | tuple[float, ...]) -> str:
    return " ".join(f"{float(v):.6g}" for v in values)


def _dh_frame(a: float, d: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Fixed part Rx(alpha) Tx(a) Tz(d) of a modified DH transform as (pos, quat wxyz)."""
    c, s = np.cos(alpha), np.sin(alpha)
    pos = np.array([a, -s * d, c * d])
    quat = np.array([np.cos(alpha / 2), np.sin(alpha / 2), 0.0, 0.0])
    return pos, quat


def _link_geom(index: int, child_pos: np.ndarray) -> str:
    """A capsule from this joint's origin to the next joint's origin (or a sphere if they meet)."""
    r = _LINK_RADIUS_M[index]
    attrs = 'contype="0" conaffinity="0" group="1" material="arm"'
    if np.linalg.norm(child_pos) < 1e-6:
        return f'<geom type="sphere" size="{r}" {attrs}/>'
    return f'<geom type="capsule" size="{r}" fromto="0 0 0 {_fmt(child_pos)}" {attrs}/>'


def _gripper_xml() -> str:
    half = FINGER_MAX_M
    finger = (
        '<geom type="box" size="0.008 0.006 0.026" pos="0 {sign}0.006 0.026" material="finger" '
        'friction="1.5 0.02 0.002" condim="4" solref="0.005 1"/>'
    )
    return f"""
<body name="{HAND_BODY}" gravcomp="1" quat="{_fmt((np.cos(-np.pi / 8), 0, 0, np.sin(-np.pi / 8)))}">
  <geom type="box" size="0.025 0.095 0.03" pos="0 0 0.03" material="arm"/>
  <site name="{TCP_SITE}" pos="0 0 {TCP_OFFSET_M}" size="0.006" rgba="1 0.6 0 0.6" group="3"/>
  <camera name="wrist" pos="0.08 0 0.01" quat="{_fmt(_wrist_camera_quat())}" fovy="75"/>
  <body name="finger_left_body" gravcomp="1" pos="0 0 0.0584">
    <joint name="{FINGER_JOINTS[0]}" type="slide" axis="0 1 0" range="0 {half}" damping="5"
      armature="0.1"/>
    {finger.format(sign="")}
  </body>
  <body name="finger_right_body" gravcomp="1" pos="0 0 0.0584">
    <joint name="{FINGER_JOINTS[1]}" type="slide" axis="0 -1 0" range="0 {half}" damping="5"
      armature="0.1"/>
    {finger.format(sign="-")}
  </body>
</body>"""


def _wrist_camera_quat() -> np.ndarray:
    # Camera looks along its -z; point it along the hand's +z, tilted 0.35 rad back towards the
    # fingers so both fingertips and the object between them are in view.
    flip = np.array([0.0, 1.0, 0.0, 0.0])
    tilt = np.array([np.cos(0.175), 0.0, np.sin(0.175), 0.0])
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, flip, tilt)
    return out


def _look_at_xyaxes(pos: np.ndarray, target: np.ndarray) -> str:
    forward = (target - pos) / np.linalg.norm(target - pos)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return _fmt(np.concatenate([right, up]))


def _arm_xml() -> str:
    frames = [_dh_frame(*p) for p in PANDA_DH]
    opened: list[str] = []
    for i in range(7):
        pos, quat = frames[i]
        lo, hi = JOINT_LIMITS_RAD[i]
        opened.append(
            f'<body name="link{i + 1}" pos="{_fmt(pos)}" quat="{_fmt(quat)}" gravcomp="1">'
            f'<joint name="{ARM_JOINTS[i]}" range="{lo} {hi}" actuatorgravcomp="true"'
            f' actuatorfrcrange="{-TORQUE_LIMITS_NM[i]} {TORQUE_LIMITS_NM[i]}"/>'
            + _link_geom(i, frames[i + 1][0])
        )
    flange_pos, flange_quat = frames[7]
    flange = f'<body name="flange" pos="{_fmt(flange_pos)}" quat="{_fmt(flange_quat)}">'
    return (
        '<body name="link0"><geom type="capsule" size="0.065" fromto="0 0 0.05 0 0 0.28"'
        ' material="arm" contype="0" conaffinity="0"/>'
        + "".join(opened)
        + flange
        + _gripper_xml()
        + "</body>" * 8
        + "</body>"
    )


def _actuators_xml() -> str:
    # Joint motors carry feed-forward torques; the seven "osc" position actuators act on fixed
    # tendons whose coefficients the operational-space controller rewrites at run time (see
    # sim/controller.py), so the impedance law itself is evaluated in C at every physics step.
    motors = "".join(f'<motor name="tau{i + 1}" joint="{j}"/>' for i, j in enumerate(ARM_JOINTS))
    osc = "".join(f'<position name="osc{i}" tendon="osc{i}" kp="1" kv="1"/>' for i in range(7))
    fingers = "".join(
        f'<position name="{j}" joint="{j}" kp="2000" ctrlrange="0 {FINGER_MAX_M}"'
        f' forcerange="-{FINGER_FORCE_N} {FINGER_FORCE_N}"/>'
        for j in FINGER_JOINTS
    )
    return motors + osc + fingers


def _tendons_xml() -> str:
    joints = "".join(f'<joint joint="{j}" coef="1"/>' for j in ARM_JOINTS)
    return "".join(f'<fixed name="osc{i}">{joints}</fixed>' for i in range(7))


def _header_xml(timestep_s: float) -> str:
    """The compiler, physics options, visual settings and defaults of the scene."""
    return f"""  <compiler angle="radian" autolimits="true"/>
  <option timestep="{timestep_s}" cone="elliptic" impratio="10"/>
  <visual><global offwidth="640" offheight="480"/><quality shadowsize="0" offsamples="0"/></visual>
  <default>
    <joint damping="1" armature="0.1"/>
    <geom density="1000" friction="1 0.005 0.0001"/>
  </default>
"""


def _asset_xml(asset: str) -> str:
    """The ``<asset>`` block: the arm's materials and skybox, then the task's fragment."""
    return f"""  <asset>
    <material name="arm" rgba="0.92 0.92 0.95 1"/>
    <material name="finger" rgba="0.2 0.2 0.22 1"/>
    <material name="table" rgba="0.55 0.42 0.3 1"/>
    <material name="floor" rgba="0.3 0.32 0.35 1"/>
    <texture name="sky" type="skybox" builtin="gradient" rgb1="0.62 0.72 0.85" rgb2="0.15 0.17 0.2"
      width="64" height="64"/>
    {asset}
  </asset>
"""


FRONT_VIEW = ((0.95, 0.0, 0.42), (0.45, 0.0, 0.02))
"""Where the "front" camera stands and the point it looks at (m, world frame): close enough
that a 4 cm cube on the table spans several pixels of an 84x84 image."""


def _worldbody_xml(worldbody: str, front_view: tuple[Any, Any] = FRONT_VIEW) -> str:
    """The ``<worldbody>`` block: lights, floor, table, scene cameras, the arm, then the task."""
    # "front" is an observation camera (``front_view``). "overview" frames the whole arm and
    # table for videos people watch.
    front_pos = np.asarray(front_view[0], np.float64)
    front = _look_at_xyaxes(front_pos, np.asarray(front_view[1], np.float64))
    overview_pos = np.array([1.3, -0.9, 0.95])
    overview = _look_at_xyaxes(overview_pos, np.array([0.3, 0.0, 0.2]))
    return f"""  <worldbody>
    <light pos="0.4 0 1.5" dir="0 0 -1" directional="true" castshadow="false"/>
    <light pos="1.5 -1 1.2" dir="-0.6 0.5 -0.5" directional="true" castshadow="false"
      diffuse="0.35 0.35 0.35"/>
    <geom name="floor" type="plane" size="2 2 0.1" pos="0 0 -0.75" material="floor"
      contype="0" conaffinity="0"/>
    <geom name="table" type="box" size="0.55 0.6 0.375" pos="0.35 0 -0.375" material="table"/>
    <camera name="front" pos="{_fmt(front_pos)}" xyaxes="{front}" fovy="50"/>
    <camera name="overview" pos="{_fmt(overview_pos)}" xyaxes="{overview}" fovy="45"/>
    {_arm_xml()}
    {worldbody}
  </worldbody>
"""


def build_mjcf(
    worldbody: str = "",
    asset: str = "",
    contact: str = "",
    sensor: str = "",
    timestep_s: float = 0.002,
    front_view: tuple[Any, Any] = FRONT_VIEW,
) -> str:
    """Assemble the full scene (arm, gripper, table, cameras) with a task's fragments.

    Args:
        worldbody: MJCF pasted inside ``<worldbody>`` after the arm (task bodies, sites).
        asset: MJCF pasted inside ``<asset>`` (materials, textures).
        contact: MJCF pasted inside ``<contact>`` (pairs, excludes).
        sensor: MJCF pasted inside ``<sensor>``.
        timestep_s: physics time step.
        front_view: where the "front" camera stands and the point it looks at (a task whose
            objects leave the table frames them: reach's goals reach 0.4 m up).

    Returns:
        The MJCF document as a string, ready for :func:`load_model`.
    """
    return (
        '<mujoco model="handrail_panda">\n'
        + _header_xml(timestep_s)
        + _asset_xml(asset)
        + _worldbody_xml(worldbody, front_view)
        + f"""  <contact>
    <exclude body1="finger_left_body" body2="finger_right_body"/>
    {contact}
  </contact>
  <tendon>{_tendons_xml()}</tendon>
  <actuator>{_actuators_xml()}</actuator>
  <sensor>{sensor}</sensor>
</mujoco>"""
    )


def load_model(xml: str | None = None) -> mujoco.MjModel:
    """Compile an MJCF string (default: the arm alone) into an MjModel."""
    return mujoco.MjModel.from_xml_string(build_mjcf() if xml is None else xml)


def finger_target_m(command: float) -> float:
    """Map a gripper command in [-1 (open), +1 (closed)] to one finger's target position."""
    return FINGER_MAX_M * (1.0 - float(np.clip(command, -1.0, 1.0))) / 2.0
