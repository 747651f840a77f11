"""Learner checkpoints: ``state.msgpack`` (flax.serialization) + ``config.json``; no pickle.

A checkpoint folder holds everything needed to rebuild the policy: the resolved SACConfig, the
observation and action specs, the full learner state (params, target params, optimizer states,
RNG, step counter) and any JSON-able ``extra`` the caller adds (e.g. env-step counters).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import flax.serialization
import jax
import numpy as np

from handrail.demos.commit import fsync_dir, fsync_paths, write_bytes_atomic
from handrail.learners import obs_norm
from handrail.learners.agents.sac import SAC, SACConfig, SACState
from handrail.learners.specs import ActionSpec, ObsSpec

STATE_FILE = "state.msgpack"
"""Learner state, flax.serialization msgpack."""
CONFIG_FILE = "config.json"
"""Resolved config, specs, extra and format version."""
FORMAT_VERSION = 1
"""Bumped when the checkpoint layout changes."""


class CheckpointError(ValueError):
    """A checkpoint's file is missing, damaged (truncated, not JSON) or of a newer format.

    The message names the file; a command adds what to do about it (another checkpoint, a
    fresh run) with ``add_note``.
    """


def read_json(path: str | os.PathLike[str]) -> Any:
    """The parsed JSON file at ``path``; CheckpointError naming it when it is missing or damaged."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, ValueError) as exc:  # JSONDecodeError, UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"{path} is damaged: not valid JSON ({exc})") from None


def write_checkpoint_dir(link: str | os.PathLike[str], fill: Callable[[Path], object]) -> Path:
    """Write a new checkpoint folder beside the current one, then switch to it atomically.

    ``link`` (e.g. ``run/checkpoints/latest``) is a symlink to a hidden folder
    ``.<name>.<generation>`` next to it. ``fill(folder)`` writes the new generation's files
    into a fresh folder (what it returns is ignored); once they are synced, a new symlink
    replaces ``link`` with one ``os.replace``. A crash at any point leaves ``link`` on either
    the previous or the new folder, never on a mix; folders no link points to are removed by
    the next save. A save that fails (an OSError such as a full disk, an interrupt) removes
    its new folder and re-raises, the previous one intact.

    Returns:
        The new folder.
    """
    link = Path(link)
    parent = link.parent
    parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{link.name}."
    if link.is_dir() and not link.is_symlink():  # a plain folder from an older layout
        os.replace(link, parent / f"{prefix}000000")
        os.symlink(f"{prefix}000000", link)
    gens = [
        int(p.name[len(prefix) :])
        for p in parent.glob(f"{prefix}*")
        if p.name[len(prefix) :].isdigit()
    ]
    folder = parent / f"{prefix}{max(gens, default=0) + 1:06d}"
    if folder.exists():
        shutil.rmtree(folder)
    tmp_link = parent / f"{prefix}link.tmp"
    folder.mkdir()
    try:
        fill(folder)
        fsync_paths(p for p in folder.rglob("*") if p.is_file())
        for sub in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
            fsync_dir(sub)
        tmp_link.unlink(missing_ok=True)
        os.symlink(folder.name, tmp_link)
    except BaseException:  # a failed save (disk full, Ctrl-C) leaves nothing but the last one
        shutil.rmtree(folder, ignore_errors=True)
        tmp_link.unlink(missing_ok=True)
        raise
    os.replace(tmp_link, link)
    fsync_dir(parent)
    for old in parent.glob(f"{prefix}*"):  # the previous generation and crashed attempts
        if old.name == folder.name:
            continue
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
    return folder


def save_checkpoint(
    directory: str | os.PathLike[str],
    state: SACState,
    config: SACConfig,
    obs_spec: ObsSpec,
    action_spec: ActionSpec,
    extra: dict[str, Any] | None = None,
    pairs: obs_norm.Pairs = (),
) -> Path:
    """Write a checkpoint folder (created if needed; files replaced atomically); ``pairs``:
    the learner's :attr:`SAC.pairs`.

    Returns:
        The checkpoint folder.
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": FORMAT_VERSION,
        "config": config.to_json(),
        "obs_spec": obs_spec.to_json(),
        "action_spec": action_spec.to_json(),
        "extra": extra or {},
    }
    state = jax.device_get(state)
    meta["obs_norm"] = obs_norm.to_json(obs_norm.input_spec(obs_spec, pairs), state.obs_norm)
    if pairs:
        meta["pairs"] = [list(pair) for pair in pairs]
        meta["pair_names"] = obs_norm.pair_names(obs_spec, pairs)
    write_bytes_atomic(path / STATE_FILE, flax.serialization.to_bytes(state))
    write_bytes_atomic(path / CONFIG_FILE, json.dumps(meta, indent=2).encode())
    return path


def read_meta(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed ``config.json`` of a checkpoint folder (clear error when it is not one)."""
    path = Path(directory)
    if not (path / CONFIG_FILE).is_file() or not (path / STATE_FILE).is_file():
        raise CheckpointError(
            f"{path} is not a handrail checkpoint: expected {CONFIG_FILE} and {STATE_FILE} in it"
        )
    meta = read_json(path / CONFIG_FILE)
    version = meta.get("format_version") if isinstance(meta, dict) else None
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path / CONFIG_FILE}: checkpoint format_version {version} was written by a newer "
            f"handrail (this one reads version {FORMAT_VERSION}); upgrade handrail to load it"
        )
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path / CONFIG_FILE}: not a checkpoint's config (format_version {version!r}, this "
            f"handrail reads version {FORMAT_VERSION}); the file is damaged or from elsewhere"
        )
    return meta


