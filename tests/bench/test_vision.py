"""``handrail bench vision``: what it runs for each row and how it tabulates (no training)."""

from __future__ import annotations

from pathlib import Path

import pytest

from handrail.bench.vision import BenchVisionConfig, bench_vision, plan, plot, table

PIXELS = {"demos": "d", "encoder": "e", "ignored": ["object", "cube_from_tcp_dm"],
          "probe": {"features": [0.9, 0.9, 0.5], "features_proprio": [0.9, 0.9, 0.8],
                    "proprio": [0.3, 0.9, 0.7]}}  # fmt: skip


def _row(learner: str, seed: int, final: float) -> dict:
    return {"learner": learner, "seed": seed, "steps_to_goal": None, "min_after": None,
            "final": {"success_rate": final}, "minutes": 9.6,
            "curve": [(1000, 60.0, 0.0), (2000, 120.0, final)]}  # fmt: skip


def test_the_pixel_rows_read_the_cameras_and_proprio_only(tmp_path: Path) -> None:
    cfg = BenchVisionConfig(rows=("pixels",), seeds=(0, 1), pixel_steps=15_000, out=tmp_path)
    runs = plan(cfg, {"pixels": PIXELS})
    assert [(r.learner, r.seed, r.steps) for r in runs] == [("pixels", 0, 15_000),
                                                             ("pixels", 1, 15_000)]  # fmt: skip
    argv = runs[0].argv
    assert argv[argv.index("--encoder") + 1] == "e" and argv[argv.index("--demos") + 1] == "d"
    at = argv.index("--ignore-obs-keys")
    assert argv[at + 1 : at + 3] == ("object", "cube_from_tcp_dm")
    assert "--reward" not in argv


def test_the_table_and_plot_of_the_pixel_rows(tmp_path: Path) -> None:
    rows = [_row("pixels", 0, 0.37), _row("pixels", 1, 0.14)]
    lines = table(rows, {"pixels": PIXELS})
    assert (
        "| 0, 1 | cameras (frozen encoder) + proprio | -, - | -, - | 37%, 14% | 9.6, 9.6 |" in lines
    )
    assert any("features [0.9, 0.9, 0.5]" in line for line in lines)
    plot(rows, tmp_path / "vision.png")
    assert (tmp_path / "vision.png").stat().st_size > 0


def test_an_unknown_row_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--rows pixel: give classifier, pixels or both"):
        bench_vision(BenchVisionConfig(rows=("pixel",), out=tmp_path / "b"))
    assert not (tmp_path / "b").exists()
