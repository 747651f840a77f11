"""The base Gymnasium env every handrail arm task builds on.

One control step (``control_dt_s``, 10 Hz by default) runs::

    action --decode_action--> base-frame EeCommand
           --> target = previous target + delta (rotation: rotvec_to_quat(delta) * quat)
           --> SafetyFilter (workspace box, step and orientation limits)
           --> OperationalSpaceController for ``substeps`` physics steps; gripper position command

Writing a task (one file in ``sim/tasks/``, discovered automatically)
--------------------------------------------------------------------
1. A frozen config dataclass subclassing :class:`SimConfig`; give every new field a unit in its
   name and a docstring, and validate it in ``__post_init__`` (call ``super().__post_init__()``).
2. An env subclassing :class:`ArmEnv`, with ``config_cls`` set, overriding:

   - ``scene_fragments()``: MJCF strings for :func:`handrail.sim.arm.build_mjcf` (keys
     ``worldbody``, ``asset``, ``contact``, ``sensor``): your bodies, sites and materials.
     Free joints of your objects follow the arm's 9 qpos entries.
   - ``task_spaces()``: ``{"object": Box(...), "goal": Box(...)}``, float32 Boxes.
   - ``reset_task(rng)``: place objects / goals using only ``rng`` (the env's seeded
     ``np_random``); the arm is already at its (noisy) home pose, kinematics not yet computed.
   - ``task_obs()``: arrays matching ``task_spaces()``, read from ``self.data``. Include where
     to go next as base-frame offsets in decimetres (:func:`offset_dm`, e.g. the object from
     the tool centre point): from 20 demos, sparse-reward pick_cube went from 0% to 100%
     success with them, because networks learn centimetre-scale differences of metre-scale
     positions slowly. The same holds for turns: give a yaw error in radians, wrapped by the
     part's symmetry (peg_insert's ``hole_yaw_from_peg_rad``), not only two quaternions.
   - ``is_success()``: bool; ``dense_reward()``: shaped reward (used when ``reward="dense"``);
     ``failure()``: where an unsuccessful episode stopped, from a short fixed list of phrases
     (``handrail eval`` counts the failed episodes by it).
3. A scripted expert: ``reset(seed=None)`` and ``__call__(obs) -> float32 action in [-1, 1]``,
   constructed as ``Expert(config)``, using only the observation. Build actions with
   :func:`expert_action` so they go through the same ``encode_action`` as teleop.
4. ``TASK = TaskSpec(name, ConfigCls, EnvCls, ExpertCls)`` at module level, ``name`` being the
   file's name (``sim/tasks/<name>.py``); the files of ``sim/tasks/`` are the list of tasks.

``task_obs()``, ``is_success()`` and ``dense_reward()`` run every env step, next to about 0.3-1 ms
of physics: keep them cheap (look ids up once in ``__init__`` rather than ``model.site(name)``
per call, avoid chains of small NumPy calls). ``handrail bench sim`` shows the cost per task.

Observations are a Dict: ``proprio`` (layout :data:`PROPRIO_LAYOUT`), the task's keys, and uint8
``H x W x 3`` images for each name in ``config.cameras``. Reward is 1.0 on success (sparse) or the
task's dense reward; ``info["success"]`` is set on every step, and ``info["outcome"]`` on an
episode's last: ``"success"`` or the task's :meth:`ArmEnv.failure` (where it names one).
Success terminates the episode when ``terminate_on_success`` (default, as in HIL-SERL); the
time limit is reported as truncation.
Observations are read after the last physics step's kinematics pass, i.e. they lag the physics
by one step (2 ms).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium
import mujoco
import numpy as np
from gymnasium import spaces
from numpy.typing import ArrayLike

from handrail.control.safety import SIM_TASK_LIMITS, SafetyFilter, SafetyLimits, SafetyReport
from handrail.control.spaces import ActionConfig, EeCommand, encode_action
from handrail.control.step import OUTCOME_KEY, SUCCESS_OUTCOME
from handrail.control.transforms import quat_mul_floats, rotvec_to_quat_floats
from handrail.sim import arm
from handrail.sim._action_math import decode_scalar
from handrail.sim.controller import ControllerConfig, OperationalSpaceController

PROPRIO_LAYOUT: tuple[tuple[str, int], ...] = (
    ("ee_pos_m", 3),
    ("ee_quat_wxyz", 4),
    ("ee_linvel_m_s", 3),
    ("ee_angvel_rad_s", 3),
    ("gripper_opening_m", 1),
)
PROPRIO_DIM = sum(size for _, size in PROPRIO_LAYOUT)
PROPRIO_SLICES: dict[str, slice] = {}
_start = 0
for _name, _size in PROPRIO_LAYOUT:
    PROPRIO_SLICES[_name] = slice(_start, _start + _size)
    _start += _size
_REPORT_FLAGS = tuple(f.name for f in dataclasses.fields(SafetyReport))

_DIVERGED = (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
             mujoco.mjtWarning.mjWARN_BADQACC)  # fmt: skip
"""MuJoCo's warnings of a diverged simulation: it prints one and resets the whole state to the
model's initial one (the object back at its XML pose, the arm at its zero pose)."""
SIM_DIVERGED_KEY = "sim_diverged"
"""Info key, True on the step where the simulation diverged (the episode is truncated there)."""


