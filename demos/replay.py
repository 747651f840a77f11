"""Pure helpers for open-loop replay: how far replayed observations drift from recorded ones.

Nothing here imports MuJoCo: ``handrail replay`` (launch/) runs the sim and hands the arrays in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from handrail.control.spaces import is_image

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
        bad = {k: v.max_abs for k, v in d.keys.items() if not v.is_image and v.max_abs > tolerance}
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
