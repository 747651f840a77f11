"""Store summary, validation, filter and merge on small synthetic stores."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from handrail.demos import (
    FieldMismatchError,
    FieldSpec,
    NonFiniteError,
    StoreCorruptError,
    StoreLockedError,
    create_store,
    open_store,
    open_writer,
)
from handrail.demos.ops import (
    Episode,
    filter_store,
    format_episode_table,
    format_summary,
    merge_stores,
    store_meta,
    summarize,
    validate_store,
    write_store,
)

FIELDS = [FieldSpec("proprio", "float32", (4,), "m"), FieldSpec("goal", "float64", (3,))]


def make_store(path: Path, lengths: list[int], *, seed: int = 0, fields=FIELDS) -> list[Episode]:
    """Writes episodes of the given lengths; odd ones successful, every third with a human step."""
    rng = np.random.default_rng(seed)
    episodes = []
    with create_store(
        path,
        kind="demo",
        obs_fields=fields,
        action_dim=2,
        control_dt_s=0.05,
        task="reach",
        durable=False,
    ) as w:
        for i, steps in enumerate(lengths):
            w.begin_episode(seed=100 + i)
            obs = {f.name: rng.normal(size=(steps + 1, *f.shape)).astype(f.dtype) for f in fields}
            act = rng.uniform(-1, 1, (steps, 2)).astype(np.float32)
            interv = np.zeros(steps, np.int8)
            if i % 3 == 0:
                interv[0] = 1
            for t in range(steps):
                w.add_step(
                    obs={k: v[t] for k, v in obs.items()},
                    action=act[t],
                    intervention=int(interv[t]),
                    reward=float(t),
                    terminated=False,
                    truncated=t == steps - 1,
                    timestamp=1000.0 + t,
                )
            w.end_episode(final_obs={k: v[-1] for k, v in obs.items()}, success=i % 2 == 1)
            episodes.append(
                Episode(
                    obs={k: v[:-1] for k, v in obs.items()},
                    final_obs={k: v[-1] for k, v in obs.items()},
                    action=act,
                    reward=np.arange(steps, dtype=np.float32),
                    terminated=np.zeros(steps, bool),
                    truncated=np.arange(steps) == steps - 1,
                    intervention=interv,
                    success=i % 2 == 1,
                    seed=100 + i,
                )
            )
    return episodes


def test_summary_counts_episodes_steps_success_and_interventions(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [3, 1, 5, 2])
    s = summarize(tmp_path / "s")
    assert (s.num_episodes, s.num_steps, s.num_successful) == (4, 11, 2)
    assert s.num_intervened_steps == 2  # episodes 0 and 3
    assert s.success_rate == 0.5
    on_disk = [p.stat().st_size for p in (tmp_path / "s").rglob("*") if p.is_file()]
    assert s.size_bytes == sum(on_disk)
    table = format_summary(s)
    for text in ("episodes", "11", "50.0%", "proprio", "float64", "size on disk"):
        assert text in table


def test_summary_counts_who_acted_per_episode(tmp_path: Path) -> None:
    eps = make_store(tmp_path / "s", [4, 2, 3, 1])
    patterns = [[1, 1, 0, 2], [0, 0], [2, 1, 0], [2]]  # 0 policy, 1 human, 2 scripted
    for ep, who in zip(eps, patterns, strict=True):
        ep.intervention = np.array(who, np.int8)
    write_store(tmp_path / "p", store_meta(open_store(tmp_path / "s")), eps)
    s = summarize(tmp_path / "p")
    rows = [(e.episode, e.num_steps, e.num_human, e.num_scripted, e.success) for e in s.episodes]
    assert rows == [
        (0, 4, 2, 1, False),
        (1, 2, 0, 0, True),
        (2, 3, 1, 1, False),
        (3, 1, 0, 1, True),
    ]
    assert [e.human_share for e in s.episodes] == pytest.approx([0.5, 0.0, 1 / 3, 0.0])
    assert s.num_human_steps == 3 and s.human_share == pytest.approx(3 / 10)
    assert s.num_intervened_steps == 6 and s.intervention_share == pytest.approx(0.6)
    assert "human share         30.0% (3 steps by a human)" in format_summary(s)
    header, *lines = format_episode_table(s.episodes).splitlines()
    assert header.split() == ["episode", "steps", "human", "scripted", "human", "%", "success"]
    assert [ln.split() for ln in lines] == [
        ["0", "4", "2", "1", "50.0%", "no"],
        ["1", "2", "0", "0", "0.0%", "yes"],
        ["2", "3", "1", "1", "33.3%", "no"],
        ["3", "1", "0", "1", "0.0%", "yes"],
    ]


def test_summary_of_a_store_without_interventions(tmp_path: Path) -> None:
    """Importers write no intervention column: every step is the policy's, shares are zero."""
    eps = make_store(tmp_path / "s", [3, 2])
    for ep in eps:
        ep.intervention = None
    write_store(tmp_path / "p", store_meta(open_store(tmp_path / "s")), eps)
    s = summarize(tmp_path / "p")
    assert [(e.num_human, e.num_scripted, e.human_share) for e in s.episodes] == [(0, 0, 0.0)] * 2
    assert s.human_share == 0.0 and s.intervention_share == 0.0
    assert "0.0%" in format_episode_table(s.episodes)


