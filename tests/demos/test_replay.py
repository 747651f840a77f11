"""Pure drift statistics used by `handrail replay`."""

from __future__ import annotations

import numpy as np
import pytest

from handrail.demos.replay import (
    drift_failures,
    episode_drift,
    format_drift_table,
    key_drift,
    overall_drift,
)


def test_key_drift_is_max_and_mean_abs_error() -> None:
    d = key_drift(np.array([[0.0, 1.0], [2.0, 3.0]]), np.array([[0.5, 1.0], [2.0, 1.0]]))
    assert d.max_abs == 2.0
    assert d.mean_abs == pytest.approx(2.5 / 4)
    assert not d.is_image


def test_images_are_flagged_and_not_held_to_the_state_tolerance() -> None:
    rec = {"proprio": np.zeros((3, 2)), "front": np.zeros((3, 4, 4, 3), np.uint8)}
    rep = {"proprio": np.full((3, 2), 1e-6), "front": np.full((3, 4, 4, 3), 9, np.uint8)}
    d = episode_drift(0, rec, rep)
    assert d.keys["front"].is_image and d.keys["front"].max_abs == 9
    assert drift_failures([d], tolerance=1e-4) == []
    assert d.worst() == pytest.approx(1e-6) and d.worst(images=True) == 9


def test_image_flag_looks_at_one_step_of_the_stack() -> None:
    """Grey images are images; a uint8 state of 4x3 per step is not, though its stack is 3-D."""
    grey = np.zeros((3, 4, 4, 1), np.uint8)
    assert key_drift(grey, grey).is_image
    counts = np.zeros((3, 4, 3), np.uint8)
    assert not key_drift(counts, counts + 1).is_image


def test_drift_above_tolerance_and_short_replays_are_failures() -> None:
    rec = {"goal": np.zeros((4, 3))}
    short = episode_drift(1, rec, {"goal": np.zeros((2, 3))}, note="ended early")
    assert short.steps_compared == 2
    far = episode_drift(2, rec, {"goal": np.full((4, 3), 0.01)})
    lines = drift_failures([short, far], tolerance=1e-3)
    assert lines == [
        "episode 1: ended early",
        "episode 2: max abs error above 0.001: goal 0.01",
    ]


def test_overall_weights_means_by_steps() -> None:
    a = episode_drift(0, {"x": np.zeros((1, 1))}, {"x": np.ones((1, 1))})
    b = episode_drift(1, {"x": np.zeros((3, 1))}, {"x": np.zeros((3, 1))})
    total = overall_drift([a, b])["x"]
    assert total.max_abs == 1.0 and total.mean_abs == pytest.approx(0.25)
    assert "overall" in format_drift_table({"overall": {"x": total}})


def test_missing_keys_and_bad_tolerance_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="lack keys"):
        episode_drift(0, {"a": np.zeros((2, 1))}, {"b": np.zeros((2, 1))})
    with pytest.raises(ValueError, match="tolerance"):
        drift_failures([], tolerance=-1.0)
