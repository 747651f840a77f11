"""A simulated person who watches the policy and takes over when it goes off course.

It stands in for the operator of HIL-SERL so that the effect of interventions can be measured
(and tested) without a person: the task's scripted expert says what a good action is at every
step; the simulated person compares the policy's proposal with it and, like a person, notices
only a sustained drift, reacts with a delay, acts for a while, hands back, and has a limited
budget of steps per episode. Every rule is a field of :class:`SimulatedHumanConfig`.

Off course at one step (both on the normalised actions):

- the policy's translation points away from the expert's by more than ``max_angle_deg``
  (judged only where the expert asks for a real motion, ``min_expert_motion``), or
- the policy's gripper command has the other sign than the expert's (open vs closed), when the
  action has a gripper.

Like a person watching the scene, it also judges the outcome when given the task's progress (its
dense reward, ``progress=``): no new best progress for ``stall_steps`` steps, or progress fallen
``max_regress`` below the episode's best (a dropped cube), makes it take over too. (Along the
scripted experts' own trajectories progress never stalls for more than 12 steps nor falls by
more than 0.03.) Two rules make a more patient person (both off by default; measured by
``handrail bench hil``, where the eager default person taught pick_cube faster and the patient
one, with peg_insert's preset, taught peg_insert faster): with ``stall_from="first-gain"`` the
stall clock starts at the episode's first gain of progress (a far approach may not move the
dense reward at all; the direction rule judges it meanwhile), and from progress
``judge_direction_below`` on (nearly done: a cube lifted half way, a peg half inserted) it
judges the outcome only, letting a policy that is about to succeed finish its own way.

The person notices after ``patience_steps`` consecutive off-course steps (or at once when the
outcome rule fires), acts from
``reaction_delay_steps`` later (the policy keeps acting in between), acts at least
``min_takeover_steps``, then hands back (``handback="fixed"``) or hands back once the policy's
proposals have agreed with the expert for ``patience_steps`` judged steps in a row
(``handback="agree"``; a step where the expert barely moves, such as a fine insertion, judges
nothing and neither counts nor breaks the streak, so the person does not hand back mid-insertion
to a policy that merely stands still). A person never acts more than ``budget_steps`` per
episode. :attr:`SimulatedHuman.takeovers` counts what made it take over (:data:`TRIGGERS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from handrail.control.intervention import Decision
from handrail.control.step import ActedBy

_HANDBACK = ("fixed", "agree")
_STALL_FROM = ("start", "first-gain")
TRIGGERS = ("off course", "stall", "regress")
"""What made the simulated person take over: the policy's direction, no new best progress for
``stall_steps``, or a fall of progress below the episode's best."""


@dataclass(frozen=True)
class SimulatedHumanConfig:
    """When the simulated person takes over and hands back (see the module docstring)."""

    max_angle_deg: float = 90.0
    """A translation pointing further than this from the expert's is off course (deg)."""
    min_expert_motion: float = 0.2
    """Expert translations shorter than this (norm of the normalised xyz) are not judged."""
    gripper: bool = False
    """A gripper command of the other sign than the expert's is off course (off: a person
    judges the gripper by its outcome, a dropped object, which the progress rule sees; with it
    on, a 97%-successful policy's exploration noise drew a takeover in every pick_cube episode)."""
    patience_steps: int = 5
    """Consecutive off-course steps before the person notices."""
    reaction_delay_steps: int = 2
    """Steps from noticing to acting (the policy keeps acting meanwhile)."""
    min_takeover_steps: int = 8
    """Steps the person acts before handing back."""
    handback: Literal["fixed", "agree"] = "agree"
    """fixed: hand back after min_takeover_steps; agree: after that, once the policy's
    proposals agreed with the expert for patience_steps judged steps in a row (steps where the
    expert moves less than min_expert_motion do not count)."""
    budget_steps: int = 40
    """Most steps the person acts in one episode."""
    stall_steps: int = 15
    """Steps without new best progress after which the person takes over (0: never)."""
    stall_from: Literal["start", "first-gain"] = "start"
    """When the stall clock starts: at the episode's start (a far approach that does not move
    the dense reward counts as a stall: an eager person, who on pick_cube teaches the approach
    early), or at its first gain of progress."""
    max_regress: float = 0.1
    """Fall of progress below the episode's best at which the person takes over."""
    min_progress: float = 0.01
    """Smallest gain of progress that counts as a new best."""
    judge_direction_below: float = math.inf
    """Progress from which on only the outcome (stall, regress) is judged, not the direction
    (the arm tasks' dense reward: 0.5 reached, 1 done, e.g. 0.75; inf: judge the direction
    everywhere)."""
    replan: bool = False
    """Restart the expert's plan at each takeover, from the state the policy left (a person
    re-plans; a phase-keeping expert may otherwise carry on with a plan made for other states)."""

    def __post_init__(self) -> None:
        problems = [
            f"{name}={getattr(self, name)!r} (need >= 0)"
            for name in (
                "patience_steps",
                "reaction_delay_steps",
                "min_takeover_steps",
                "budget_steps",
                "stall_steps",
                "max_regress",
                "min_progress",
            )
            if getattr(self, name) < 0
        ]
        if not 0.0 < self.max_angle_deg <= 180.0:
            problems.append(f"max_angle_deg={self.max_angle_deg!r} (need 0 < angle <= 180)")
        if self.min_expert_motion < 0:
            problems.append(f"min_expert_motion={self.min_expert_motion!r} (need >= 0)")
        if self.stall_from not in _STALL_FROM:
            problems.append(f"stall_from={self.stall_from!r} (choose {' or '.join(_STALL_FROM)})")
        if self.handback not in _HANDBACK:
            problems.append(f"handback={self.handback!r} (choose {' or '.join(_HANDBACK)})")
        if problems:
            raise ValueError("SimulatedHumanConfig: invalid " + "; ".join(problems))


