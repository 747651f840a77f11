"""Episodes as plain arrays: store round trip, import counting, reports, optional imports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.demos import FieldSpec, open_store
from handrail.demos.episodes import (
    ConversionReport,
    Episode,
    StoreMeta,
    import_into_store,
    iter_store_episodes,
    require,
    store_meta,
    write_store,
)

META = StoreMeta(
    kind="demo",
    task="reach",
    obs_fields=(FieldSpec("proprio", "float32", (3,), "m"),),
    action_dim=2,
    control_dt_s=0.05,
)


def make_episode(steps: int, seed: int) -> Episode:
    rng = np.random.default_rng(seed)
    return Episode(
        obs={"proprio": rng.normal(size=(steps, 3)).astype(np.float32)},
        final_obs={"proprio": rng.normal(size=3).astype(np.float32)},
        action=rng.uniform(-1, 1, (steps, 2)).astype(np.float32),
        reward=np.arange(steps, dtype=np.float32),
        terminated=np.arange(steps) == steps - 1,
        truncated=np.zeros(steps, bool),
        intervention=(np.arange(steps) % 2).astype(np.int8),
        success=seed % 2 == 0,
        seed=seed,
    )


def test_write_then_iterate_returns_the_same_episodes(tmp_path: Path) -> None:
    eps = [make_episode(3, 0), make_episode(5, 1)]
    assert write_store(tmp_path / "s", META, eps) == 2
    reader = open_store(tmp_path / "s")
    meta = store_meta(reader)
    assert (meta.kind, meta.task, meta.action_dim, meta.control_dt_s) == ("demo", "reach", 2, 0.05)
    back = [ep for _, ep in iter_store_episodes(reader)]
    for want, got in zip(eps, back, strict=True):
        np.testing.assert_array_equal(got.obs["proprio"], want.obs["proprio"])
        np.testing.assert_array_equal(got.final_obs["proprio"], want.final_obs["proprio"])
        np.testing.assert_array_equal(got.action, want.action)
        np.testing.assert_array_equal(got.policy_action, want.action)  # None: the action
        np.testing.assert_array_equal(got.intervention, want.intervention)
        assert (got.success, got.seed) == (want.success, want.seed)


def test_import_into_store_counts_lazily_written_steps(tmp_path: Path) -> None:
    report = ConversionReport()
    lazy = (make_episode(n, n) for n in (2, 4, 1))
    assert import_into_store(tmp_path / "s", META, lazy, report) is report
    assert (report.episodes, report.steps) == (3, 7)
    assert open_store(tmp_path / "s").num_steps == 7


def test_report_says_each_drop_and_note_once() -> None:
    report = ConversionReport(episodes=1, steps=2)
    for _ in range(2):
        report.drop("final_obs")
        report.note("fps rounded")
    assert report.format().splitlines() == [
        "wrote 1 episodes, 2 steps",
        "dropped: final_obs",
        "note: fps rounded",
    ]


def test_missing_optional_package_names_the_extra() -> None:
    with pytest.raises(ImportError, match=r"'no_such_pkg_xyz'.*handrail\[io\]"):
        require("no_such_pkg_xyz.sub", "testing")
