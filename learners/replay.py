"""In-RAM replay with n-step returns, and the symmetric demo/online sampler (RLPD).

Transitions are turned into n-step rows when they are added: a row is written once its k-step
return is known (k = n_step, or fewer when the episode ends first), so a stored row is exactly
what the update reads: ``(obs, action, reward_k, discount_k, next_obs_k)`` with
``discount_k = gamma**k * (1 - terminated)``. Sums never cross an episode boundary; a
``terminated`` end stops bootstrapping, a ``truncated`` end (time limit) bootstraps.

The caller must flag every episode end with ``terminated`` or ``truncated``: rows of the
unfinished tail (the last n_step - 1 transitions) are only written when their return is known.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

import numpy as np


class Batch(NamedTuple):
    """A minibatch (or a stack of them); numpy float32 or jax arrays with shared leading dims."""

    obs: Any
    action: Any
    reward: Any
    discount: Any
    next_obs: Any


def pack_width(obs_dim: int, action_dim: int) -> int:
    """Columns of a packed row: obs | action | reward | discount | next_obs."""
    return 2 * obs_dim + action_dim + 2


def unpack(rows: Any, obs_dim: int, action_dim: int) -> Batch:
    """Split packed rows (..., pack_width) into a :class:`Batch` (numpy or jax)."""
    a0 = obs_dim
    r0 = a0 + action_dim
    return Batch(
        obs=rows[..., :a0],
        action=rows[..., a0:r0],
        reward=rows[..., r0],
        discount=rows[..., r0 + 1],
        next_obs=rows[..., r0 + 2 :],
    )


class NStepBuilder:
    """Turns a stream of 1-step transitions into packed n-step rows (see module docstring)."""

    def __init__(self, obs_dim: int, action_dim: int, n_step: int, gamma: float) -> None:
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.n_step, self.gamma = n_step, gamma
        self._pending: deque[tuple[np.ndarray, np.ndarray, float]] = deque()

    @property
    def empty(self) -> bool:
        """True at an episode boundary (nothing waiting for its return)."""
        return not self._pending

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: float,
        next_obs: np.ndarray,
        terminated: bool,
        truncated: bool,
    ) -> np.ndarray:
        """Add one transition; returns the rows completed by it, shape (k, pack_width), k >= 0."""
        obs = np.asarray(obs, np.float32).reshape(self.obs_dim)
        action = np.asarray(action, np.float32).reshape(self.action_dim)
        self._pending.append((obs, action, float(reward)))
        ended = bool(terminated) or bool(truncated)
        if not ended and len(self._pending) < self.n_step:
            return np.zeros((0, pack_width(self.obs_dim, self.action_dim)), np.float32)
        count = len(self._pending) if ended else 1
        not_done = 0.0 if terminated else 1.0
        next_obs = np.asarray(next_obs, np.float32).reshape(self.obs_dim)
        rows = []
        for _ in range(count):
            ret, scale = 0.0, 1.0
            for _, _, r in self._pending:
                ret += scale * r
                scale *= self.gamma
            o, a, _ = self._pending.popleft()
            rows.append(np.concatenate([o, a, [ret, scale * not_done], next_obs]))
        return np.asarray(rows, np.float32)

    def reset(self) -> None:
        """Drop unfinished transitions (e.g. after an aborted episode)."""
        self._pending.clear()


class ReplayBuffer:
    """Ring buffer of packed n-step rows in numpy (flat observations)."""

    def __init__(
        self, obs_dim: int, action_dim: int, capacity: int, n_step: int = 1, gamma: float = 0.99
    ) -> None:
        if capacity < 1:
            raise ValueError(f"ReplayBuffer: capacity must be >= 1, got {capacity}")
        self.obs_dim, self.action_dim, self.capacity = obs_dim, action_dim, capacity
        self.n_step, self.gamma = n_step, gamma
        self.rows = np.zeros((capacity, pack_width(obs_dim, action_dim)), np.float32)
        self.pos = 0
        self.size = 0
        self._builder = NStepBuilder(obs_dim, action_dim, n_step, gamma)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: float,
        next_obs: np.ndarray,
        terminated: bool,
        truncated: bool,
    ) -> None:
        """Add one transition (flat obs, action in [-1, 1])."""
        self.add_rows(self._builder.add(obs, action, reward, next_obs, terminated, truncated))

    def add_rows(self, rows: np.ndarray) -> None:
        """Append already-packed n-step rows (k, pack_width)."""
        for row in rows:
            self.rows[self.pos] = row
            self.pos = (self.pos + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)

    def add_episode(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        """Add a whole episode: obs (T+1, D), actions (T, A), rewards/terminated/truncated (T,).

        If the last step is flagged neither terminated nor truncated, the episode is treated as
        truncated (it bootstraps from its final observation).
        """
        obs = np.asarray(obs, np.float32)
        steps = len(actions)
        if obs.shape != (steps + 1, self.obs_dim):
            raise ValueError(
                f"add_episode: obs must have shape (T+1, {self.obs_dim}) = ({steps + 1}, "
                f"{self.obs_dim}) for {steps} actions, got {obs.shape}"
            )
        for t in range(steps):
            last = t == steps - 1
            trunc = bool(truncated[t]) or (last and not bool(terminated[t]))
            self.add(obs[t], actions[t], rewards[t], obs[t + 1], bool(terminated[t]), trunc)

    def valid_rows(self) -> np.ndarray:
        """The filled rows (a view, in storage order)."""
        return self.rows[: self.size]

    def sample(self, rng: np.random.Generator, batch_size: int, num_batches: int = 1) -> Batch:
        """Uniform sample with replacement; leaves have leading shape (num_batches, batch_size)."""
        if self.size == 0:
            raise ValueError("ReplayBuffer.sample: the buffer is empty; add transitions first")
        idx = rng.integers(0, self.size, size=(num_batches, batch_size))
        return unpack(self.rows[idx], self.obs_dim, self.action_dim)


class MixedSampler:
    """Symmetric sampling ([RLPD] Sec. 3.1): each batch is part demos, part online data."""

    def __init__(
        self, online: ReplayBuffer, demos: ReplayBuffer | None, demo_ratio: float = 0.5
    ) -> None:
        if not 0.0 <= demo_ratio <= 1.0:
            raise ValueError(f"MixedSampler: demo_ratio must be in [0, 1], got {demo_ratio}")
        if demos is not None and (demos.obs_dim, demos.action_dim) != (
            online.obs_dim,
            online.action_dim,
        ):
            raise ValueError(
                f"MixedSampler: demo rows are (obs {demos.obs_dim}, action {demos.action_dim}) "
                f"but online rows are (obs {online.obs_dim}, action {online.action_dim})"
            )
        self.online, self.demos, self.demo_ratio = online, demos, demo_ratio

    def num_demo_rows(self, batch_size: int) -> int:
        """Demo rows per batch: round(batch_size * demo_ratio), or 0 without demos."""
        if self.demos is None or len(self.demos) == 0:
            return 0
        return round(batch_size * self.demo_ratio)

    def sample(self, rng: np.random.Generator, batch_size: int, num_batches: int = 1) -> Batch:
        """Demo rows first, then online rows, along the batch axis."""
        n_demo = self.num_demo_rows(batch_size)
        parts = []
        if n_demo > 0:
            parts.append(self.demos.sample(rng, n_demo, num_batches))  # type: ignore[union-attr]
        if batch_size - n_demo > 0:
            parts.append(self.online.sample(rng, batch_size - n_demo, num_batches))
        if len(parts) == 1:
            return parts[0]
        return Batch(*(np.concatenate(leaves, axis=1) for leaves in zip(*parts, strict=True)))
