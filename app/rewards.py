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
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from handrail.app.config import TrainConfig
from handrail.app.envs import HANDRAIL_TASKS, with_cameras

CLASSIFIER_PREFIX = "classifier:"
"""``--reward classifier:PATH``."""
STATS_FILE = "reward_classifier.json"
"""The run folder's record of what the classifier did (episodes ended, false positives...)."""


CHECKPOINT_DIR = "reward_classifier"
"""In a latest checkpoint: the classifier as corrected so far, the corrections and the
counts; in the run folder: the newest corrected classifier."""
CORRECTIONS_FILE = "corrections.npz"
"""The corrected episodes' frames (``<i>/<key>`` per episode)."""
STATE_FILE = "reward_state.json"
"""The counts and the corrections' records, as of the checkpoint."""


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


def _classifier_env(env: Any) -> Any:
    """The ClassifierReward wrapper around (or inside) ``env``, or None."""
    from handrail.learners.agents.learned_reward import ClassifierReward

    while env is not None and not isinstance(env, ClassifierReward):
        env = getattr(env, "env", None)
    return env


def log_stats(env: Any, run: Any, env_steps: int) -> None:
    """A ``reward_classifier`` record of the counts so far in ``metrics.jsonl`` (at every
    evaluation: false positives climbing is a policy that found frames the classifier takes
    for success)."""
    found = _classifier_env(env)
    if found is not None:
        run.log("reward_classifier", env_steps, found.stats.to_json())


def report(env: Any, run_path: Path, corrections: Any = None) -> None:
    """Print and write (``reward_classifier.json``) what the classifier did in training, and
    the ``corrections`` made (:class:`Corrections`)."""
    env = _classifier_env(env)
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


def labelled_stores(paths: Sequence[Path], last: int) -> list[tuple[Any, Any, str]]:
    """(reader, label per step, where the labels came from) of every store: its labels
    (``handrail label``), or without any, its success flags (the last ``last`` steps of each
    successful episode succeed).

    Raises:
        ValueError: a store cannot be opened or holds non-finite values (naming it).
    """
    from handrail.demos import open_store
    from handrail.demos.errors import StoreError
    from handrail.demos.finite import require_finite
    from handrail.demos.labels import UNLABELLED, labels_from_success, read_labels

    out = []
    for path in paths:
        try:
            reader = open_store(path)
            require_finite(reader, list(range(reader.num_episodes)))
            labels = read_labels(path).success
        except (StoreError, OSError, ValueError) as exc:
            raise ValueError(f"--demos {path}: {exc}") from exc
        if (labels != UNLABELLED).any():
            by = sorted({s["by"] for s in read_labels(path).sources})
            source = f"{path}: labels by {', '.join(by)}"
        else:
            labels = labels_from_success(reader, last=last)
            source = f"{path}: success flags, last {last} step(s)"
            print(f"handrail reward: {path} has no labels: its success flags label it (the last "
                  f"{last} step(s) of each successful episode succeed)", file=sys.stderr)  # fmt: skip
        out.append((reader, labels, source))
    return out


