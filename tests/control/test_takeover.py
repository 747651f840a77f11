"""InterventionEnv and DeviceHuman: executed actions, who acted, events, pause, status."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from handrail.control.intervention import Arbiter, ArbiterConfig, Decision
from handrail.control.spaces import ActionConfig
from handrail.control.step import ACTED_BY_KEY, EXECUTED_ACTION_KEY, ActedBy
from handrail.control.takeover import EVENTS_KEY, DeviceHuman, InterventionEnv
from handrail.control.teleop import DeviceState, TeleopEvent


class Box:
    def __init__(self, n: int) -> None:
        self.shape, self.low, self.high, self.dtype = (n,), -np.ones(n), np.ones(n), np.float32


class CountingEnv:
    """Obs = step count; records the actions it executed; never succeeds on its own."""

    def __init__(self, horizon: int = 10) -> None:
        self.action_space, self.observation_space = Box(4), Box(1)
        self.horizon, self.t, self.executed = horizon, 0, []
        self.closed = False

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        self.t = 0
        return np.zeros(1), {"success": False}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.executed.append(np.asarray(action))
        self.t += 1
        return np.full(1, self.t), 0.0, False, self.t >= self.horizon, {"success": False}

    def close(self) -> None:
        self.closed = True


class ScriptedHuman:
    """Takes over on the given steps and emits the given events."""

    name = "scripted"

    def __init__(self, human_steps: set[int], events: dict[int, tuple[TeleopEvent, ...]]) -> None:
        self.human_steps, self.events, self.t, self.resets = human_steps, events, 0, 0

    def reset(self, seed: int | None) -> None:
        self.t, self.resets = 0, self.resets + 1

    def decide(self, obs: Any, policy_action: np.ndarray) -> Decision:
        t, self.t = self.t, self.t + 1
        if t in self.human_steps:
            return Decision(np.full(4, 0.5, np.float32), ActedBy.HUMAN, self.events.get(t, ()))
        return Decision(
            np.asarray(policy_action, np.float32), ActedBy.POLICY, self.events.get(t, ())
        )

    def wait_ready(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_env_runs_the_human_action_and_reports_it() -> None:
    env = CountingEnv()
    wrapped = InterventionEnv(env, ScriptedHuman({1, 2}, {}))
    wrapped.reset(seed=0)
    policy = np.full(4, -0.25, np.float32)
    infos = [wrapped.step(policy)[4] for _ in range(4)]
    assert [i[ACTED_BY_KEY] for i in infos] == [0, 1, 1, 0]
    np.testing.assert_array_equal(env.executed[1], np.full(4, 0.5))
    np.testing.assert_array_equal(env.executed[0], policy)
    for info, executed in zip(infos, env.executed, strict=True):
        np.testing.assert_array_equal(info[EXECUTED_ACTION_KEY], executed)
    assert (wrapped.total_human_steps, wrapped.total_steps) == (2, 4)
    assert wrapped.status()["human"] == "50%"


@pytest.mark.parametrize(
    ("event", "terminated", "truncated", "success", "reward"),
    [(TeleopEvent.SUCCESS, True, False, True, 1.0), (TeleopEvent.FAILURE, True, False, False, 0.0),
     (TeleopEvent.END, False, True, False, 0.0), (TeleopEvent.RERECORD, False, True, False, 0.0)],
)  # fmt: skip
def test_events_end_the_episode_as_the_person_says(
    event: TeleopEvent, terminated: bool, truncated: bool, success: bool, reward: float
) -> None:
    wrapped = InterventionEnv(CountingEnv(), ScriptedHuman(set(), {2: (event,)}))
    wrapped.reset(seed=0)
    for _ in range(2):
        assert wrapped.step(np.zeros(4))[2:4] == (False, False)
    _, r, term, trunc, info = wrapped.step(np.zeros(4))
    assert (term, trunc, info["success"], r) == (terminated, truncated, success, reward)
    assert info[EVENTS_KEY] == [event.value]
    assert wrapped.rerecord_requested == (event is TeleopEvent.RERECORD)
    wrapped.reset(seed=1)
    assert not wrapped.rerecord_requested and wrapped.episode_events == []


def test_step_before_reset_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        InterventionEnv(CountingEnv(), ScriptedHuman(set(), {})).step(np.zeros(4))


class FakeDevice:
    name = "fake"

    def __init__(self, states: list[DeviceState]) -> None:
        self.states, self.reads, self.closed = list(states), 0, False

    def read(self) -> DeviceState:
        self.reads += 1
        return self.states.pop(0) if self.states else DeviceState()

    def close(self) -> None:
        self.closed = True


def test_device_human_waits_while_paused_and_keeps_the_events_given_meanwhile() -> None:
    device = FakeDevice([
        DeviceState(events=(TeleopEvent.PAUSE,)),
        DeviceState(),
        DeviceState(events=(TeleopEvent.SUCCESS,)),
        DeviceState(events=(TeleopEvent.PAUSE,)),
    ])  # fmt: skip
    clock = iter(np.arange(0.0, 10.0, 0.1))
    sleeps: list[float] = []
    notes: list[str] = []
    human = DeviceHuman(device, Arbiter(ArbiterConfig(), ActionConfig()),
                        clock=lambda: float(next(clock)), sleep=sleeps.append,
                        notify=notes.append)  # fmt: skip
    d = human.decide(None, np.zeros(4, np.float32))
    assert not d.paused and d.events == (TeleopEvent.SUCCESS,)
    assert device.reads == 4 and len(sleeps) == 3
    assert any("paused" in n for n in notes)


def test_device_human_maps_with_the_observed_orientation() -> None:
    seen: list[Any] = []

    def quat(obs: Any) -> np.ndarray:
        seen.append(obs)
        return np.array([0.0, 1.0, 0.0, 0.0])  # tool pointing down: tool z = -base z

    device = FakeDevice([DeviceState(twist=[0, 0, 1.0, 0, 0, 0])])
    human = DeviceHuman(device, Arbiter(ArbiterConfig(deadband=0.0), ActionConfig(frame="ee")),
                        ee_quat=quat, clock=lambda: 0.0)  # fmt: skip
    d = human.decide({"proprio": 1}, np.zeros(4, np.float32))
    assert seen == [{"proprio": 1}]
    assert d.acted_by == ActedBy.HUMAN and d.action[2] == pytest.approx(-1.0)  # up = tool -z


def test_wait_at_reset_waits_for_an_event_and_close_releases_the_device() -> None:
    device = FakeDevice([DeviceState(), DeviceState(), DeviceState(events=(TeleopEvent.END,))])
    sleeps: list[float] = []
    human = DeviceHuman(device, Arbiter(ArbiterConfig(), ActionConfig()), sleep=sleeps.append,
                        notify=lambda _: None)  # fmt: skip
    env = CountingEnv()
    wrapped = InterventionEnv(env, human, wait_at_reset=True)
    wrapped.reset(seed=0)
    assert device.reads == 3 and len(sleeps) == 2
    wrapped.close()
    assert device.closed and env.closed
