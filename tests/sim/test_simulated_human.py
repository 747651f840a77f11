"""The simulated person: when it notices, reacts, acts, hands back; budget; on a real task."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from handrail import sim
from handrail.control.step import ActedBy
from handrail.control.takeover import InterventionEnv
from handrail.learners.actor import Actor
from handrail.sim.simulated_human import SimulatedHuman, SimulatedHumanConfig, off_course

GOOD = np.array([1.0, 0.0, 0.0, 1.0], np.float32)  # the expert: +x, gripper closed
BAD = np.array([-1.0, 0.0, 0.0, 1.0], np.float32)  # the other way


class ConstantExpert:
    def __init__(self) -> None:
        self.calls, self.resets = 0, 0

    def reset(self, seed: int | None = None) -> None:
        self.resets += 1

    def __call__(self, obs: Any) -> np.ndarray:
        self.calls += 1
        return GOOD


def who(human: SimulatedHuman, proposals: list[np.ndarray]) -> list[int]:
    return [int(human.decide(None, p).acted_by) for p in proposals]


@pytest.mark.parametrize(
    ("proposal", "expected"),
    [([0.9, 0.3, 0.0, 1.0], False),  # roughly the same way
     ([-0.9, 0.1, 0.0, 1.0], True),  # the other way
     ([0.9, 0.0, 0.0, -1.0], True),  # gripper opens while the expert holds
     ([0.0, 0.0, 0.0, 1.0], True)],  # standing still while the expert moves
)  # fmt: skip
def test_off_course(proposal: list[float], expected: bool) -> None:
    cfg = SimulatedHumanConfig(gripper=True)
    assert off_course(np.array(proposal), GOOD, cfg, True) is expected


def test_the_gripper_rule_is_off_by_default() -> None:
    assert not off_course(np.array([0.9, 0.0, 0.0, -1.0]), GOOD, SimulatedHumanConfig(), True)


def test_small_expert_motions_are_not_judged_on_direction() -> None:
    slow = np.array([0.05, 0.0, 0.0, 1.0])
    assert not off_course(np.array([-1.0, 0, 0, 1.0]), slow, SimulatedHumanConfig(), True)


def test_notices_after_patience_reacts_after_the_delay_and_hands_back_after_min_steps() -> None:
    cfg = SimulatedHumanConfig(patience_steps=3, reaction_delay_steps=2, min_takeover_steps=4,
                               handback="fixed")  # fmt: skip
    human = SimulatedHuman(ConstantExpert(), cfg)
    # off course from step 0: noticed at step 2, acts from step 4, four steps, back at step 8
    assert who(human, [BAD] * 10) == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0]


@pytest.mark.parametrize("replan", [False, True])
def test_replan_restarts_the_experts_plan_at_each_takeover(replan: bool) -> None:
    cfg = SimulatedHumanConfig(patience_steps=3, reaction_delay_steps=2, min_takeover_steps=4,
                               handback="fixed", replan=replan)  # fmt: skip
    expert = ConstantExpert()
    human = SimulatedHuman(expert, cfg)  # resets the expert once
    acted = who(human, [BAD] * 20)
    takeovers = sum(1 for a, b in zip([0, *acted], acted, strict=False) if (a, b) == (0, 1))
    assert takeovers == 2
    assert expert.resets == 1 + (takeovers if replan else 0)


def test_agree_handback_waits_for_the_policy_to_agree() -> None:
    cfg = SimulatedHumanConfig(patience_steps=2, reaction_delay_steps=0, min_takeover_steps=2)
    human = SimulatedHuman(ConstantExpert(), cfg)
    acted = who(human, [BAD, BAD, BAD, BAD, BAD, GOOD, GOOD, GOOD])
    assert acted == [0, 1, 1, 1, 1, 1, 0, 0]  # back once its proposals agreed twice in a row


class ScriptedExpert(ConstantExpert):
    """Plays ``actions`` in order, one per call."""

    def __init__(self, actions: list[np.ndarray]) -> None:
        super().__init__()
        self.actions = iter(actions)

    def __call__(self, obs: Any) -> np.ndarray:
        self.calls += 1
        return next(self.actions)


def test_agreement_counts_only_steps_where_the_expert_moves_enough_to_judge() -> None:
    """A fine insertion: the expert's steps are too small to judge a direction from, so a
    policy standing still neither strays nor agrees there; the person keeps control through them
    and hands back only after two judged steps that agree."""
    fine = np.array([0.05, 0.0, 0.0, 1.0], np.float32)
    still = np.array([0.0, 0.0, 0.0, 1.0], np.float32)
    cfg = SimulatedHumanConfig(patience_steps=2, reaction_delay_steps=0, min_takeover_steps=2)
    expert = ScriptedExpert([GOOD, GOOD, *[fine] * 6, GOOD, GOOD, GOOD])
    human = SimulatedHuman(expert, cfg)
    acted = who(human, [BAD, BAD, *[still] * 6, GOOD, GOOD, GOOD])
    assert acted == [0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    # an unjudged step neither completes the streak nor breaks it; a straying step breaks it
    expert = ScriptedExpert([GOOD, GOOD, GOOD, fine, GOOD, GOOD, GOOD, GOOD])
    human = SimulatedHuman(expert, cfg)
    acted = who(human, [BAD, BAD, GOOD, still, BAD, GOOD, GOOD, GOOD])
    assert acted == [0, 1, 1, 1, 1, 1, 0, 0]


def test_budget_caps_the_steps_per_episode_and_reset_refills_it() -> None:
    cfg = SimulatedHumanConfig(patience_steps=1, reaction_delay_steps=0, min_takeover_steps=50,
                               budget_steps=5)  # fmt: skip
    expert = ConstantExpert()
    human = SimulatedHuman(expert, cfg)
    assert sum(who(human, [BAD] * 30)) == 5
    human.reset(seed=1)
    assert expert.resets == 2 and sum(who(human, [BAD] * 30)) == 5
    assert expert.calls == 60  # asked every step, so a stateful expert keeps its phase


def test_a_stalled_task_makes_it_take_over_even_when_the_actions_look_right() -> None:
    progress = iter([0.0, 0.1, 0.2] + [0.2] * 20)
    cfg = SimulatedHumanConfig(stall_steps=5, reaction_delay_steps=0, min_takeover_steps=3,
                               handback="fixed")  # fmt: skip
    human = SimulatedHuman(ConstantExpert(), cfg, progress=lambda: next(progress))
    acted = who(human, [GOOD] * 12)
    assert acted[:7] == [0] * 7 and acted[7:10] == [1, 1, 1]  # no new best for 5 steps after 0.2


def test_a_drop_in_progress_makes_it_take_over() -> None:
    progress = iter([0.5, 0.6, 0.3, 0.3, 0.3])
    cfg = SimulatedHumanConfig(max_regress=0.1, reaction_delay_steps=0)
    human = SimulatedHuman(ConstantExpert(), cfg, progress=lambda: next(progress))
    assert who(human, [GOOD] * 3) == [0, 0, 1]


def test_the_stall_clock_starts_at_the_first_gain_of_progress_or_at_the_start() -> None:
    """A far approach may not move the dense reward: with stall_from="first-gain" no stall
    takeover comes before any progress; the eager default counts a flat start as a stall."""
    flat = iter([0.0] * 30)
    cfg = SimulatedHumanConfig(stall_steps=5, reaction_delay_steps=0, stall_from="first-gain")
    human = SimulatedHuman(ConstantExpert(), cfg, progress=lambda: next(flat))
    assert who(human, [GOOD] * 30) == [0] * 30
    assert human.takeovers == {"off course": 0, "stall": 0, "regress": 0}
    flat = iter([0.0] * 30)
    cfg = SimulatedHumanConfig(stall_steps=5, reaction_delay_steps=0)  # the default: "start"
    human = SimulatedHuman(ConstantExpert(), cfg, progress=lambda: next(flat))
    assert who(human, [GOOD] * 7)[5:] == [1, 1] and human.takeovers["stall"] == 1


@pytest.mark.parametrize(("level", "takes_over"), [(0.5, True), (0.8, False)])
def test_near_the_goal_only_the_outcome_is_judged(level: float, takes_over: bool) -> None:
    """Below judge_direction_below a wrong direction draws a takeover; from it on it does not
    (the policy may finish its own way), while a fall of progress still does."""
    steady = iter([level] * 20)
    cfg = SimulatedHumanConfig(patience_steps=3, reaction_delay_steps=0, stall_steps=0,
                               judge_direction_below=0.75)  # fmt: skip
    human = SimulatedHuman(ConstantExpert(), cfg, progress=lambda: next(steady))
    assert any(who(human, [BAD] * 20)) is takes_over
    assert human.takeovers["off course"] == int(takes_over)
    falling = iter([0.9, 0.95, 0.8, 0.8])
    human = SimulatedHuman(ConstantExpert(), cfg, progress=lambda: next(falling))
    assert who(human, [BAD] * 3) == [0, 0, 1]
    assert human.takeovers == {"off course": 0, "stall": 0, "regress": 1}


def test_takeovers_are_counted_by_trigger_over_episodes() -> None:
    cfg = SimulatedHumanConfig(patience_steps=2, reaction_delay_steps=1, min_takeover_steps=2,
                               handback="fixed", stall_steps=4)  # fmt: skip
    human = SimulatedHuman(ConstantExpert(), cfg)
    who(human, [BAD] * 6)  # off course: noticed at 2, acting from 3
    human.reset(seed=1)
    rising = iter([0.0, 0.1] + [0.1] * 10)
    human.progress = lambda: next(rising)
    who(human, [GOOD] * 8)  # progress at step 2, then no new best for 4 steps
    assert human.takeovers == {"off course": 1, "stall": 1, "regress": 0}


@pytest.mark.parametrize("kwargs", [{"patience_steps": -1}, {"max_angle_deg": 0.0},
                                    {"handback": "never"}, {"min_expert_motion": -0.1},
                                    {"stall_from": "later"}])  # fmt: skip
def test_invalid_config_names_the_field(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SimulatedHumanConfig(**kwargs)


def test_on_pick_cube_it_rescues_a_policy_that_does_nothing() -> None:
    """A policy that never moves fails every episode; the simulated person (the scripted expert
    taking over when the task stalls) makes most of them succeed, with human steps flagged."""
    env = sim.make("pick_cube", episode_steps=50)
    idle = lambda obs: np.zeros(env.action_space.shape, np.float32)  # noqa: E731
    alone = Actor(env, idle, seed=0).run_episodes(3)
    assert not any(s.success for s in alone)
    human = SimulatedHuman(sim.make_expert("pick_cube", env), progress=env.unwrapped.dense_reward)
    wrapped = InterventionEnv(env, human)
    steps: list[Any] = []

    class Sink:
        def add(self, step: Any) -> None:
            steps.append(step)

    helped = Actor(wrapped, idle, seed=0, sinks=[Sink()]).run_episodes(5)
    assert sum(bool(s.success) for s in helped) >= 4
    assert all(0 < s.human_steps <= human.config.budget_steps for s in helped)
    for step in steps:
        if step.acted_by == ActedBy.HUMAN:
            assert np.any(step.action != 0)  # the expert's action was executed
        np.testing.assert_array_equal(step.policy_action, 0.0)  # the proposal kept beside it


def test_on_peg_insert_it_rescues_a_policy_that_does_nothing() -> None:
    """The peg expert steers the env's target: taking over from a policy, it must steer from
    the target as the policy left it (an expert steering from its own copy of the target
    rescued none of these episodes: it hovered mm off the hole until its budget ran out)."""
    env = sim.make("peg_insert", episode_steps=60)
    idle = lambda obs: np.zeros(env.action_space.shape, np.float32)  # noqa: E731
    human = SimulatedHuman(sim.make_expert("peg_insert", env), progress=env.unwrapped.dense_reward,
                           has_gripper=False)  # fmt: skip
    helped = Actor(InterventionEnv(env, human), idle, seed=0).run_episodes(5)
    assert sum(bool(s.success) for s in helped) >= 4
    assert all(0 < s.human_steps <= human.config.budget_steps for s in helped)
