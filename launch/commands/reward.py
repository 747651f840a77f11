"""``handrail reward train`` and ``handrail reward eval``: a learned success classifier.

``reward train --demos STORE [STORE ...] --out PATH`` trains
:mod:`handrail.learners.agents.classifier` on the stores' labelled frames (``handrail label``; a
store without labels is labelled from its success flags: the last ``--last`` steps of each
successful episode succeed, every other step fails), holds whole episodes out for validation,
chooses the threshold there, and writes the classifier folder with its loss plot. ``reward eval
PATH --demos STORE`` scores it on other episodes: frame precision and recall, and per episode
whether it fired where the store says the task succeeded. ``handrail train --reward
classifier:PATH`` then trains on it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

from handrail.launch.commands.common import plot_losses, write_folder
from handrail.learners.agents.classifier import ClassifierConfig
from handrail.learners.agents.corrections import labelled_stores


@dataclass(frozen=True)
class RewardTrain:
    """Options of ``handrail reward train``."""

    demos: tuple[Path, ...]
    """Episode stores with camera frames: demonstrations, failures, corrections."""
    out: Path
    """Folder to write the classifier into (``--reward classifier:PATH`` reads it)."""
    last: int = 1
    """For a store without labels: the steps at the end of each successful episode whose
    frames show success (1 where success ends the episode, as in the simulator)."""
    overwrite: bool = False
    """Replace ``--out`` if it holds a classifier."""
    progress: bool = True
    """Show the progress bar."""
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    """Cameras, state keys, network and optimisation settings."""

    def __post_init__(self) -> None:
        if not self.demos:
            raise ValueError("--demos: give at least one episode store")
        if self.last < 1:
            raise ValueError(f"--last must be >= 1 step, got {self.last}")


@dataclass(frozen=True)
class RewardEval:
    """Options of ``handrail reward eval``."""

    classifier: tyro.conf.Positional[Path]
    """The classifier folder (``handrail reward train --out``)."""
    demos: tuple[Path, ...]
    """Episode stores to score it on (episodes it was not trained on)."""
    last: int = 1
    """For a store without labels: as ``reward train --last``."""

    def __post_init__(self) -> None:
        if not self.demos:
            raise ValueError("--demos: give at least one episode store")
        if self.last < 1:
            raise ValueError(f"--last must be >= 1 step, got {self.last}")


def train(cmd: Annotated[RewardTrain, tyro.conf.arg(name="")]) -> int:
    """Train a success classifier on labelled frames and write it to ``--out``."""
    from handrail.learners.agents.classifier import (
        frames_dataset,
        save_classifier,
        train_classifier,
    )

    out = Path(cmd.out)
    if out.exists() and not (cmd.overwrite and (out / "classifier.json").is_file()):
        what = "a classifier: add --overwrite" if (out / "classifier.json").is_file() else (
            "something else: choose another --out")  # fmt: skip
        raise ValueError(f"--out {out} already exists and holds {what}")
    stores = labelled_stores(cmd.demos, cmd.last)
    dataset = frames_dataset(stores, cmd.classifier)
    print(f"handrail reward: {len(dataset)} labelled frames ({int(dataset.label.sum())} success) "
          f"of cameras {list(dataset.frames)} from {len(stores)} store(s)", file=sys.stderr)  # fmt: skip
    result = train_classifier(dataset, cmd.classifier, progress=cmd.progress)

    def fill(folder: Path) -> None:
        save_classifier(folder, result, cmd.classifier, dataset,
                        extra={"demos": [str(p.resolve()) for p in cmd.demos],
                               "last": cmd.last})  # fmt: skip
        plot_losses(result.history, folder / "loss.png", title="handrail reward train",
                    ylabel="balanced cross-entropy", train_label="train (shifted frames)",
                    val_label="validation episodes")  # fmt: skip

    write_folder(out, fill)
    v, c = result.validation, result.counts
    print(f"handrail reward: validation on {c['val_episodes']} held-out episodes "
          f"({c['val_frames']} frames, {c['val_success']} success): precision "
          f"{v['precision']:.3f}, recall {v['recall']:.3f} at threshold {result.threshold:.3f}",
          file=sys.stderr)  # fmt: skip
    if not v["precision"] >= cmd.classifier.target_precision:
        print(f"handrail reward: warning: no threshold reached precision "
              f"{cmd.classifier.target_precision} on the validation frames; label more "
              "failures that look like success (near misses)", file=sys.stderr)  # fmt: skip
    print(f"handrail reward: classifier {out.resolve()}; train on it with handrail train "
          f"--reward classifier:{out}", file=sys.stderr)  # fmt: skip
    return 0


def evaluate(cmd: Annotated[RewardEval, tyro.conf.arg(name="")]) -> int:
    """Score a classifier on other stores' labelled frames and episodes."""
    import numpy as np

    from handrail.learners.agents.classifier import SuccessClassifier, frames_dataset, scores

    clf = SuccessClassifier(cmd.classifier)
    stores = labelled_stores(cmd.demos, cmd.last)
    for reader, _labels, _source in stores:
        clf.check_keys({f.name: tuple(f.shape) for f in reader.obs_fields}, f"store {reader.path}")
    dataset = frames_dataset(stores, clf.config)
    prob = clf.probability({**dataset.frames, **_state(dataset, clf)})
    frame_scores = scores(prob, dataset.label, clf.threshold)
    episodes = _episode_scores(dataset, prob >= clf.threshold)
    report = {"classifier": str(cmd.classifier), "threshold": clf.threshold,
              "frames": frame_scores, "episodes": episodes}  # fmt: skip
    print(json.dumps(report, indent=1, default=float))
    print(f"handrail reward: {len(dataset)} frames of {len(np.unique(dataset.episode))} "
          f"episodes: precision {frame_scores['precision']:.3f}, recall "
          f"{frame_scores['recall']:.3f}; episodes: {episodes['false_positives']} false "
          f"positives, {episodes['false_negatives']} false negatives", file=sys.stderr)  # fmt: skip
    return 0


def _state(dataset: Any, clf: Any) -> dict[str, Any]:
    """The dataset's state columns split back into the classifier's state keys."""
    if not clf.state_keys:
        return {}
    from handrail.learners.specs import ObsSpec

    spec = ObsSpec(clf.state_keys, tuple(clf.state_shapes[k] for k in clf.state_keys))
    return {key: dataset.state[:, cols] for key, cols in spec.slices()}


def _episode_scores(dataset: Any, fired: Any) -> dict[str, int]:
    """Per episode: fired on some frame vs. a success frame labelled in it."""
    import numpy as np

    counts = {"episodes": 0, "false_positives": 0, "false_negatives": 0, "true_positives": 0}
    for e in np.unique(dataset.episode):
        rows = dataset.episode == e
        hit, success = bool(fired[rows].any()), bool(dataset.label[rows].any())
        counts["episodes"] += 1
        counts["true_positives"] += int(hit and success)
        counts["false_positives"] += int(hit and not success)
        counts["false_negatives"] += int(success and not hit)
    return counts
