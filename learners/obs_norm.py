"""Per-key normalisation of a learner's state inputs: fitted once on early data, then frozen.

A robot's state comes on whatever scales its sensors use: joint angles in radians, positions
that move by centimetres, a gripper encoder in the hundreds. Networks learn slowly from inputs
whose scales differ by orders of magnitude, so the learner rescales every column of the flat
observation to zero mean and unit spread before its networks see it::

    x_in = clip((x - shift) / scale, -bound, bound)

The statistics are fitted once, when the learner starts updating, from every row it holds then
(the demonstrations and the warm-up data), and frozen: the replay keeps raw observations and
every update and every action normalises them with the same numbers. They live in the agent
state (``SACState.obs_norm``), so a checkpoint carries them bit for bit and every place that
runs the policy (``handrail eval``, residual bases, ``actor_node``) normalises as training did.

Per key: every column is centred on its mean, and every column of a key is divided by one scale,
the key's. Keys on different scales (a gripper encoder in the hundreds beside positions in
metres) come to the same footing, while inside a key, whose columns share units, the
proportions stay as the sensor gives them: a column that barely moved while the statistics were
taken (a resting object's height, a quaternion component) is not blown up into unit-variance
noise the networks would have to learn to ignore. Every key weighs the same: its columns'
variances sum to the same share (the mean number of columns per key), so that a wide key (a
14-column proprioception, 7 joints) does not drown a narrow one (where the object is from the
gripper) by its number of columns; with one key, every column's spread is 1 on average.
Bounded: normalised values are clipped at +-:data:`BOUND` times the key's spread (one outlier
cannot push a network's input off by more than that).
Columns left as they are (shift 0, scale 1, no bound): a residual's base action (already in
[-1, 1]), camera frames (the image encoder scales them) and every column of a learner trained
without normalisation.

Where to go next, found in the demonstrations: a task brings some things together (the gripper
to the object, the object to its goal), and a network given only where each thing is must learn
to subtract their positions from a handful of demonstrations. :func:`meeting_pairs` finds the
pairs of columns that every demonstration ends with at the same value although they started
apart, and the learner reads their differences as extra inputs (:func:`extend`), normalised
like the other columns (as a key of their own, :data:`RELATIVE_KEY`). Nothing about the task
is named: the pairs come from the demonstrations' data alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from handrail.control.base_policy import BASE_ACTION_KEY
from handrail.learners.specs import ObsSpec

BOUND = 10.0
"""Normalised inputs are clipped to +-BOUND (VecNormalize's default clip)."""
KEEP_KEYS = (BASE_ACTION_KEY,)
"""Keys never normalised: a residual's base action is already in [-1, 1]."""

RELATIVE_KEY = "relative"
"""The name the differences of :func:`meeting_pairs` go by (in messages and config.json)."""
MEET_RATIO = 0.15
"""A pair meets when its mean distance at the demonstrations' ends is at most this fraction of
its root-mean-square distance at their starts ..."""
MEET_TAIL = 0.3
"""... and 90% of the demonstrations end within this fraction."""
MOVE_RATIO = 0.1
"""Both columns of a pair must vary over the demonstrations, the one that varies less by at
least this fraction of the other's spread (a column that stays put does not meet anything: the
other column merely arrives at its value)."""

PLACE_RATIO = 0.1
"""Where a pair meets must vary from demonstration to demonstration (its standard deviation at
least this fraction of the starting distance): columns that always end at the same value (two
velocities at rest, two offsets at zero) say nothing together that each does not say alone."""

Pairs = tuple[tuple[int, int], ...]
"""Flat-observation columns (i, j) whose difference x_i - x_j is an extra input."""

ObsNorm = dict[str, Any]
"""``{"shift", "scale", "bound"}``: float32 arrays of the flat observation's length."""


class ObsNormError(ValueError):
    """The statistics of a state key are unusable (not finite, or the key never changes)."""


def identity(dim: int) -> ObsNorm:
    """The normalisation that changes nothing (shift 0, scale 1, no bound)."""
    return {
        "shift": np.zeros(dim, np.float32),
        "scale": np.ones(dim, np.float32),
        "bound": np.full(dim, np.inf, np.float32),
    }


def meeting_pairs(
    spec: ObsSpec, obs: np.ndarray, first: np.ndarray, final: np.ndarray,
    keep: Sequence[str] = KEEP_KEYS,
) -> Pairs:  # fmt: skip
    """The column pairs every demonstration brings together (see the module docstring).

    Args:
        obs: flat observations of the demonstrations, (N, dim).
        first: (N,) bool, the rows that start an episode.
        final: (N,) bool, the rows that end one (the observation after its last step).
    """
    obs = np.asarray(obs, np.float64)
    start, end = obs[np.asarray(first, bool)], obs[np.asarray(final, bool)]
    if len(start) < 2 or len(start) != len(end) or not np.isfinite(obs).all():
        return ()
    keep = (*keep, *spec.images)  # camera frames: pixels meet nothing
    skip = {c for key, cols in spec.slices() if key in keep for c in range(spec.dim)[cols]}
    columns = [c for c in range(spec.dim) if c not in skip]
    spread = obs.std(axis=0)
    pairs = []
    for a, i in enumerate(columns):
        for j in columns[a + 1 :]:
            apart = float(np.sqrt(np.mean((start[:, i] - start[:, j]) ** 2)))
            if not apart > 0 or min(spread[i], spread[j]) < MOVE_RATIO * max(spread[i], spread[j]):
                continue
            met = np.abs(end[:, i] - end[:, j])
            if float(np.std(end[:, i] + end[:, j])) / 2 < PLACE_RATIO * apart:
                continue
            if met.mean() <= MEET_RATIO * apart and np.quantile(met, 0.9) <= MEET_TAIL * apart:
                pairs.append((i, j))
    return tuple(pairs)


def demo_pairs(spec: ObsSpec, demos: Any, enabled: bool = True) -> Pairs:
    """:func:`meeting_pairs` of demonstration replay rows (``learners.replay.Rows``); none
    without demonstrations or when not ``enabled`` (``LoopConfig.relative_inputs``)."""
    if demos is None or not enabled or spec.images:  # with cameras the rows hold the state
        return ()
    return meeting_pairs(spec, demos.data["obs"], demos.first, demos.final)


def extend(obs: Any, pairs: Pairs) -> Any:
    """Flat observations with the differences of ``pairs`` appended (JAX or NumPy)."""
    if not pairs:
        return obs
    xp = np if isinstance(obs, np.ndarray) else jnp
    i, j = (np.asarray(side, np.int32) for side in zip(*pairs, strict=True))
    return xp.concatenate([obs, obs[..., i] - obs[..., j]], axis=-1)


def input_spec(spec: ObsSpec, pairs: Pairs) -> ObsSpec:
    """The spec of :func:`extend`'s output: ``spec`` and one key of the differences."""
    if not pairs:
        return spec
    return ObsSpec((*spec.keys, RELATIVE_KEY), (*spec.shapes, (len(pairs),)), spec.images)


def pair_names(spec: ObsSpec, pairs: Pairs) -> list[str]:
    """``key[col]-key[col]`` for each pair (what the run prints and config.json keeps)."""
    names = []
    for key, cols in spec.slices():
        names += [f"{key}[{c}]" if cols.stop - cols.start > 1 else key
                  for c in range(cols.stop - cols.start)]  # fmt: skip
    return [f"{names[i]}-{names[j]}" for i, j in pairs]


def fit(
    spec: ObsSpec, rows: np.ndarray, keep: Sequence[str] = KEEP_KEYS,
    only: Sequence[str] | None = None,
) -> ObsNorm:  # fmt: skip
    """The normalisation of flat observations ``rows`` (N, dim): columns centred, one scale
    per key, every key the same weight (see the module docstring); ``only``: normalise these
    keys alone (the others as they are).

    Raises:
        ObsNormError: no rows; a key with a non-finite value (naming the key, its column and the
            row count); a key that never changes over the rows (a constant key carries nothing a
            learner can use: leave it out, or train without normalisation).
    """
    rows = np.asarray(rows, np.float64)
    if rows.ndim != 2 or rows.shape[1] != spec.dim:
        raise ValueError(f"obs_norm.fit: rows of shape {rows.shape}, expected (N, {spec.dim})")
    if len(rows) < 2:
        raise ObsNormError(
            f"observation normalisation needs at least 2 rows to fit on, got {len(rows)}; "
            "raise --loop.warmup-steps or give demonstrations (or --loop.no-normalize-obs)"
        )
    norm = identity(spec.dim)
    keep = (*keep, *spec.images)  # camera frames go to the encoder as they are
    chosen = [(key, cols) for key, cols in spec.slices()
              if key not in keep and (only is None or key in only)]  # fmt: skip
    share = sum(cols.stop - cols.start for _, cols in chosen) / max(len(chosen), 1)
    for key, cols in chosen:
        block = rows[:, cols]
        bad = ~np.isfinite(block)
        if bad.any():
            column = int(np.argwhere(bad)[0][1])
            raise ObsNormError(
                f"observation key {key!r} has non-finite values (nan or inf) in column {column} "
                f"of the {len(rows)} rows its normalisation is fitted on; fix the env or sensor "
                f"that gives them, or leave the key out with --ignore-obs-keys {key}"
            )
        mean, std = block.mean(axis=0), block.std(axis=0)
        scale = float(np.sqrt(np.mean(std**2)))
        if not scale > 1e-8 * max(1.0, float(np.abs(mean).max())):
            raise ObsNormError(
                f"observation key {key!r} is constant over the {len(rows)} rows its "
                f"normalisation is fitted on (demonstrations and warm-up): it carries nothing a "
                f"learner can use. Leave it out with --ignore-obs-keys {key}, or train without "
                "normalisation (--loop.no-normalize-obs)"
            )
        norm["shift"][cols] = mean
        weight = math.sqrt(share / (cols.stop - cols.start))  # each key's variance: ``share``
        norm["scale"][cols] = scale / weight
        norm["bound"][cols] = BOUND * weight
    return norm


def apply(norm: ObsNorm, obs: Any) -> Any:
    """Normalised flat observations (any leading dims; JAX or NumPy arrays)."""
    return jnp.clip((obs - norm["shift"]) / norm["scale"], -norm["bound"], norm["bound"])


def is_identity(norm: ObsNorm) -> bool:
    """Whether ``norm`` leaves every column as it is (a learner without normalisation)."""
    return bool(np.all(np.isinf(np.asarray(norm["bound"]))))


def to_json(spec: ObsSpec, norm: ObsNorm) -> dict[str, dict[str, list[float]]]:
    """Per normalised key: its columns' ``mean`` and ``std`` (what ``config.json`` shows)."""
    shift, scale, bound = (np.asarray(norm[k], np.float64) for k in ("shift", "scale", "bound"))
    return {
        key: {"mean": shift[cols].tolist(), "std": scale[cols].tolist()}
        for key, cols in spec.slices()
        if np.isfinite(bound[cols]).all()
    }


def describe(spec: ObsSpec, norm: ObsNorm) -> str:
    """One line: which keys are normalised and their scales."""
    scale, bound = np.asarray(norm["scale"]), np.asarray(norm["bound"])
    parts = [
        f"{key} /{float(scale[cols].max()):.3g}"
        for key, cols in spec.slices()
        if np.isfinite(bound[cols]).all()
    ]
    if not parts:
        return "observations: not normalised"
    return (
        "observations: centred, scaled per key (" + ", ".join(parts) + f"; clipped at +-{BOUND:g})"
    )
