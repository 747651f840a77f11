"""A learned success classifier as the task's reward: the env side.

:class:`ClassifierReward` wraps an env whose observations hold the classifier's cameras: after
every step the classifier scores the new observation, the reward is 1 where it fires and 0
elsewhere, and the episode ends there (SERL's rule). The cameras are then dropped from the
observation unless the learner reads them. Where the env still reports its own success (the
simulator, or a person), each episode is scored against it: a *false positive* is an episode
the classifier ended that the task says failed, a *false negative* one the task says succeeded
without the classifier firing. On a robot the person watching gives that success where it matters
(``verdict``): asked after each episode the classifier ended, their word is the task's.

:func:`relabel_rewards` gives recorded episodes (demonstrations) the same reward and ends, so
the offline half of every batch agrees with what the classifier says online.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import jax.numpy as jnp
import numpy as np

from handrail.learners.agents.classifier import SuccessClassifier

CLASSIFIER_PREFIX = "classifier:"
"""How a reward names a success classifier: ``classifier:PATH`` (``handrail train --reward``,
``actor_node``'s ``reward``)."""
CLASSIFIER_P_KEY = "classifier_p"
"""Info key: the classifier's success probability for the step's new observation."""
CLASSIFIER_SUCCESS_KEY = "classifier_success"
"""Info key: whether the classifier fired on the step."""


@dataclass
class ClassifierStats:
    """Episodes the classifier scored, against the task's own success where it was known."""

    episodes: int = 0
    """Finished episodes."""
    ended: int = 0
    """Episodes the classifier ended (it fired)."""
    judged: int = 0
    """Episodes whose task success was known (the env reported the success key)."""
    false_positives: int = 0
    """Ended by the classifier, failed by the task's success."""
    false_negatives: int = 0
    """Succeeded by the task's success, never detected."""
    true_positives: int = 0
    """Ended by the classifier, succeeded by the task."""

    def to_json(self) -> dict[str, int]:
        """Every counter by name."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line for the run's output."""
        text = f"the classifier ended {self.ended} of {self.episodes} episodes"
        if not self.judged:
            return text + " (the env reports no success of its own to check it against)"
        return (f"{text}; against the task's success over {self.judged}: "
                f"{self.false_positives} false positives (ended, task failed), "
                f"{self.false_negatives} false negatives (task succeeded, not detected)")  # fmt: skip


class ClassifierReward(gym.Wrapper):
    """Reward 1 and the episode's end where the classifier fires (see the module doc).

    Args:
        env: an env with a Dict observation space holding the classifier's cameras.
        classifier: the loaded classifier.
        success_key: info key of the task's own success (scored against, never rewarded).
        keep_cameras: leave the cameras in the observation (a pixel learner reads them).
        keep_false_positives: keep each episode's frames (the classifier's keys) while it runs;
            a false positive's are then :attr:`false_positive` until taken (a correction).
        verdict: asked after each episode the classifier ended: whether the task succeeded
            (a person's word on a robot; None: no answer, the env's success flag stands).

    Raises:
        ValueError: the env's observations lack the classifier's cameras or state keys.
    """

    def __init__(
        self, env: gym.Env, classifier: SuccessClassifier, *, success_key: str = "success",
        keep_cameras: bool = False, keep_false_positives: bool = False,
        verdict: Callable[[], bool | None] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise ValueError(
                f"--reward classifier needs an env with a Dict observation holding the "
                f"cameras {list(classifier.cameras)}; this one's is {space}"
            )
        classifier.check_keys({k: tuple(s.shape) for k, s in space.spaces.items()
                               if s.shape is not None}, "the env's observation")  # fmt: skip
        self.classifier = classifier
        self.success_key = success_key
        self.stats = ClassifierStats()
        self._drop = () if keep_cameras else tuple(classifier.cameras)
        self.observation_space = gym.spaces.Dict(
            {k: s for k, s in space.spaces.items() if k not in self._drop}
        )
        self._task_success: bool | None = None
        self._keep = keep_false_positives
        self.verdict = verdict
        self._episode: list[dict[str, np.ndarray]] = []
        self.false_positive: dict[str, np.ndarray] | None = None
        """The latest false positive's frames (per key, one row per step), until taken."""

    def use(self, classifier: SuccessClassifier) -> None:
        """Score from now on with ``classifier`` (a retrained one: the same cameras and keys)."""
        if (classifier.cameras, classifier.state_keys) != (
            self.classifier.cameras,
            self.classifier.state_keys,
        ):
            raise ValueError(f"the new classifier reads {classifier.cameras} "
                             f"{classifier.state_keys}, the env's {self.classifier.cameras} "
                             f"{self.classifier.state_keys}")  # fmt: skip
        self.classifier = classifier

    def _strip(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obs.items() if k not in self._drop}

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset the env; the episode's scores start afresh."""
        obs, info = self.env.reset(**kwargs)
        self._task_success = None
        self._episode = []
        return self._strip(obs), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Step the env; the reward and the end come from the classifier."""
        obs, _reward, terminated, truncated, info = self.env.step(action)
        p = float(self.classifier.probability(obs))
        fired = p >= self.classifier.threshold
        if self.success_key in info:
            self._task_success = bool(self._task_success) or bool(info[self.success_key])
        info = {**info, CLASSIFIER_P_KEY: p, CLASSIFIER_SUCCESS_KEY: fired}
        terminated = bool(terminated) or fired
        if self._keep:
            keys = (*self.classifier.cameras, *self.classifier.state_keys)
            self._episode.append({k: np.array(obs[k]) for k in keys})
        if fired and self.verdict is not None:
            said = self.verdict()
            if said is not None:
                self._task_success = said
                info[self.success_key] = said
        if terminated or truncated:
            self._score(fired)
            if self._keep and fired and self._task_success is False:
                self.false_positive = {k: np.stack([o[k] for o in self._episode])
                                       for k in self._episode[0]}  # fmt: skip
            self._episode = []
        return self._strip(obs), float(fired), terminated, bool(truncated), info

    def _score(self, fired: bool) -> None:
        s = self.stats
        s.episodes += 1
        s.ended += int(fired)
        if self._task_success is None:
            return
        s.judged += 1
        s.true_positives += int(fired and self._task_success)
        s.false_positives += int(fired and not self._task_success)
        s.false_negatives += int(self._task_success and not fired)


def relabel_rewards(data: Any, classifier: SuccessClassifier) -> Any:
    """Recorded episodes (``EpisodeData``) with the classifier's reward and ends: each step's
    reward is 1 and it terminates where the classifier fires on the observation after it, and
    nowhere else (the recorded ends were the task's own; an episode's last step that the
    classifier does not end is a truncation, which bootstraps).

    Raises:
        ValueError: the episodes lack the classifier's cameras or state keys.
    """
    classifier.check_keys({k: tuple(np.shape(v)[1:]) for k, v in data.obs.items()},
                          "the demonstrations")  # fmt: skip
    if data.num_steps == 0:
        return data
    nxt = data.next_obs()
    fired = (
        classifier.probability({k: nxt[k] for k in (*classifier.cameras, *classifier.state_keys)})
        >= classifier.threshold
    )
    return dataclasses.replace(
        data, reward=fired.astype(np.float32), terminated=fired,
        truncated=np.asarray(data.truncated, bool) & ~fired,
    )  # fmt: skip


def can_relabel(layout: Any, classifier: SuccessClassifier) -> bool:
    """Whether :func:`relabel_replay` can score a replay of ``layout``: it keeps every camera
    the classifier reads, and the classifier reads no state key (the replay keeps the state
    flattened)."""
    stored = {f.name for f in layout.fields}
    return set(classifier.cameras) <= stored and not classifier.state_keys


def relabel_replay(layout: Any, state: Any, classifier: SuccessClassifier) -> tuple[Any, int]:
    """A replay (``ReplayLayout``, ``ReplayState``) with every stored transition's reward and
    end given anew by ``classifier`` on its next observation, as :func:`relabel_rewards` does
    for recorded episodes; returns it and how many transitions changed.

    Raises:
        ValueError: the replay does not keep the classifier's cameras (a learner that reads
            none of them, or other ones), or it reads state keys (the replay keeps the state
            flattened).
    """
    if not can_relabel(layout, classifier):
        raise ValueError(
            f"the replay keeps {sorted(f.name for f in layout.fields)}; relabelling it needs "
            "the classifier's cameras "
            f"{list(classifier.cameras)} in it and no state keys (this one reads "
            f"{list(classifier.state_keys)})"
        )
    nxt = np.asarray(state.next)
    live = np.zeros(layout.total, bool)
    for s in range(len(layout.segments)):
        off = layout.offset(s)
        live[off : off + int(state.size[s])] = True
    rows = np.flatnonzero(live & (nxt >= 0))
    reward = np.array(state.reward)
    terminated = np.array(state.terminated)
    fired = np.zeros(len(rows), bool)
    for i in range(0, len(rows), 2048):
        at = nxt[rows[i : i + 2048]]
        frames = {c: np.asarray(state.data[c][at]) for c in classifier.cameras}
        fired[i : i + 2048] = classifier.probability(frames) >= classifier.threshold
    changed = int(np.sum(terminated[rows] != fired))
    reward[rows], terminated[rows] = fired.astype(np.float32), fired
    return state.replace(reward=jnp.asarray(reward), terminated=jnp.asarray(terminated)), changed