def test_summary_of_an_empty_store(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [])
    s = summarize(tmp_path / "s")
    assert s.episodes == () and np.isnan(s.human_share)
    assert "human share         n/a (0 steps by a human)" in format_summary(s)


def test_validate_passes_a_clean_store(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [2, 3])
    assert validate_store(tmp_path / "s") == []


def _damage_one_chunk(root: Path, array: str) -> Path:
    chunks = sorted(p for p in (root / array).rglob("*") if p.is_file() and p.name != "zarr.json")
    assert chunks, f"no chunk files under {array}"
    raw = bytearray(chunks[0].read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunks[0].write_bytes(bytes(raw))
    return chunks[0]


def test_validate_reports_a_damaged_chunk(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [4, 4])
    _damage_one_chunk(tmp_path / "s", "data/obs/proprio")
    problems = validate_store(tmp_path / "s")
    assert problems, "a flipped byte must be found"
    assert any("episode 0" in p for p in problems)


def test_validate_reports_a_path_that_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (problem,) = validate_store(tmp_path / "x")
    assert "NotAStoreError" in problem


def test_filter_keeps_selected_episodes_exactly(tmp_path: Path) -> None:
    eps = make_store(tmp_path / "s", [3, 1, 5, 2])
    assert filter_store(tmp_path / "s", tmp_path / "ok", successful_only=True) == 2
    data = open_store(tmp_path / "ok").load()
    np.testing.assert_array_equal(data.action, np.concatenate([eps[1].action, eps[3].action]))
    assert [r.seed for r in data.records] == [101, 103]
    assert all(r.success for r in data.records)
    assert filter_store(tmp_path / "s", tmp_path / "iv", interventions_only=True) == 2
    assert filter_store(tmp_path / "s", tmp_path / "ids", episodes=[2]) == 1
    np.testing.assert_array_equal(
        open_store(tmp_path / "ids").load().obs["goal"], eps[2].obs["goal"]
    )


def test_filter_rejects_unknown_episode_ids(tmp_path: Path) -> None:
    make_store(tmp_path / "s", [2])
    with pytest.raises(ValueError, match=r"\[5\]"):
        filter_store(tmp_path / "s", tmp_path / "o", episodes=[5])


def test_merge_concatenates_in_order_and_keeps_records(tmp_path: Path) -> None:
    a = make_store(tmp_path / "a", [2, 3], seed=1)
    b = make_store(tmp_path / "b", [4], seed=2)
    assert merge_stores([tmp_path / "a", tmp_path / "b"], tmp_path / "m") == 3
    data = open_store(tmp_path / "m").load()
    want = np.concatenate([a[0].obs["proprio"], a[1].obs["proprio"], b[0].obs["proprio"]])
    np.testing.assert_array_equal(data.obs["proprio"], want)
    np.testing.assert_array_equal(data.final_obs["goal"][2], b[0].final_obs["goal"])
    np.testing.assert_array_equal(data.intervention[:2], a[0].intervention)
    assert validate_store(tmp_path / "m") == []


def test_merge_with_different_fields_is_a_clear_error(tmp_path: Path) -> None:
    make_store(tmp_path / "a", [2])
    make_store(tmp_path / "b", [2], fields=[FieldSpec("proprio", "float32", (5,), "m")])
    with pytest.raises(FieldMismatchError, match="field specs"):
        merge_stores([tmp_path / "a", tmp_path / "b"], tmp_path / "m")


def _damage(store: Path, array: str) -> None:
    """Cut a few bytes off the first chunk of ``array`` (caught by its checksum on reading)."""
    chunk = sorted(p for p in (store / array / "c").rglob("*") if p.is_file())[0]
    chunk.write_bytes(chunk.read_bytes()[:-7])


def _left_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_failed_merge_leaves_nothing_at_out_so_a_rerun_works(tmp_path: Path) -> None:
    make_store(tmp_path / "a", [2, 3], seed=1)
    make_store(tmp_path / "b", [4], seed=2)
    _damage(tmp_path / "b", "data/intervention")  # read while copying, after a's episodes
    with pytest.raises(StoreCorruptError):
        merge_stores([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    assert _left_in(tmp_path) == ["a", "b"]  # no store, no hidden partial folder
    shutil.rmtree(tmp_path / "b")
    make_store(tmp_path / "b", [4], seed=2)  # the damage repaired, the same command again
    assert merge_stores([tmp_path / "a", tmp_path / "b"], tmp_path / "m") == 3
    assert validate_store(tmp_path / "m") == []


def test_filtering_a_store_onto_itself_keeps_the_selected_episodes(tmp_path: Path) -> None:
    eps = make_store(tmp_path / "s", [3, 1, 5, 2])
    assert filter_store(tmp_path / "s", tmp_path / "s", episodes=[2, 0], overwrite=True) == 2
    data = open_store(tmp_path / "s").load()
    np.testing.assert_array_equal(data.action, np.concatenate([eps[2].action, eps[0].action]))
    assert validate_store(tmp_path / "s") == [] and _left_in(tmp_path) == ["s"]


def test_a_replaced_store_stays_whole_until_its_replacement_is(tmp_path: Path) -> None:
    old = make_store(tmp_path / "s", [3])
    new = make_store(tmp_path / "n", [2, 2, 2], seed=3)

    def interrupted() -> Iterator[Episode]:
        yield new[0]
        raise KeyboardInterrupt  # Ctrl-C in the middle of the copy

    meta = store_meta(open_store(tmp_path / "n"))
    with pytest.raises(KeyboardInterrupt):
        write_store(tmp_path / "s", meta, interrupted(), overwrite=True)
    data = open_store(tmp_path / "s").load()
    np.testing.assert_array_equal(data.action, old[0].action)
    assert _left_in(tmp_path) == ["n", "s"]
    assert write_store(tmp_path / "s", meta, new, overwrite=True) == 3


def test_partial_outputs_of_killed_runs_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    make_store(tmp_path / "a", [2])
    stale = tmp_path / ".m.x1.handrail-partial"  # a killed merge's leftovers
    (stale / "m" / "data").mkdir(parents=True)
    live = tmp_path / ".m.x2.handrail-partial"  # another merge into m, running now
    live.mkdir()
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert merge_stores([tmp_path / "a", tmp_path / "a"], tmp_path / "m") == 2
        assert not stale.exists() and live.exists()
    finally:
        os.close(fd)


def test_a_store_another_process_writes_is_not_replaced(tmp_path: Path) -> None:
    make_store(tmp_path / "a", [2])
    make_store(tmp_path / "m", [1, 1])
    with open_writer(tmp_path / "m"), pytest.raises(StoreLockedError, match="open for writing"):
        merge_stores([tmp_path / "a", tmp_path / "a"], tmp_path / "m", overwrite=True)
    assert open_store(tmp_path / "m").num_episodes == 2
    assert _left_in(tmp_path) == ["a", "m"]


def test_a_folder_that_is_not_a_store_is_never_replaced(tmp_path: Path) -> None:
    make_store(tmp_path / "a", [2])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="not a handrail episode store"):
        filter_store(tmp_path / "a", tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    (tmp_path / "empty").mkdir()  # an empty folder is taken without --overwrite
    assert filter_store(tmp_path / "a", tmp_path / "empty") == 1


def test_nan_in_a_source_stops_filter_and_merge_before_anything_is_written(
    tmp_path: Path,
) -> None:
    from handrail.demos.episodes import write_episode

    eps = make_store(tmp_path / "a", [2, 3])
    eps[1].reward[2] = np.nan
    with create_store(tmp_path / "bad", kind="demo", obs_fields=FIELDS, action_dim=2,
                      control_dt_s=0.05, task="reach") as writer:  # fmt: skip
        for ep in eps:
            write_episode(writer, ep)  # the writer stores what it is given
    with pytest.raises(NonFiniteError, match="episode 1: reward is nan at step 2"):
        filter_store(tmp_path / "bad", tmp_path / "out")
    with pytest.raises(NonFiniteError, match=f"{tmp_path / 'bad'}: 1 episode"):
        merge_stores([tmp_path / "a", tmp_path / "bad"], tmp_path / "out")
    assert _left_in(tmp_path) == ["a", "bad"]
    assert filter_store(tmp_path / "bad", tmp_path / "out", episodes=[0]) == 1
