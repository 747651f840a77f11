"""`handrail replay` end to end through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest

from handrail.demos import open_store
from handrail.launch import cli


def test_replay_reproduces_recorded_observations(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    video = tmp_path / "r.mp4"
    assert cli.main(["replay", str(recorded), "--episodes", "0,2", "--video", str(video)]) == 0
    out = capsys.readouterr().out
    assert "ep 0" in out and "ep 2" in out and "ep 1 " not in out and "OK: 2 episodes" in out
    reader = open_store(recorded)
    steps = sum(r.num_steps for r in reader.episodes if r.id in (0, 2))
    with imageio.get_reader(video) as mp4:
        # at the recorded control rate; one frame per reset and per replayed step
        assert mp4.get_meta_data()["fps"] == pytest.approx(1.0 / reader.attrs["control_dt_s"])
        assert mp4.count_frames() == steps + 2


def test_replay_video_frames_human_steps_in_orange(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The frame after step t is framed in orange exactly when a human acted in step t."""
    from handrail.demos.ops import iter_store_episodes, store_meta, write_store
    from handrail.demos.replay import HUMAN_BORDER_RGB

    reader = open_store(recorded)
    (ep,) = [ep for _, ep in iter_store_episodes(reader, episodes=[1])]
    human = {1, 2, ep.num_steps - 1}
    ep.intervention = np.array([t in human for t in range(ep.num_steps)], np.int8)
    write_store(tmp_path / "s", store_meta(reader), [ep])
    videos = {}
    for name, flags in (("marked", []), ("bare", ["--no-highlight"])):
        videos[name] = tmp_path / f"{name}.mp4"
        argv = ["replay", str(tmp_path / "s"), "--video", str(videos[name]), *flags]
        assert cli.main(argv) == 0
    capsys.readouterr()
    marked, bare = (np.stack(imageio.mimread(videos[k])).astype(float) for k in ("marked", "bare"))
    assert len(marked) == len(bare) == ep.num_steps + 1

    def framed(frames: np.ndarray) -> list[int]:
        """Frames whose outer 2 px columns are orange (to within the video codec's error)."""
        edges = np.concatenate([frames[:, 40:-40, :2], frames[:, 40:-40, -2:]], axis=2)
        err = np.abs(edges - np.asarray(HUMAN_BORDER_RGB)).mean(axis=(1, 2, 3))
        return [k for k, e in enumerate(err) if e < 25]

    assert framed(marked) == sorted(t + 1 for t in human)
    assert framed(bare) == []
    caption, scene = (slice(8, 18), slice(8, 60)), (slice(120, 200), slice(120, 240))
    assert np.abs(marked[0][caption] - bare[0][caption]).mean() > 40  # captioned, policy or not
    assert np.abs(marked[0][scene] - bare[0][scene]).mean() < 5  # the render itself unchanged


def test_replay_flags_drift_beyond_tolerance(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Wrong seeds replay from another start state: the drift check must fail."""
    from handrail.demos.ops import iter_store_episodes, store_meta, write_store

    reader = open_store(recorded)
    eps = [ep for _, ep in iter_store_episodes(reader, episodes=[0])]
    eps[0].seed = 999
    write_store(tmp_path / "bad", store_meta(reader), eps)
    assert cli.main(["replay", str(tmp_path / "bad")]) == 1
    assert "max abs error above" in capsys.readouterr().err


def test_on_robot_says_what_it_waits_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["replay", str(tmp_path / "x"), "--on-robot"]) == 2
    err = capsys.readouterr().err
    assert "ROS 2" in err and "safety filter" in err


def test_a_store_holding_nan_is_refused_before_the_replay(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A nan observation once replayed as "OK" with a nan drift; now it is named up front."""
    from handrail.demos import create_store
    from handrail.demos.ops import iter_store_episodes, store_meta, write_episode

    reader = open_store(recorded)
    meta = store_meta(reader)
    eps = [ep for _, ep in iter_store_episodes(reader)]
    eps[2].obs["proprio"][1, 3] = np.nan
    bad = tmp_path / "bad"
    with create_store(bad, kind=meta.kind, obs_fields=list(meta.obs_fields),
                      action_dim=meta.action_dim, control_dt_s=meta.control_dt_s,
                      task=meta.task) as writer:  # fmt: skip
        for ep in eps:
            write_episode(writer, ep)  # the writer stores what it is given
    assert cli.main(["replay", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert "OK" not in out and "episode 2: obs 'proprio' is nan at step 1" in err
    assert err.count("\n") == 1  # one line
    assert cli.main(["replay", str(bad), "--episodes", "0,1"]) == 0  # the others replay
