"""`handrail label` through the CLI entry point, on small stores written with the store API."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest

from handrail.demos import FieldSpec, create_store, open_writer
from handrail.demos.labels import FAILURE, SUCCESS, UNLABELLED, read_labels
from handrail.launch import cli
from handrail.launch.commands.label import contact_sheet, default_labeller

CAM, STATE = FieldSpec("cam", "uint8", (8, 8, 3)), FieldSpec("state", "float32", (2,))
U, F, S = UNLABELLED, FAILURE, SUCCESS


def make_store(path: Path, lengths: list[int], fields=(CAM, STATE)) -> Path:
    """Episodes of the given lengths; odd ones successful."""
    with create_store(path, kind="demo", obs_fields=list(fields), action_dim=2,
                      control_dt_s=0.05, task="reach", durable=False) as w:  # fmt: skip
        for e, steps in enumerate(lengths):
            w.begin_episode()
            for t in range(steps):
                obs = {f.name: np.full(f.shape, t, f.dtype) for f in fields}
                w.add_step(obs=obs, action=np.zeros(2, np.float32), reward=0.0,
                           terminated=False, truncated=False)  # fmt: skip
            w.end_episode(final_obs={f.name: np.zeros(f.shape, f.dtype) for f in fields},
                          success=e % 2 == 1)  # fmt: skip
    return path


def test_label_from_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = make_store(tmp_path / "s", [2, 3, 2])
    assert cli.main(["label", str(store), "--from", "success", "--last", "2"]) == 0
    out = capsys.readouterr().out
    labels = read_labels(store)
    np.testing.assert_array_equal(labels.success, [F, F, F, S, S, F, F])
    assert labels.sources[0]["by"] == default_labeller() and "@" in default_labeller()
    assert labels.sources[0]["method"] == "success"
    assert re.search(r"^\s+1\s+3\s+2\s+1\s+0\s+success$", out, re.M)  # episode 1's counts
    assert "store: 2 success frames, 5 failure frames, 0 unlabelled (7 steps)" in out
    assert f"next: handrail reward train --demos {store} --out reward.clf" in out
    # A second labelling of some episodes keeps the others' labels.
    args = ["--from", "interventions", "--episodes", "0", "--by", "ann"]
    assert cli.main(["label", str(store), *args]) == 0
    assert read_labels(store).success.tolist() == [F, F, F, S, S, F, F]  # no takeovers: no change


class Person(io.StringIO):
    """A person at stdin who checks, before each answer, that the sheets named so far exist."""

    def __init__(self, answers: str, capsys: pytest.CaptureFixture[str]) -> None:
        super().__init__(answers)
        self.capsys, self.shown = capsys, ""

    def readline(self, *args) -> str:  # input() reads a line from a stdin that is not a tty
        self.shown += self.capsys.readouterr().out
        assert all(p.is_file() for p in self.sheets)
        return super().readline(*args)

    @property
    def sheets(self) -> list[Path]:
        """The contact sheets shown so far."""
        return [Path(p) for p in re.findall(r"sheet: (\S+\.png)", self.shown)]


def test_label_interactively_from_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path / "s", [2, 3, 2])
    person = Person("maybe\n1\n\nn\n", capsys)  # episode 0: asked again, then from step 1
    monkeypatch.setattr("sys.stdin", person)
    assert cli.main(["label", str(store), "--from", "interactive", "--episodes", "0-2"]) == 0
    out = person.shown + capsys.readouterr().out
    np.testing.assert_array_equal(read_labels(store).success, [F, S, U, U, U, F, F])
    names = [
        "episode_0000_steps_0-1.png",
        "episode_0001_steps_0-2.png",
        "episode_0002_steps_0-1.png",
    ]
    assert [p.name for p in person.sheets] == names  # one per episode, also when asked again
    assert not person.sheets[0].parent.exists()  # the sheets' temp folder is gone
    assert "answer a step 0..1, n, k (or Enter) or q" in out
    assert "recorded success: yes" in out
    assert "store: 1 success frames, 3 failure frames, 3 unlabelled (7 steps)" in out
    # stdin running out stops, keeping the answers given
    monkeypatch.setattr("sys.stdin", io.StringIO("0\n"))
    assert cli.main(["label", str(store), "--from", "interactive", "--episodes", "1,2"]) == 0
    np.testing.assert_array_equal(read_labels(store).success, [F, S, S, S, S, F, F])


def test_label_interactively_without_a_camera(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path / "s", [3], fields=(STATE,))
    monkeypatch.setattr("sys.stdin", io.StringIO("2\n"))
    assert cli.main(["label", str(store), "--from", "interactive"]) == 0
    out = capsys.readouterr().out
    assert "has no camera field (uint8 HxWx3): no contact sheets" in out and "sheet:" not in out
    np.testing.assert_array_equal(read_labels(store).success, [F, F, S])


def test_a_contact_sheet_numbers_each_frame() -> None:
    frames = np.zeros((13, 8, 8, 3), np.uint8)
    frames[:, :, :, 1] = 255
    sheet = contact_sheet(frames)  # 10 frames a row, 96 px high, their step below, 4 px apart
    assert sheet.dtype == np.uint8 and sheet.shape == (2 * 116, 10 * 100, 3)
    assert np.all(sheet[:96, :96] == [0, 255, 0])  # frame 0, scaled up
    assert np.any(sheet[96:112, :96].min(axis=-1) > 200)  # its step number, in white
    assert np.all(sheet[116:, 3 * 100 :] == 40)  # no frames past the last one


def test_bad_input_and_a_writing_recorder_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_store(tmp_path / "s", [2, 3])
    assert cli.main(["label", str(store), "--from", "success", "--episodes", "0,7"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "handrail label: error: episodes: id 7 is out of range; this store has ids 0..1"
    )
    assert cli.main(["label", str(store), "--from", "success", "--last", "0"]) == 2
    assert "last=0 must be an int >= 1" in capsys.readouterr().err
    with open_writer(store, durable=False):
        assert cli.main(["label", str(store), "--from", "success"]) == 2
    assert "is open for writing by process" in capsys.readouterr().err
    assert read_labels(store).sources == ()
