"""`handrail sim rollout` and `handrail sim view` smoke tests."""

from __future__ import annotations

from pathlib import Path

import imageio.v2 as imageio
import pytest

from handrail.launch.commands import sim as sim_cmd


def test_rollout_prints_success_rate_and_writes_video(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    video = tmp_path / "out.mp4"
    assert sim_cmd.rollout(task="reach", policy="expert", episodes=2, video=video, seed=3) == 0
    out = capsys.readouterr().out
    assert "success rate: 1.00 (2/2)" in out
    frames = imageio.mimread(video)
    assert len(frames) > 2 and frames[0].shape == (240, 320, 3)
    with imageio.get_reader(video) as reader:
        assert reader.get_meta_data()["fps"] == 10.0  # reach steps at 10 Hz: real speed


def test_rollout_video_must_be_an_mp4(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\*\.mp4"):
        sim_cmd.rollout(task="reach", episodes=1, video=tmp_path / "out.gif")


def test_random_policy_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_cmd.rollout(task="reach", policy="random", episodes=1) == 0
    assert "success rate:" in capsys.readouterr().out


def test_view_without_display_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert sim_cmd.view(task="reach") == 2
    assert "no display" in capsys.readouterr().err
