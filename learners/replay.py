"""Replay as data: a pytree state with pure, jit-friendly ``insert`` and ``sample`` (Brax style).

Storage. One array per field, each in its own dtype (uint8 camera frames stay uint8), shared by
several named segments (``online``, ``demos``, ``interventions``...), each a ring with its own
capacity, insert position and size. Every observation is stored once: a row holds the
observation an action was taken on, that action and its reward, and ``next[row]``, the index
of the row holding the next observation. An episode's final observation is a row of its own
(no action; ``next = FINAL``). Rows of several actors may interleave: ``pending[segment,
actor]`` remembers each actor's last transition until the row of its next observation arrives.

n-step returns are computed when sampling, by following ``next`` from the sampled row for up to
``n_step`` transitions: the sum stops early at a terminal transition (no bootstrap) or at an
episode's final row (bootstrap from it: truncation and time limits bootstrap). A transition is
sampled only once every row its return needs has arrived.

Sampling. A :class:`Mixture` says how many rows of every minibatch come from each group of
segments (RLPD / HIL-SERL: half ``online``, half ``demos`` + ``interventions``); inside a group
rows are uniform over the group's transitions. Sizes are state, not shapes, so a growing
segment never recompiles a jitted update. A group with no rows yet lends its share to the
first group. Rows that are not (yet) transitions are skipped by drawing twice as many
candidates as needed and keeping the first valid ones, which keeps every draw uniform over the
valid rows (see :func:`sample`).

Ring overwrites are safe because ``next`` always points to a newer row: by the time a row is
overwritten, every row that could reach it has been overwritten before it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

PENDING = -1
"""``next`` of a transition whose next observation has not arrived yet."""
FINAL = -2
"""``next`` of a row that only holds an episode's final observation (not a transition)."""


_RESERVED = frozenset({"reward", "terminated", "next"})


@dataclass(frozen=True)
class ReplayField:
    """One stored field."""

    name: str
    """Field name, e.g. ``obs`` (the flat state), ``front`` (a camera) or ``action``."""
    shape: tuple[int, ...]
    """Per-row shape."""
    dtype: str
    """NumPy dtype name, e.g. ``float32`` or ``uint8``."""
    kind: Literal["obs", "step"] = "obs"
    """obs: part of the observation (read at the row and at the bootstrap row); step: belongs
    to the transition (read at the row only), like the action."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)
        if self.kind not in ("obs", "step"):
            raise ValueError(f"ReplayField {self.name!r}: kind must be obs or step")

    @property
    def row_bytes(self) -> int:
        """Bytes of this field per row."""
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class ReplayLayout:
    """What a replay holds: its fields, its segments and the n-step return it samples."""

    fields: tuple[ReplayField, ...]
    """Stored fields (observation parts, the action, extras)."""
    segments: tuple[tuple[str, int], ...]
    """(name, capacity in rows) of every segment, in storage order."""
    n_step: int = 1
    """Horizon of the n-step return."""
    gamma: float = 0.99
    """Discount per env step."""
    max_actors: int = 16
    """How many actors may interleave their episodes in one segment."""

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        seg_names = [s for s, _ in self.segments]
        problems = []
        if len(set(names)) != len(names) or set(names) & _RESERVED:
            problems.append(f"field names must be unique and not {sorted(_RESERVED)}, got {names}")
        if not self.segments or len(set(seg_names)) != len(seg_names):
            problems.append(f"need at least one segment with unique names, got {seg_names}")
        if any(cap < 2 for _, cap in self.segments):
            problems.append(f"every segment needs capacity >= 2 rows, got {self.segments}")
        if self.n_step < 1 or not 0.0 <= self.gamma <= 1.0 or self.max_actors < 1:
            problems.append(
                f"need n_step >= 1, gamma in [0, 1], max_actors >= 1; got {self.n_step}, "
                f"{self.gamma}, {self.max_actors}"
            )
        if problems:
            raise ValueError("ReplayLayout: " + "; ".join(problems))

    @property
    def total(self) -> int:
        """Rows over all segments."""
        return sum(cap for _, cap in self.segments)

    def segment(self, name: str) -> int:
        """Index of a segment by name (ValueError naming the segments otherwise)."""
        for i, (seg, _) in enumerate(self.segments):
            if seg == name:
                return i
        raise ValueError(f"replay has no segment {name!r}; it has {[s for s, _ in self.segments]}")

    def offset(self, segment: int) -> int:
        """First row of a segment in the shared arrays."""
        return sum(cap for _, cap in self.segments[:segment])

    def capacity(self, segment: int) -> int:
        """Rows of a segment."""
        return self.segments[segment][1]

    @property
    def row_bytes(self) -> int:
        """Bytes per row: every field plus reward (4), terminated (1) and next (4)."""
        return sum(f.row_bytes for f in self.fields) + 9

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict (saved with the replay, compared on load)."""
        return {
            "fields": [[f.name, list(f.shape), f.dtype, f.kind] for f in self.fields],
            "segments": [[s, c] for s, c in self.segments],
            "n_step": self.n_step,
            "gamma": self.gamma,
            "max_actors": self.max_actors,
        }


