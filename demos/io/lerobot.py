"""LeRobotDataset v3 (``codebase_version`` "v3.0") import and export.

Layout written and read (a folder):

- ``meta/info.json``: ``codebase_version``, ``fps``, ``robot_type``, totals, ``chunks_size``,
  ``data_path`` (``data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet``), ``splits`` and
  ``features`` (name -> ``dtype``, ``shape``, ``names``);
- ``meta/tasks.parquet``: ``task`` -> ``task_index``;
- ``meta/episodes/chunk-XXX/file-XXX.parquet``: one row per episode (``episode_index``, ``tasks``,
  ``length``, ``dataset_from_index``/``dataset_to_index``, ``data/chunk_index``/``file_index``, ...);
- ``data/chunk-XXX/file-XXX.parquet``: one row per frame with the features plus
  ``episode_index``, ``frame_index``, ``index``, ``timestamp`` (= frame_index / fps), ``task_index``;
- ``meta/stats.json``: min/max/mean/std/count per numeric feature.

State observations map to ``observation.state`` (``proprio``) and ``observation.<key>``; images
(uint8 HxWxC, C in 1, 3, 4) become per-frame ``image`` features (PNG bytes, lossless). Episode final observations
have no place in LeRobot and are dropped (the last frame's observation stands in on import);
``video`` features of foreign datasets are not decoded and are dropped. The handrail field spec is
kept in ``info.json["handrail"]`` so that a round trip restores names, shapes and units.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos import FieldSpec
from handrail.demos.episodes import ConversionReport, Episode, StoreMeta, import_into_store
from handrail.demos.io._lerobot_layout import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_PATH,
    EPISODES_PATH,
    INDEX_FEATURES,
    STEP_FEATURES,
    feature_name,
    pyarrow_modules,
    to_numpy,
)
from handrail.demos.io._lerobot_write import export_lerobot, write_lerobot

__all__ = [
    "CHUNKS_SIZE",
    "CODEBASE_VERSION",
    "DATA_PATH",
    "EPISODES_PATH",
    "INDEX_FEATURES",
    "export_lerobot",
    "feature_name",
    "import_lerobot",
    "read_lerobot",
    "write_lerobot",
]

# ----------------------------------------------------------------------------- reading


def _obs_mapping(info: dict, report: ConversionReport) -> dict[str, FieldSpec]:
    """LeRobot feature -> handrail field, from the stored handrail spec or by naming rule."""
    stored = (info.get("handrail") or {}).get("fields")
    if stored:
        return {
            f["feature"]: FieldSpec(f["name"], f["dtype"], tuple(f["shape"]), f["units"])
            for f in stored
        }
    out = {}
    for name, ft in info["features"].items():
        if not name.startswith("observation."):
            continue
        if ft["dtype"] in ("video", "string"):
            report.drop(f"{name} ({ft['dtype']} features are not imported)")
            continue
        key = name.removeprefix("observation.images.").removeprefix("observation.")
        key = key.replace(".", "_")
        shape = tuple(int(d) for d in ft["shape"])
        names = ft.get("names") or [""]
        if ft["dtype"] == "image" and str(names[0]).startswith("channel"):
            shape = (shape[1], shape[2], shape[0])  # stored as CHW, decoded as HWC
        dtype = "uint8" if ft["dtype"] == "image" else ft["dtype"]
        out[name] = FieldSpec(key, dtype, shape)
    return out


def _read_tasks(pq: Any, root: Path) -> dict[int, str]:
    path = root / "meta" / "tasks.parquet"
    if not path.is_file():
        return {}
    table = pq.read_table(path)
    names = table.column_names
    col = next((c for c in ("task", "__index_level_0__") if c in names), None)
    if col is None:
        pandas_meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
        col = (pandas_meta.get("index_columns") or [None])[0]
    if col is None or col not in names:
        return {}
    return dict(
        zip(table.column("task_index").to_pylist(), table.column(col).to_pylist(), strict=True)
    )


def _read_episode_rows(pq: Any, root: Path) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for path in sorted((root / "meta" / "episodes").glob("*/*.parquet")):
        table = pq.read_table(path)
        keep = [c for c in table.column_names if not c.startswith("stats/")]
        for row in table.select(keep).to_pylist():
            rows[int(row["episode_index"])] = row
    return rows


def _optional(table: Any, name: str, feats: dict, dtype: Any) -> np.ndarray | None:
    if name not in table.column_names:
        return None
    return to_numpy(table.column(name), feats.get(name, {"dtype": "x"})).astype(dtype)


def _episode_obs(
    table: Any, feats: dict[str, Any], mapping: dict[str, FieldSpec]
) -> dict[str, np.ndarray]:
    """The episode's observation columns, reshaped and cast to their handrail fields."""
    steps = table.num_rows
    obs = {}
    for feature, spec in mapping.items():
        arr = to_numpy(table.column(feature), feats[feature])
        obs[spec.name] = arr.reshape(steps, *spec.shape).astype(spec.dtype)
    return obs


