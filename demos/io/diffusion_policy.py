"""Import of diffusion_policy's zarr ReplayBuffer layout.

The layout: a Zarr group (diffusion_policy wrote Zarr format 2, as a directory or a ``.zip``)
with ``data/<key>`` arrays concatenated over episodes along axis 0 (``action`` plus observation
keys such as ``state``, ``img``, ``keypoint``) and ``meta/episode_ends`` (int64, the exclusive end
row of each episode). zarr-python 3 reads format 2 directly.

The format stores no rewards, done flags, success flags, seeds, control period or final
observations; the import says what it assumed for each.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos import FieldSpec
from handrail.demos.episodes import ConversionReport, Episode, StoreMeta, import_into_store

DEFAULT_CONTROL_DT_S = 0.1
"""diffusion_policy's Push-T and real-robot data run at 10 Hz."""


def _open_group(path: Path) -> Any:
    import zarr

    if path.suffix == ".zip":
        store = zarr.storage.ZipStore(path, mode="r")
        return zarr.open_group(store, mode="r")
    return zarr.open_group(str(path), mode="r")


def _episode_ends(root: Any, path: Path, num_rows: int) -> np.ndarray:
    try:
        ends = np.asarray(root["meta"]["episode_ends"][:], dtype=np.int64).reshape(-1)
    except KeyError as exc:
        raise ValueError(f"{path} has no meta/episode_ends: not a diffusion_policy buffer") from exc
    if len(ends) == 0:
        raise ValueError(f"{path}: meta/episode_ends is empty (no episodes)")
    starts = np.concatenate([[0], ends[:-1]])
    if np.any(ends <= starts) or ends[-1] > num_rows:
        raise ValueError(
            f"{path}: meta/episode_ends must increase strictly and end at most at the {num_rows} "
            f"data rows; got {ends[:10].tolist()}..."
        )
    return ends


def _read(arr: Any, name: str, start: int, stop: int) -> np.ndarray:
    try:
        return np.asarray(arr[start:stop])
    except Exception as exc:  # an unknown or failing codec (e.g. imagecodecs' JPEG XL)
        raise ValueError(
            f"cannot decode data/{name} rows {start}:{stop} ({type(exc).__name__}: {exc}); if it "
            "uses an image codec from imagecodecs, `pip install imagecodecs` and register it"
        ) from exc


def _open_data(path: Path) -> tuple[Any, dict[str, Any]]:
    """The root group and its ``data/`` arrays by name; checks ``action`` is an (N, A) array."""
    try:
        root = _open_group(path)
        data = root["data"]
    except Exception as exc:
        raise ValueError(f"{path} is not a Zarr group with a data/ group: {exc}") from exc
    arrays = {name: arr for name, arr in data.arrays()}
    if "action" not in arrays:
        raise ValueError(f"{path}: data/ has no 'action' array (has {sorted(arrays)})")
    action = arrays["action"]
    if action.ndim != 2:
        raise ValueError(f"{path}: data/action must be (N, A), got shape {action.shape}")
    return root, arrays


def _note_assumptions(
    report: ConversionReport, control_dt_s: float | None, mark_successful: bool
) -> float:
    """Notes what the buffer does not store; returns the control period to use."""
    if control_dt_s is None:
        control_dt_s = DEFAULT_CONTROL_DT_S
        report.note(f"no control period stored: {control_dt_s} s assumed (--control-dt-s)")
    report.note("no rewards or done flags stored: rewards 0, each episode truncated at its end")
    report.note("no final observations stored: each episode's last observation stands in")
    if not mark_successful:
        report.note("no success flags stored: episodes marked unsuccessful (--mark-successful)")
    return control_dt_s


def _iter_episodes(
    arrays: dict[str, Any], ends: np.ndarray, control_dt_s: float, success: bool, task: str
) -> Iterator[Episode]:
    """Episodes cut from the concatenated ``data/`` arrays at ``ends``."""
    action = arrays["action"]
    obs_arrays = {k: v for k, v in arrays.items() if k != "action"}
    start = 0
    for end in ends.tolist():
        steps = end - start
        obs = {k: _read(v, k, start, end) for k, v in obs_arrays.items()}
        truncated = np.zeros(steps, bool)
        truncated[-1] = True
        yield Episode(
            obs=obs,
            final_obs={k: v[-1].copy() for k, v in obs.items()},
            action=_read(action, "action", start, end).astype(np.float32),
            reward=np.zeros(steps, np.float32),
            terminated=np.zeros(steps, bool),
            truncated=truncated,
            timestamp=np.arange(steps, dtype=np.float64) * float(control_dt_s),
            success=success,
            task=task,
        )
        start = end


def read_diffusion_policy(
    path: str | Path,
    *,
    task: str = "unknown",
    control_dt_s: float | None = None,
    mark_successful: bool = False,
    report: ConversionReport | None = None,
) -> tuple[StoreMeta, Iterator[Episode]]:
    """Opens a diffusion_policy ReplayBuffer; returns its meta and a generator over episodes.

    Args:
        path: The ``.zarr`` folder (or ``.zarr.zip``).
        task: Task name to record; the buffer does not store one.
        control_dt_s: Control period; the buffer does not store one (default 0.1 s).
        mark_successful: Mark every episode successful (the buffer has no success flags).
        report: Collects what was assumed.
    """
    report = report if report is not None else ConversionReport()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    root, arrays = _open_data(path)
    action = arrays["action"]
    ends = _episode_ends(root, path, int(action.shape[0]))
    fields = tuple(
        FieldSpec(name=k, dtype=str(v.dtype), shape=tuple(int(d) for d in v.shape[1:]))
        for k, v in arrays.items()
        if k != "action"
    )
    dt_s = _note_assumptions(report, control_dt_s, mark_successful)
    meta = StoreMeta(
        kind="demo",
        task=task,
        obs_fields=fields,
        action_dim=int(action.shape[1]),
        control_dt_s=float(dt_s),
        robot="unknown",
    )
    return meta, _iter_episodes(arrays, ends, dt_s, mark_successful, task)


def import_diffusion_policy(
    src: str | Path,
    out: str | Path,
    *,
    task: str = "unknown",
    control_dt_s: float | None = None,
    mark_successful: bool = False,
    overwrite: bool = False,
) -> ConversionReport:
    """Imports a diffusion_policy zarr ReplayBuffer into a new handrail store at ``out``."""
    report = ConversionReport()
    meta, eps = read_diffusion_policy(
        src,
        task=task,
        control_dt_s=control_dt_s,
        mark_successful=mark_successful,
        report=report,
    )

    return import_into_store(out, meta, eps, report, overwrite=overwrite)
