"""nan and inf in a store: found per episode and field, named with the filter that drops them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.demos import NonFiniteError, create_store, open_store
from handrail.demos import finite as finite_mod
from handrail.demos.episodes import Episode, write_episode, write_store
from handrail.demos.finite import find_non_finite, format_ids, require_finite
from handrail.demos.format import FieldSpec
from handrail.demos.ops import filter_store, store_meta

FIELDS = [
    FieldSpec("state", "float32", (3,), "m"),
    FieldSpec("cam", "uint8", (4, 4, 3)),
    FieldSpec("count", "int32", ()),
]


def episodes(count: int, steps: int) -> list[Episode]:
    """Finite episodes of ``steps`` steps each."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(count):
        obs = {
            "state": rng.standard_normal((steps + 1, 3)).astype(np.float32),
            "cam": rng.integers(0, 256, (steps + 1, 4, 4, 3), dtype=np.uint8),
            "count": np.arange(steps + 1, dtype=np.int32),
        }
        out.append(
            Episode(
                obs={k: v[:-1] for k, v in obs.items()},
                final_obs={k: v[-1] for k, v in obs.items()},
                action=rng.uniform(-1, 1, (steps, 2)).astype(np.float32),
                policy_action=rng.uniform(-1, 1, (steps, 2)).astype(np.float32),
                reward=rng.standard_normal(steps).astype(np.float32),
                terminated=np.zeros(steps, bool),
                truncated=np.arange(steps) == steps - 1,
                success=True,
                seed=i,
            )
        )
    return out


def write_as_is(path: Path, eps: list[Episode]) -> None:
    """A store holding ``eps`` exactly, nan included (the writer itself stores what it is given,
    as any other Zarr writer could)."""
    with create_store(
        path, kind="demo", obs_fields=FIELDS, action_dim=2, control_dt_s=0.1, task="t",
        durable=False,
    ) as writer:  # fmt: skip
        for ep in eps:
            write_episode(writer, ep)


@pytest.fixture
def bad_store(tmp_path: Path) -> Path:
    """Six episodes of 7 steps; episodes 1, 3, 4 and 5 hold nan or inf."""
    eps = episodes(6, steps=7)
    eps[1].obs["state"][5, 2] = np.nan
    eps[1].obs["state"][6, 0] = np.inf  # later in the same field: the first one is named
    eps[3].action[2, 0] = np.inf
    eps[3].reward[0] = -np.inf
    eps[4].final_obs["state"][1] = np.nan
    eps[5].policy_action[6, 1] = np.nan
    write_as_is(tmp_path / "s", eps)
    return tmp_path / "s"


def test_the_first_nan_or_inf_of_each_field_and_episode_is_found(
    bad_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(finite_mod, "_BLOCK_BYTES", 24)  # two rows per read: bad rows in any block
    found = find_non_finite(open_store(bad_store))
    assert [(f.episode, f.field, f.step, str(f.value)) for f in found] == [
        (1, "obs 'state'", 5, "nan"),
        (3, "action", 2, "inf"),
        (3, "reward", 0, "-inf"),
        (4, "final_obs 'state'", None, "nan"),
        (5, "policy_action", 6, "nan"),
    ]
    (only,) = find_non_finite(open_store(bad_store), [0, 2, 4])
    assert only.describe() == "episode 4: final_obs 'state' is nan"
    assert found[0].describe() == "episode 1: obs 'state' is nan at step 5"


def test_the_error_names_the_store_the_episodes_and_the_filter_that_leaves_them_out(
    bad_store: Path, tmp_path: Path
) -> None:
    with pytest.raises(NonFiniteError) as info:
        require_finite(open_store(bad_store))
    message = str(info.value)
    assert message.startswith(f"{bad_store}: 4 episode(s) hold nan or inf")
    assert "episode 1: obs 'state' is nan at step 5; episode 3: action is inf at step 2" in message
    assert "episode 4: final_obs 'state' is nan" in message
    fix = f"handrail demos filter {bad_store} --out {bad_store}-finite --episodes 0,2"
    assert message.endswith(fix)
    require_finite(open_store(bad_store), [0, 2])  # the others are fine
    assert filter_store(bad_store, tmp_path / "clean", episodes=[0, 2]) == 2
    require_finite(open_store(tmp_path / "clean"))


def test_a_store_where_every_episode_is_bad_says_to_fix_the_source(tmp_path: Path) -> None:
    eps = episodes(2, steps=3)
    for ep in eps:
        ep.reward[1] = np.nan
    write_as_is(tmp_path / "s", eps)
    with pytest.raises(NonFiniteError, match="every episode holds them: fix the source"):
        require_finite(open_store(tmp_path / "s"))


def test_copying_an_episode_with_nan_into_a_store_is_refused_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    eps = episodes(3, steps=4)
    eps[2].obs["state"][3, 1] = np.nan
    meta = store_meta(open_store(_finite_store(tmp_path)))
    with pytest.raises(
        NonFiniteError, match="episode 2 of the input: obs 'state' is nan at step 3"
    ):
        write_store(tmp_path / "out", meta, eps)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok"]  # no store, no partial folder


def _finite_store(tmp_path: Path) -> Path:
    write_as_is(tmp_path / "ok", episodes(1, steps=2))
    return tmp_path / "ok"


def test_episode_lists_are_written_as_ranges() -> None:
    assert format_ids([7, 0, 1, 2, 5, 8]) == "0-2,5,7-8"
    assert format_ids([3]) == "3" and format_ids([]) == ""
