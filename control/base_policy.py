"""Base policies for residual RL: one interface over experts, callables, chunked models.

A base policy maps an env observation (a dict of arrays) to an action in env units and may
keep state over an episode (a scripted expert's phase, an action chunk being executed), so it
has ``reset(seed)``, called at every episode start. Residual RL learns a small correction on
top of it (:mod:`handrail.learners.agents.residual`); the base itself never changes.

Chunked policies (ACT, diffusion policies, a chunked BC policy) predict several actions per
query. :class:`ChunkedBase` turns one of those into a per-step base: it queries the model once
every ``execute`` steps and plays the chunk's actions in between, or, with a temporal ensemble
(ACT, Zhao et al. 2023, Sec. 3.3), queries every step and averages every prediction made for
the current step, weighting the older ones more (``exp(-m * i)``, ``i = 0`` the oldest).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

Obs = Mapping[str, np.ndarray]
"""An env observation as a dict of arrays."""

BASE_ACTION_KEY = "base_action"
"""Observation key under which residual RL adds the base policy's action (in [-1, 1])."""


@runtime_checkable
class BasePolicy(Protocol):
    """``policy(obs) -> action`` (env units, shape (action_dim,)) with an episode reset."""

    def __call__(self, obs: Obs) -> np.ndarray:
        """The action for this step."""
        ...

    def reset(self, seed: int | None = None) -> None:
        """Start a new episode (``seed``: the episode's reset seed, when known)."""
        ...


class CallableBase:
    """Any ``obs -> action`` callable as a :class:`BasePolicy` (its ``reset`` is forwarded).

    Args:
        fn: the policy; a ``reset(seed=...)`` method on it is called at each episode start.
        name: how the base is named in logs and errors.
    """

    def __init__(self, fn: Callable[[Obs], Any], name: str = "callable") -> None:
        if not callable(fn):
            raise TypeError(f"base policy {name!r}: {fn!r} is not callable (need obs -> action)")
        self.fn, self.name = fn, name

    def __call__(self, obs: Obs) -> np.ndarray:
        return np.asarray(self.fn(obs), np.float32)

    def reset(self, seed: int | None = None) -> None:
        reset = getattr(self.fn, "reset", None)
        if reset is not None:
            reset(seed=seed)


class ChunkedBase:
    """A chunk-predicting model as a per-step :class:`BasePolicy` (see the module docstring).

    Args:
        query: ``obs -> (horizon, action_dim)`` actions in env units for this step and the next.
        execute: actions played from each chunk before the next query (1..horizon); ignored
            with ``temporal_ensemble``, which queries every step.
        temporal_ensemble: average all predictions for the current step (ACT).
        ensemble_m: the ensemble's weight decay ``m`` (ACT's default 0.01).
        reset_fn: called with the seed at every episode start (the model's own state).

    Attributes:
        queries: model queries so far (tests count them).
    """

    def __init__(
        self,
        query: Callable[[Obs], Any],
        *,
        execute: int = 1,
        temporal_ensemble: bool = False,
        ensemble_m: float = 0.01,
        reset_fn: Callable[[int | None], None] | None = None,
    ) -> None:
        if execute < 1:
            raise ValueError(f"ChunkedBase: execute must be >= 1, got {execute}")
        if ensemble_m < 0:
            raise ValueError(f"ChunkedBase: ensemble_m must be >= 0, got {ensemble_m}")
        self.query, self.execute = query, execute
        self.temporal_ensemble, self.ensemble_m = temporal_ensemble, ensemble_m
        self.reset_fn = reset_fn
        self.queries = 0
        self._chunk: np.ndarray | None = None
        self._played = 0
        self._pending: deque[np.ndarray] = deque()  # ensemble: predictions still covering steps

    def _ask(self, obs: Obs) -> np.ndarray:
        chunk = np.asarray(self.query(obs), np.float32)
        if chunk.ndim != 2 or chunk.shape[0] < 1:
            raise ValueError(
                f"ChunkedBase: the model returned shape {chunk.shape}; a chunked base must "
                "return (horizon, action_dim) actions"
            )
        if not self.temporal_ensemble and chunk.shape[0] < self.execute:
            raise ValueError(
                f"ChunkedBase: execute={self.execute} but the model predicts only "
                f"{chunk.shape[0]} actions per query; lower execute to at most the horizon"
            )
        self.queries += 1
        return chunk

    def __call__(self, obs: Obs) -> np.ndarray:
        if self.temporal_ensemble:
            self._pending.append(self._ask(obs))
            # The i-th pending chunk (oldest first) was predicted len - 1 - i steps ago, so its
            # row for this step is that offset; drop the chunks that no longer reach this step.
            while len(self._pending[0]) < len(self._pending):
                self._pending.popleft()
            count = len(self._pending)
            rows = np.stack([c[count - 1 - i] for i, c in enumerate(self._pending)])
            weights = np.exp(-self.ensemble_m * np.arange(count))
            return (weights @ rows / weights.sum()).astype(np.float32)
        if self._chunk is None or self._played >= self.execute:
            self._chunk, self._played = self._ask(obs), 0
        action = self._chunk[self._played]
        self._played += 1
        return action.copy()

    def reset(self, seed: int | None = None) -> None:
        self._chunk, self._played = None, 0
        self._pending.clear()
        if self.reset_fn is not None:
            self.reset_fn(seed)
