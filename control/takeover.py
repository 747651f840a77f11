"""A human in the loop around any env: the person (or a simulated one) may take over each step.

:class:`InterventionEnv` wraps a Gymnasium-style env (it needs only ``reset``/``step`` and the
spaces, so it works around a MuJoCo task and a ROS 2 arm alike, without importing either). Each
``step(policy_action)`` asks a :class:`Human` who acts, executes that action and reports it the
way the actor reads it (``info["executed_action"]``, ``info["acted_by"]``), so the stored
transition holds the executed action, the policy's proposal and who acted; the learner then
routes human steps to its intervention buffer as well (HIL-SERL).

A person's events end episodes: ``success`` ends it as a success (the task's success flag set,
the reward ``success_reward``, terminated), ``failure`` ends it as a failure (terminated, no
success), ``end`` and ``rerecord`` cut it (truncated; ``rerecord`` also tells a recorder to
drop the episode, see :attr:`InterventionEnv.episode_events`).

:class:`DeviceHuman` is a person at a :class:`~handrail.control.teleop.TeleopDevice` through an
:class:`~handrail.control.intervention.Arbiter`; ``handrail.sim.simulated_human`` has the
simulated one. Both are clock-injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from handrail.control.intervention import Arbiter, Decision
from handrail.control.step import ACTED_BY_KEY, EXECUTED_ACTION_KEY, ActedBy
from handrail.control.teleop import TeleopDevice, TeleopEvent

EVENTS_KEY = "human_events"
"""``info`` key listing the person's events of the step (their string values)."""


class Human(Protocol):
    """Whoever may take over: a person at a device, or a simulated one."""

    name: str
    """Shown in status lines."""

    def reset(self, seed: int | None) -> None:
        """A new episode starts."""
        ...

    def decide(self, obs: Any, policy_action: np.ndarray) -> Decision:
        """Who acts on ``obs`` this step, and with which action."""
        ...

    def wait_ready(self) -> None:
        """Block until the person says the scene is reset (no-op for a simulated human)."""
        ...

    def close(self) -> None:
        """Release devices."""
        ...