@flax.struct.dataclass
class ReplayState:
    """The whole replay as arrays (a pytree: can be donated, saved, sharded)."""

    data: dict[str, jax.Array]
    """(total, *shape) per field, each in its own dtype."""
    reward: jax.Array
    """(total,) float32: reward of the row's transition."""
    terminated: jax.Array
    """(total,) bool: the row's transition ended in a terminal state."""
    next: jax.Array
    """(total,) int32: row of the next observation, or PENDING / FINAL."""
    pos: jax.Array
    """(segments,) int32: next row to write, relative to the segment."""
    size: jax.Array
    """(segments,) int32: rows written, up to the capacity."""
    pending: jax.Array
    """(segments, max_actors) int32: each actor's transition awaiting its next row, or -1."""


class Rows(NamedTuple):
    """A block of rows to insert (NumPy or JAX), leading dim K; padding rows have valid False."""

    data: Mapping[str, Any]
    """(K, *shape) per field; zeros where a field does not apply (the action of a final row)."""
    reward: Any
    """(K,) float32."""
    terminated: Any
    """(K,) bool."""
    final: Any
    """(K,) bool: the row is an episode's final observation, not a transition."""
    first: Any
    """(K,) bool: the row starts an episode (it is not linked to the actor's previous row)."""
    actor: Any
    """(K,) int32 in [0, max_actors)."""
    valid: Any
    """(K,) bool: False rows are padding and are skipped."""


class Sample(NamedTuple):
    """Sampled n-step transitions, leading dims ``shape`` (e.g. (utd, batch))."""

    obs: dict[str, jax.Array]
    """obs-kind fields at the sampled row."""
    next_obs: dict[str, jax.Array]
    """obs-kind fields at the bootstrap row (k transitions later)."""
    step: dict[str, jax.Array]
    """step-kind fields (the action, extras) of the sampled transition."""
    reward: jax.Array
    """sum_{j<k} gamma^j r_j."""
    discount: jax.Array
    """gamma^k, or 0 when the k-th transition terminated."""
    group: jax.Array
    """Index of the mixture group the row came from (0 for the rows a group lent to group 0)."""
    segment: jax.Array
    """Index of the segment (``layout.segments``) the row came from."""


@dataclass(frozen=True)
class Mixture:
    """How many rows of each minibatch come from each group of segments."""

    groups: tuple[tuple[tuple[str, ...], int], ...]
    """((segment names, rows per minibatch), ...); group 0 also fills in for empty groups."""

    def __post_init__(self) -> None:
        if not self.groups or any(n < 0 for _, n in self.groups) or self.batch_size < 1:
            raise ValueError(f"Mixture: need groups with row counts >= 0 summing to >= 1: {self}")

    @property
    def batch_size(self) -> int:
        """Rows per minibatch."""
        return sum(n for _, n in self.groups)

    @classmethod
    def symmetric(
        cls,
        batch_size: int,
        ratio: float,
        online: Sequence[str] = ("online",),
        offline: Sequence[str] = ("demos", "interventions"),
    ) -> Mixture:
        """``round(batch_size * ratio)`` rows from ``offline``, the rest from ``online`` (RLPD)."""
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"Mixture: the offline ratio must be in [0, 1], got {ratio}")
        n_off = round(batch_size * ratio)
        return cls(((tuple(online), batch_size - n_off), (tuple(offline), n_off)))


