"""Corrections of a learned success classifier while a policy trains on it.

A policy that trains on a classifier's reward looks for frames it takes for success. A person
who watches marks the episodes it ended wrongly (in simulation the task's own success flag
stands in for them); :class:`Corrections` adds each such episode to the classifier's training
frames as a failure, trains it again from scratch, swaps it into the env and relabels the
replay. ``handrail train --corrections.episodes`` and the robot's ``actor_node``
(``corrections``) both run it; :func:`labelled_stores` reads the labelled stores a classifier is
trained on (``handrail reward train``).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

CHECKPOINT_DIR = "reward_classifier"
"""In a latest checkpoint: the classifier as corrected so far, the corrections and the
counts; in the run folder: the newest corrected classifier."""
CORRECTIONS_FILE = "corrections.npz"
"""The corrected episodes' frames (``<i>/<key>`` per episode)."""
STATE_FILE = "reward_state.json"
"""The counts and the corrections' records, as of the checkpoint."""


def classifier_env(env: Any) -> Any:
    """The ClassifierReward wrapper around (or inside) ``env``, or None."""
    from handrail.learners.agents.learned_reward import ClassifierReward

    while env is not None and not isinstance(env, ClassifierReward):
        env = getattr(env, "env", None)
    return env


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
            stored = read_labels(path)
        except (StoreError, OSError, ValueError) as exc:
            raise ValueError(f"--demos {path}: {exc}") from exc
        labels = stored.success
        if (labels != UNLABELLED).any():
            by = sorted({s["by"] for s in stored.sources})
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
    of its false positives (``--corrections`` of ``handrail train``, ``corrections`` of
    ``actor_node``).

    After every finished episode :meth:`after_episode` takes the false positive the env kept
    (if any) when the budget and the spacing allow: its frames join the classifier's own
    training frames as a failed episode (never held out), the classifier is retrained from
    scratch with its own settings (the threshold on the same held-out episodes), written to the
    run folder's ``reward_classifier``, put in the env, and the replay (demonstrations and
    online steps) is relabelled by it where it keeps the classifier's cameras.

    Args:
        env: the env holding the :class:`~handrail.learners.agents.learned_reward.
            ClassifierReward` (nothing is done without one).
        trainer: the run's trainer (its replay is relabelled through ``edit_replay``).
        run_path: the run folder (the corrected classifier goes to its ``reward_classifier``).
        episodes: at most this many corrections (0: none; the counts are still kept).
        every: at least this many env steps between two corrections.
        say: prints one line of what happens (``handrail train``: to stderr).
        option: how the user asked for corrections, for the messages.

    Raises:
        ValueError: corrections are asked for and the classifier names no training stores, or
            they are gone (before the run starts).
    """

    def __init__(
        self, env: Any, trainer: Any, run_path: Path, *, episodes: int, every: int,
        say: Callable[[str], None] = print, option: str = "--corrections",
    ) -> None:  # fmt: skip
        self.env = classifier_env(env)
        self.limit, self.every = episodes, every
        self.trainer, self.run_path = trainer, run_path
        self.say, self.option = say, option
        self.episodes: list[dict[str, np.ndarray]] = []
        self.records: list[dict[str, Any]] = []
        self._dataset: Any = None
        self._original: Any = None
        self._labelled: list[tuple[Any, Any, str]] = []
        self.relabels = self._warned = False
        if self.env is not None and self.limit:
            from handrail.learners.agents.learned_reward import can_relabel

            self._original = _original(self.env.classifier)
            self._labelled = _stores(self._original, option)  # checked before the run starts
            self.relabels = can_relabel(trainer.learner.layout, self.env.classifier)
            if not self.relabels:
                say("the replay keeps none of the classifier's frames (or it reads state keys): "
                    "a corrected classifier rewards the steps after it, the stored ones keep "
                    "their rewards")  # fmt: skip

    def after_episode(
        self, env_steps: int, log: Callable[[str, int, dict[str, Any]], None] | None = None
    ) -> dict[str, Any] | None:
        """Take the env's latest false positive as a correction, if one is due (see class);
        ``log(kind, env_steps, record)`` gets the correction's record, which is returned."""
        if self.env is None:
            return None
        if self.limit and not self.env.stats.judged and not self._warned:
            self._warned = True
            self.say(f"the env reports no success of its own (info[{self.env.success_key!r}]) "
                     f"and nobody gave a verdict: no false positive can be found, so "
                     f"{self.option} makes none")  # fmt: skip
        if self.env.false_positive is None:
            return None
        episode, self.env.false_positive = self.env.false_positive, None
        last = self.records[-1]["env_steps"] if self.records else None
        if len(self.episodes) >= self.limit or (last is not None and env_steps - last < self.every):
            return None
        self.episodes.append(episode)
        record = self._retrain(env_steps)
        self.records.append(record)
        if log is not None:
            log("reward_correction", env_steps, record)
        self.say(f"correction {len(self.episodes)} of {self.limit} at {env_steps} env steps (a "
                 f"false positive of {len(episode[next(iter(episode))])} steps): retrained, "
                 f"threshold {record['threshold']:.3f}, validation precision "
                 f"{record['precision']:.3f} recall {record['recall']:.3f}; "
                 f"{record['relabelled']} stored transitions changed")  # fmt: skip
        return record

    def _training_frames(self) -> Any:
        """The frames the run's first classifier was trained on (read once)."""
        from handrail.learners.agents.classifier import frames_dataset

        if self._dataset is None:
            self._dataset = frames_dataset(self._labelled, self._original.config)
        return self._dataset

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


def _stores(original: Any, option: str) -> list[tuple[Any, Any, str]]:
    """The labelled stores ``original`` was trained on (``handrail reward train`` names
    them in its ``classifier.json``).

    Raises:
        ValueError: it names none, or one is gone or damaged.
    """
    extra = original.meta.get("extra") or {}
    paths = extra.get("demos")
    if not paths:
        raise ValueError(
            f"{option}: the classifier {original.path} does not name the stores it was "
            "trained on (no extra.demos in its classifier.json): train it with handrail "
            f"reward train, or leave out {option}"
        )
    try:
        return labelled_stores([Path(p) for p in paths], int(extra.get("last", 1)))
    except ValueError as exc:
        raise ValueError(f"{option}: the stores {original.path} was trained on: {exc} "
                         "(a correction retrains on them)") from exc  # fmt: skip


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