def judged(expert: np.ndarray, config: SimulatedHumanConfig) -> bool:
    """Whether the expert's action moves enough for the policy's direction to be judged."""
    motion = float(np.linalg.norm(np.asarray(expert, np.float64)[:3]))
    return motion >= max(config.min_expert_motion, 1e-9)


def off_course(
    proposal: np.ndarray, expert: np.ndarray, config: SimulatedHumanConfig, has_gripper: bool
) -> bool:
    """Whether the policy's proposal strays from the expert's action (module docstring)."""
    p, e = np.asarray(proposal, np.float64), np.asarray(expert, np.float64)
    if has_gripper and config.gripper and np.sign(p[-1]) != np.sign(e[-1]) and e[-1] != 0:
        return True
    if not judged(e, config):
        return False
    e_norm = float(np.linalg.norm(e[:3]))
    p_norm = float(np.linalg.norm(p[:3]))
    if p_norm < 1e-9:
        return True  # standing still while the expert moves
    cos = float(p[:3] @ e[:3]) / (p_norm * e_norm)
    return cos < math.cos(math.radians(config.max_angle_deg))


class SimulatedHuman:
    """A :class:`~handrail.control.takeover.Human` driven by a task's scripted expert.

    Args:
        expert: ``reset(seed=...)`` and ``__call__(obs) -> action`` (same units as the policy's).
        config: the rules (module docstring).
        has_gripper: the action's last dimension is a gripper command.
        progress: the task's progress now (e.g. ``lambda: env.unwrapped.dense_reward()``);
            None judges the actions only.
    """

    name = "simulated"

    def __init__(
        self,
        expert: Any,
        config: SimulatedHumanConfig | None = None,
        *,
        has_gripper: bool = True,
        progress: Callable[[], float] | None = None,
    ) -> None:
        self.expert, self.config = expert, config or SimulatedHumanConfig()
        self.has_gripper, self.progress = has_gripper, progress
        self._takeovers = dict.fromkeys(TRIGGERS, 0)
        self.reset(None)

    def reset(self, seed: int | None) -> None:
        """A new episode: the expert starts over, the person's budget is full."""
        reset = getattr(self.expert, "reset", None)
        if reset is not None:
            reset(seed=seed)
        self.off_streak = self.agree_streak = 0
        self.countdown: int | None = None  # steps until the noticed takeover starts
        self.acting_steps = 0  # steps acted in the current takeover
        self.used = 0  # steps acted this episode
        self.engaged = False
        self.best = self.now = -math.inf  # the episode's best progress, and progress now
        self.since_best = 0  # steps since it was reached (or since the policy got control back)
        self.progressed = False  # progress has risen since the episode's first step
        self.trigger: str | None = None  # what made the person notice, until it takes over

    @property
    def takeovers(self) -> dict[str, int]:
        """Takeovers since this person was made, by what triggered them (:data:`TRIGGERS`)."""
        return dict(self._takeovers)

    def _watch_progress(self) -> str | None:
        """Update the progress record; the outcome rule that says the policy fails, if any."""
        if self.progress is None:
            return None
        cfg, now = self.config, float(self.progress())
        if now >= self.best + cfg.min_progress:
            self.progressed = self.progressed or self.best > -math.inf
            self.best, self.since_best = now, 0
        else:
            self.since_best += 1
        self.now = now
        if now < self.best - cfg.max_regress:
            return "regress"
        armed = self.progressed or cfg.stall_from == "start"
        if cfg.stall_steps > 0 and armed and self.since_best >= cfg.stall_steps:
            return "stall"
        return None

    def decide(self, obs: Any, policy_action: np.ndarray) -> Decision:
        """The expert's action while the person is in control, else the policy's."""
        cfg = self.config
        proposal = np.asarray(policy_action, np.float32)
        good = np.asarray(self.expert(obs), np.float32)  # called every step: experts keep phase
        failing = self._watch_progress()
        strayed = off_course(proposal, good, cfg, self.has_gripper)
        if self.now >= cfg.judge_direction_below and not self.engaged:
            strayed = False  # nearly done: the outcome rules judge
        self.off_streak = self.off_streak + 1 if strayed else 0
        if strayed:
            self.agree_streak = 0
        elif judged(good, cfg):
            self.agree_streak += 1
        if self.engaged:
            done = self.acting_steps >= cfg.min_takeover_steps and (
                cfg.handback == "fixed" or self.agree_streak >= cfg.patience_steps
            )
            if done or self.used >= cfg.budget_steps:
                self.engaged, self.off_streak, self.since_best = False, 0, 0
        elif self.countdown is not None:
            self.countdown -= 1
        elif (self.off_streak >= max(cfg.patience_steps, 1) or failing) and (
            self.used < cfg.budget_steps
        ):
            self.countdown = cfg.reaction_delay_steps
            self.trigger = failing or "off course"
        if not self.engaged and self.countdown is not None and self.countdown <= 0:
            self.engaged, self.countdown, self.acting_steps = True, None, 0
            self._takeovers[self.trigger or "off course"] += 1
            reset = getattr(self.expert, "reset", None)
            if cfg.replan and reset is not None:
                reset(seed=None)
                good = np.asarray(self.expert(obs), np.float32)
        if not self.engaged:
            return Decision(proposal, ActedBy.POLICY)
        self.acting_steps += 1
        self.used += 1
        return Decision(good, ActedBy.HUMAN)

    def wait_ready(self) -> None:
        """A simulated scene needs no hand reset."""

    def close(self) -> None:
        """Nothing to release."""