def empty_columns(layout: ReplayLayout) -> dict[str, tuple[tuple[int, ...], Any, int]]:
    """Every per-row column of an empty replay: each field's, then ``reward``, ``terminated``
    and ``next``, as (shape of a row, dtype, fill value)."""
    columns: dict[str, tuple[tuple[int, ...], Any, int]] = {
        f.name: (f.shape, f.dtype, 0) for f in layout.fields
    }
    columns.update(reward=((), jnp.float32, 0), terminated=((), bool, 0),
                   next=((), jnp.int32, FINAL))  # fmt: skip
    return columns


def init(layout: ReplayLayout) -> ReplayState:
    """An empty replay."""
    total, segs = layout.total, len(layout.segments)
    columns = {name: jnp.full((total, *shape), fill, dtype)
               for name, (shape, dtype, fill) in empty_columns(layout).items()}  # fmt: skip
    return ReplayState(
        data={f.name: columns[f.name] for f in layout.fields},
        reward=columns["reward"],
        terminated=columns["terminated"],
        next=columns["next"],
        pos=jnp.zeros(segs, jnp.int32),
        size=jnp.zeros(segs, jnp.int32),
        pending=jnp.full((segs, layout.max_actors), -1, jnp.int32),
    )


@functools.partial(jax.jit, static_argnums=(0, 2), donate_argnums=1)
def insert(layout: ReplayLayout, state: ReplayState, segment: int, rows: Rows) -> ReplayState:
    """Append a block of rows to one segment (its ring overwrites its oldest rows).

    ``state`` is donated (updated in place); keep using the returned state.
    """
    return insert_fn(layout, state, segment, rows)


def insert_fn(layout: ReplayLayout, state: ReplayState, segment: int, rows: Rows) -> ReplayState:
    """Un-jitted body of :func:`insert`, for fusing into larger jitted functions."""
    offset, cap = layout.offset(segment), layout.capacity(segment)
    rows = jax.tree_util.tree_map(jnp.asarray, rows)

    def write(state: ReplayState, row: Rows) -> tuple[ReplayState, None]:
        # Every update is to one row and keeps the old value for padding rows (valid False),
        # so a write costs O(row), never O(capacity).
        valid = row.valid
        rel = state.pos[segment]
        p = offset + rel
        pend = state.pending[segment]
        pend = jnp.where(pend == p, -1, pend)  # an actor silent for a whole ring: forget it
        prev = jnp.where(row.first, -1, pend[row.actor])
        link_at = jnp.maximum(prev, 0)
        nxt = state.next.at[link_at].set(jnp.where(valid & (prev >= 0), p, state.next[link_at]))
        nxt = nxt.at[p].set(jnp.where(valid, jnp.where(row.final, FINAL, PENDING), nxt[p]))

        def put(arr: jax.Array, value: jax.Array) -> jax.Array:
            return arr.at[p].set(jnp.where(valid, value.astype(arr.dtype), arr[p]))

        new_pend = pend.at[row.actor].set(jnp.where(row.final, -1, p))
        new = ReplayState(
            data={k: put(v, row.data[k]) for k, v in state.data.items()},
            reward=put(state.reward, row.reward),
            terminated=put(state.terminated, row.terminated & ~row.final),
            next=nxt,
            pos=state.pos.at[segment].set(jnp.where(valid, (rel + 1) % cap, rel)),
            size=state.size.at[segment].set(
                jnp.where(valid, jnp.minimum(state.size[segment] + 1, cap), state.size[segment])
            ),
            pending=state.pending.at[segment].set(
                jnp.where(valid, new_pend, state.pending[segment])
            ),
        )
        return new, None

    state, _ = jax.lax.scan(write, state, rows)
    return state