DM_PER_M = 10.0
"""Relative positions in observations are in decimetres: O(1) numbers for the networks, which
learn far faster from them than from metres (measured in the sparse-reward learning study)."""


def offset_dm(target_m: np.ndarray, origin_m: np.ndarray) -> np.ndarray:
    """``target - origin`` in decimetres (base frame): the observation of where to go next.

    Scripted experts and policies act on differences of positions; giving them directly
    spares the networks from computing centimetre-scale differences of metre-scale inputs.
    """
    return (np.asarray(target_m, np.float64) - origin_m) * DM_PER_M


def default_safety() -> SafetyLimits:
    """Workspace and step limits of the sim tasks (table top at z = 0), defined once in
    :data:`handrail.control.safety.SIM_TASK_LIMITS`; ``sim_robot`` and the ROS 2 layer use the
    arm's reachable box, :data:`handrail.control.safety.SIM_ARM_LIMITS`."""
    return SIM_TASK_LIMITS


@dataclass(frozen=True)
class SimConfig:
    """Settings shared by every simulated arm task."""

    control_dt_s: float = 0.1
    """Control period (s): one env step."""
    physics_dt_s: float = 0.002
    """Physics time step (s); control_dt_s must be a whole multiple of it."""
    episode_steps: int = 100
    """Time limit in env steps; reaching it ends the episode with truncated=True."""
    action: ActionConfig = field(default_factory=ActionConfig)
    """Layout and scale of the end-effector delta action."""
    safety: SafetyLimits = field(default_factory=default_safety)
    """Workspace box, step and orientation limits applied to every target."""
    image_size: int = 84
    """Height and width (px) of camera observations."""
    cameras: tuple[str, ...] = ()
    """Cameras rendered into the observation: any of "front", "wrist" (default: none)."""
    reward: Literal["sparse", "dense"] = "sparse"
    """sparse: 1.0 on success else 0.0; dense: the task's shaped reward."""
    terminate_on_success: bool = True
    """End the episode (terminated=True) on the first successful step."""
    home_noise_rad: float = 0.02
    """Uniform noise added to each arm joint of the home pose at reset (rad)."""
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    """Gains of the operational-space controller."""
    render_size_px: tuple[int, int] = (240, 320)
    """(height, width) of frames from render()."""

    def __post_init__(self) -> None:
        if not (self.physics_dt_s > 0 and self.control_dt_s > 0):
            raise ValueError("control_dt_s and physics_dt_s must be > 0")
        ratio = self.control_dt_s / self.physics_dt_s
        if abs(ratio - round(ratio)) > 1e-6 or round(ratio) < 1:
            raise ValueError(
                f"control_dt_s ({self.control_dt_s}) must be a whole multiple of physics_dt_s "
                f"({self.physics_dt_s}); got ratio {ratio:.4g}. Set control_dt_s to e.g. "
                f"{max(1, round(ratio)) * self.physics_dt_s:.4g}."
            )
        if self.episode_steps < 1:
            raise ValueError(f"episode_steps must be >= 1, got {self.episode_steps}")
        if self.image_size < 1:
            raise ValueError(f"image_size must be a positive pixel count, got {self.image_size}")
        if min(self.render_size_px) < 1 or len(self.render_size_px) != 2:
            raise ValueError(f"render_size_px must be (height, width) > 0: {self.render_size_px}")
        bad = [c for c in self.cameras if c not in arm.CAMERAS]
        if bad or len(set(self.cameras)) != len(self.cameras):
            raise ValueError(
                f"cameras must be distinct names from {arm.CAMERAS}; got {self.cameras}"
            )
        if self.reward not in ("sparse", "dense"):
            raise ValueError(f'reward must be "sparse" or "dense", got {self.reward!r}')
        if self.home_noise_rad < 0:
            raise ValueError(f"home_noise_rad must be >= 0, got {self.home_noise_rad}")

    @property
    def substeps(self) -> int:
        """Physics steps per control step."""
        return round(self.control_dt_s / self.physics_dt_s)


