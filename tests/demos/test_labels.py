"""Success labels in the episode store: the labellers, the merge rule, crash safety, and the
store operations that must keep working on a labelled store."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from handrail.demos import (
    FieldSpec,
    StoreCorruptError,
    StoreLockedError,
    create_store,
    open_store,
    open_writer,
)
from handrail.demos import labels as labels_mod
from handrail.demos.commit import atomic_write_json
from handrail.demos.labels import (
    FAILURE,
    SUCCESS,
    UNLABELLED,
    camera_field,
    check_writable,
    label_interactively,
    labels_from_interventions,
    labels_from_reward,
    labels_from_success,
    read_labels,
    write_labels,
)
from handrail.demos.ops import filter_store, merge_stores, validate_store
from handrail.demos.rollback import roll_back

CAM, STATE = FieldSpec("cam", "uint8", (8, 8, 3)), FieldSpec("state", "float32", (2,))
U, F, S = UNLABELLED, FAILURE, SUCCESS


def add_episode(writer, steps: int, *, success: bool, human: tuple[int, ...] = (),
                held: int = 0) -> None:  # fmt: skip
    """One episode whose camera frame before step t is filled with t (the final one: 200 + t);
    its last ``held`` steps earn a sparse reward (the goal held after success)."""
    fields = writer.obs_fields
    writer.begin_episode(seed=steps)
    for t in range(steps):
        obs = {f.name: np.full(f.shape, t, f.dtype) for f in fields}
        writer.add_step(obs=obs, action=np.zeros(2, np.float32), intervention=int(t in human),
                        reward=float(t >= steps - held), terminated=False,
                        truncated=t == steps - 1)  # fmt: skip
    final = {f.name: np.full(f.shape, 200 + steps, f.dtype) for f in fields}
    writer.end_episode(final_obs=final, success=success)


def make_store(path: Path, episodes: list[dict], fields=(CAM, STATE)) -> Path:
    """A store of ``episodes`` (each ``add_episode``'s keyword arguments), written for real."""
    with create_store(path, kind="demo", obs_fields=list(fields), action_dim=2,
                      control_dt_s=0.05, task="reach", durable=False) as w:  # fmt: skip
        for ep in episodes:
            add_episode(w, **ep)
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Episodes of 3 (failed), 4 (successful) and 2 (successful) steps: 9 steps."""
    return make_store(
        tmp_path / "s",
        [dict(steps=3, success=False), dict(steps=4, success=True), dict(steps=2, success=True)],
    )


def add_recovered_episode(path: Path) -> None:
    """An episode a crash cut short, kept with ``recover="truncate"`` (``recovered``)."""
    w = open_writer(path, durable=False)
    w.begin_episode(seed=1)
    for _ in range(260):  # more than one staging block (256 rows): some rows reach the disk
        w.add_step(obs={"cam": np.zeros((8, 8, 3), np.uint8), "state": np.zeros(2, np.float32)},
                   action=np.zeros(2, np.float32), reward=0.0, terminated=False, truncated=False)  # fmt: skip
    w.flush()
    w._crash()
    open_writer(path, recover="truncate", durable=False).close()


def test_a_store_without_labels_reads_all_unlabelled(store: Path) -> None:
    labels = read_labels(store)
    np.testing.assert_array_equal(labels.success, np.full(9, U, np.int8))
    np.testing.assert_array_equal(labels.source, np.full(9, -1, np.int8))
    assert labels.sources == () and labels.success.dtype == np.int8
    assert labels.counts() == {"success": 0, "failure": 0, "unlabelled": 9}


def test_labels_from_success(store: Path) -> None:
    add_recovered_episode(store)
    reader = open_store(store)
    assert reader.episodes[3].recovered
    got = labels_from_success(reader, last=2)
    assert got.dtype == np.int8 and len(got) == reader.num_steps
    np.testing.assert_array_equal(got[:9], [F, F, F, F, F, S, S, S, S])
    assert np.all(got[9:] == U)  # the crash-cut episode: its success is unknown
    np.testing.assert_array_equal(labels_from_success(reader)[:9], [F, F, F, F, F, F, S, F, S])
    only = labels_from_success(reader, episodes=[1])
    np.testing.assert_array_equal(only[:9], [U, U, U, F, F, F, S, U, U])
    np.testing.assert_array_equal(labels_from_success(reader, last=9)[7:9], [S, S])


def test_labels_from_reward_mark_every_step_the_goal_held(tmp_path: Path) -> None:
    path = make_store(tmp_path / "r", [dict(steps=4, success=True, held=2),
                                       dict(steps=3, success=False)])  # fmt: skip
    add_recovered_episode(path)
    reader = open_store(path)
    got = labels_from_reward(reader)
    np.testing.assert_array_equal(got[:7], [F, F, S, S, F, F, F])
    assert np.all(got[7:] == U)  # crash-cut: unknown
    np.testing.assert_array_equal(labels_from_reward(reader, episodes=[1])[:7],
                                  [U, U, U, U, F, F, F])  # fmt: skip


def test_labels_from_interventions(tmp_path: Path) -> None:
    path = make_store(
        tmp_path / "s",
        [
            dict(steps=8, success=False, human=(0, 3, 6, 7)),  # takeovers at 3 and 6, not 0
            dict(steps=5, success=True, human=(4,)),  # a takeover at the end, then success
            dict(steps=3, success=True),
        ],
    )
    reader = open_store(path)
    got = labels_from_interventions(reader, before=2)
    np.testing.assert_array_equal(got[:8], [U, F, F, U, F, F, U, U])
    np.testing.assert_array_equal(got[8:13], [U, U, F, F, S])
    np.testing.assert_array_equal(got[13:], [U, U, S])
    wide = labels_from_interventions(reader, before=10, last=2, episodes=[1, 0])
    np.testing.assert_array_equal(wide[:13], [F, F, F, F, F, F, U, U, F, F, F, S, S])
    assert np.all(wide[13:] == U)
    assert np.all(labels_from_interventions(reader, before=0, episodes=[0]) == U)


def test_label_interactively_reads_answers_and_asks_again(store: Path) -> None:
    reader = open_store(store)
    answers = iter(["x", "3", " 1 ", "n", "q", "never asked"])  # episode 0: bad, out of range, 1
    seen: list[tuple[int, np.ndarray]] = []

    def ask(record, frames) -> str:
        seen.append((record.id, frames))
        return next(answers)

    got = label_interactively(reader, ask)
    assert camera_field(reader) == "cam"
    np.testing.assert_array_equal(got, [F, S, S, F, F, F, F, U, U])
    assert [e for e, _ in seen] == [0, 0, 0, 1, 2]
    frames = seen[0][1]  # the frames after each step: the next step's, then the final one
    assert frames.shape == (3, 8, 8, 3) and frames.dtype == np.uint8
    np.testing.assert_array_equal(frames[:, 0, 0, 0], [1, 2, 203])
    np.testing.assert_array_equal(seen[3][1][:, 0, 0, 0], [1, 2, 3, 204])
    kept = label_interactively(reader, lambda r, f: "k" if r.id == 2 else "", episodes=[2, 0])
    assert np.all(kept == U)


def test_label_interactively_without_a_camera_gives_no_frames(tmp_path: Path) -> None:
    path = make_store(tmp_path / "s", [dict(steps=2, success=True)], fields=(STATE,))
    seen = []
    reader = open_store(path)
    got = label_interactively(reader, lambda r, f: seen.append(f) or "0")
    assert seen == [None] and camera_field(reader) is None
    np.testing.assert_array_equal(got, [S, S])


def test_write_then_read_back_with_who_and_when(store: Path) -> None:
    auto = labels_from_success(open_store(store))
    written = write_labels(store, auto, by="ann@lab", method="success")
    back = read_labels(store)
    np.testing.assert_array_equal(back.success, auto)
    np.testing.assert_array_equal(back.source, np.zeros(9, np.int8))
    np.testing.assert_array_equal(written.success, back.success)
    assert back.sources == written.sources and len(back.sources) == 1
    (who,) = back.sources
    assert (who["by"], who["method"]) == ("ann@lab", "success")
    when = datetime.fromisoformat(who["time"])
    assert when.utcoffset() == timedelta(0)
    assert back.counts() == {"success": 2, "failure": 7, "unlabelled": 0}
    record = json.loads((store / "zarr.json").read_text())["attributes"]["labels"]
    assert record["num_steps"] == 9 and record["sources"] == [who]
    assert open_store(store).num_episodes == 3  # the episodes are as they were


def test_a_correction_overrides_only_the_steps_it_labels(store: Path) -> None:
    write_labels(store, labels_from_success(open_store(store)), by="auto", method="success")
    fix = np.full(9, U, np.int8)
    fix[5] = SUCCESS  # a person saw success one step earlier in episode 1
    fix[8] = FAILURE
    merged = write_labels(store, fix, by="ann", method="interactive")
    np.testing.assert_array_equal(merged.success, [F, F, F, F, F, S, S, F, F])
    np.testing.assert_array_equal(merged.source, [0, 0, 0, 0, 0, 1, 0, 0, 1])
    assert [s["by"] for s in merged.sources] == ["auto", "ann"]
    np.testing.assert_array_equal(read_labels(store).source, merged.source)
    # Nothing to say: nothing written, the labels stay.
    same = write_labels(store, np.full(9, U, np.int8), by="x", method="m")
    assert same.sources == merged.sources == read_labels(store).sources
    # Relabelling every step drops the sources no step refers to any more.
    again = write_labels(store, np.full(9, FAILURE, np.int8), by="bob", method="success")
    assert [s["by"] for s in again.sources] == ["bob"] and np.all(again.source == 0)
    assert sorted(p.name for p in (store / "labels").iterdir() if p.is_dir()) == ["1", "2"]


def test_steps_committed_after_labelling_read_unlabelled(store: Path) -> None:
    write_labels(store, np.full(9, FAILURE, np.int8), by="a", method="success")
    with open_writer(store, durable=False) as w:  # recovery leaves the label arrays alone
        add_episode(w, 3, success=True)
    labels = read_labels(store)
    np.testing.assert_array_equal(labels.success, [F] * 9 + [U] * 3)
    np.testing.assert_array_equal(labels.source, [0] * 9 + [-1] * 3)
    with pytest.raises(ValueError, match=r"shape \(9,\); the store has 12 committed steps"):
        write_labels(store, np.full(9, SUCCESS, np.int8), by="a", method="success")
    roll_back(store, 2)  # the record still covers 9 steps; only the 7 the store holds are read
    assert read_labels(store).success.tolist() == [F] * 7


class Killed(Exception):
    """The process dies here."""


def test_a_write_killed_before_the_record_leaves_the_old_labels(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = write_labels(store, labels_from_success(open_store(store)), by="a", method="success")

    def killed_before_replace(path, obj, **kwargs) -> None:
        def hook(point: str) -> None:
            if point == "replace_record":  # the arrays and the temp record are on disk
                raise Killed(point)

        atomic_write_json(path, obj, hook=hook)

    monkeypatch.setattr(labels_mod, "atomic_write_json", killed_before_replace)
    with pytest.raises(Killed):
        write_labels(store, np.full(9, SUCCESS, np.int8), by="b", method="interactive")
    assert (store / "labels" / "1" / "success").is_dir()  # the new arrays were written
    back = read_labels(store)
    np.testing.assert_array_equal(back.success, old.success)
    assert back.sources == old.sources
    assert validate_store(store) == []
    monkeypatch.undo()
    with open_writer(store, durable=False) as w:  # the next writer cleans up and appends
        add_episode(w, 2, success=False)
    assert not list(store.rglob("*.handrail-tmp"))
    np.testing.assert_array_equal(read_labels(store).success, [*old.success, U, U])
    new = write_labels(store, np.full(11, SUCCESS, np.int8), by="b", method="interactive")
    assert np.all(read_labels(store).success == SUCCESS) and new.counts()["success"] == 11
    assert sorted(p.name for p in (store / "labels").iterdir() if p.is_dir()) == ["0", "2"]


def test_a_rollback_takes_the_dropped_steps_labels_with_it(store: Path) -> None:
    write_labels(store, labels_from_success(open_store(store)), by="a", method="success")
    roll_back(store, 2)  # a resumed recording run drops episode 2 (2 steps) ...
    with open_writer(store, durable=False) as w:  # ... and records a new one in its place
        add_episode(w, 3, success=False)
    np.testing.assert_array_equal(read_labels(store).success, [F, F, F, F, F, F, S, U, U, U])


def _two_labellings(store: Path) -> None:
    """Episode 0 (3 steps) labelled by "a"; episodes 1 and 2 (4 and 2 steps) by "b", who left
    step 3 unlabelled."""
    write_labels(store, np.array([F, F, F, U, U, U, U, U, U], np.int8), by="a", method="success")
    write_labels(store, np.array([U, U, U, U, F, F, S, F, S], np.int8), by="b", method="reward")


def test_a_labelled_store_validates_and_filters_with_its_labels(
    store: Path, tmp_path: Path
) -> None:
    _two_labellings(store)
    assert validate_store(store) == []
    sub = tmp_path / "sub"
    assert filter_store(store, sub, episodes=[0, 2]) == 2
    assert validate_store(sub) == [] and open_store(sub).num_steps == 5
    copied = read_labels(sub)  # each step's label, and who set it, comes along
    assert copied.success.tolist() == [F, F, F, F, S]
    assert [copied.sources[i]["by"] for i in copied.source] == ["a", "a", "a", "b", "b"]
    only_b = tmp_path / "only_b"
    assert filter_store(store, only_b, episodes=[1]) == 1
    assert read_labels(only_b).success.tolist() == [U, F, F, S]
    assert [s["by"] for s in read_labels(only_b).sources] == ["b"]  # "a" labelled none of it
    assert filter_store(store, store, episodes=[2, 0], overwrite=True) == 2  # in place
    assert read_labels(store).success.tolist() == [F, S, F, F, F]
    unlabelled = make_store(tmp_path / "plain", [dict(steps=3, success=True)])
    assert filter_store(unlabelled, tmp_path / "plain_sub") == 1
    assert read_labels(tmp_path / "plain_sub").sources == ()


def test_a_labelled_store_merges_with_its_labels_and_exports(store: Path, tmp_path: Path) -> None:
    from handrail.demos.io.robomimic import export_robomimic

    _two_labellings(store)
    plain = make_store(tmp_path / "plain", [dict(steps=2, success=True)])
    assert merge_stores([store, plain, store], tmp_path / "m") == 7
    merged = read_labels(tmp_path / "m")
    want = [F, F, F, U, F, F, S, F, S]
    assert merged.success.tolist() == [*want, U, U, *want]
    assert [s["by"] for s in merged.sources] == ["a", "b", "a", "b"]  # per source store
    assert validate_store(tmp_path / "m") == []
    assert export_robomimic(store, tmp_path / "d.hdf5").episodes == 3


def test_a_recorder_writing_the_store_blocks_labelling(store: Path) -> None:
    locked = pytest.raises(StoreLockedError, match=f"open for writing by process {os.getpid()}")
    with open_writer(store, durable=False), locked:
        write_labels(store, np.full(9, FAILURE, np.int8), by="a", method="success")
    with open_writer(store, durable=False), pytest.raises(StoreLockedError):
        check_writable(store)  # what a command checks before a person starts labelling
    check_writable(store)
    assert read_labels(store).sources == ()


def test_damaged_label_arrays_are_an_error(store: Path) -> None:
    write_labels(store, np.full(9, FAILURE, np.int8), by="a", method="success")
    (store / "labels" / "0" / "source" / "c" / "0").unlink()
    with pytest.raises(StoreCorruptError, match=r"chunk labels/0/source/c/0 .* is missing"):
        read_labels(store)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p, r: write_labels(p, np.zeros(8, np.int8), by="a", method="m"),
         r"success has shape \(8,\); the store has 9 committed steps"),
        (lambda p, r: write_labels(p, np.zeros(9, np.int64), by="a", method="m"),
         "success has dtype int64; labels are int8"),
        (lambda p, r: write_labels(p, np.full(9, 2, np.int8), by="a", method="m"),
         r"success holds \[2\]; a label is -1 \(unlabelled\), 0 \(failure\) or 1 \(success\)"),
        (lambda p, r: write_labels(p, np.zeros(9, np.int8), by="", method="m"),
         "by='' must be a non-empty str"),
        (lambda p, r: labels_from_success(r, last=0), "last=0 must be an int >= 1"),
        (lambda p, r: labels_from_interventions(r, last=0), "last=0 must be an int >= 1"),
        (lambda p, r: labels_from_interventions(r, before=-1), "before=-1 must be an int >= 0"),
        (lambda p, r: labels_from_success(r, episodes=[1, 3]),
         "id 3 is out of range; this store has ids 0..2"),
        (lambda p, r: label_interactively(r, lambda rec, f: "", episodes=[5]),
         "id 5 is out of range"),
    ],
)  # fmt: skip
def test_bad_input_is_one_clear_line(store: Path, call, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        call(store, open_store(store))
    assert "\n" not in str(info.value)
    assert read_labels(store).sources == ()  # nothing was written