def _n_step(
    layout: ReplayLayout, state: ReplayState, idx: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(valid, return, discount, bootstrap row) of the n-step transitions starting at ``idx``."""
    nxt, gamma = state.next, layout.gamma
    ok = jnp.ones(idx.shape, bool)
    ret = jnp.zeros(idx.shape, jnp.float32)
    scale = jnp.ones(idx.shape, jnp.float32)
    discount = jnp.zeros(idx.shape, jnp.float32)
    boot = idx
    stopped = jnp.zeros(idx.shape, bool)
    row = idx
    for hop in range(layout.n_step):
        link = nxt[row]
        ok &= stopped | (link >= 0)
        link = jnp.maximum(link, 0)
        term = state.terminated[row]
        ret = ret + jnp.where(stopped, 0.0, scale * state.reward[row])
        scale = jnp.where(stopped, scale, scale * gamma)
        discount = jnp.where(stopped, discount, jnp.where(term, 0.0, scale))
        boot = jnp.where(stopped, boot, link)
        stop_here = term | (nxt[link] == FINAL) | (hop == layout.n_step - 1)
        stopped = stopped | stop_here
        row = jnp.where(stopped, row, link)
    return ok, ret, discount, boot


def _candidates(
    layout: ReplayLayout, state: ReplayState, key: jax.Array, names: tuple[str, ...], shape: tuple
) -> tuple[jax.Array, jax.Array]:
    """Uniform rows over the union of some segments; also whether the union is empty."""
    segs = [layout.segment(n) for n in names]
    sizes = jnp.stack([state.size[s] for s in segs])
    ends = jnp.cumsum(sizes)
    total = ends[-1]
    u = jax.random.randint(key, shape, 0, jnp.maximum(total, 1))
    which = jnp.searchsorted(ends, u, side="right")
    starts = jnp.asarray([layout.offset(s) for s in segs], jnp.int32)
    before = ends - sizes
    rows = starts[which] + (u - before[which])
    return rows.astype(jnp.int32), total == 0


def sample(
    layout: ReplayLayout,
    state: ReplayState,
    key: jax.Array,
    mixture: Mixture,
    lead: tuple[int, ...] = (),
) -> Sample:
    """Draw minibatches of shape ``(*lead, mixture.batch_size)`` of n-step transitions.

    For every group, 2x its row count candidates are drawn uniformly over the group's rows, and
    the first valid ones (transitions whose n-step return is complete) are kept in draw order:
    the kept rows are i.i.d. uniform over the valid rows. Should a group draw fewer valid
    candidates than it needs (vanishingly rare unless most of its rows are final
    observations), the valid ones are reused in turn. Call it only when every group it draws
    from (after lending) holds at least one valid transition.
    """
    idx_parts, group_parts = [], []
    keys = jax.random.split(key, 2 * len(mixture.groups))
    for g, (names, count) in enumerate(mixture.groups):
        if count == 0:
            continue
        shape = (*lead, 2 * count)
        rows, empty = _candidates(layout, state, keys[2 * g], names, shape)
        if g > 0:  # an empty group lends its rows to group 0
            lent, _ = _candidates(layout, state, keys[2 * g + 1], mixture.groups[0][0], shape)
            rows = jnp.where(empty, lent, rows)
        ok = _n_step(layout, state, rows)[0]
        order = jnp.argsort(~ok, axis=-1, stable=True)
        n_ok = jnp.sum(ok, axis=-1, keepdims=True)
        slot = jnp.arange(count)
        slot = jnp.where(slot < n_ok, slot, slot % jnp.maximum(n_ok, 1))
        picked = jnp.take_along_axis(rows, jnp.take_along_axis(order, slot, axis=-1), axis=-1)
        idx_parts.append(picked)
        group_id = jnp.where(empty, 0, g) if g > 0 else 0
        group_parts.append(jnp.broadcast_to(jnp.asarray(group_id, jnp.int32), picked.shape))
    idx = jnp.concatenate(idx_parts, axis=-1)
    _, ret, discount, boot = _n_step(layout, state, idx)
    obs_fields = [f.name for f in layout.fields if f.kind == "obs"]
    return Sample(
        obs={k: state.data[k][idx] for k in obs_fields},
        next_obs={k: state.data[k][boot] for k in obs_fields},
        step={f.name: state.data[f.name][idx] for f in layout.fields if f.kind == "step"},
        reward=ret,
        discount=discount,
        group=jnp.concatenate(group_parts, axis=-1),
        segment=jnp.searchsorted(
            jnp.asarray([layout.offset(s) for s in range(1, len(layout.segments))], jnp.int32),
            idx,
            side="right",
        ).astype(jnp.int32),
    )


def valid_mask(layout: ReplayLayout, state: ReplayState) -> np.ndarray:
    """(total,) bool: rows that :func:`sample` may return (live transitions, complete return)."""
    rows = jnp.arange(layout.total, dtype=jnp.int32)
    ok = np.asarray(_n_step(layout, state, rows)[0])
    live = np.zeros(layout.total, bool)
    for s in range(len(layout.segments)):
        off = layout.offset(s)
        live[off : off + int(state.size[s])] = True
    return ok & live


def num_rows(layout: ReplayLayout, state: ReplayState, segment: str) -> int:
    """Rows written to a segment (transitions and final observations), up to its capacity."""
    return int(state.size[layout.segment(segment)])
