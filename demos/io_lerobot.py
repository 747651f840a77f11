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

State observations map to ``observation.state`` (``proprio``) and ``observation.<key>``; uint8
HxWx3 images become per-frame ``image`` features (PNG bytes, lossless). Episode final observations
have no place in LeRobot and are dropped (the last frame's observation stands in on import);
``video`` features of foreign datasets are not decoded and are dropped. The handrail field spec is
kept in ``info.json["handrail"]`` so that a round trip restores names, shapes and units.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos import FieldSpec, open_store
from handrail.demos.episodes import (
    ConversionReport,
    Episode,
    StoreMeta,
    import_into_store,
    iter_store_episodes,
    require,
    store_meta,
)

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
"""Files per chunk folder (LeRobot's default)."""
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
INDEX_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
_STEP_FEATURES = {  # handrail per-step arrays besides observations: feature -> (dtype, attr)
    "action": ("float32", "action"),
    "policy_action": ("float32", "policy_action"),
    "next.reward": ("float32", "reward"),
    "next.done": ("bool", "terminated"),
    "next.truncated": ("bool", "truncated"),
    "intervention": ("int64", "intervention"),
    "handrail.timestamp": ("float64", "timestamp"),
}


def _pa() -> Any:
    require("pyarrow.parquet", "LeRobotDataset import/export")
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa, pq


def _is_image(spec: FieldSpec) -> bool:
    return str(spec.dtype) == "uint8" and len(spec.shape) == 3 and spec.shape[-1] == 3


def feature_name(spec: FieldSpec) -> str:
    """The LeRobot feature an observation field is exported as."""
    if _is_image(spec):
        return f"observation.images.{spec.name}"
    return "observation.state" if spec.name == "proprio" else f"observation.{spec.name}"


def _features(meta: StoreMeta) -> dict[str, dict[str, Any]]:
    feats: dict[str, dict[str, Any]] = {}
    for spec in meta.obs_fields:
        if _is_image(spec):
            shape, names = list(spec.shape), ["height", "width", "channels"]
            feats[feature_name(spec)] = {"dtype": "image", "shape": shape, "names": names}
        else:
            size = int(np.prod(spec.shape, dtype=np.int64))
            feats[feature_name(spec)] = {"dtype": str(spec.dtype), "shape": [size], "names": None}
    for name, (dtype, _) in _STEP_FEATURES.items():
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
    for name, (_, attr) in _STEP_FEATURES.items():
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
        vals = np.concatenate([_to_numpy(t.column(name), ft) for t in tables]).astype(np.float64)
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
    pa, pq = _pa()
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
    reader = open_store(store)
    eps = (ep for _, ep in iter_store_episodes(reader))
    return write_lerobot(out, store_meta(reader), eps, overwrite=overwrite)


# ----------------------------------------------------------------------------- reading


def _to_numpy(col: Any, ft: dict[str, Any]) -> np.ndarray:
    import pyarrow as pa

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if ft["dtype"] == "image":
        image = require("PIL.Image", "LeRobot image features")
        raw = col.field("bytes").to_pylist()
        return np.stack([np.asarray(image.open(io.BytesIO(b)).convert("RGB")) for b in raw])
    n = len(col)
    nested = False
    while (
        pa.types.is_list(col.type)
        or pa.types.is_fixed_size_list(col.type)
        or (pa.types.is_large_list(col.type))
    ):
        col, nested = col.flatten(), True
    values = np.asarray(col.to_numpy(zero_copy_only=False))
    return values.reshape(n, -1) if nested else values


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
    return _to_numpy(table.column(name), feats.get(name, {"dtype": "x"})).astype(dtype)


def _episode(table: Any, ctx: dict[str, Any], report: ConversionReport) -> Episode:
    feats, mapping, meta = ctx["features"], ctx["mapping"], ctx["meta"]
    steps = table.num_rows
    obs = {}
    for feature, spec in mapping.items():
        arr = _to_numpy(table.column(feature), feats[feature])
        obs[spec.name] = arr.reshape(steps, *spec.shape).astype(spec.dtype)
    action = _to_numpy(table.column("action"), feats["action"]).astype(np.float32)
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
    timestamp = _optional(table, "handrail.timestamp", feats, np.float64)
    if timestamp is None:
        timestamp = _to_numpy(table.column("timestamp"), {"dtype": "x"}).astype(np.float64)
    row = ctx["episodes"].get(int(table.column("episode_index")[0].as_py()), {})
    success = row.get("success")
    if success is None:
        done_ok = _optional(table, "next.success", feats, bool)
        report.note("no per-episode success: taken from next.success, else False")
        success = bool(done_ok is not None and done_ok.any())
    seed = row.get("seed")
    task_index = int(table.column("task_index")[0].as_py())
    interv = _optional(table, "intervention", feats, np.int8)
    if interv is None:
        report.note("no intervention column: every step stored as chosen by the policy")
    return Episode(
        obs=obs,
        final_obs={k: v[-1].copy() for k, v in obs.items()},
        action=action.reshape(steps, meta.action_dim),
        reward=np.zeros(steps, np.float32) if reward is None else reward,
        terminated=terminated,
        truncated=truncated,
        policy_action=_optional(table, "policy_action", feats, np.float32),
        intervention=interv,
        timestamp=timestamp,
        success=bool(success),
        seed=None if seed is None or int(seed) < 0 else int(seed),
        task=ctx["tasks"].get(task_index, meta.task),
    )


def read_lerobot(
    root: str | Path, *, task: str | None = None, report: ConversionReport | None = None
) -> tuple[StoreMeta, Iterator[Episode]]:
    """Reads a LeRobotDataset v3 folder; returns its meta and a generator over episodes."""
    pa, pq = _pa()
    report = report if report is not None else ConversionReport()
    root = Path(root)
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
    feats = info["features"]
    if "action" not in feats:
        raise ValueError(f"{root}: info.json has no 'action' feature")
    mapping = _obs_mapping(info, report)
    known = {*mapping, *_STEP_FEATURES, *INDEX_FEATURES, "next.success"}
    for name in feats:
        if name not in known:
            report.drop(f"{name} (no handrail field for it)")
    report.drop("final_obs (LeRobot has none; each episode's last observation stands in)")
    hmeta = info.get("handrail") or {}
    tasks = _read_tasks(pq, root)
    meta = StoreMeta(
        kind=hmeta.get("kind", "demo"),
        task=task or hmeta.get("task") or next(iter(tasks.values()), "unknown"),
        obs_fields=tuple(mapping.values()),
        action_dim=int(np.prod(feats["action"]["shape"])),
        control_dt_s=float(hmeta.get("control_dt_s") or 1.0 / float(info["fps"])),
        robot=info.get("robot_type") or "unknown",
    )
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

    def episodes() -> Iterator[Episode]:
        for path in files:
            table = pq.read_table(path)
            index = table.column("episode_index").to_numpy()
            for e in dict.fromkeys(index.tolist()):
                rows = table.filter(pa.array(index == e))
                rows = rows.sort_by("frame_index")
                yield _episode(rows, ctx, report)

    return meta, episodes()


def import_lerobot(
    src: str | Path, out: str | Path, *, task: str | None = None, overwrite: bool = False
) -> ConversionReport:
    """Imports a LeRobotDataset v3 folder into a new handrail store at ``out``."""
    report = ConversionReport()
    meta, eps = read_lerobot(src, task=task, report=report)

    return import_into_store(out, meta, eps, report, overwrite=overwrite)