class DeviceHuman:
    """A person at a teleop device, arbitrated against the policy.

    Args:
        device: the device (keyboard, gamepad, SpaceMouse...).
        arbiter: engage/release rules and the mapping into the policy's action frame.
        ee_quat: the end effector's orientation (w, x, y, z) from an observation; None when the
            policy's actions are in the base frame and no orientation is needed.
        clock: seconds, monotonic (injected for tests).
        sleep: how to wait while paused (injected for tests).
        notify: where prompts go (pause, waiting at reset).
        in_control: the person is in control from every episode start (recording demos);
            otherwise the policy is, until the person takes over.
    """

    def __init__(
        self,
        device: TeleopDevice,
        arbiter: Arbiter,
        *,
        ee_quat: Callable[[Any], np.ndarray | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        notify: Callable[[str], None] = print,
        in_control: bool = False,
    ) -> None:
        self.device, self.arbiter, self.in_control = device, arbiter, in_control
        self.name = device.name
        self._ee_quat, self._clock, self._sleep, self._notify = ee_quat, clock, sleep, notify

    def reset(self, seed: int | None) -> None:
        self.arbiter.reset(take_over=self.in_control)

    def decide(self, obs: Any, policy_action: np.ndarray) -> Decision:
        """The arbiter's decision; while paused, waits (polling the device) and keeps events."""
        quat = None if self._ee_quat is None else self._ee_quat(obs)
        decision = self.arbiter.decide(policy_action, self.device.read(), self._clock(), quat)
        if not decision.paused:
            return decision
        self._notify("paused: press the pause key/button again to go on")
        events = list(decision.events)
        while decision.paused:
            self._sleep(0.05)
            decision = self.arbiter.decide(policy_action, self.device.read(), self._clock(), quat)
            events += decision.events
        return Decision(decision.action, decision.acted_by, tuple(events), False)

    def wait_ready(self) -> None:
        """Wait at reset until the person gives any event (e.g. the intervene toggle)."""
        self._notify(f"{self.name}: reset the scene, then press the intervene key/button (or "
                     "any event) to start the episode")  # fmt: skip
        while True:
            state = self.device.read()
            if state.events:
                return
            self._sleep(0.05)

    def close(self) -> None:
        self.device.close()


class InterventionEnv:
    """Wraps an env so that a :class:`Human` may act instead of the policy (module docstring).

    Args:
        env: a Gymnasium-style env whose actions the human's decisions are valid for.
        human: the person or simulated person.
        success_key: the info key of the task's success flag.
        success_reward: the reward of a step the person marks a success.
        wait_at_reset: wait for the person at every reset (real robots: the scene is reset by
            hand).
        policy_acted_by: who the steps the person leaves to the policy are credited to (a
            scripted expert: SCRIPTED).
    """

    def __init__(
        self,
        env: Any,
        human: Human,
        *,
        success_key: str = "success",
        success_reward: float = 1.0,
        wait_at_reset: bool = False,
        policy_acted_by: ActedBy = ActedBy.POLICY,
    ) -> None:
        self.env, self.human = env, human
        self.policy_acted_by = policy_acted_by
        self.success_key, self.success_reward = success_key, success_reward
        self.wait_at_reset = wait_at_reset
        self.action_space, self.observation_space = env.action_space, env.observation_space
        self.metadata = getattr(env, "metadata", {})
        self.acted_by = ActedBy.POLICY
        """Who acted at the last step."""
        self.episode_events: list[TeleopEvent] = []
        """The person's events in the episode in progress (or the one that just ended)."""
        self.total_human_steps = self.total_steps = 0
        """Steps the person acted, and all steps, since the wrapper was made (the actor
        counts them per episode)."""
        self._obs: Any = None

    @property
    def unwrapped(self) -> Any:
        """The innermost env."""
        return getattr(self.env, "unwrapped", self.env)

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Any:
        """Reset the env and the human (waiting for the person first when configured)."""
        if self.wait_at_reset:
            self.human.wait_ready()
        self._obs, info = self.env.reset(seed=seed, options=options)
        self.human.reset(seed)
        self.episode_events = []
        self.acted_by = ActedBy.POLICY
        return self._obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Execute the human's action or the policy's (``action``), with the person's events."""
        if self._obs is None:
            raise RuntimeError("InterventionEnv.step: call reset() first")
        decision = self.human.decide(self._obs, np.asarray(action))
        obs, reward, terminated, truncated, info = self.env.step(decision.action)
        info = dict(info)
        info[EXECUTED_ACTION_KEY] = decision.action
        human = decision.acted_by == ActedBy.HUMAN
        info[ACTED_BY_KEY] = int(decision.acted_by if human else self.policy_acted_by)
        info[EVENTS_KEY] = [event.value for event in decision.events]
        for event in decision.events:
            if event is TeleopEvent.SUCCESS:
                info[self.success_key], reward, terminated = True, self.success_reward, True
            elif event is TeleopEvent.FAILURE:
                info[self.success_key], terminated = False, True
            elif event in (TeleopEvent.END, TeleopEvent.RERECORD):
                truncated = True
        self.episode_events += decision.events
        self.acted_by = decision.acted_by
        self.total_steps += 1
        self.total_human_steps += human
        self._obs = obs
        return obs, float(reward), bool(terminated), bool(truncated), info

    @property
    def rerecord_requested(self) -> bool:
        """The person asked to throw the current (or just ended) episode away."""
        return TeleopEvent.RERECORD in self.episode_events

    def status(self) -> dict[str, str]:
        """Who is in control, the intervention rate so far and the episode's events."""
        rate = self.total_human_steps / max(self.total_steps, 1)
        out = {
            "control": f"{self.human.name}" if self.acted_by == ActedBy.HUMAN else "policy",
            "human": f"{rate:.0%}",
        }
        if self.episode_events:
            out["events"] = ",".join(e.value for e in self.episode_events[-3:])
        return out

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.human.close()
        self.env.close()