def _episode_flags(
    table: Any, feats: dict[str, Any], report: ConversionReport
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rewards, terminated and truncated flags; missing columns get defaults and a note."""
    steps = table.num_rows
    reward = _optional(table, "next.reward", feats, np.float32)
    terminated = _optional(table, "next.done", feats, bool)
    truncated = _optional(table, "next.truncated", feats, bool)
    if reward is None:
        report.note("no next.reward: rewards stored as 0")
    if terminated is None:
        report.note("no next.done: no step is marked terminated")
        terminated = np.zeros(steps, bool)
    if truncated is None:
        truncated = np.zeros(steps, bool)
        truncated[-1] = not terminated[-1]
    return (np.zeros(steps, np.float32) if reward is None else reward), terminated, truncated


def _episode_success(
    table: Any, feats: dict[str, Any], row: dict[str, Any], report: ConversionReport
) -> bool:
    """The episode's success flag: from its episodes row, else from any ``next.success``."""
    success = row.get("success")
    if success is None:
        done_ok = _optional(table, "next.success", feats, bool)
        report.note("no per-episode success: taken from next.success, else False")
        success = bool(done_ok is not None and done_ok.any())
    return bool(success)


def _episode(table: Any, ctx: dict[str, Any], report: ConversionReport) -> Episode:
    """One episode's frames (sorted by ``frame_index``) as a handrail Episode."""
    feats, meta = ctx["features"], ctx["meta"]
    steps = table.num_rows
    obs = _episode_obs(table, feats, ctx["mapping"])
    action = to_numpy(table.column("action"), feats["action"]).astype(np.float32)
    reward, terminated, truncated = _episode_flags(table, feats, report)
    timestamp = _optional(table, "handrail.timestamp", feats, np.float64)
    if timestamp is None:
        timestamp = to_numpy(table.column("timestamp"), {"dtype": "x"}).astype(np.float64)
    row = ctx["episodes"].get(int(table.column("episode_index")[0].as_py()), {})
    success = _episode_success(table, feats, row, report)
    seed = row.get("seed")
    task_index = int(table.column("task_index")[0].as_py())
    interv = _optional(table, "intervention", feats, np.int8)
    if interv is None:
        report.note("no intervention column: every step stored as chosen by the policy")
    return Episode(
        obs=obs,
        final_obs={k: v[-1].copy() for k, v in obs.items()},
        action=action.reshape(steps, meta.action_dim),
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        policy_action=_optional(table, "policy_action", feats, np.float32),
        intervention=interv,
        timestamp=timestamp,
        success=success,
        seed=None if seed is None or int(seed) < 0 else int(seed),
        task=ctx["tasks"].get(task_index, meta.task),
    )


def _read_info(root: Path) -> dict[str, Any]:
    """``meta/info.json``, checked to be a v3 dataset with an ``action`` feature."""
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        raise ValueError(f"{root} has no meta/info.json: not a LeRobotDataset folder")
    info = json.loads(info_path.read_text())
    version = info.get("codebase_version")
    if version != CODEBASE_VERSION:
        raise ValueError(
            f"{root} is LeRobotDataset {version}; only {CODEBASE_VERSION} is supported "
            "(convert older datasets with LeRobot's v3 converter first)"
        )
    if "action" not in info["features"]:
        raise ValueError(f"{root}: info.json has no 'action' feature")
    return info


def _store_meta(
    info: dict[str, Any], mapping: dict[str, FieldSpec], tasks: dict[int, str], task: str | None
) -> StoreMeta:
    """The handrail store meta: the stored handrail spec where there is one, else derived."""
    hmeta = info.get("handrail") or {}
    return StoreMeta(
        kind=hmeta.get("kind", "demo"),
        task=task or hmeta.get("task") or next(iter(tasks.values()), "unknown"),
        obs_fields=tuple(mapping.values()),
        action_dim=int(np.prod(info["features"]["action"]["shape"])),
        control_dt_s=float(hmeta.get("control_dt_s") or 1.0 / float(info["fps"])),
        robot=info.get("robot_type") or "unknown",
    )


def _iter_episodes(
    pa: Any, pq: Any, files: list[Path], ctx: dict[str, Any], report: ConversionReport
) -> Iterator[Episode]:
    """Episodes in file order, each file split by ``episode_index`` in order of appearance."""
    for path in files:
        table = pq.read_table(path)
        index = table.column("episode_index").to_numpy()
        for e in dict.fromkeys(index.tolist()):
            rows = table.filter(pa.array(index == e))
            rows = rows.sort_by("frame_index")
            yield _episode(rows, ctx, report)


def read_lerobot(
    root: str | Path, *, task: str | None = None, report: ConversionReport | None = None
) -> tuple[StoreMeta, Iterator[Episode]]:
    """Reads a LeRobotDataset v3 folder; returns its meta and a generator over episodes."""
    pa, pq = pyarrow_modules()
    report = report if report is not None else ConversionReport()
    root = Path(root)
    info = _read_info(root)
    feats = info["features"]
    mapping = _obs_mapping(info, report)
    known = {*mapping, *STEP_FEATURES, *INDEX_FEATURES, "next.success"}
    for name in feats:
        if name not in known:
            report.drop(f"{name} (no handrail field for it)")
    report.drop("final_obs (LeRobot has none; each episode's last observation stands in)")
    tasks = _read_tasks(pq, root)
    meta = _store_meta(info, mapping, tasks, task)
    ctx = {
        "features": feats,
        "mapping": mapping,
        "meta": meta,
        "tasks": tasks,
        "episodes": _read_episode_rows(pq, root),
    }
    files = sorted((root / "data").glob("*/*.parquet"))
    if not files:
        raise ValueError(f"{root} has no data/chunk-*/file-*.parquet files")
    return meta, _iter_episodes(pa, pq, files, ctx, report)


def import_lerobot(
    src: str | Path, out: str | Path, *, task: str | None = None, overwrite: bool = False
) -> ConversionReport:
    """Imports a LeRobotDataset v3 folder into a new handrail store at ``out``."""
    report = ConversionReport()
    meta, eps = read_lerobot(src, task=task, report=report)

    return import_into_store(out, meta, eps, report, overwrite=overwrite)