class ArmEnv(gymnasium.Env):
    """Panda-like arm with an end-effector delta action; subclass it for a task (see module doc).

    Args:
        config: the task's config (default: ``config_cls()``).
        render_mode: None or "rgb_array".
    """

    metadata: dict[str, Any] = {  # noqa: RUF012 (Gymnasium's own type: an instance variable)
        "render_modes": ["rgb_array"],
        "render_fps": 10,
    }
    config_cls: ClassVar[type[SimConfig]] = SimConfig

    def __init__(self, config: SimConfig | None = None, render_mode: str | None = None) -> None:
        config = self.config_cls() if config is None else config
        if not isinstance(config, self.config_cls):
            raise TypeError(f"config must be a {self.config_cls.__name__}, got {type(config)}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f'render_mode must be None or "rgb_array", got {render_mode!r}')
        self.config = config
        self.render_mode = render_mode
        self.control_dt_s = config.control_dt_s
        self.metadata = {**self.metadata, "render_fps": round(1.0 / config.control_dt_s)}
        xml = arm.build_mjcf(**self.scene_fragments(), timestep_s=config.physics_dt_s,
                             front_view=self.front_view())  # fmt: skip
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.data = mujoco.MjData(self.model)
        self.controller = OperationalSpaceController(
            self.model, self.data, arm.TCP_SITE, arm.HOME_QPOS_RAD, config.controller
        )
        self.safety = SafetyFilter(config.safety)
        self._tcp = self.model.site(arm.TCP_SITE).id
        self._fingers = np.array([self.model.actuator(j).id for j in arm.FINGER_JOINTS])
        self._finger_qpos = np.array([self.model.joint(j).qposadr[0] for j in arm.FINGER_JOINTS])
        size = config.image_size
        obs_spaces: dict[str, spaces.Space] = {
            "proprio": spaces.Box(-np.inf, np.inf, (PROPRIO_DIM,), np.float32),
            **self.task_spaces(),
        }
        for cam in config.cameras:
            obs_spaces[cam] = spaces.Box(0, 255, (size, size, 3), np.uint8)
        self.observation_space = spaces.Dict(obs_spaces)
        self.action_space = spaces.Box(-1.0, 1.0, (config.action.dim,), np.float32)
        self._renderer: mujoco.Renderer | None = None
        self._frame_renderer: mujoco.Renderer | None = None
        self._vel = np.zeros(6)
        self._target_pos = np.zeros(3)
        self._target_quat = np.array([0.0, 1.0, 0.0, 0.0])
        self._steps = 0
        # Hot-path views into data (its arrays never move) and preallocated buffers.
        self._site_pos, self._site_mat = (
            self.data.site_xpos[self._tcp],
            self.data.site_xmat[self._tcp],
        )
        self._proprio_buf = np.zeros(PROPRIO_DIM)
        self._quat_buf = self._proprio_buf[PROPRIO_SLICES["ee_quat_wxyz"]]
        self._finger_ids = [int(i) for i in self._fingers]
        self._finger_adr = [int(i) for i in self._finger_qpos]

    # ----- task hooks -------------------------------------------------------------------------
    def scene_fragments(self) -> dict[str, str]:
        """MJCF fragments for :func:`handrail.sim.arm.build_mjcf` (task bodies)."""
        return {}

    def front_view(self) -> tuple[Any, Any]:
        """Where the ``front`` camera stands and the point it looks at (m): the table's
        centre by default; a task whose objects leave the table frames them."""
        return arm.FRONT_VIEW

    def task_spaces(self) -> dict[str, spaces.Box]:
        """Observation spaces of the task's keys (float32 Boxes)."""
        return {}

    def reset_task(self, rng: np.random.Generator) -> None:
        """Randomise objects and goals using only ``rng``."""

    def task_obs(self) -> dict[str, np.ndarray]:
        """The task's observation arrays."""
        return {}

    def is_success(self) -> bool:
        """Whether the current state solves the task."""
        return False

    def dense_reward(self) -> float:
        """Shaped reward used when ``config.reward == "dense"``."""
        return float(self.is_success())

    def failure(self) -> str | None:
        """How an unsuccessful episode ended, in a few words from a short fixed list per task
        (evaluations count failed episodes by it): where the object or the tool stopped, not
        why. Runs once per episode, on its last step. None (a task that names none): the
        episode's last step then says nothing of how it failed."""
        return None

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Pose (position m, quaternion w, x, y, z; base frame) of each task object and goal.

        What a perception system would report; ``sim_robot`` publishes them on
        ``objects/<name>/pose`` and ``hw.mirrors`` rebuilds ``task_obs()`` from them.
        """
        return {}

    # ----- state helpers ----------------------------------------------------------------------
    @property
    def unwrapped(self) -> ArmEnv:
        """This env (it wraps nothing), typed as an ArmEnv: ``env.unwrapped.model`` type-checks."""
        return self

    @property
    def ee_pos(self) -> np.ndarray:
        """Tool centre point position (m, world = base frame)."""
        return self.data.site_xpos[self._tcp].copy()

    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The commanded end-effector target: position (m) and orientation (w, x, y, z).

        Every action moves this target (then the safety filter), whoever sent it: a policy, a
        person or an expert. Experts that say where the target should go follow it through
        :func:`handrail.sim.make_expert` so that they stay right after others acted.
        """
        return np.array(self._target_pos, np.float64), np.array(self._target_quat, np.float64)

    @property
    def ee_quat(self) -> np.ndarray:
        """Tool orientation (w, x, y, z), sign chosen near the nominal gripper-down (0, 1, 0, 0)."""
        return self._read_ee_quat().copy()

    def _read_ee_quat(self) -> np.ndarray:
        """ee_quat written into the proprio buffer (no allocation; valid until overwritten)."""
        quat = self._quat_buf
        mujoco.mju_mat2Quat(quat, self._site_mat)
        if quat[1] < 0:
            mujoco.mju_scl(quat, quat, -1.0)
        return quat

    @property
    def gripper_opening_m(self) -> float:
        """Distance between the fingers (m)."""
        qpos, (left, right) = self.data.qpos, self._finger_adr
        return float(qpos[left] + qpos[right])

    def _proprio(self) -> np.ndarray:
        buf, vel = self._proprio_buf, self._vel
        buf[0:3] = self._site_pos
        self._read_ee_quat()
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_SITE, self._tcp, vel, 0)
        buf[7:10] = vel[3:]
        buf[10:13] = vel[:3]
        buf[13] = self.gripper_opening_m
        return buf.astype(np.float32)  # a fresh array: callers may keep observations

    def _get_obs(self) -> dict[str, np.ndarray]:
        obs = {"proprio": self._proprio()}
        for key, value in self.task_obs().items():
            obs[key] = np.asarray(value, dtype=np.float32)
        if self.config.cameras:
            if self._renderer is None:
                size = self.config.image_size
                self._renderer = mujoco.Renderer(self.model, size, size)
            for cam in self.config.cameras:
                self._renderer.update_scene(self.data, camera=cam)
                obs[cam] = self._renderer.render()
        return obs

    # ----- the arm as a robot (sim_robot) -----------------------------------------------------
    def command_pose(
        self, pos_m: np.ndarray, quat_wxyz: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, SafetyReport]:
        """Make a Cartesian pose the controller's target, through the arm's safety filter.

        What a Cartesian impedance controller does with a ``target_pose`` message: the target
        is clipped into the workspace box and the step and orientation limits (never
        followed outside them), then tracked from the next physics step on.

        Returns:
            The target actually set (position, quaternion) and the filter's report.
        """
        pos = tuple(self._site_pos.tolist())
        quat = tuple(self._read_ee_quat().tolist())
        target_pos, target_quat, report = self.safety.filter(pos, quat, pos_m, quat_wxyz)
        self._target_pos, self._target_quat = target_pos, target_quat
        self.controller.set_target(target_pos, target_quat)
        return target_pos, target_quat, report

    def command_gripper(self, opening_m: float) -> None:
        """Set the fingers' position target from an opening (m), clipped to the gripper's range."""
        if not math.isfinite(opening_m):
            return
        finger_m = min(max(opening_m / 2.0, 0.0), arm.FINGER_MAX_M)
        ctrl, (left, right) = self.data.ctrl, self._finger_ids
        ctrl[left] = ctrl[right] = finger_m

    def advance(self, physics_steps: int) -> None:
        """Run the controller and physics for ``physics_steps`` steps (no env step counted)."""
        self.controller.step(physics_steps)

    def arm_state(self) -> dict[str, np.ndarray]:
        """Measured state a robot driver publishes (fresh arrays, SI units, base frame).

        Keys: ``proprio`` (layout :data:`PROPRIO_LAYOUT`), ``joint_pos_rad``/``joint_vel_rad_s``
        /``joint_effort_nm`` (the 7 arm joints then the 2 fingers, m and N for those),
        ``gripper_vel_m_s``.
        """
        d = self.data
        arm_q, fingers = self.model.jnt_qposadr[:7], self._finger_adr
        qpos_idx = [*arm_q.tolist(), *fingers]
        dof_idx = [
            *self.model.jnt_dofadr[:7].tolist(),
            *(int(self.model.jnt_dofadr[self.model.joint(j).id]) for j in arm.FINGER_JOINTS),
        ]
        return {
            "proprio": self._proprio(),
            "joint_pos_rad": d.qpos[qpos_idx].copy(),
            "joint_vel_rad_s": d.qvel[dof_idx].copy(),
            "joint_effort_nm": d.qfrc_actuator[dof_idx].copy(),
            "gripper_vel_m_s": np.array([d.qvel[dof_idx[7]] + d.qvel[dof_idx[8]]]),
        }

    # ----- Gymnasium API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the arm near home, the gripper open, and the task's objects at random."""
        super().reset(seed=seed)
        m, d, rng = self.model, self.data, self.np_random
        mujoco.mj_resetData(m, d)
        noise = self.config.home_noise_rad
        d.qpos[:7] = np.asarray(arm.HOME_QPOS_RAD) + rng.uniform(-noise, noise, 7)
        d.qpos[self._finger_qpos] = arm.FINGER_MAX_M
        d.ctrl[self._fingers] = arm.FINGER_MAX_M
        self.reset_task(rng)
        mujoco.mj_forward(m, d)
        self.controller.reset()
        self._target_pos, self._target_quat = self.ee_pos, self.ee_quat
        self.controller.set_target(self._target_pos, self._target_quat)
        self._steps = 0
        return self._get_obs(), {"success": self.is_success()}

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply one end-effector delta action for ``control_dt_s``."""
        cfg = self.config
        quat = tuple(self._read_ee_quat().tolist())
        (dx, dy, dz), rotvec, gripper = decode_scalar(action, cfg.action, quat)
        tx, ty, tz = self._target_pos.tolist()
        target_quat: np.ndarray | tuple[float, ...] = self._target_quat
        if rotvec is not None:
            target_quat = quat_mul_floats(
                rotvec_to_quat_floats(*rotvec), tuple(self._target_quat.tolist())
            )
        pos = tuple(self._site_pos.tolist())
        target_pos, target_quat, report = self.safety.filter(
            pos, quat, (tx + dx, ty + dy, tz + dz), target_quat
        )
        self._target_pos, self._target_quat = target_pos, target_quat
        self.controller.set_target(target_pos, target_quat)
        if cfg.action.gripper and math.isfinite(gripper):
            # A non-finite gripper command holds the fingers where they are, as the safety
            # filter holds the pose for a non-finite target (min/max would pass NaN through).
            self.command_gripper(gripper_opening_m(gripper))
        diverged_before = self._diverged_count()
        self.controller.step(cfg.substeps)
        self._steps += 1
        # A diverged simulation was reset by MuJoCo mid-step: the scene after it is not where
        # the action led, so the episode ends there, truncated (no success, no terminal value).
        diverged = self._diverged_count() > diverged_before
        success = bool(self.is_success()) and not diverged
        if diverged:  # the reset scene's reward is not the action's
            reward = 0.0
        else:
            reward = float(success) if cfg.reward == "sparse" else float(self.dense_reward())
        terminated = success and cfg.terminate_on_success
        truncated = self._steps >= cfg.episode_steps or diverged
        flags = {name: getattr(report, name) for name in _REPORT_FLAGS}
        info = {"success": success, "is_success": success, "safety": flags,
                SIM_DIVERGED_KEY: diverged}  # fmt: skip
        if (terminated or truncated) and (outcome := self._outcome(success, diverged)):
            info[OUTCOME_KEY] = outcome
        return self._get_obs(), reward, terminated, truncated, info

    def _outcome(self, success: bool, diverged: bool) -> str | None:
        """:data:`OUTCOME_KEY` of an episode's last step (None: the task names none)."""
        if diverged:
            return "the simulation diverged"
        return SUCCESS_OUTCOME if success else self.failure()

    def _diverged_count(self) -> int:
        """How many times MuJoCo has found this simulation diverged (and reset it)."""
        return sum(int(self.data.warning[w].number) for w in _DIVERGED)

    def render(self) -> np.ndarray | None:
        """An RGB frame from the "overview" camera (the whole arm and table) when ``render_mode == "rgb_array"``."""
        if self.render_mode != "rgb_array":
            return None
        if self._frame_renderer is None:
            height, width = self.config.render_size_px
            self._frame_renderer = mujoco.Renderer(self.model, height, width)
        self._frame_renderer.update_scene(self.data, camera="overview")
        return self._frame_renderer.render()

    def close(self) -> None:
        """Free the renderers' GL resources."""
        for name in ("_renderer", "_frame_renderer"):
            renderer = getattr(self, name, None)
            if renderer is not None:
                renderer.close()
                setattr(self, name, None)


