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

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from handrail.app.config import TrainConfig
from handrail.control.step import Step


def with_model_cameras(cfg: TrainConfig, model: Any) -> TrainConfig:
    """``cfg`` with the cameras of ``model`` in its env settings: an image encoder (or its
    :func:`load` ``cameras_only``), or the success classifier whose cameras a ``--pixels``
    learner reads. They are the run's own (config.json), since whatever loads its policy later
    (eval, a resume, a base) must render them."""
    if model is None:
        return cfg
    from handrail.app.config import format_env_kwargs
    from handrail.app.envs import with_cameras

    kwargs = format_env_kwargs(with_cameras(cfg.task, cfg.env, model))
    return dataclasses.replace(cfg, env_kwargs=kwargs)


@dataclasses.dataclass(frozen=True)
class StoreCameras:
    """The camera fields of recorded episodes, as a camera model names what it reads
    (:func:`handrail.app.envs.with_cameras` renders them)."""

    cameras: tuple[str, ...]
    """The camera fields, in the store's order."""
    frame_shapes: dict[str, tuple[int, ...]]
    """Each camera's frame shape (H, W, C)."""


def store_cameras(data: Any, ignore: tuple[str, ...] = ()) -> StoreCameras:
    """The camera fields of ``data`` (``EpisodeData``) a ``--pixels`` learner reads: every uint8
    image field not in ``ignore``.

    Raises:
        ValueError: the episodes hold no camera field (naming what they hold and the fix).
    """
    from handrail.control.spaces import is_image

    shapes = {k: tuple(np.shape(v)[1:]) for k, v in data.obs.items() if k not in ignore}
    cams = {k: s for k, s in shapes.items() if is_image(s, np.asarray(data.obs[k]).dtype)}
    if not cams:
        raise ValueError(
            f"--pixels: the store has no camera field (uint8 H x W x C) to learn from; it holds "
            f"{sorted(shapes)}. Record the cameras (handrail record --cameras front,wrist)"
        )
    return StoreCameras(tuple(cams), cams)


def load(path: Path | None, *, cameras_only: bool = False) -> Any:
    """The image encoder at ``path`` (None for None; ``cameras_only``: its
    :class:`~handrail.learners.agents.encoder.EncoderCameras`, no network), or a one-line
    ValueError."""
    if path is None:
        return None
    from handrail.learners.agents.encoder import EncoderCameras, ImageEncoder

    try:
        return (EncoderCameras if cameras_only else ImageEncoder)(path)
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


class CameraTap(gym.Wrapper):
    """Keeps the camera frames of the last two observations its env gave, beneath the
    wrappers that replace them (an encoder's features) or drop them (a success classifier),
    so that a run's ``--record`` store keeps what the robot saw, not what the learner read
    (:class:`RecordFrames` hands them to the recorder). Wrap the task's env in it first."""

    def __init__(self, env: gym.Env) -> None:
        from handrail.control.spaces import is_image

        super().__init__(env)
        spaces = getattr(env.observation_space, "spaces", {})
        self.cameras = {k: s for k, s in spaces.items() if is_image(s.shape, s.dtype)}
        self.frames: tuple[dict[str, Any], dict[str, Any]] = ({}, {})

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self._keep(obs, fresh=True)
        return obs, info

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self._keep(out[0])
        return out

    def _keep(self, obs: Any, *, fresh: bool = False) -> None:
        now = {k: np.array(obs[k]) for k in self.cameras}  # a copy: renderers reuse buffers
        self.frames = (now if fresh else self.frames[1], now)

    def recorded_space(self, space: gym.spaces.Dict) -> gym.spaces.Dict:
        """``space`` (what the learner reads) as the store records it: without the encoder's
        features, with every camera."""
        from handrail.learners.agents.encoder import FEATURES_KEY

        kept = {k: s for k, s in space.spaces.items() if k != FEATURES_KEY}
        return gym.spaces.Dict({**kept, **self.cameras})


class RecordFrames:
    """A sink that hands each step to ``sink`` with the tapped camera frames in place of the
    encoder's features (the actor calls its sinks right after the env's step, before the
    next)."""

    def __init__(self, sink: Any, camera_tap: CameraTap) -> None:
        from handrail.learners.agents.encoder import FEATURES_KEY

        self.sink, self.tap, self.features = sink, camera_tap, FEATURES_KEY

    def add(self, step: Step) -> None:
        before, after = self.tap.frames
        obs = {k: v for k, v in step.obs.items() if k != self.features}
        next_obs = {k: v for k, v in step.next_obs.items() if k != self.features}
        self.sink.add(dataclasses.replace(step, obs={**obs, **before},
                                          next_obs={**next_obs, **after}))  # fmt: skip
