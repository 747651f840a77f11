"""SAC on camera keys: an encoder per camera shared by the critics and trained through their
loss, the actor on its features with the gradient stopped, random shift in updates only."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from handrail.learners import obs_norm
from handrail.learners.agents import losses
from handrail.learners.agents.losses import Batch
from handrail.learners.agents.sac import SAC, Encoded, SACConfig
from handrail.learners.specs import ActionSpec, ObsSpec

SIZE = 12
SPEC = ObsSpec(
    keys=("front", "joints", "wrist"),
    shapes=((SIZE, SIZE, 3), (3,), (SIZE, SIZE, 3)),
    images=("front", "wrist"),
)
ACTIONS = ActionSpec(low=(-1.0, -1.0), high=(1.0, 1.0))
UTD, BATCH = 2, 8


def _sac(**overrides) -> SAC:
    config = dict(hidden_dims=(32, 32), num_critics=2, utd=UTD, batch_size=BATCH,
                  image_channels=(8, 8), image_strides=(2, 1), image_features=16)  # fmt: skip
    return SAC(SPEC, ACTIONS, SACConfig(**{**config, **overrides}))


def _obs(rng: np.random.Generator, lead: tuple[int, ...]) -> np.ndarray:
    """Flat observations: random frames (0..255) and joints."""
    parts = {
        "front": rng.integers(0, 256, (*lead, SIZE, SIZE, 3), dtype=np.uint8),
        "joints": rng.normal(size=(*lead, 3)).astype(np.float32),
        "wrist": rng.integers(0, 256, (*lead, SIZE, SIZE, 3), dtype=np.uint8),
    }
    return SPEC.flatten(parts)


def _batch(seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    lead = (UTD, BATCH)
    return Batch(
        obs=jnp.asarray(_obs(rng, lead)),
        action=jnp.asarray(rng.uniform(-1, 1, (*lead, 2)), jnp.float32),
        reward=jnp.asarray(rng.uniform(0, 1, lead), jnp.float32),
        discount=jnp.full(lead, 0.99, jnp.float32),
        next_obs=jnp.asarray(_obs(rng, lead)),
        online=jnp.asarray(rng.uniform(size=lead) < 0.5),
    )


def _norm(tree) -> float:
    return float(sum(jnp.sum(jnp.abs(x)) for x in jax.tree_util.tree_leaves(tree)))


def test_the_spec_keeps_cameras_through_json_and_refuses_a_frame_that_is_not_one() -> None:
    assert ObsSpec.from_json(SPEC.to_json()) == SPEC
    assert "images" not in ObsSpec(("a",), ((3,),)).to_json()  # state records as they were
    assert [k for k, *_ in SPEC.image_slices()] == ["front", "wrist"]
    np.testing.assert_array_equal(SPEC.state_columns(), np.arange(3) + SIZE * SIZE * 3)
    with pytest.raises(ValueError, match="image key 'joints' has shape \\(3,\\)"):
        ObsSpec(keys=("joints",), shapes=((3,),), images=("joints",))
    with pytest.raises(ValueError, match="image key 'side' is not one of the keys"):
        ObsSpec(keys=("joints",), shapes=((3,),), images=("side",))


def test_normalisation_and_pairs_leave_the_frames_alone() -> None:
    rows = _obs(np.random.default_rng(0), (50,))
    norm = obs_norm.fit(SPEC, rows)
    frames = np.concatenate([np.arange(c.start, c.stop) for _, c, _ in SPEC.image_slices()])
    assert np.all(norm["shift"][frames] == 0) and np.all(norm["scale"][frames] == 1)
    assert np.all(np.isinf(norm["bound"][frames]))
    assert np.all(np.isfinite(norm["bound"][SPEC.state_columns()]))  # the joints are scaled
    first = np.zeros(50, bool)
    first[::10] = True
    final = np.roll(first, -1)
    pairs = obs_norm.meeting_pairs(SPEC, rows, first, final)
    assert all(i in SPEC.state_columns() and j in SPEC.state_columns() for i, j in pairs)


def test_encoder_shapes_and_who_trains_it() -> None:
    sac = _sac()
    state = sac.init(jax.random.PRNGKey(0))
    encoder = state.critic_params["encoder"]
    assert set(encoder) == {"camera_front", "camera_wrist"}
    batch = sac.normalize_batch(state, jax.tree_util.tree_map(lambda x: x[0], _batch()))
    features = sac.features(encoder, batch.obs)
    assert features.shape == (BATCH, 2 * 16 + 3)
    assert sac.critic_fn(state.critic_params, batch.obs, batch.action).shape == (2, BATCH)

    # The critic loss trains the encoder; the actor loss does not reach it.
    critic_grads = jax.grad(lambda p: losses.critic_loss(
        p, state.target_critic_params, jnp.float32(0.1), batch,
        batch.action, jnp.zeros(BATCH), jax.random.PRNGKey(1),
        critic_fn=sac.critic_fn, critic_subset=2)[0])(state.critic_params)  # fmt: skip
    assert _norm(critic_grads["encoder"]) > 0
    actor_grads = jax.grad(lambda p: losses.actor_loss(
        p, state.critic_params, jnp.float32(0.1), batch, jax.random.PRNGKey(2),
        policy_fn=sac.loss_policy_fn, critic_fn=sac.critic_fn)[0])(state.actor_params)  # fmt: skip
    assert _norm(actor_grads["encoder"]) == 0 and _norm(actor_grads["pi"]) > 0


def test_an_update_trains_the_critics_encoder_and_hands_it_to_the_actor() -> None:
    sac = _sac()
    state = sac.init(jax.random.PRNGKey(0))
    new, metrics = sac.update(state, _batch())
    assert float(metrics["update/nonfinite"]) == 0.0
    before, after = state.critic_params["encoder"], new.critic_params["encoder"]
    assert _norm(jax.tree_util.tree_map(jnp.subtract, after, before)) > 0
    for a, b in zip(jax.tree_util.tree_leaves(new.actor_params["encoder"]),
                    jax.tree_util.tree_leaves(after), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # What is published runs the new encoder: the deterministic action moved with it.
    obs = _obs(np.random.default_rng(5), (4,))
    key = jax.random.PRNGKey(0)
    a0 = sac.act(state, obs, key, deterministic=True)
    a1 = sac.act(new, obs, key, deterministic=True)
    assert a0.shape == (4, 2) and np.all(np.abs(a1) <= 1) and not np.allclose(a0, a1)


def test_the_shift_differs_per_sample_keeps_the_state_and_never_acts() -> None:
    sac = _sac(image_shift=2)
    batch = _batch()
    # The same frame in every row, so any difference between rows is the shift's.
    rng = np.random.default_rng(3)
    one = _obs(rng, ())
    obs = jnp.broadcast_to(jnp.asarray(one), batch.obs.shape)
    shifted = sac.augment(batch._replace(obs=obs, next_obs=obs), jax.random.PRNGKey(0))
    state_cols = SPEC.state_columns()
    np.testing.assert_array_equal(np.asarray(shifted.obs[..., state_cols]),
                                  np.asarray(obs[..., state_cols]))  # fmt: skip
    for _, cols, shape in SPEC.image_slices():
        frames = np.asarray(shifted.obs[..., cols]).reshape((-1, *shape))
        distinct = {f.tobytes() for f in frames}
        assert len(distinct) > len(frames) // 3  # 25 offsets: most of 16 rows differ
        assert not np.array_equal(np.asarray(shifted.obs), np.asarray(shifted.next_obs))
    assert _sac(image_shift=0).augment(batch, jax.random.PRNGKey(0)) is batch

    # Acting reads the frames as they are: the same observation gives the same action.
    state = sac.init(jax.random.PRNGKey(1))
    many = np.broadcast_to(one, (16, one.shape[-1]))
    actions = sac.act(state, many, jax.random.PRNGKey(2), deterministic=True)
    np.testing.assert_allclose(actions, np.broadcast_to(actions[0], actions.shape), atol=1e-6)


def test_pretraining_shares_the_encoder() -> None:
    sac = _sac()
    state = sac.init(jax.random.PRNGKey(0))
    new, _ = sac.pretrain_step(state, jax.tree_util.tree_map(lambda x: x[0], _batch()))
    for a, b in zip(jax.tree_util.tree_leaves(new.actor_params["encoder"]),
                    jax.tree_util.tree_leaves(new.critic_params["encoder"]), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("encode_once", [False, True])
def test_a_residual_on_cameras_acts_around_its_base_whose_action_its_critics_never_read(
    encode_once: bool,
) -> None:
    """As on state: the actor reads the frames' features, the state and the base's action; the
    critics the features and the state, not the base's action (they rate the executed one);
    a fresh residual plays its base's action; an update moves the critics' encoder (also when
    the update reads encoded frames, whose base action comes from the flat rows beside them)."""
    spec = ObsSpec((*SPEC.keys, "base_action"), (*SPEC.shapes, (2,)), SPEC.images)
    sac = SAC(spec, ACTIONS, SACConfig(hidden_dims=(32, 32), num_critics=2, utd=UTD,
                                       batch_size=BATCH, image_channels=(8, 8),
                                       image_strides=(2, 1), image_features=16,
                                       residual_scale=0.1, residual_q_filter="deploy",
                                       image_encode_once=encode_once))  # fmt: skip
    state = sac.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    flat = np.concatenate([_obs(rng, (4,)), rng.uniform(-0.5, 0.5, (4, 2))], -1).astype(np.float32)
    other = flat.copy()
    other[:, -2:] = -other[:, -2:]  # another base action, the same frames and state
    action = jnp.asarray(rng.uniform(-1, 1, (4, 2)), jnp.float32)
    np.testing.assert_array_equal(
        np.asarray(sac.critic_fn(state.critic_params, jnp.asarray(flat), action)),
        np.asarray(sac.critic_fn(state.critic_params, jnp.asarray(other), action)),
    )
    acted = sac.act(state, flat, jax.random.PRNGKey(1), deterministic=True)
    np.testing.assert_allclose(acted, flat[:, -2:], atol=1e-6)  # zero correction: the base
    batch = _batch()
    base = jnp.asarray(rng.uniform(-0.5, 0.5, (UTD, BATCH, 2)), jnp.float32)
    batch = batch._replace(obs=jnp.concatenate([batch.obs, base], -1),
                           next_obs=jnp.concatenate([batch.next_obs, base], -1))  # fmt: skip
    new, metrics = sac.update(state, batch)
    assert float(metrics["update/nonfinite"]) == 0.0 and 0 <= metrics["actor/q_filter_keep"] <= 1
    assert _norm(jax.tree_util.tree_map(jnp.subtract, new.critic_params["encoder"],
                                        state.critic_params["encoder"])) > 0  # fmt: skip


def test_the_learner_keeps_frames_as_uint8_and_its_batches_are_the_flat_observations() -> None:
    from handrail.control.step import ActedBy, Step
    from handrail.learners import replay
    from handrail.learners.learner import ONLINE, Learner, LoopConfig, to_batch

    sac = _sac(utd=1, batch_size=4, n_step=1)
    learner = Learner(sac, LoopConfig(warmup_steps=0, buffer_capacity=16), seed=0)
    rng = np.random.default_rng(0)

    def obs() -> dict[str, np.ndarray]:
        return {"front": rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8),
                "joints": rng.normal(size=3).astype(np.float32),
                "wrist": rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)}  # fmt: skip

    seen = [obs() for _ in range(4)]
    for t in range(3):
        learner.add(Step(obs=seen[t], action=np.zeros(2, np.float32), reward=float(t),
                         next_obs=seen[t + 1], terminated=False, truncated=t == 2,
                         acted_by=ActedBy.POLICY, actor_id=0))  # fmt: skip
    learner.flush()
    data = learner.replay.data
    assert data["front"].dtype == jnp.uint8 and data["obs"].shape[-1] == 3  # the joints alone
    seg = learner.layout.segment(ONLINE)
    off = learner.layout.offset(seg)
    for t in range(4):  # three steps and the episode's final observation, each stored once
        np.testing.assert_array_equal(np.asarray(data["wrist"][off + t]), seen[t]["wrist"])
    sample = replay.sample(learner.layout, learner.replay, jax.random.PRNGKey(0),
                           learner.mixture, (1,))  # fmt: skip
    batch = to_batch(sample, learner.layout, SPEC)
    flat = {tuple(SPEC.flatten(o).tolist()): t for t, o in enumerate(seen)}
    for row in range(4):  # every row is a step's observation and its successor, flattened
        t = flat[tuple(np.asarray(batch.obs[0, row]).tolist())]
        np.testing.assert_array_equal(np.asarray(batch.next_obs[0, row]), SPEC.flatten(seen[t + 1]))


def test_frames_of_another_size_are_resized_where_they_enter() -> None:
    import gymnasium as gym

    from handrail.learners.images import resize

    space = gym.spaces.Dict({
        "front": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8),
        "joints": gym.spaces.Box(-1, 1, (3,), np.float32),
    })  # fmt: skip
    spec = ObsSpec.from_space(space, images=True, image_size=16)
    assert spec.shapes[0] == (16, 16, 3)
    obs = space.sample()
    small = resize(obs["front"], 16)
    np.testing.assert_array_equal(spec.split(obs)["front"], small)  # what the replay keeps
    expected = spec.flatten({"front": small, "joints": obs["joints"]})
    np.testing.assert_array_equal(spec.flatten(obs), expected)  # what acting reads
    with pytest.raises(ValueError, match="camera 'front': frames must be uint8"):
        spec.flatten({**obs, "front": obs["front"].astype(np.float32)})
    with pytest.raises(ValueError, match="camera 'front': frames of shape \\(32, 32, 1\\)"):
        spec.flatten({**obs, "front": obs["front"][..., :1]})


def test_a_patch_stem_trains_through_the_critics_and_bad_kernels_are_one_line() -> None:
    sac = _sac(image_kernels=(4, 3), image_strides=(4, 1))
    state = sac.init(jax.random.PRNGKey(0))
    stem = state.critic_params["encoder"]["camera_front"]["Conv_0"]["kernel"]
    assert stem.shape == (4, 4, 3, 8)
    new, metrics = sac.update(state, _batch())
    assert float(metrics["update/nonfinite"]) == 0.0
    moved = new.critic_params["encoder"]["camera_front"]["Conv_0"]["kernel"] - stem
    assert float(jnp.abs(moved).sum()) > 0
    assert SACConfig.from_json(sac.config.to_json()).image_kernels == (4, 3)
    for kernels in [(4,), (4, 0)]:
        with pytest.raises(ValueError, match=r"image_kernels=\(4,"):
            SACConfig(image_channels=(8, 8), image_strides=(4, 1), image_kernels=kernels)


def _leaves_close(a, b, **tol) -> bool:
    return all(np.allclose(np.asarray(x), np.asarray(y), **tol) for x, y in
               zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True))  # fmt: skip


def test_encoding_once_is_drqv2s_update_with_two_encoder_passes_fewer() -> None:
    # image_encode_once: the critic's gradient through its own features (the chain rule by
    # hand) is the same gradient; the target critics read the online encoder's features of the
    # next frames, never the target encoder; the actor steps on its critic step's features.
    plain, once = _sac(image_shift=0, utd=1), _sac(image_shift=0, utd=1, image_encode_once=True)
    state = plain.init(jax.random.PRNGKey(0))
    batch = jax.tree_util.tree_map(lambda x: x[:1], _batch())
    # A fresh state's target encoder is the online one: both read the same next features.
    new_plain, _ = plain.update(state, batch)
    new_once, metrics = once.update(state, batch)
    assert float(metrics["update/nonfinite"]) == 0.0
    assert _leaves_close(new_once.critic_params, new_plain.critic_params, rtol=1e-4, atol=1e-6)
    assert not _leaves_close(new_once.actor_params["pi"], new_plain.actor_params["pi"], atol=0)

    # The target encoder is not read: moving it moves nothing (it does without the option).
    moved = state.replace(target_critic_params={
        **state.target_critic_params,
        "encoder": jax.tree_util.tree_map(lambda x: x + 0.5, state.target_critic_params["encoder"]),
    })  # fmt: skip
    assert _leaves_close(once.update(moved, batch)[0].critic_params["q"], new_once.critic_params["q"],
                         rtol=0, atol=0)  # fmt: skip
    assert not _leaves_close(plain.update(moved, batch)[0].critic_params["q"],
                             new_plain.critic_params["q"], atol=1e-6)  # fmt: skip

    # The actor's step: as the critic block left the state, on the features the critic step
    # computed of its (normalised) observations with the encoder it started from.
    norm = once.normalize_batch(state, batch)
    rng, key_critic, key_actor = jax.random.split(state.rng, 3)
    key_critic = jax.random.split(key_critic)[0]  # as update_fn, which splits off the shift's
    after_critics, (_, features) = once._critic_block(state.replace(rng=rng), norm, key_critic)
    np.testing.assert_allclose(
        np.asarray(features[0]),
        np.asarray(once.encode(state.critic_params["encoder"], norm.obs[0])), rtol=1e-5, atol=1e-6
    )  # fmt: skip
    last = jax.tree_util.tree_map(lambda x: x[0], norm)
    by_hand, _ = once.actor_step(once.share_encoder(after_critics),
                                 last._replace(obs=Encoded(features[0], last.obs)), key_actor)  # fmt: skip
    assert _leaves_close(new_once.actor_params, by_hand.actor_params, rtol=1e-5, atol=1e-6)


def test_encoding_once_compiles_two_encoder_passes_fewer() -> None:
    # Per critic step the plain update encodes four times (the next frames for the target
    # policy and, by the target encoder, the target critics; the frames for the critics, with
    # their gradient; again for the actor after the update) and once backwards; encoding once
    # leaves two forward passes and the backward one. Each pass is two convolutions a camera.
    import re

    def convolutions(sac: SAC) -> int:
        state = sac.init(jax.random.PRNGKey(0))
        batch = jax.tree_util.tree_map(lambda x: x[:1], _batch())
        hlo = jax.jit(sac.update_fn).lower(state, batch).compile().as_text()
        return len(re.findall(r" convolution\(", hlo))

    plain, once = convolutions(_sac(utd=1)), convolutions(_sac(utd=1, image_encode_once=True))
    assert plain - once == 2 * 2 * 2, (plain, once)
