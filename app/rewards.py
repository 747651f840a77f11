"""Where ``handrail train``'s reward comes from: the task's own, or a learned classifier.

``--reward classifier:PATH`` loads the classifier (``handrail reward train``), builds the
training env with its cameras (a handrail task renders them at the size the classifier's
frames were recorded at, and leaves the ending to the classifier), wraps it in
:class:`~handrail.learners.agents.learned_reward.ClassifierReward`, and relabels the
demonstrations' rewards with it. Evaluation keeps the task's own success: that is what a run
is judged by.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from handrail.app.config import TrainConfig
from handrail.app.envs import HANDRAIL_TASKS, with_cameras
from handrail.learners.agents.corrections import CHECKPOINT_DIR, Corrections, classifier_env
from handrail.learners.agents.learned_reward import CLASSIFIER_PREFIX

STATS_FILE = "reward_classifier.json"
"""The run folder's record of what the classifier did (episodes ended, false positives...)."""


def load_reward_classifier(cfg: TrainConfig, resumed: Path | None = None) -> Any:
    """The run's success classifier, or None for the task's own reward; ``resumed``: the run
    folder being resumed, whose latest checkpoint's corrected classifier wins.

    Raises:
        ValueError: the path holds no classifier, or the run cannot use one (naming why).
    """
    if cfg.reward == "task":
        return None
    if cfg.actors:
        raise ValueError(
            "--reward classifier: and --actors exclude each other for now: train in one process"
        )
    from handrail.learners.agents.classifier import META_FILE, SuccessClassifier

    path = Path(cfg.reward.removeprefix(CLASSIFIER_PREFIX))
    corrected = None if resumed is None else resumed / "checkpoints" / "latest" / CHECKPOINT_DIR
    if corrected is not None and (corrected / META_FILE).is_file():
        path = corrected
    try:
        return SuccessClassifier(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--reward {cfg.reward}: {exc}") from exc


def env_kwargs(cfg: TrainConfig, classifier: Any) -> dict[str, Any]:
    """The training env's keyword arguments: the run's, and on a handrail task with a
    classifier, its cameras at its frames' size, ending episodes only where it fires (the
    run's own ``--env-kwargs`` win)."""
    kwargs = dict(cfg.env)
    if classifier is None or cfg.task not in HANDRAIL_TASKS:
        return kwargs
    kwargs = with_cameras(cfg.task, kwargs, classifier)
    kwargs.setdefault("terminate_on_success", False)
    return kwargs


def with_classifier(
    cfg: TrainConfig, env: Any, classifier: Any, *, keep_cameras: bool = False
) -> Any:
    """``env`` with the classifier's reward (itself for the task's reward); ``keep_cameras``:
    leave the frames in the observation (an image encoder reads them next)."""
    if classifier is None:
        return env
    from handrail.learners.agents.learned_reward import ClassifierReward

    try:
        return ClassifierReward(env, classifier, success_key=cfg.success_key,
                                keep_cameras=keep_cameras,
                                keep_false_positives=cfg.corrections.episodes > 0)  # fmt: skip
    except ValueError as exc:
        raise ValueError(f"--reward {cfg.reward}: {exc}") from exc


def relabel_demos(cfg: TrainConfig, demos: Any, classifier: Any) -> Any:
    """The demonstrations with the classifier's rewards and ends (as they are unchanged)."""
    if classifier is None or demos is None:
        return demos
    from handrail.learners.agents.learned_reward import relabel_rewards

    try:
        data = relabel_rewards(demos, classifier)
    except ValueError as exc:
        raise ValueError(f"--demos with --reward {cfg.reward}: {exc}") from exc
    fired = int(data.terminated.sum())
    print(f"handrail train: reward: the classifier fired on {fired} of {data.num_steps} demo "
          f"steps ({int(sum(r.success for r in data.records))} of {data.num_episodes} episodes "
          "recorded as successful)", file=sys.stderr)  # fmt: skip
    return data


def log_stats(env: Any, run: Any, env_steps: int) -> None:
    """A ``reward_classifier`` record of the counts so far in ``metrics.jsonl`` (at every
    evaluation: false positives climbing is a policy that found frames the classifier takes
    for success)."""
    found = classifier_env(env)
    if found is not None:
        run.log("reward_classifier", env_steps, found.stats.to_json())


def corrections(cfg: TrainConfig, env: Any, trainer: Any, run_path: Path) -> Corrections:
    """The run's :class:`~handrail.learners.agents.corrections.Corrections` (``--corrections``)."""
    return Corrections(env, trainer, run_path, episodes=cfg.corrections.episodes,
                       every=cfg.corrections.every, say=_say)  # fmt: skip


def _say(text: str) -> None:
    print(f"handrail train: reward: {text}", file=sys.stderr)


def report(env: Any, run_path: Path, corrections: Any = None) -> None:
    """Print and write (``reward_classifier.json``) what the classifier did in training, and
    the ``corrections`` made (:class:`Corrections`)."""
    env = classifier_env(env)
    if env is None:
        return
    stats = env.stats
    records = [] if corrections is None else corrections.records
    made = f"; {len(records)} correction(s) made" if records else ""
    print(f"handrail train: reward: {stats.describe()}{made}", file=sys.stderr)
    if run_path.is_dir():
        (run_path / STATS_FILE).write_text(json.dumps(
            {"classifier": str(env.classifier.path), "threshold": env.classifier.threshold,
             **stats.to_json(), "corrections": records}, indent=1))  # fmt: skip
