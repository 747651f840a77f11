"""Pure helpers for open-loop replay: how far replayed observations drift from recorded ones,
and the marks on the replay video that say who acted at each step.

Nothing here imports MuJoCo: ``handrail replay`` (launch/) runs the sim and hands the arrays in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from handrail.control.spaces import is_image
from handrail.control.step import ActedBy
from handrail.demos.format import INTERVENTION_SOURCES

DEFAULT_TOLERANCE = 1e-4
"""Default bound on max |replayed - recorded| for state observations (their units: m, rad, ...).

MuJoCo is deterministic for the same model, seed and action sequence on one machine, so a
faithful recording replays to float32 rounding (~1e-7 on positions of order 1); 1e-4 leaves
room for a different CPU or BLAS while still catching a wrong seed or a dropped step.
"""


@dataclass(frozen=True)
class KeyDrift:
    """Drift of one observation key over the compared steps."""

    max_abs: float
    """Largest absolute difference over all steps and elements."""
    mean_abs: float
    """Mean absolute difference over all steps and elements."""
    is_image: bool
    """True for images (pixel levels 0-255; not held to the state tolerance)."""


@dataclass(frozen=True)
class EpisodeDrift:
    """Drift of one replayed episode."""

    episode: int
    """Episode id in the store."""
    steps_compared: int
    """Observations compared (recorded steps plus the final observation)."""
    keys: dict[str, KeyDrift]
    """Per observation key."""
    note: str = ""
    """Why fewer steps were compared than recorded (e.g. the replay terminated early)."""

    def worst(self, *, images: bool = False) -> float:
        """Largest max-abs drift over state keys (and image keys if ``images``)."""
        vals = [d.max_abs for d in self.keys.values() if images or not d.is_image]
        return max(vals, default=0.0)


def key_drift(recorded: np.ndarray, replayed: np.ndarray) -> KeyDrift:
    """Max and mean absolute error between two equally shaped (steps, ...) observation stacks."""
    rec = np.asarray(recorded)
    rep = np.asarray(replayed)
    if rec.shape != rep.shape:
        raise ValueError(f"shapes differ: recorded {rec.shape} vs replayed {rep.shape}")
    image = is_image(rec.shape[1:], rec.dtype)
    diff = np.abs(rec.astype(np.float64) - rep.astype(np.float64))
    if diff.size == 0:
        return KeyDrift(0.0, 0.0, image)
    return KeyDrift(float(diff.max()), float(diff.mean()), image)


def episode_drift(
    episode: int,
    recorded: Mapping[str, np.ndarray],
    replayed: Mapping[str, np.ndarray],
    *,
    note: str = "",
) -> EpisodeDrift:
    """Drift per key, comparing the first ``min(len)`` steps of each key.

    Args:
        episode: Episode id (for the report).
        recorded: Key -> (T, ...) recorded observations (usually with the final one appended).
        replayed: Key -> (T', ...) replayed observations; keys missing here are an error.
        note: Carried into the result.
    """
    missing = sorted(set(recorded) - set(replayed))
    if missing:
        raise ValueError(f"replayed observations lack keys {missing}; the env's fields changed")
    n = min(min(len(v) for v in recorded.values()), min(len(replayed[k]) for k in recorded))
    keys = {k: key_drift(recorded[k][:n], replayed[k][:n]) for k in recorded}
    return EpisodeDrift(episode=episode, steps_compared=n, keys=keys, note=note)


def overall_drift(drifts: Sequence[EpisodeDrift]) -> dict[str, KeyDrift]:
    """Max of max-abs and step-weighted mean of mean-abs, per key, over episodes."""
    out: dict[str, KeyDrift] = {}
    keys = dict.fromkeys(k for d in drifts for k in d.keys)
    for k in keys:
        parts = [(d.keys[k], d.steps_compared) for d in drifts if k in d.keys]
        weight = sum(n for _, n in parts) or 1
        out[k] = KeyDrift(
            max_abs=max(p.max_abs for p, _ in parts),
            mean_abs=sum(p.mean_abs * n for p, n in parts) / weight,
            is_image=parts[0][0].is_image,
        )
    return out


def drift_failures(drifts: Sequence[EpisodeDrift], tolerance: float) -> list[str]:
    """One line per episode whose state drift exceeds ``tolerance`` or that replayed short."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    lines = []
    for d in drifts:
        bad = {  # "not <=": a nan drift fails too
            k: v.max_abs for k, v in d.keys.items() if not v.is_image and not v.max_abs <= tolerance
        }
        if bad:
            detail = ", ".join(f"{k} {v:.3g}" for k, v in bad.items())
            lines.append(f"episode {d.episode}: max abs error above {tolerance:g}: {detail}")
        if d.note:
            lines.append(f"episode {d.episode}: {d.note}")
    return lines


def format_drift_table(rows: Mapping[str, Mapping[str, KeyDrift]]) -> str:
    """A table with one block per row label (episode or 'overall') and one line per key."""
    lines = [f"{'':<10} {'key':<16} {'max abs':>12} {'mean abs':>12}"]
    for label, keys in rows.items():
        for k, d in keys.items():
            unit = " (pixels)" if d.is_image else ""
            lines.append(f"{label:<10} {k:<16} {d.max_abs:>12.3g} {d.mean_abs:>12.3g}{unit}")
            label = ""
    return "\n".join(lines)


# ----------------------------------------------------------------------------- video highlights

HUMAN_BORDER_RGB = (255, 140, 0)
"""Border colour (orange) of video frames that show a step a human acted in."""


def annotate_frame(
    frame: np.ndarray, caption: str, *, border_rgb: tuple[int, int, int] | None = None
) -> np.ndarray:
    """A copy of an HxWx3 uint8 frame with ``caption`` at its top left, and a border if asked.

    The border is ``max(2, min(H, W) // 60)`` px wide (4 px on the sim's 240x320 renders); the
    caption is white text on a black box just inside it, in Pillow's default font scaled to the
    frame height. Nothing else of the frame changes.

    Args:
        frame: (H, W, 3) uint8 RGB image.
        caption: One line of text.
        border_rgb: Colour of the border; None draws none.
    """
    img = np.asarray(frame)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(
            f"annotate_frame: expected an HxWx3 uint8 frame, got {img.dtype}{img.shape}"
        )
    from PIL import Image, ImageDraw, ImageFont  # Pillow comes with matplotlib; only videos need it

    height, width = img.shape[:2]
    border = max(2, min(height, width) // 60)
    canvas = Image.fromarray(img.copy())
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default(size=max(8, height // 20))
    pad = max(1, border // 2)
    x, y = border + pad, border + pad
    _, _, right, bottom = draw.textbbox((x, y), caption, font=font)
    draw.rectangle((x - pad, y - pad, right + pad - 1, bottom + pad - 1), fill=(0, 0, 0))
    draw.text((x, y), caption, fill=(255, 255, 255), font=font)
    out = np.array(canvas)
    if border_rgb is not None:
        colour = np.asarray(border_rgb, np.uint8)
        out[:border] = out[-border:] = colour
        out[:, :border] = out[:, -border:] = colour
    return out


def highlight_episode_frames(
    frames: Sequence[np.ndarray], intervention: np.ndarray, *, episode: int
) -> list[np.ndarray]:
    """Marks who acted on the frames of one replayed episode.

    Replay renders one frame after the reset and one after each step, so frame 0 shows the start
    state and frame ``t + 1`` shows the result of step ``t``'s action: that frame is attributed to
    step ``t``. It gets an orange border (:data:`HUMAN_BORDER_RGB`) if a human chose that action,
    none for the policy or a script, and every frame a caption such as
    ``ep 3 step 12: human (25% human)`` (the share of the episode's steps a human acted in).

    Args:
        frames: The episode's frames, reset frame first; fewer than ``len(intervention) + 1``
            when the replay ended early.
        intervention: (T,) who acted per step (0 policy, 1 human, 2 scripted).
        episode: Episode id for the caption.
    """
    who = np.asarray(intervention)
    if len(frames) > len(who) + 1:
        raise ValueError(
            f"episode {episode}: {len(frames)} frames for {len(who)} steps; replay renders one "
            "frame after the reset and one per step"
        )
    human = who == ActedBy.HUMAN
    share = f"{float(np.mean(human)) if len(who) else 0.0:.0%} human"
    out = [annotate_frame(frames[0], f"ep {episode} start ({share})")] if len(frames) else []
    for t, frame in enumerate(frames[1:]):
        source = INTERVENTION_SOURCES.get(int(who[t]), f"source {int(who[t])}")
        caption = f"ep {episode} step {t}: {source} ({share})"
        out.append(
            annotate_frame(frame, caption, border_rgb=HUMAN_BORDER_RGB if human[t] else None)
        )
    return out