def _differences(saved: Mapping[str, Any], current: Mapping[str, Any], prefix: str) -> list[str]:
    out = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if a != b:
            out.append(f"{prefix}{key}: checkpoint {a!r} vs current {b!r}")
    return out


def load_checkpoint(directory: str | os.PathLike[str], sac: SAC) -> tuple[SACState, dict]:
    """Restore the learner state saved for the same config and specs as ``sac``.

    Returns:
        (state, extra) where ``extra`` is the dict given to :func:`save_checkpoint`.

    Raises:
        ValueError: when the checkpoint's config or specs differ (each differing field named).
    """
    path = Path(directory)
    meta = read_meta(path)
    # Fields added since the checkpoint was written take their defaults (which keep the
    # behaviour it was trained with), so older checkpoints keep loading.
    saved_config = SACConfig.from_json(meta["config"]).to_json()
    diffs = _differences(saved_config, sac.config.to_json(), "config.")
    diffs += _differences(meta["obs_spec"], sac.obs_spec.to_json(), "obs_spec.")
    diffs += _differences(meta["action_spec"], sac.action_spec.to_json(), "action_spec.")
    diffs += _differences({"pairs": meta.get("pairs", [])},
                          {"pairs": [list(p) for p in sac.pairs]}, "")  # fmt: skip
    if diffs:
        raise ValueError(
            f"checkpoint {path} was saved with a different learner config; differing fields:\n  "
            + "\n  ".join(diffs)
            + "\nBuild the SAC from the checkpoint's config.json (or load_policy) to use it."
        )
    template = jax.device_get(sac.init(jax.random.PRNGKey(0)))
    try:
        raw = flax.serialization.msgpack_restore((path / STATE_FILE).read_bytes())
        if isinstance(raw, dict) and "obs_norm" not in raw:  # saved before normalisation
            raw["obs_norm"] = flax.serialization.to_state_dict(template.obs_norm)
        state = flax.serialization.from_state_dict(template, raw)
    except Exception as exc:  # msgpack and flax raise several types for a damaged file
        raise CheckpointError(
            f"{path / STATE_FILE} is damaged or incomplete ({exc}); it cannot be loaded"
        ) from None
    _check_norm(path, meta, state, sac.input_spec)
    return jax.tree_util.tree_map(jax.numpy.asarray, state), meta["extra"]


def _check_norm(path: Path, meta: dict[str, Any], state: SACState, spec: ObsSpec) -> None:
    """The saved normalisation is one of ``spec``'s keys and of its length."""
    keys = sorted(set(meta.get("obs_norm", {})) - set(spec.keys))
    shapes = {name: np.shape(value) for name, value in state.obs_norm.items()}
    if keys or any(shape != (spec.dim,) for shape in shapes.values()):
        raise CheckpointError(
            f"{path}: the checkpoint's observation normalisation (keys "
            f"{sorted(meta.get('obs_norm', {}))}, {shapes.get('shift')} columns) does not match "
            f"its observation keys {list(spec.keys)} ({spec.dim} columns); the checkpoint is "
            "damaged or was assembled from two runs"
        )


def checkpoint_folder(path: str | os.PathLike[str], which: str = "best") -> Path:
    """The SAC checkpoint folder of a run folder (``checkpoints/<which>``), of a trainer save
    (its ``learner`` folder), or ``path`` itself; the file check is the caller's."""
    ckpt = Path(path)
    if (ckpt / "checkpoints").is_dir():
        ckpt = ckpt / "checkpoints" / which
    if (ckpt / "learner" / STATE_FILE).is_file():  # a Trainer.save_into folder
        ckpt = ckpt / "learner"
    return ckpt


def sac_from_checkpoint(directory: str | os.PathLike[str]) -> SAC:
    """A SAC built from a checkpoint's own config and specs."""
    meta = read_meta(directory)
    return SAC(
        ObsSpec.from_json(meta["obs_spec"]),
        ActionSpec.from_json(meta["action_spec"]),
        SACConfig.from_json(meta["config"]),
        pairs=tuple((int(i), int(j)) for i, j in meta.get("pairs", ())),
    )


class StaticParams:
    """A parameter source that always returns the same params (a loaded checkpoint)."""

    def __init__(self, params: Any) -> None:
        self.params = params

    def latest(self) -> tuple[int, Any]:
        """Version 0 and the params."""
        return 0, self.params


def load_policy(
    path: str | os.PathLike[str], deterministic: bool = True, seed: int = 0
) -> Callable[[Mapping[str, np.ndarray] | np.ndarray], np.ndarray]:
    """A ready inference function ``policy(obs) -> env action`` from a checkpoint folder.

    ``obs`` is the env's observation (dict or array; one or a batch). It is the same
    ``make_policy`` the actor and evaluation use; stochastic policies draw their noise from
    keys derived from ``seed``.
    """
    from handrail.learners.actor import LearnedPolicy

    sac = sac_from_checkpoint(path)
    state, _ = load_checkpoint(path, sac)
    make = functools.partial(sac.make_policy, deterministic=deterministic)
    return LearnedPolicy(make, StaticParams(sac.policy_params(state)), sac.obs_spec, sac.action_spec,
                         seed=seed)  # fmt: skip