def gripper_opening_m(command: float) -> float:
    """Finger opening (m) for a normalised gripper command (-1 open, +1 closed)."""
    return 2.0 * arm.FINGER_MAX_M * (1.0 - min(max(command, -1.0), 1.0)) / 2.0


def expert_action(
    config: SimConfig,
    ee_quat: np.ndarray,
    delta_pos_m: ArrayLike,
    delta_rotvec_rad: ArrayLike | None = None,
    gripper: float = -1.0,
) -> np.ndarray:
    """Encode a base-frame increment as a normalised action of ``config.action``."""
    rot = np.zeros(3) if delta_rotvec_rad is None else np.asarray(delta_rotvec_rad, float)
    cmd = EeCommand(
        delta_pos_m=np.asarray(delta_pos_m, float), delta_rotvec_rad=rot, gripper=gripper
    )
    return encode_action(cmd, config.action, ee_quat)


@dataclass(frozen=True)
class TaskSpec:
    """What a task module exports as ``TASK`` so that ``handrail.sim`` can find it."""

    name: str
    """Task name, e.g. "reach"; the gymnasium id is handrail/<name>-v0."""
    config_cls: type[SimConfig]
    """The task's frozen config dataclass."""
    env_cls: type[ArmEnv]
    """The env class, constructed as env_cls(config, render_mode=...)."""
    expert_cls: type
    """The scripted expert, constructed as expert_cls(config)."""

    def make_config(self, **overrides: Any) -> SimConfig:
        """The task's config with some fields replaced; unknown names raise ValueError."""
        names = [f.name for f in dataclasses.fields(self.config_cls)]
        unknown = sorted(set(overrides) - set(names))
        if unknown:
            raise ValueError(
                f"unknown config field(s) {unknown} for task {self.name!r}; valid: {names}"
            )
        return self.config_cls(**overrides)
