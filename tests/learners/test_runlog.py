"""Run folder: config, JSONL metrics (crash-tolerant), TensorBoard, atomic plot, video."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.learners.runlog import RunDir, write_video


def video_fps_and_frames(path: Path) -> tuple[float, int]:
    """Frame rate and frame count of an mp4, read back from the file."""
    import imageio.v2 as imageio

    with imageio.get_reader(path) as reader:
        return reader.get_meta_data()["fps"], reader.count_frames()


def test_config_round_trip_and_missing_config(tmp_path: Path) -> None:
    with RunDir(tmp_path / "run") as run:
        with pytest.raises(ValueError, match=r"no config\.json"):
            run.read_config()
        run.write_config({"task": "reach", "hidden": (64, 64), "lr": np.float32(0.5)})
        assert run.read_config() == {"task": "reach", "hidden": [64, 64], "lr": 0.5}
        assert not list(run.path.glob(".*tmp*"))


def test_metrics_are_flushed_per_line_and_torn_lines_skipped(tmp_path: Path) -> None:
    run = RunDir(tmp_path, tensorboard=False)
    run.log("train", 10, {"critic/loss": np.float32(1.5)})
    run.log("eval", 20, {"success_rate": 0.5, "mean_return": -3.0})
    # Readable before close (flushed), as a crash would leave it.
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["train", "eval"]
    assert json.loads(lines[0])["critic/loss"] == 1.5
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"kind": "eval", "env_st')  # torn write
    assert [r["env_steps"] for r in run.read_metrics("eval")] == [20]
    run.close()


def test_reopen_appends_and_continues_wall_clock(tmp_path: Path) -> None:
    with RunDir(tmp_path, tensorboard=False) as run:
        run.log("eval", 5, {"success_rate": 0.0})
    record = json.loads((tmp_path / "metrics.jsonl").read_text())
    record["wall_time_s"] = 100.0
    (tmp_path / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    with RunDir(tmp_path, tensorboard=False) as run:
        second = run.log("eval", 10, {"success_rate": 1.0})
    assert second["wall_time_s"] >= 100.0
    assert len(RunDir(tmp_path, tensorboard=False).read_metrics()) == 2


def test_rewind_drops_later_records_and_their_wall_clock(tmp_path: Path) -> None:
    lines = [{"kind": "episode", "env_steps": s, "wall_time_s": float(s)} for s in (5, 10, 15)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with RunDir(tmp_path, tensorboard=False) as run:
        assert run.rewind(10) == 1 and run.rewind(10) == 0
        record = run.log("episode", 15, {})
    assert [r["env_steps"] for r in RunDir(tmp_path, tensorboard=False).read_metrics()] == [
        5,
        10,
        15,
    ]
    assert 10.0 <= record["wall_time_s"] < 15.0


def test_tensorboard_event_file_is_written(tmp_path: Path) -> None:
    with RunDir(tmp_path) as run:
        run.log("train", 1, {"actor/loss": 0.1})
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1 and b"train/actor/loss" in events[0].read_bytes()  # kind/key tag


def test_plot_is_a_png_and_written_atomically(tmp_path: Path) -> None:
    with RunDir(tmp_path, tensorboard=False) as run:
        run.write_plot()  # no data yet: still a valid (empty) figure
        for step in range(1, 30):
            run.log("episode", step * 10, {"return": -step, "success": step % 2, "length": 10})
        run.log("eval", 150, {"success_rate": 0.4, "mean_return": -5.0})
        path = run.write_plot(title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_plot_stacks_how_evaluation_episodes_failed(tmp_path: Path) -> None:
    """A row more where the evaluations say how their failed episodes ended."""
    import imageio.v2 as imageio

    from handrail.learners.runlog import failure_shares

    def plot_height(records: list[tuple[str, int, dict]]) -> int:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        with RunDir(folder, tensorboard=False) as run:
            for kind, step, metrics in records:
                run.log(kind, step, {"success_rate": 0.5, "mean_return": 0.5, **metrics})
            return int(imageio.imread(run.write_plot()).shape[0])

    said = [("baseline", 0, {"episodes": 10, "failed_outcomes": {"far": 4, "short": 1}}),
            ("eval", 100, {"episodes": 20, "failed_outcomes": {"short": 2}}),
            ("eval", 200, {"episodes": 20})]  # fmt: skip
    outcomes, xy, shares = failure_shares([metrics | {"env_steps": step}
                                           for _, step, metrics in said])  # fmt: skip
    assert outcomes == ["far", "short"]  # most frequent over the run first
    assert xy[:, 0].tolist() == [0.0, 100.0, 200.0]
    assert shares.tolist() == [[0.4, 0.0, 0.0], [0.1, 0.1, 0.0]]
    silent = [("eval", 100, {"episodes": 20}), ("eval", 200, {"episodes": 20})]
    assert failure_shares([m for _, _, m in silent])[0] == []
    assert plot_height(said) == plot_height(silent) * 3 // 2  # 3 rows of 3.25 in, not 2


def test_video_is_an_mp4_at_the_given_rate(tmp_path: Path) -> None:
    frames = [np.full((32, 32, 3), i * 20, np.uint8) for i in range(10)]
    with RunDir(tmp_path, tensorboard=False) as run:
        path = run.write_video(frames, "eval_100", fps=10.0)
        with pytest.raises(ValueError, match="no frames"):
            run.write_video([], "empty", fps=10.0)
        with pytest.raises(ValueError, match="fps"):
            run.write_video(frames, "still", fps=0.0)
    assert path == tmp_path / "videos" / "eval_100.mp4"
    assert b"ftyp" in path.read_bytes()[:32]
    assert video_fps_and_frames(path) == (10.0, 10)
    assert [p.name for p in path.parent.iterdir()] == ["eval_100.mp4"]  # no temp files left


def test_writing_a_video_beside_jax_prints_no_fork_warning(tmp_path: Path) -> None:
    """ffmpeg is started with fork and exec; JAX's warning about forking its threads was
    printed by every run that wrote a video, and it does not apply."""
    import warnings

    import jax.numpy as jnp

    jnp.ones(2).block_until_ready()  # JAX's threads are up
    frames = [np.zeros((16, 16, 3), np.uint8)] * 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_video(tmp_path, frames, "quiet", fps=10.0)
    assert not [w for w in caught if "fork" in str(w.message)]


def test_a_new_run_folder_is_never_one_that_exists(tmp_path: Path) -> None:
    import threading

    from handrail.learners.runlog import create_run_folder

    run = tmp_path / "runs" / "reach-s0"
    assert create_run_folder(run) == run and run.is_dir()
    with pytest.raises(FileExistsError):
        create_run_folder(run)
    made: list[Path] = []
    threads = [threading.Thread(target=lambda: made.append(create_run_folder(run, numbered=True)))
               for _ in range(8)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(p.name for p in made) == sorted(f"reach-s0-{n}" for n in range(2, 10))
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="a file is in the way"):
        create_run_folder(tmp_path / "file" / "run")


def test_a_plot_that_cannot_be_written_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from matplotlib.figure import Figure

    def full_disk(self: Figure, path: Path, **kwargs: object) -> None:
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with RunDir(tmp_path, tensorboard=False) as run:
        run.write_plot()
        before = run.plot_path.read_bytes()
        monkeypatch.setattr(Figure, "savefig", full_disk)
        with pytest.raises(OSError, match="No space left"):
            run.write_plot()
    assert run.plot_path.read_bytes() == before  # the last whole plot
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_run_folder_has_one_writer_at_a_time(tmp_path: Path) -> None:
    busy = rf"{tmp_path} is in use by another process"
    with RunDir(tmp_path, tensorboard=False), pytest.raises(ValueError, match=busy):
        RunDir(tmp_path, tensorboard=False)
    with RunDir(tmp_path, tensorboard=False) as run:  # free again once closed
        run.log("eval", 1, {})
