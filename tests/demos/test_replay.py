"""Pure drift statistics and video highlights used by `handrail replay`."""

from __future__ import annotations

import numpy as np
import pytest

from handrail.demos.replay import (
    HUMAN_BORDER_RGB,
    annotate_frame,
    drift_failures,
    episode_drift,
    format_drift_table,
    highlight_episode_frames,
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


def test_a_nan_drift_is_a_failure_not_a_pass() -> None:
    """nan compares false with everything: "drift > tolerance" alone would let it pass."""
    rec = {"goal": np.zeros((3, 2))}
    lost = episode_drift(4, rec, {"goal": np.array([[0.0, 0.0], [np.nan, 0.0], [0.0, 0.0]])})
    assert drift_failures([lost], tolerance=1e-4) == [
        "episode 4: max abs error above 0.0001: goal nan"
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


def noise_frame(seed: int = 0, shape: tuple[int, int] = (240, 320)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)


def is_bordered(frame: np.ndarray) -> bool:
    """The outermost 2 px ring (the thinnest border drawn) is all the human colour."""
    edges = (frame[:2], frame[-2:], frame[:, :2], frame[:, -2:])
    ring = np.concatenate([e.reshape(-1, 3) for e in edges])
    return bool(np.all(ring == HUMAN_BORDER_RGB))


@pytest.mark.parametrize("shape", [(240, 320), (96, 128), (480, 640)])
def test_annotation_adds_a_border_and_a_caption_and_nothing_else(shape: tuple[int, int]) -> None:
    frame = noise_frame(1, shape)
    before = frame.copy()
    plain = annotate_frame(frame, "ep 0 step 3: human", border_rgb=None)
    marked = annotate_frame(frame, "ep 0 step 3: human", border_rgb=HUMAN_BORDER_RGB)
    np.testing.assert_array_equal(frame, before)  # a copy; the input is left alone
    assert plain.shape == marked.shape == frame.shape and marked.dtype == np.uint8
    assert is_bordered(marked) and not is_bordered(plain)
    height, width = shape
    border = max(2, min(shape) // 60)
    assert np.all(marked[:border] == HUMAN_BORDER_RGB) and np.all(
        marked[-border:] == HUMAN_BORDER_RGB
    )
    for out in (plain, marked):
        inner = (slice(border, height - border), slice(border, width - border))
        changed = np.any(out[inner] != frame[inner], axis=-1)
        rows, cols = np.nonzero(changed)
        assert rows.size > 0, "the caption must be drawn"
        assert rows.min() <= 2 and cols.min() <= 2  # a box at the top left, inside the border
        assert rows.max() < height // 6, "the caption is one line at the top"
        box = changed[: rows.max() + 1, : cols.max() + 1]
        assert box.all(), "the changed interior pixels are exactly the caption box"
    # the plain frame's outer ring is the original: policy frames get no border
    np.testing.assert_array_equal(plain[-border:], frame[-border:])
    np.testing.assert_array_equal(plain[:, -border:], frame[:, -border:])


def test_annotation_rejects_frames_that_are_not_rgb_uint8() -> None:
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        annotate_frame(np.zeros((8, 8), np.uint8), "x")
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        annotate_frame(np.zeros((8, 8, 3), np.float32), "x")


def test_frame_after_step_t_carries_step_t() -> None:
    """Frame 0 is the reset; frame t + 1 is rendered after step t and is marked with step t."""
    who = np.array([0, 1, 1, 0, 2, 1], np.int8)
    frames = [np.full((60, 80, 3), 90, np.uint8)] * (len(who) + 1)
    out = highlight_episode_frames(frames, who, episode=4)
    assert len(out) == len(frames)
    assert [is_bordered(f) for f in out] == [False, False, True, True, False, False, True]
    # replay ended after 3 steps: the frames there are marks of the same steps
    short = highlight_episode_frames(frames[:4], who, episode=4)
    assert [is_bordered(f) for f in short] == [False, False, True, True]
    with pytest.raises(ValueError, match="one per step"):
        highlight_episode_frames(frames + frames[:1], who, episode=4)


def test_caption_says_who_acted() -> None:
    """The same frame at the same step is captioned differently for policy, human and script."""
    frame = np.full((120, 160, 3), 200, np.uint8)
    inner = (slice(4, 40), slice(4, 156))  # inside any border, covering the caption
    captions = [
        highlight_episode_frames([frame, frame], np.array([code], np.int8), episode=0)[1][inner]
        for code in (0, 1, 2)
    ]
    for i in range(3):
        for j in range(i + 1, 3):
            assert np.any(captions[i] != captions[j]), (i, j)
    start = highlight_episode_frames([frame], np.array([1], np.int8), episode=0)[0]
    assert not is_bordered(start) and np.any(start != frame)  # captioned, never bordered
