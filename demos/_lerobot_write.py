"""LeRobotDataset v3 writer: the export half of :mod:`handrail.demos.io_lerobot`."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos._lerobot_layout import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_PATH,
    EPISODES_PATH,
    INDEX_FEATURES,
    STEP_FEATURES,
    feature_name,
    is_image,
    pyarrow_modules,
    to_numpy,
)
from handrail.demos.episodes import (
    ConversionReport,
    Episode,
    StoreMeta,
    export_store,
    require,
)


def _features(meta: StoreMeta) -> dict[str, dict[str, Any]]:
    feats: dict[str, dict[str, Any]] = {}
    for spec in meta.obs_fields:
        if is_image(spec):
            shape, names = list(spec.shape), ["height", "width", "channels"]
            feats[feature_name(spec)] = {"dtype": "image", "shape": shape, "names": names}
        else:
            size = int(np.prod(spec.shape, dtype=np.int64))
            feats[feature_name(spec)] = {"dtype": str(spec.dtype), "shape": [size], "names": None}
    for name, (dtype, _) in STEP_FEATURES.items():
        dim = meta.action_dim if name in ("action", "policy_action") else 1
        feats[name] = {"dtype": dtype, "shape": [dim], "names": None}
    return {**feats, **INDEX_FEATURES}


def _png(frames: np.ndarray) -> list[bytes]:
    image = require("PIL.Image", "LeRobot image features")
    out = []
    for frame in frames:
        buf = io.BytesIO()
        image.fromarray(frame).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def _column(pa: Any, arr: np.ndarray, ft: dict[str, Any]) -> Any:
    if ft["dtype"] == "image":
        return pa.StructArray.from_arrays(
            [pa.array(_png(arr), pa.binary()), pa.array([None] * len(arr), pa.string())],
            names=["bytes", "path"],
        )
    arr = np.ascontiguousarray(arr, dtype=ft["dtype"]).reshape(len(arr), -1)
    if ft["shape"] == [1]:
        return pa.array(arr[:, 0])
    return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), int(arr.shape[1]))


def _frames_table(pa: Any, ep: Episode, meta: StoreMeta, feats: dict, ids: tuple) -> Any:
    episode_index, start, task_index = ids
    steps = ep.num_steps
    dt = meta.control_dt_s
    cols: dict[str, Any] = {}
    for spec in meta.obs_fields:
        name = feature_name(spec)
        cols[name] = _column(pa, ep.obs[spec.name], feats[name])
    defaults = {
        "policy_action": ep.action,
        "intervention": np.zeros(steps),
        "handrail.timestamp": np.arange(steps) * dt,
    }
    for name, (_, attr) in STEP_FEATURES.items():
        value = getattr(ep, attr)
        cols[name] = _column(pa, defaults[name] if value is None else value, feats[name])
    frame = np.arange(steps, dtype=np.int64)
    cols["timestamp"] = pa.array((frame * dt).astype(np.float32))
    cols["frame_index"] = pa.array(frame)
    cols["episode_index"] = pa.array(np.full(steps, episode_index, np.int64))
    cols["index"] = pa.array(frame + start)
    cols["task_index"] = pa.array(np.full(steps, task_index, np.int64))
    return pa.table(cols)


def _stats(pa: Any, tables: list[Any], feats: dict) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    for name, ft in feats.items():
        if ft["dtype"] in ("image", "bool", "string"):
            continue
        vals = np.concatenate([to_numpy(t.column(name), ft) for t in tables]).astype(np.float64)
        vals = vals.reshape(len(vals), -1)
        stats[name] = {
            "min": vals.min(0).tolist(),
            "max": vals.max(0).tolist(),
            "mean": vals.mean(0).tolist(),
            "std": vals.std(0).tolist(),
            "count": [len(vals)],
        }
    return stats


def _write_parquet(pq: Any, table: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def _tasks_table(pa: Any, tasks: list[str]) -> Any:
    pandas_meta = {  # lets pandas.read_parquet restore `task` as the index, as LeRobot expects
        "index_columns": ["task"],
        "column_indexes": [],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
    }
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": tasks})
    return table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})


def write_lerobot(
    root: str | Path,
    meta: StoreMeta,
    episodes: Iterable[Episode],
    *,
    frames_per_file: int = 100_000,
    overwrite: bool = False,
) -> ConversionReport:
    """Writes ``episodes`` as a LeRobotDataset v3 folder at ``root``."""
    pa, pq = pyarrow_modules()
    root = Path(root)
    if root.exists() and any(root.iterdir()) and not overwrite:
        raise FileExistsError(f"{root} is not empty; pass overwrite=True (--overwrite)")
    feats = _features(meta)
    report = ConversionReport()
    report.drop("final_obs (LeRobot keeps no observation after an episode's last step)")
    tasks: list[str] = []
    pending: list[Any] = []
    written: list[Any] = []
    ep_rows: list[dict[str, Any]] = []
    file_no = 0

    def flush() -> None:
        nonlocal file_no, pending
        if pending:
            table = pa.concat_tables(pending)
            chunk, fidx = divmod(file_no, CHUNKS_SIZE)
            _write_parquet(pq, table, root / DATA_PATH.format(chunk_index=chunk, file_index=fidx))
            written.append(table)
            file_no, pending = file_no + 1, []

    for i, ep in enumerate(episodes):
        task = ep.task or meta.task
        if task not in tasks:
            tasks.append(task)
        if pending and sum(t.num_rows for t in pending) + ep.num_steps > frames_per_file:
            flush()
        table = _frames_table(pa, ep, meta, feats, (i, report.steps, tasks.index(task)))
        pending.append(table)
        chunk, fidx = divmod(file_no, CHUNKS_SIZE)
        ep_rows.append(
            {
                "episode_index": i,
                "tasks": [task],
                "length": ep.num_steps,
                "data/chunk_index": chunk,
                "data/file_index": fidx,
                "dataset_from_index": report.steps,
                "dataset_to_index": report.steps + ep.num_steps,
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
                "success": bool(ep.success),
                "seed": -1 if ep.seed is None else int(ep.seed),
            }
        )
        report.episodes += 1
        report.steps += ep.num_steps
    flush()
    _write_parquet(
        pq, pa.Table.from_pylist(ep_rows), root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    )
    _write_parquet(pq, _tasks_table(pa, tasks), root / "meta" / "tasks.parquet")
    fps = 1.0 / meta.control_dt_s
    if abs(fps - round(fps)) > 1e-6:
        report.note(f"fps {fps:.4g} rounded to {round(fps)} in info.json (exact period kept)")
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": meta.robot,
        "total_episodes": report.episodes,
        "total_frames": report.steps,
        "total_tasks": len(tasks),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 500,
        "fps": round(fps),
        "splits": {"train": f"0:{report.episodes}"},
        "data_path": DATA_PATH,
        "video_path": None,
        "features": feats,
        "handrail": _handrail_meta(meta),
    }
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    stats = _stats(pa, written, feats) if written else {}
    (root / "meta" / "stats.json").write_text(json.dumps(stats))
    return report


def _handrail_meta(meta: StoreMeta) -> dict[str, Any]:
    return {
        "kind": meta.kind,
        "task": meta.task,
        "control_dt_s": meta.control_dt_s,
        "fields": [
            {
                "name": f.name,
                "dtype": str(f.dtype),
                "shape": list(f.shape),
                "units": f.units,
                "feature": feature_name(f),
            }
            for f in meta.obs_fields
        ],
    }


def export_lerobot(
    store: str | Path, out: str | Path, *, overwrite: bool = False
) -> ConversionReport:
    """Exports every episode of a handrail store as a LeRobotDataset v3 folder."""
    return export_store(write_lerobot, store, out, overwrite=overwrite)
