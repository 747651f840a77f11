"""Replay as data: insert/sample against a brute-force model, n-step at episode ends, several
actors interleaved, ring wrap-around, mixtures, uniform draws, save/load and memory per step."""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.learners import replay
from handrail.learners.replay import Mixture, ReplayField, ReplayLayout, Rows

GAMMA = 0.5
FIELDS = (ReplayField("obs", (1,), "float32"), ReplayField("action", (1,), "float32", "step"))


def rows(items: list[dict]) -> Rows:
    """Rows from dicts with obs (float id), action, reward, terminated, final, first, actor."""
    k = len(items)
    get = lambda name, default=0: np.array([it.get(name, default) for it in items])  # noqa: E731
    return Rows(
        data={"obs": get("obs").reshape(k, 1).astype(np.float32),
              "action": get("action").reshape(k, 1).astype(np.float32)},
        reward=get("reward").astype(np.float32), terminated=get("terminated", False).astype(bool),
        final=get("final", False).astype(bool), first=get("first", False).astype(bool),
        actor=get("actor").astype(np.int32), valid=get("valid", True).astype(bool),
    )  # fmt: skip


@dataclass
class Episode:
    """One actor's episode as the model sees it: obs o_0..o_m, rewards r_0..r_{m-1}."""

    obs: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    ended: bool = False
    terminated: bool = False


def expected(episode: Episode, t: int, n: int) -> tuple[float, float, float] | None:
    """(return, discount, bootstrap obs) of transition t, or None if it is not complete."""
    steps = len(episode.rewards)
    if episode.ended:
        k = min(n, steps - t)
    elif t + n <= steps - 1:
        k = n
    else:
        return None
    ret = sum(GAMMA**j * episode.rewards[t + j] for j in range(k))
    last = t + k == steps and episode.ended
    discount = 0.0 if (last and episode.terminated) else GAMMA**k
    return ret, discount, episode.obs[t + k]


def episode_rows(actor: int, episode_id: int, length: int, end: str) -> list[dict]:
    """Rows of one episode: obs ids actor*1e4 + episode*100 + t, reward t + 1; end in
    {terminated, truncated, open}: open leaves it unfinished (no final row)."""
    base = actor * 10_000 + episode_id * 100
    out = [{"obs": base + t, "action": -(base + t), "reward": t + 1.0, "actor": actor,
            "first": t == 0, "terminated": end == "terminated" and t == length - 1}
           for t in range(length)]  # fmt: skip
    if end != "open":
        out.append({"obs": base + length, "final": True, "actor": actor})
    return out


