"""The learner: routing of steps (online, interventions), demonstrations in every batch,
versioned params, readiness and its config checks."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from handrail.control.step import ActedBy, Step
from handrail.learners import replay
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.learner import INTERVENTIONS, ONLINE, Learner, LoopConfig, to_batch
from handrail.learners.replay import Rows
from handrail.learners.specs import ActionSpec, ObsSpec

SAC_ = SAC(ObsSpec(("x",), ((1,),)), ActionSpec((-1.0,), (1.0,)),
           SACConfig(hidden_dims=(8,), num_critics=2, utd=2, batch_size=16, n_step=1))  # fmt: skip


def step(x: float, who: ActedBy = ActedBy.POLICY, done: bool = False, actor: int = 0) -> Step:
    return Step(obs={"x": np.array([x], np.float32)}, action=np.array([x / 100], np.float32),
                reward=x, next_obs={"x": np.array([x + 1], np.float32)}, terminated=False,
                truncated=done, acted_by=who, actor_id=actor)  # fmt: skip


def stored(learner: Learner, segment: str) -> list[tuple[float, bool]]:
    """(obs, is a final row) of a segment's rows in storage order."""
    seg = learner.layout.segment(segment)
    off, size = learner.layout.offset(seg), int(learner.replay.size[seg])
    obs = np.asarray(learner.replay.data["obs"])[off : off + size, 0]
    final = np.asarray(learner.replay.next)[off : off + size] == replay.FINAL
    return list(zip(obs.tolist(), final.tolist(), strict=True))


def test_human_runs_go_to_both_segments_and_are_closed_by_their_next_observation() -> None:
    learner = Learner(SAC_, LoopConfig(warmup_steps=0, buffer_capacity=32), seed=0)
    who = [ActedBy.POLICY, ActedBy.HUMAN, ActedBy.HUMAN, ActedBy.POLICY, ActedBy.HUMAN]
    for t, w in enumerate(who):
        learner.add(step(float(t), w, done=t == len(who) - 1))
    learner.flush()
    assert stored(learner, ONLINE) == [(0, False), (1, False), (2, False), (3, False),
                                       (4, False), (5, True)]  # fmt: skip
    # the run 1-2 ends at obs 3 (a final row); the run at 4 ends with the episode (obs 5)
    assert stored(learner, INTERVENTIONS) == [(1, False), (2, False), (3, True), (4, False),
                                              (5, True)]  # fmt: skip
    valid = replay.valid_mask(learner.layout, learner.replay)
    seg = learner.layout.segment(INTERVENTIONS)
    off = learner.layout.offset(seg)
    assert valid[off : off + 5].tolist() == [True, True, False, True, False]


def stored_rewards(learner: Learner, segment: str) -> list[float]:
    seg = learner.layout.segment(segment)
    off, size = learner.layout.offset(seg), int(learner.replay.size[seg])
    final = np.asarray(learner.replay.next)[off : off + size] == replay.FINAL
    return np.asarray(learner.replay.reward)[off : off + size][~final].tolist()


def test_a_takeover_penalises_the_policy_step_it_follows_and_only_that() -> None:
    """RLIF's signal: the policy step right before a person takes over learns a lower reward
    (per actor, actors interleaved); the person's steps, later policy steps and the rows of
    the intervention buffer keep theirs, and an episode's last step is staged at once."""
    learner = Learner(SAC_, LoopConfig(warmup_steps=0, buffer_capacity=64,
                                       takeover_penalty=0.5), seed=0)  # fmt: skip
    P, H = ActedBy.POLICY, ActedBy.HUMAN
    a = [(10.0, P), (11.0, P), (12.0, H), (13.0, H), (14.0, P), (15.0, H)]
    b = [(20.0, H), (21.0, P), (22.0, P)]  # a takeover at its first step follows nothing
    for t in range(len(a)):
        learner.add(step(*a[t], done=t == len(a) - 1, actor=0))
        if t < len(b):
            learner.add(step(*b[t], done=t == len(b) - 1, actor=1))
        if t == len(b) - 1:  # b ended: all its steps staged; only a's latest is held back
            assert learner.pending_steps == 2 * len(b)
            learner.flush()
            assert learner.pending_steps == 1
            assert sorted(stored_rewards(learner, ONLINE)) == [10.0, 10.5, 20.0, 21.0, 22.0]
    learner.flush()
    got = sorted(stored_rewards(learner, ONLINE))
    assert got == [10.0, 10.5, 12.0, 13.0, 13.5, 15.0, 20.0, 21.0, 22.0]
    assert sorted(stored_rewards(learner, INTERVENTIONS)) == [12.0, 13.0, 15.0, 20.0]
    assert learner.steps == len(a) + len(b) and learner.pending_steps == 0


