"""Import of diffusion_policy's zarr ReplayBuffer (Zarr format 2) into a handrail store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from handrail.demos import open_store
from handrail.demos.io.diffusion_policy import import_diffusion_policy


def make_buffer(path: Path, ends: list[int]) -> dict[str, np.ndarray]:
    """A ReplayBuffer as diffusion_policy writes it: zarr v2, data/<key>, meta/episode_ends."""
    rng = np.random.default_rng(0)
    n = ends[-1]
    arrays = {
        "state": rng.normal(size=(n, 5)).astype(np.float32),
        "img": rng.integers(0, 255, (n, 8, 8, 3)).astype(np.uint8),
        "action": rng.normal(size=(n, 2)).astype(np.float32),
    }
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    data = root.create_group("data")
    for k, v in arrays.items():
        data.create_array(k, data=v, chunks=(3, *v.shape[1:]))
    root.create_group("meta").create_array("episode_ends", data=np.asarray(ends, np.int64))
    return arrays


def test_import_splits_episodes_and_keeps_arrays(tmp_path: Path) -> None:
    arrays = make_buffer(tmp_path / "pusht.zarr", [4, 5, 9])
    assert (tmp_path / "pusht.zarr/.zgroup").is_file()  # really format 2
    report = import_diffusion_policy(
        tmp_path / "pusht.zarr", tmp_path / "s", task="push", control_dt_s=0.1, mark_successful=True
    )
    assert (report.episodes, report.steps) == (3, 9)
    assert any("rewards" in n for n in report.notes)
    reader = open_store(tmp_path / "s")
    assert {f.name: (f.dtype, f.shape) for f in reader.obs_fields} == {
        "state": ("float32", (5,)),
        "img": ("uint8", (8, 8, 3)),
    }
    d = reader.load()
    assert d.episode_lengths.tolist() == [4, 1, 4]
    np.testing.assert_array_equal(d.obs["img"], arrays["img"])
    np.testing.assert_array_equal(d.action, arrays["action"])
    np.testing.assert_array_equal(d.final_obs["state"], arrays["state"][[3, 4, 8]])
    assert d.truncated.tolist() == [False] * 3 + [True, True] + [False] * 3 + [True]
    assert all(r.success and r.task == "push" for r in d.records)


def test_bad_episode_ends_are_a_clear_error(tmp_path: Path) -> None:
    make_buffer(tmp_path / "b.zarr", [4, 3, 9])
    with pytest.raises(ValueError, match="episode_ends must increase"):
        import_diffusion_policy(tmp_path / "b.zarr", tmp_path / "s")


def test_a_group_without_meta_is_rejected(tmp_path: Path) -> None:
    root = zarr.open_group(str(tmp_path / "x.zarr"), mode="w", zarr_format=2)
    root.create_group("data").create_array("action", data=np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="episode_ends"):
        import_diffusion_policy(tmp_path / "x.zarr", tmp_path / "s")