class Corrections:
    """What the classifier did in a run, kept in its checkpoints, and a person's corrections
    of its false positives (``--corrections``; see :class:`~handrail.app.config.
    CorrectionConfig`).

    After every finished episode :meth:`after_episode` takes the false positive the env kept
    (if any) when the budget and the spacing allow: its frames join the classifier's own
    training frames as a failed episode (never held out), the classifier is retrained from
    scratch with its own settings (the threshold on the same held-out episodes), written to the
    run folder's ``reward_classifier``, put in the env, and the replay (demonstrations and
    online steps) is relabelled by it where it keeps the classifier's cameras.
    """

    def __init__(self, cfg: TrainConfig, env: Any, trainer: Any, run_path: Path) -> None:
        self.env = _classifier_env(env)
        self.limit, self.every = cfg.corrections.episodes, cfg.corrections.every
        self.trainer, self.run_path = trainer, run_path
        self.episodes: list[dict[str, np.ndarray]] = []
        self.records: list[dict[str, Any]] = []
        self._dataset: Any = None
        self._original: Any = None
        self._labelled: list[tuple[Any, Any, str]] = []
        self.relabels = self._warned = False
        if self.env is not None and self.limit:
            from handrail.learners.agents.learned_reward import can_relabel

            self._original = _original(self.env.classifier)
            self._labelled = self._stores(self._original)  # checked before the run starts
            self.relabels = can_relabel(trainer.learner.layout, self.env.classifier)
            if not self.relabels:
                print("handrail train: reward: the replay keeps none of the classifier's frames "
                      "(or it reads state keys): a corrected classifier rewards the steps after "
                      "it, the stored ones keep their rewards", file=sys.stderr)  # fmt: skip

    def after_episode(self, env_steps: int, run: Any) -> None:
        """Take the env's latest false positive as a correction, if one is due (see class)."""
        if self.env is None:
            return
        if self.limit and not self.env.stats.judged and not self._warned:
            self._warned = True
            print("handrail train: reward: the env reports no success of its own "
                  f"(info[{self.env.success_key!r}]): no false positive can be found, so "
                  "--corrections makes none", file=sys.stderr)  # fmt: skip
        if self.env.false_positive is None:
            return
        episode, self.env.false_positive = self.env.false_positive, None
        last = self.records[-1]["env_steps"] if self.records else None
        if len(self.episodes) >= self.limit or (last is not None and env_steps - last < self.every):
            return
        self.episodes.append(episode)
        record = self._retrain(env_steps)
        self.records.append(record)
        run.log("reward_correction", env_steps, record)
        print(f"handrail train: reward: correction {len(self.episodes)} of {self.limit} at "
              f"{env_steps} env steps (a false positive of {len(episode[next(iter(episode))])} "
              f"steps): retrained, threshold {record['threshold']:.3f}, validation precision "
              f"{record['precision']:.3f} recall {record['recall']:.3f}; "
              f"{record['relabelled']} stored transitions changed", file=sys.stderr)  # fmt: skip

    def _training_frames(self) -> Any:
        """The frames the run's first classifier was trained on (read once)."""
        from handrail.learners.agents.classifier import frames_dataset

        if self._dataset is None:
            self._dataset = frames_dataset(self._labelled, self._original.config)
        return self._dataset

    @staticmethod
    def _stores(original: Any) -> list[tuple[Any, Any, str]]:
        """The labelled stores ``original`` was trained on (``handrail reward train`` names
        them in its ``classifier.json``).

        Raises:
            ValueError: it names none, or one is gone or damaged.
        """
        extra = original.meta.get("extra") or {}
        paths = extra.get("demos")
        if not paths:
            raise ValueError(
                f"--corrections: the classifier {original.path} does not name the stores it was "
                "trained on (no extra.demos in its classifier.json): train it with handrail "
                "reward train, or leave out --corrections"
            )
        try:
            return labelled_stores([Path(p) for p in paths], int(extra.get("last", 1)))
        except ValueError as exc:
            raise ValueError(f"--corrections: the stores {original.path} was trained on: {exc} "
                             "(a correction retrains on them)") from exc  # fmt: skip

    def _retrain(self, env_steps: int) -> dict[str, Any]:
        from handrail.learners.agents.classifier import (
            SuccessClassifier,
            save_classifier,
            train_classifier,
            with_failed_episodes,
        )
        from handrail.learners.agents.learned_reward import relabel_replay
        from handrail.learners.checkpoint import write_checkpoint_dir

        original = self._original
        data = with_failed_episodes(self._training_frames(), self.episodes, original.config)
        result = train_classifier(data, original.config)
        extra = {**(original.meta.get("extra") or {}), "corrected_from": str(original.path),
                 "corrections": len(self.episodes)}  # fmt: skip
        live = self.run_path / CHECKPOINT_DIR
        write_checkpoint_dir(live, lambda folder: save_classifier(folder, result, original.config,
                                                                  data, extra=extra))  # fmt: skip
        clf = SuccessClassifier(live)
        self.env.use(clf)
        changed = [0]
        if self.relabels:

            def relabel(layout: Any, replay: Any) -> Any:
                replay, changed[0] = relabel_replay(layout, replay, clf)
                return replay

            self.trainer.edit_replay(relabel)
        v = result.validation
        return {"env_steps": env_steps, "corrections": len(self.episodes),
                "threshold": result.threshold, "precision": v["precision"],
                "recall": v["recall"], "relabelled": changed[0]}  # fmt: skip

    def save_into(self, folder: Path) -> None:
        """Into a checkpoint folder: the counts, and the corrected classifier with its
        corrections (none before the first)."""
        if self.env is None:
            return
        out = folder / CHECKPOINT_DIR
        out.mkdir()
        state = {"stats": self.env.stats.to_json(), "records": self.records}
        (out / STATE_FILE).write_text(json.dumps(state, indent=1))
        if not self.episodes:
            return
        _copy_classifier(self.env.classifier.path, out)
        arrays: dict[str, Any] = {f"{i}/{k}": v for i, ep in enumerate(self.episodes)
                                  for k, v in ep.items()}  # fmt: skip
        np.savez(out / CORRECTIONS_FILE, **arrays)

    def restore(self, folder: Path) -> None:
        """From a checkpoint folder that :meth:`save_into` wrote (nothing if it has none)."""
        saved = folder / CHECKPOINT_DIR
        if self.env is None or not (saved / STATE_FILE).is_file():
            return
        from handrail.learners.agents.classifier import META_FILE
        from handrail.learners.agents.learned_reward import ClassifierStats
        from handrail.learners.checkpoint import read_json

        state = read_json(saved / STATE_FILE)
        self.env.stats = ClassifierStats(**state["stats"])
        self.records = list(state["records"])
        if (saved / CORRECTIONS_FILE).is_file():
            with np.load(saved / CORRECTIONS_FILE) as arrays:
                episodes: dict[int, dict[str, np.ndarray]] = {}
                for name in arrays.files:
                    i, key = name.split("/", 1)
                    episodes.setdefault(int(i), {})[key] = arrays[name]
            self.episodes = [episodes[i] for i in sorted(episodes)]
        if (saved / META_FILE).is_file():  # the run folder's copy is the checkpoint's again
            from handrail.learners.agents.classifier import SuccessClassifier
            from handrail.learners.checkpoint import write_checkpoint_dir

            live = self.run_path / CHECKPOINT_DIR
            write_checkpoint_dir(live, lambda folder: _copy_classifier(saved, folder))
            self.env.use(SuccessClassifier(live))


def _original(current: Any) -> Any:
    """The classifier a run was given (a corrected one names it)."""
    from handrail.learners.agents.classifier import SuccessClassifier

    source = (current.meta.get("extra") or {}).get("corrected_from")
    return current if source is None else SuccessClassifier(source)


def _copy_classifier(source: Path, folder: Path) -> None:
    """A classifier's two files into ``folder``."""
    from handrail.learners.agents.classifier import META_FILE, PARAMS_FILE

    for name in (PARAMS_FILE, META_FILE):
        shutil.copyfile(source / name, folder / name)