@pytest.mark.parametrize("cut", [False, True])
def test_online_returns_can_stop_where_who_acts_changes(cut: bool) -> None:
    """With cut_returns_at_takeover the policy's 3-step return before a takeover sums only its
    own rewards and bootstraps from the takeover's observation (a final row); the person's run
    likewise ends where the policy gets control back. Without it the return runs through."""
    sac = SAC(SAC_.obs_spec, SAC_.action_spec,
              SACConfig(hidden_dims=(8,), num_critics=2, utd=2, batch_size=16, n_step=3))  # fmt: skip
    learner = Learner(sac, LoopConfig(warmup_steps=0, buffer_capacity=32,
                                      cut_returns_at_takeover=cut), seed=0)  # fmt: skip
    P, H = ActedBy.POLICY, ActedBy.HUMAN
    for t, w in enumerate([P, P, H, H, P, P]):
        learner.add(step(float(t), w, done=t == 5))
    learner.flush()
    rows = stored(learner, ONLINE)
    if cut:
        assert rows == [(0, False), (1, False), (2, True), (2, False), (3, False), (4, True),
                        (4, False), (5, False), (6, True)]  # fmt: skip
    else:
        assert [o for o, final in rows if not final] == [0, 1, 2, 3, 4, 5] and len(rows) == 7
    off = learner.layout.offset(learner.layout.segment(ONLINE))
    ok, ret, discount, boot = replay._n_step(learner.layout, learner.replay,
                                             jax.numpy.asarray([off], jax.numpy.int32))  # fmt: skip
    g = learner.layout.gamma
    obs = np.asarray(learner.replay.data["obs"])[:, 0]
    assert bool(ok[0])
    if cut:  # rewards 0 and 1 (the policy's), then the value at the takeover (obs 2)
        np.testing.assert_allclose([ret[0], discount[0], obs[boot[0]]], [g, g**2, 2.0], rtol=1e-6)
    else:  # rewards 0, 1 and the person's 2, then the value at obs 3
        np.testing.assert_allclose([ret[0], discount[0], obs[boot[0]]], [g + 2 * g**2, g**3, 3.0],
                                   rtol=1e-6)  # fmt: skip
    # inserted a step at a time (the fused loop): a takeover at an episode's last step makes
    # three rows of one step (the cut, the transition, the episode's end)
    for t, w in ((10.0, P), (11.0, H)):
        learner.add(step(t, w, done=w == H))
        learner.flush()
    assert stored(learner, ONLINE)[-3:] == ([(11, True), (11, False), (12, True)] if cut else
                                            [(10, False), (11, False), (12, True)])  # fmt: skip


def test_batches_flag_exactly_the_rows_drawn_from_the_intervention_buffer() -> None:
    """The person's corrections are marked in every minibatch (for the intervention BC term);
    the same human steps drawn from the online buffer are not: they are the online half."""
    learner = Learner(SAC_, LoopConfig(warmup_steps=0, buffer_capacity=64), seed=0)
    for t in range(20):  # human obs are 100+, policy obs below 20
        who = ActedBy.HUMAN if t % 4 == 1 else ActedBy.POLICY
        learner.add(step(100.0 + t if who == ActedBy.HUMAN else float(t), who, done=t == 19))
    learner.flush()
    batch = to_batch(replay.sample(learner.layout, learner.replay, jax.random.PRNGKey(1),
                                   learner.mixture, (4,)), learner.layout, SAC_.obs_spec)  # fmt: skip
    human, online = np.asarray(batch.human), np.asarray(batch.online)
    obs = np.asarray(batch.obs)[..., 0]
    assert human.any() and not np.any(human & online)
    np.testing.assert_array_equal(human, ~online)  # no demos: the offline half is corrections
    assert np.all(obs[human] >= 100)


