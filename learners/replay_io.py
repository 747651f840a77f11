"""Saving and loading a replay: the live rows of every segment and the counters as NumPy arrays.

The arrays go into one ``np.savez`` file next to a checkpoint; the layout is saved with them and
compared on load, so a replay is never read back into a learner built differently.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from handrail.learners.checkpoint import CheckpointError
from handrail.learners.replay import ReplayLayout, ReplayState, empty_columns

_COUNTERS = ("layout", "pos", "size", "pending")
"""The arrays :func:`to_arrays` always writes besides the segments' rows."""


def to_arrays(layout: ReplayLayout, state: ReplayState) -> dict[str, np.ndarray]:
    """The live rows of every segment and the counters, as NumPy arrays (for ``np.savez``)."""
    host = jax.device_get(state)
    out: dict[str, np.ndarray] = {
        "layout": np.asarray(json.dumps(layout.to_json())),
        "pos": host.pos,
        "size": host.size,
        "pending": host.pending,
    }
    for s, (name, _) in enumerate(layout.segments):
        live = slice(layout.offset(s), layout.offset(s) + int(host.size[s]))
        for field, arr in (*host.data.items(), ("reward", host.reward),
                           ("terminated", host.terminated), ("next", host.next)):  # fmt: skip
            out[f"{name}/{field}"] = arr[live]
    return out


def check_layout(layout: ReplayLayout, arrays: Mapping[str, np.ndarray]) -> None:
    """ValueError if ``arrays`` were saved from a replay of another layout."""
    saved = json.loads(str(arrays["layout"]))
    if saved != json.loads(json.dumps(layout.to_json())):
        raise ValueError(
            f"replay was saved with layout {saved} but this learner has {layout.to_json()}; "
            "resume with the run's own config"
        )


def from_arrays(layout: ReplayLayout, arrays: Mapping[str, np.ndarray]) -> ReplayState:
    """Inverse of :func:`to_arrays`; ValueError if they were saved with another layout."""
    check_layout(layout, arrays)
    # Each column is built on the host as init() builds it, filled with the live rows and
    # handed to the device before the next: a replay of camera frames is GBs, and copies of
    # all of it at once (init on the device, a host copy of that, then a device copy) took 3x
    # its size (and the learner's empty replay 1x more) and got a pixel run's resume killed.
    empty = empty_columns(layout)

    def column(field: str) -> jax.Array:
        shape, dtype, fill = empty[field]
        host = np.full((layout.total, *shape), fill, dtype) if fill else np.zeros(
            (layout.total, *shape), dtype)  # fmt: skip
        for s, (name, _) in enumerate(layout.segments):
            start = layout.offset(s)
            host[start : start + int(arrays["size"][s])] = arrays[f"{name}/{field}"]
        return jax.device_put(host)  # jnp.asarray kept a second copy of it: 2x, not 1x

    return ReplayState(
        data={f.name: column(f.name) for f in layout.fields},
        reward=column("reward"),
        terminated=column("terminated"),
        next=column("next"),
        pos=jnp.asarray(arrays["pos"], jnp.int32),
        size=jnp.asarray(arrays["size"], jnp.int32),
        pending=jnp.asarray(arrays["pending"], jnp.int32),
    )


def load_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of a saved replay file (``np.savez``), read into memory.

    Raises:
        CheckpointError: the file is missing, truncated or damaged, or not a saved replay (the
            message names the file).
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path} is damaged or incomplete ({exc})") from None
    missing = [name for name in _COUNTERS if name not in arrays]
    if missing:
        raise CheckpointError(f"{path} is not a saved replay: it has no {', '.join(missing)}")
    return arrays
