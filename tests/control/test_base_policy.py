"""Base policies: a chunked model is queried once per `execute` steps and starts a new chunk at
each episode; the temporal ensemble is the weighted mean of every prediction for the step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from handrail.control.base_policy import BasePolicy, CallableBase, ChunkedBase


class Counter:
    """A chunk model whose chunk predicted at query q is rows q*10 + k (k = 0..horizon-1)."""

    def __init__(self, horizon: int) -> None:
        self.horizon, self.queries = horizon, 0

    def __call__(self, obs: Any) -> np.ndarray:
        q = self.queries
        self.queries += 1
        return np.array([[q * 10.0 + k] for k in range(self.horizon)], np.float32)


def test_chunks_are_played_for_execute_steps_then_requeried() -> None:
    model = Counter(horizon=4)
    base = ChunkedBase(model, execute=3)
    actions = [float(base({})[0]) for _ in range(7)]
    assert actions == [0, 1, 2, 10, 11, 12, 20]
    assert base.queries == model.queries == 3


def test_reset_starts_a_new_chunk_and_forwards_the_seed() -> None:
    seeds: list[int | None] = []
    base = ChunkedBase(Counter(horizon=4), execute=4, reset_fn=seeds.append)
    base({}), base({})
    base.reset(seed=7)
    assert float(base({})[0]) == 10 and seeds == [7]  # a fresh chunk, not row 2 of the old one


def test_temporal_ensemble_is_the_weighted_mean_of_all_predictions_for_the_step() -> None:
    m = 0.5
    base = ChunkedBase(Counter(horizon=3), temporal_ensemble=True, ensemble_m=m)
    got = [float(base({})[0]) for _ in range(4)]
    # step t's predictions: from the query at t - i, its row i (i < horizon); oldest first
    expected = []
    for t in range(4):
        preds = [(t - i) * 10.0 + i for i in range(min(t, 2), -1, -1)]  # oldest first
        w = np.exp(-m * np.arange(len(preds)))
        expected.append(float(w @ preds / w.sum()))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    base.reset()
    assert float(base({})[0]) == 40.0  # only the new query's row 0 after a reset


def test_bad_chunks_and_settings_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="execute"):
        ChunkedBase(Counter(2), execute=0)
    with pytest.raises(ValueError, match=r"\(horizon, action_dim\)"):
        ChunkedBase(lambda obs: np.zeros(3))({})
    with pytest.raises(ValueError, match="lower execute"):
        ChunkedBase(Counter(horizon=2), execute=3)({})


def test_callable_base_forwards_reset_and_checks_callability() -> None:
    class Expert:
        seed: int | None = None

        def __call__(self, obs: Any) -> np.ndarray:
            return np.ones(2)

        def reset(self, seed: int | None = None) -> None:
            self.seed = seed

    expert = Expert()
    base = CallableBase(expert)
    assert isinstance(base, BasePolicy)
    base.reset(seed=3)
    assert expert.seed == 3 and base({}).dtype == np.float32
    with pytest.raises(TypeError, match="not callable"):
        CallableBase(42)  # type: ignore[arg-type]