def test_batches_hold_the_offline_share_of_demonstration_rows() -> None:
    k = 6
    demos = Rows(data={"obs": np.full((k, 1), 50.0, np.float32), "action": np.zeros((k, 1))},
                 reward=np.ones(k), terminated=np.zeros(k, bool),
                 final=np.array([0, 0, 1, 0, 0, 1], bool), first=np.array([1, 0, 0, 1, 0, 0], bool),
                 actor=np.zeros(k, np.int32), valid=np.ones(k, bool))  # fmt: skip
    learner = Learner(SAC_, LoopConfig(warmup_steps=4, buffer_capacity=32, offline_ratio=0.25),
                      seed=0, demos=demos)  # fmt: skip
    for t in range(5):
        learner.add(step(float(t), done=t == 4))
    learner.flush()
    batch = to_batch(replay.sample(learner.layout, learner.replay, jax.random.PRNGKey(0),
                                   learner.mixture, (3,)), learner.layout, SAC_.obs_spec)  # fmt: skip
    assert not np.any(np.asarray(batch.human))  # no person has acted
    offline = ~np.asarray(batch.online)
    assert offline.sum(axis=-1).tolist() == [4, 4, 4]  # 25% of 16, exactly, every minibatch
    np.testing.assert_array_equal(np.asarray(batch.obs)[offline], 50.0)
    np.testing.assert_array_equal(np.asarray(batch.obs)[~offline] < 5, True)


def test_updates_publish_new_versions_only_when_ready() -> None:
    learner = Learner(SAC_, LoopConfig(warmup_steps=3, buffer_capacity=32), seed=0)
    assert learner.latest()[0] == 0
    learner.add(step(0.0))
    assert learner.update() == {} and learner.latest()[0] == 0  # warming up
    for t in range(1, 4):
        learner.add(step(float(t), done=t == 3))
        learner.update()
    version, params = learner.latest()
    assert version == 2 and learner.updates == 2 * SAC_.config.utd
    assert params["actor"] is learner.state.actor_params
    assert params["obs_norm"] is learner.state.obs_norm


@pytest.mark.parametrize(("field", "value"), [("buffer_capacity", 1), ("offline_ratio", 2.0),
                                              ("mode", "threads"), ("max_nonfinite_updates", 0),
                                              ("takeover_penalty", -1.0)])  # fmt: skip
def test_loop_config_names_the_bad_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        LoopConfig(**{field: value})


def test_a_growing_intervention_buffer_never_recompiles_the_update() -> None:
    from handrail.learners import learner as learner_module

    compiled = learner_module._update_jit._cache_size()  # other tests share the jitted update
    learner = Learner(SAC_, LoopConfig(warmup_steps=2, buffer_capacity=64), seed=0)
    for t in range(12):  # interventions arrive between updates: the segment keeps growing
        learner.add(step(float(t), ActedBy.HUMAN if t % 3 else ActedBy.POLICY, done=t % 5 == 4))
        learner.update()
    assert int(learner.replay.size[learner.layout.segment(INTERVENTIONS)]) > 4
    assert learner.version == 11
    assert learner_module._update_jit._cache_size() - compiled <= 1  # one compilation, any size


def test_taking_the_online_rows_inserts_the_rest_as_flush_does() -> None:
    """The fused trainer's seam: take_online_rows inserts the intervention rows and hands back
    the online rows; inserting those into the online segment is exactly a flush."""
    who = [ActedBy.POLICY, ActedBy.HUMAN, ActedBy.HUMAN, ActedBy.POLICY, ActedBy.HUMAN]
    flushed, taken = (Learner(SAC_, LoopConfig(warmup_steps=0, buffer_capacity=32), seed=0)
                      for _ in range(2))  # fmt: skip
    for learner in (flushed, taken):
        for t, w in enumerate(who):
            learner.add(step(float(t), w, done=t == len(who) - 1))
    assert taken.pending_steps == len(who)
    flushed.flush()
    online = taken.take_online_rows()
    assert taken.pending_steps == 0 and int(taken.replay.size[taken.layout.segment(ONLINE)]) == 0
    assert stored(taken, INTERVENTIONS) == stored(flushed, INTERVENTIONS)
    taken.replay = replay.insert(taken.layout, taken.replay, taken.layout.segment(ONLINE), online)
    for a, b in zip(jax.tree_util.tree_leaves(flushed.replay),
                    jax.tree_util.tree_leaves(taken.replay), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_replay_larger_than_the_memory_is_refused_in_one_line_with_the_rows_that_fit() -> None:
    from handrail.learners.learner import check_memory, replay_layout

    layout = replay_layout(SAC_, LoopConfig(buffer_capacity=1_000_000), demo_rows=100)
    need = layout.total * layout.row_bytes
    check_memory(layout, available=2 * need)  # fits
    with pytest.raises(ValueError, match=r"lower --loop\.buffer-capacity") as err:
        check_memory(layout, available=need)
    fits = int(str(err.value).split("at most ")[1].split(" rows")[0].replace(",", ""))
    smaller = replay_layout(SAC_, LoopConfig(buffer_capacity=fits), demo_rows=100)
    check_memory(smaller, available=need)  # the advice is right
    assert "\n" not in str(err.value)
