"""Putting a person, or the simulated one, in the loop of a training or recording env.

``handrail train --human keyboard|gamepad|spacemouse|simulated`` and ``handrail record
--source keyboard|gamepad|spacemouse`` wrap their env with :func:`with_human`. Devices need a
handrail arm task (their motion maps onto its end-effector delta actions); the simulated person
needs a handrail task too (it is the task's scripted expert watching the task's progress).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from handrail.app.envs import HANDRAIL_TASKS
from handrail.control.intervention import Arbiter, ArbiterConfig
from handrail.control.takeover import DeviceHuman, Human, InterventionEnv
from handrail.sim.simulated_human import SimulatedHumanConfig

DEVICES = ("keyboard", "gamepad", "spacemouse")
"""Teleoperation devices (``--human`` of train, ``--source`` of record)."""


@dataclass(frozen=True)
class HumanLoopConfig:
    """How a person, or the simulated one, takes part in training (``--human``)."""

    mapping: Path | None = None
    """Device mapping TOML file (``handrail teleop map --source S`` prints the default)."""
    wait_at_reset: bool = False
    """Wait for the person at every episode start (a real scene is reset by hand)."""
    success_reward: float = 1.0
    """Reward of a step the person marks a success."""
    arbiter: ArbiterConfig = field(default_factory=ArbiterConfig)
    """When a person at a device takes over, and how the device maps onto actions."""
    simulated: SimulatedHumanConfig = field(default_factory=SimulatedHumanConfig)
    """When the simulated person (the task's scripted expert) takes over and hands back."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HumanLoopConfig:
        """Inverse of ``dataclasses.asdict`` (lists back to tuples, the path to a Path)."""
        arbiter: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                   for k, v in data.get("arbiter", {}).items()}  # fmt: skip
        mapping = data.get("mapping")
        return cls(
            mapping=None if mapping is None else Path(mapping),
            wait_at_reset=data.get("wait_at_reset", False),
            success_reward=data.get("success_reward", 1.0),
            arbiter=ArbiterConfig(**arbiter),
            simulated=SimulatedHumanConfig(**data.get("simulated", {})),
        )


def _arm_config(env: Any, task: str, who: str) -> Any:
    """The arm task's config (action layout), or a clear error for other envs."""
    config = getattr(env.unwrapped, "config", None)
    if task not in HANDRAIL_TASKS or getattr(config, "action", None) is None:
        raise ValueError(
            f"--human/--source {who} needs a handrail arm task {HANDRAIL_TASKS} (its "
            f"end-effector delta actions are what a device or the scripted expert drives); "
            f"{task!r} is not one"
        )
    return config


def ee_quat_of(obs: Any) -> np.ndarray:
    """The end effector's orientation (w, x, y, z) in an arm task's observation."""
    from handrail.sim.base import PROPRIO_SLICES

    return np.asarray(obs["proprio"][PROPRIO_SLICES["ee_quat_wxyz"]], np.float64)


def open_device(source: str, mapping: str | None) -> Any:
    """The OS device for ``source`` (its errors say what was found and how to fix access)."""
    from handrail.control import device_io

    return device_io.open_device(source, mapping)


def make_device_human(
    env: Any, task: str, source: str, hil: HumanLoopConfig, *, in_control: bool = False
) -> DeviceHuman:
    """A person at ``source`` (keyboard, gamepad, spacemouse) arbitrated against the policy
    (``in_control``: the person acts from every episode start, as when recording demos)."""
    config = _arm_config(env, task, source)
    arbiter_config: ArbiterConfig = hil.arbiter
    if source == "keyboard" and arbiter_config.engage == "motion":
        raise ValueError(
            "--hil.arbiter.engage motion cannot hand back with a terminal keyboard (it has no "
            "held button); use either or button"
        )
    device = open_device(source, None if hil.mapping is None else str(hil.mapping))
    return DeviceHuman(device, Arbiter(arbiter_config, config.action), ee_quat=ee_quat_of,
                       in_control=in_control)  # fmt: skip


def make_simulated_human(env: Any, task: str, hil: HumanLoopConfig) -> Human:
    """The task's scripted expert as a person who takes over when the policy strays."""
    from handrail import sim
    from handrail.sim.simulated_human import SimulatedHuman

    config = _arm_config(env, task, "simulated")
    return SimulatedHuman(
        sim.make_expert(task, env), hil.simulated, has_gripper=config.action.gripper,
        progress=env.unwrapped.dense_reward,
    )  # fmt: skip


def with_human(env: Any, task: str, who: str, hil: HumanLoopConfig, success_key: str) -> Any:
    """``env`` with ``who`` in the loop (``none``: ``env`` itself)."""
    if who == "none":
        return env
    if who == "simulated":
        human = make_simulated_human(env, task, hil)
    elif who in DEVICES:
        human = make_device_human(env, task, who, hil)
    else:
        raise ValueError(f"--human {who!r}: choose none, simulated or one of {DEVICES}")
    return InterventionEnv(env, human, success_key=success_key,
                           success_reward=hil.success_reward, wait_at_reset=hil.wait_at_reset)  # fmt: skip


class KeepOrDiscard:
    """Forwards steps to the recorder, except an episode the person asked to record again."""

    def __init__(self, recorder: Any, env: Any) -> None:
        self.recorder, self.env = recorder, env

    def add(self, step: Any) -> None:
        if step.done and self.env.rerecord_requested:
            self.recorder.discard()
        else:
            self.recorder.add(step)
