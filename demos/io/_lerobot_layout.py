"""LeRobotDataset v3 layout, shared by the reader and the writer (:mod:`.io_lerobot`).

Paths, the index and per-step features, how an observation field is named as a feature, and how
a parquet column becomes a NumPy array.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from handrail.demos import FieldSpec
from handrail.demos.episodes import require

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
STEP_FEATURES = {  # handrail per-step arrays besides observations: feature -> (dtype, attr)
    "action": ("float32", "action"),
    "policy_action": ("float32", "policy_action"),
    "next.reward": ("float32", "reward"),
    "next.done": ("bool", "terminated"),
    "next.truncated": ("bool", "truncated"),
    "intervention": ("int64", "intervention"),
    "handrail.timestamp": ("float64", "timestamp"),
}


def pyarrow_modules() -> Any:
    """``(pyarrow, pyarrow.parquet)``, or an ImportError naming the extra to install."""
    require("pyarrow.parquet", "LeRobotDataset import/export")
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa, pq


_PNG_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
"""PIL image mode of a PNG, by the image's channel count."""


def feature_name(spec: FieldSpec) -> str:
    """The LeRobot feature an observation field is exported as (images as a PNG ``image``)."""
    if spec.is_image:
        return f"observation.images.{spec.name}"
    return "observation.state" if spec.name == "proprio" else f"observation.{spec.name}"


def to_numpy(col: Any, ft: dict[str, Any]) -> np.ndarray:
    """A parquet column as NumPy: images decoded, list columns as ``(rows, size)``."""
    import pyarrow as pa

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if ft["dtype"] == "image":
        image = require("PIL.Image", "LeRobot image features")
        raw = col.field("bytes").to_pylist()
        mode = _PNG_MODES.get(_image_channels(ft), "RGB")
        return np.stack([np.asarray(image.open(io.BytesIO(b)).convert(mode)) for b in raw])
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


def _image_channels(ft: dict[str, Any]) -> int:
    """Channel count of an ``image`` feature, stored HWC (handrail) or CHW (``names`` say so)."""
    shape, names = ft.get("shape") or [0], ft.get("names") or [""]
    return int(shape[0] if str(names[0]).startswith("channel") else shape[-1])
