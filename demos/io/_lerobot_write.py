"""LeRobotDataset v3 writer: the export half of :mod:`handrail.demos.io.lerobot`."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos.episodes import (
    ConversionReport,
    Episode,
    StoreMeta,
    export_store,
    require,
)
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


def _features(meta: StoreMeta) -> dict[str, dict[str, Any]]:
    feats: dict[str, dict[str, Any]] = {}
    for spec in meta.obs_fields:
        if spec.is_image:
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
        grey = frame.shape[-1] == 1  # PIL reads a 2-D uint8 array as grey ("L")
        image.fromarray(frame[..., 0] if grey else frame).save(buf, format="PNG")
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


class _DataFiles:
    """Collects frame tables and writes them as numbered ``data/`` parquet files."""

    def __init__(self, pa: Any, pq: Any, root: Path, frames_per_file: int) -> None:
        self.pa, self.pq, self.root, self.frames_per_file = pa, pq, root, frames_per_file
        self.pending: list[Any] = []
        self.written: list[Any] = []
        self.file_no = 0

    def location(self) -> tuple[int, int]:
        """``(chunk_index, file_index)`` of the file being filled."""
        return divmod(self.file_no, CHUNKS_SIZE)

    def add(self, table: Any) -> None:
        """Queues an episode's frames for the file being filled."""
        self.pending.append(table)

    def make_room(self, num_steps: int) -> None:
        """Starts a new file if ``num_steps`` more frames would overfill the current one."""
        if (
            self.pending
            and sum(t.num_rows for t in self.pending) + num_steps > self.frames_per_file
        ):
            self.flush()

    def flush(self) -> None:
        """Writes the queued frames as the next data file (nothing if none are queued)."""
        if self.pending:
            table = self.pa.concat_tables(self.pending)
            chunk, fidx = self.location()
            path = self.root / DATA_PATH.format(chunk_index=chunk, file_index=fidx)
            _write_parquet(self.pq, table, path)
            self.written.append(table)
            self.file_no, self.pending = self.file_no + 1, []


def _episode_row(
    i: int, task: str, ep: Episode, start: int, location: tuple[int, int]
) -> dict[str, Any]:
    """The ``meta/episodes`` row of episode ``i``, whose first frame is global index ``start``."""
    chunk, fidx = location
    return {
        "episode_index": i,
        "tasks": [task],
        "length": ep.num_steps,
        "data/chunk_index": chunk,
        "data/file_index": fidx,
        "dataset_from_index": start,
        "dataset_to_index": start + ep.num_steps,
        "meta/episodes/chunk_index": 0,
        "meta/episodes/file_index": 0,
        "success": bool(ep.success),
        "seed": -1 if ep.seed is None else int(ep.seed),
    }


def _info(
    meta: StoreMeta, feats: dict[str, Any], report: ConversionReport, num_tasks: int
) -> dict[str, Any]:
    """The ``meta/info.json`` document; notes when the fps had to be rounded."""
    fps = 1.0 / meta.control_dt_s
    if abs(fps - round(fps)) > 1e-6:
        report.note(f"fps {fps:.4g} rounded to {round(fps)} in info.json (exact period kept)")
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": meta.robot,
        "total_episodes": report.episodes,
        "total_frames": report.steps,
        "total_tasks": num_tasks,
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
    files = _DataFiles(pa, pq, root, frames_per_file)
    tasks: list[str] = []
    ep_rows: list[dict[str, Any]] = []
    for i, ep in enumerate(episodes):
        task = ep.task or meta.task
        if task not in tasks:
            tasks.append(task)
        files.make_room(ep.num_steps)
        files.add(_frames_table(pa, ep, meta, feats, (i, report.steps, tasks.index(task))))
        ep_rows.append(_episode_row(i, task, ep, report.steps, files.location()))
        report.episodes += 1
        report.steps += ep.num_steps
    files.flush()
    episodes_path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    _write_parquet(pq, pa.Table.from_pylist(ep_rows), episodes_path)
    _write_parquet(pq, _tasks_table(pa, tasks), root / "meta" / "tasks.parquet")
    info = _info(meta, feats, report, len(tasks))
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    stats = _stats(pa, files.written, feats) if files.written else {}
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
    return export_store(
        write_lerobot, store, out, overwrite=overwrite, folder_marker="meta/info.json"
    )
