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


def test_the_e2e_rows_learn_from_the_cameras_and_proprio_with_their_own_encoder(
    tmp_path: Path,
) -> None:
    cfg = BenchVisionConfig(task="reach", rows=("e2e",), seeds=(0, 2), pixel_steps=8_000,
                            image_size=32, e2e_args="--sac.image-features 32", out=tmp_path)  # fmt: skip
    runs = plan(cfg, {})
    assert [(r.learner, r.seed, r.steps) for r in runs] == [("e2e", 0, 8_000), ("e2e", 2, 8_000)]
    argv = runs[1].argv
    assert "--pixels" in argv and "--encoder" not in argv and "--demos" not in argv
    at = argv.index("--env-kwargs")
    assert argv[at + 1 : at + 3] == ("cameras=('front', 'wrist')", "image_size=32")
    at = argv.index("--ignore-obs-keys")
    assert argv[at + 1 : at + 3] == ("goal", "goal_from_tcp_dm")
    assert argv[-2:] == ("--sac.image-features", "32")
    lines = table([_row("e2e", 0, 0.98), _row("e2e", 2, 0.91)], {})
    assert (
        "| 0, 2 | cameras (encoder trained end to end, --pixels) + proprio | -, - | -, - | 98%, 91% | 9.6, 9.6 |"
        in lines
    )


def test_the_table_and_plot_of_the_pixel_rows(tmp_path: Path) -> None:
    rows = [_row("pixels", 0, 0.37), _row("pixels", 1, 0.14), _row("e2e", 0, 0.9)]
    lines = table(rows, {"pixels": PIXELS})
    assert (
        "| 0, 1 | cameras (frozen encoder) + proprio | -, - | -, - | 37%, 14% | 9.6, 9.6 |" in lines
    )
    assert any("features [0.9, 0.9, 0.5]" in line for line in lines)
    plot(rows, tmp_path / "vision.png")
    assert (tmp_path / "vision.png").stat().st_size > 0


def test_an_unknown_row_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--rows pixel: give classifier, pixels, e2e or several"):
        bench_vision(BenchVisionConfig(rows=("pixel",), out=tmp_path / "b"))
    assert not (tmp_path / "b").exists()
