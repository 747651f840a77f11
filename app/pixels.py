"""Cameras into the policy for ``handrail train --encoder PATH``: a frozen image encoder.

The encoder (``handrail encoder train``) turns the env's camera frames into one float key,
``camera_features``, before anything else sees the observation, so the learner, the replay
and the demonstrations are those of a state run and as fast. A handrail task renders the
encoder's cameras at its frames' size; the run's config.json records those env settings and
the run folder keeps a copy of the encoder (``encoder/``), so everything that loads the run's
policy later (``handrail eval``, ``run:`` bases, ``actor_node``) gives it the same cameras and
encodes them the same way (:func:`handrail.learners.policies.load_run_policy`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from handrail.app.config import TrainConfig


def load_encoder(cfg: TrainConfig) -> Any:
    """The run's image encoder, or None without ``--encoder``.

    Raises:
        ValueError: the path holds no encoder, or the run cannot use one (naming why).
    """
    if cfg.encoder is None:
        return None
    problems = {
        "--actors": cfg.actors > 0,
        "--record": cfg.record is not None,
        "--residual-on": cfg.residual_on is not None,
    }
    bad = [name for name, on in problems.items() if on]
    if bad:
        raise ValueError(
            f"--encoder with {', '.join(bad)} is not supported yet: train with the encoder in one "
            "process, without recording or a residual base"
        )
    return load(cfg.encoder)


def load(path: Path | None) -> Any:
    """The image encoder at ``path`` (None for None), or a one-line ValueError."""
    if path is None:
        return None
    from handrail.learners.agents.encoder import ImageEncoder

    try:
        return ImageEncoder(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--encoder {path}: {exc}") from exc


def wrap(env: Any, encoder: Any) -> Any:
    """``env`` with its cameras encoded (itself without an encoder)."""
    if encoder is None:
        return env
    from handrail.learners.agents.encoder import CameraFeatures

    try:
        return CameraFeatures(env, encoder)
    except ValueError as exc:
        raise ValueError(f"--encoder {encoder.path}: {exc}") from exc


def encode_demos(demos: Any, encoder: Any) -> Any:
    """The demonstrations with their cameras encoded."""
    if encoder is None or demos is None:
        return demos
    from handrail.learners.agents.encoder import encode_episodes

    try:
        return encode_episodes(demos, encoder)
    except ValueError as exc:
        raise ValueError(f"--demos with --encoder {encoder.path}: {exc}") from exc


def keep_copy(run_path: Path, encoder: Any) -> None:
    """Copy the encoder into the run folder (the run's policy is useless without it)."""
    if encoder is None:
        return
    from handrail.learners.agents.encoder import RUN_FOLDER

    target = Path(run_path) / RUN_FOLDER
    if not target.exists():
        shutil.copytree(encoder.path, target)