def model_of(schedule: list[dict], capacity: int, n: int) -> dict[float, tuple]:
    """Brute force: {obs id: expected (return, discount, next obs)} of every valid row."""
    live = schedule[-capacity:]
    episodes: dict[tuple[int, int], Episode] = {}
    for row in schedule:
        key = (row["actor"], int(row["obs"]) % 10_000 // 100)
        ep = episodes.setdefault(key, Episode())
        ep.obs.append(row["obs"])
        if row.get("final"):
            ep.ended = True
        else:
            ep.rewards.append(row["reward"])
            ep.terminated = bool(row["terminated"])
    out = {}
    for row in live:
        if row.get("final"):
            continue
        ep = episodes[(row["actor"], int(row["obs"]) % 10_000 // 100)]
        exp = expected(ep, ep.obs.index(row["obs"]), n)
        if exp is not None:
            out[row["obs"]] = exp
    return out


def check_against_model(layout: ReplayLayout, state, schedule: list[dict], seed: int = 0) -> None:
    model = model_of(schedule, layout.capacity(0), layout.n_step)
    valid = replay.valid_mask(layout, state)
    stored = np.asarray(state.data["obs"])[:, 0]
    assert sorted(stored[valid].tolist()) == sorted(model)
    if not model:
        return
    mix = Mixture(((("online",), 64),))
    got = replay.sample(layout, state, jax.random.PRNGKey(seed), mix, (3,))
    for o, a, r, d, nx in zip(*(np.asarray(x).ravel() for x in (
            got.obs["obs"], got.step["action"], got.reward, got.discount, got.next_obs["obs"])),
            strict=True):  # fmt: skip
        ret, disc, boot = model[float(o)]
        assert a == -o
        np.testing.assert_allclose([r, d, nx], [ret, disc, boot], rtol=1e-6)


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_n_step_at_episode_end(end: str) -> None:
    layout = ReplayLayout(FIELDS, (("online", 50),), n_step=3, gamma=GAMMA)
    schedule = episode_rows(0, 0, 4, end)
    state = replay.insert(layout, replay.init(layout), 0, rows(schedule))
    mix = Mixture(((("online",), 256),))
    got = replay.sample(layout, state, jax.random.PRNGKey(0), mix)
    by_obs = {
        float(o): (float(r), float(d), float(n))
        for o, r, d, n in zip(
            got.obs["obs"][:, 0], got.reward, got.discount, got.next_obs["obs"][:, 0], strict=True
        )
    }
    assert sorted(by_obs) == [0, 1, 2, 3]  # the final row is never a transition
    # Full 3-step returns where available, shorter ones at the end; rewards are t + 1.
    assert [by_obs[t][0] for t in range(4)] == [1 + 1 + 0.75, 2 + 1.5 + 1, 3 + 2, 4]
    assert [by_obs[t][2] for t in range(4)] == [3, 4, 4, 4]
    if end == "terminated":
        assert [by_obs[t][1] for t in range(4)] == [GAMMA**3, 0, 0, 0]
    else:  # truncation bootstraps from the final observation with the shorter horizon
        assert [by_obs[t][1] for t in range(4)] == [GAMMA**3, GAMMA**3, GAMMA**2, GAMMA]


def test_rows_wait_for_their_n_step_window_and_never_cross_episodes() -> None:
    layout = ReplayLayout(FIELDS, (("online", 50),), n_step=2, gamma=GAMMA)
    state = replay.init(layout)
    schedule = episode_rows(0, 0, 5, "open")
    state = replay.insert(layout, state, 0, rows(schedule[:3]))
    check_against_model(layout, state, schedule[:3])
    assert replay.valid_mask(layout, state).sum() == 1  # obs 0; obs 1 and 2 wait for obs 3
    state = replay.insert(layout, state, 0, rows(schedule[3:]))
    check_against_model(layout, state, schedule)
    nxt = episode_rows(0, 1, 3, "terminated")
    state = replay.insert(layout, state, 0, rows(nxt))
    # the unfinished episode's tail stays unsampleable; the new episode is not linked to it
    check_against_model(layout, state, schedule + nxt)


def test_padding_rows_change_nothing() -> None:
    layout = ReplayLayout(FIELDS, (("online", 8),), n_step=1)
    state = replay.init(layout)
    before = jax.tree_util.tree_map(np.asarray, state)
    pad = rows([{"obs": 5.0, "reward": 3.0, "valid": False}] * 3)
    after = replay.insert(layout, state, 0, pad)
    for a, b in zip(jax.tree_util.tree_leaves(before), jax.tree_util.tree_leaves(after),
                    strict=True):  # fmt: skip
        np.testing.assert_array_equal(a, np.asarray(b))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 6), st.sampled_from(["terminated", "truncated"])),
        min_size=1, max_size=12,
    ),
    st.integers(1, 3),
    st.integers(4, 30),
    st.integers(0, 2**16),
)  # fmt: skip
def test_interleaved_actors_ring_and_n_step_match_brute_force(
    episodes: list[tuple[int, int, str]], n_step: int, capacity: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    streams: dict[int, list[list[dict]]] = {}
    for actor, length, end in episodes:
        streams.setdefault(actor, []).append(
            episode_rows(actor, len(streams.get(actor, [])), length, end)
        )
    queues = {a: [r for ep in eps for r in ep] for a, eps in streams.items()}
    schedule: list[dict] = []
    while any(queues.values()):  # interleave the actors' rows at random
        actor = rng.choice([a for a, q in queues.items() if q])
        take = int(rng.integers(1, 4))
        schedule += queues[actor][:take]
        queues[actor] = queues[actor][take:]
    layout = ReplayLayout(FIELDS, (("online", capacity),), n_step=n_step, gamma=GAMMA,
                          max_actors=3)  # fmt: skip
    state, start = replay.init(layout), 0
    while start < len(schedule):  # blocks of random size, padded to 4 rows
        k = int(rng.integers(1, 5))
        block = schedule[start : start + k]
        padded = block + [{"valid": False}] * (4 - len(block))
        state = replay.insert(layout, state, 0, rows(padded))
        start += k
    assert int(state.size[0]) == min(capacity, len(schedule))
    check_against_model(layout, state, schedule, seed)


def test_mixture_counts_are_exact_and_empty_groups_lend_to_online() -> None:
    layout = ReplayLayout(FIELDS, (("online", 40), ("demos", 20), ("interventions", 20)),
                          n_step=1, gamma=GAMMA)  # fmt: skip
    state = replay.init(layout)
    state = replay.insert(layout, state, 0, rows(episode_rows(0, 0, 10, "truncated")))
    mix = Mixture.symmetric(16, 0.25)
    assert mix.groups == ((("online",), 12), (("demos", "interventions"), 4))
    got = replay.sample(layout, state, jax.random.PRNGKey(1), mix, (5,))
    assert np.all(np.asarray(got.group) == 0) and np.all(np.asarray(got.obs["obs"]) < 100)
    demo_rows = episode_rows(1, 0, 6, "terminated")
    for r in demo_rows:
        r["obs"] += 50_000
    state = replay.insert(layout, state, 1, rows(demo_rows))
    got = replay.sample(layout, state, jax.random.PRNGKey(2), mix, (5,))
    obs, group = np.asarray(got.obs["obs"])[..., 0], np.asarray(got.group)
    assert np.all((group == 1).sum(axis=-1) == 4)  # exact per minibatch
    assert np.all((obs >= 50_000) == (group == 1))
    assert np.all(group[:, :12] == 0)  # group order along the batch axis


def test_draws_are_uniform_over_valid_rows() -> None:
    # Short episodes: a third of the rows are final observations, which must not bend the draw.
    layout = ReplayLayout(FIELDS, (("online", 64),), n_step=1, gamma=GAMMA)
    state = replay.init(layout)
    for e in range(5):
        state = replay.insert(layout, state, 0, rows(episode_rows(0, e, 2, "truncated")))
    got = replay.sample(layout, state, jax.random.PRNGKey(3), Mixture(((("online",), 500),)),
                        (200,))  # fmt: skip
    values, counts = np.unique(np.asarray(got.obs["obs"]), return_counts=True)
    assert len(values) == 10  # 5 episodes x 2 transitions
    expected_count = 200 * 500 / 10
    assert np.all(np.abs(counts - expected_count) < 0.06 * expected_count), counts


def test_camera_replay_costs_one_frame_per_camera_per_step() -> None:
    cams = (ReplayField("front", (64, 64, 3), "uint8"), ReplayField("wrist", (64, 64, 3), "uint8"))
    fields = (ReplayField("obs", (14,), "float32"), *cams,
              ReplayField("action", (5,), "float32", "step"))  # fmt: skip
    episodes, length = 4, 50
    layout = ReplayLayout(fields, (("online", episodes * (length + 1)),), n_step=3)
    state = replay.init(layout)
    for e in range(episodes):
        items = episode_rows(0, e, length, "truncated")
        k = len(items)
        block = rows(items)._replace(data={
            "obs": np.zeros((k, 14), np.float32), "action": np.zeros((k, 5), np.float32),
            "front": np.full((k, 64, 64, 3), e, np.uint8),
            "wrist": np.full((k, 64, 64, 3), e, np.uint8)})  # fmt: skip
        state = replay.insert(layout, state, 0, block)
    used = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(state))
    per_transition = used / (episodes * length)
    frames = 2 * 64 * 64 * 3
    assert per_transition / frames <= 1.05, per_transition / frames
    assert state.data["front"].dtype == np.uint8


def test_layout_rejects_bad_input_with_clear_errors() -> None:
    with pytest.raises(ValueError, match="unique"):
        ReplayLayout((*FIELDS, ReplayField("reward", (), "float32")), (("online", 4),))
    with pytest.raises(ValueError, match="capacity >= 2"):
        ReplayLayout(FIELDS, (("online", 1),))
    layout = ReplayLayout(FIELDS, (("online", 4),))
    with pytest.raises(ValueError, match="no segment 'demos'"):
        layout.segment("demos")
    with pytest.raises(ValueError, match="ratio"):
        Mixture.symmetric(8, 1.5)
