"""Behaviour cloning: chunk targets and masks, the episode split, learning, and the checkpoint as
a frozen base policy."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from handrail.control.base_policy import ChunkedBase
from handrail.learners.agents.bc import (
    BCConfig,
    BCPolicy,
    chunk_targets,
    load_bc,
    load_bc_policy,
    save_bc,
    split_episodes,
    train_bc,
)
from handrail.learners.specs import ActionSpec, ObsSpec

OBS = ObsSpec(("x",), ((2,),))
ACT = ActionSpec((-2.0, -2.0), (2.0, 2.0))


def episodes(count: int = 6, length: int = 12, seed: int = 0) -> SimpleNamespace:
    """Episodes where the action is a fixed linear function of the observation (env units)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (count * length, 2)).astype(np.float32)
    action = np.clip(np.stack([x[:, 0] + x[:, 1], x[:, 0] - x[:, 1]], 1), -2, 2)
    return SimpleNamespace(obs={"x": x}, action=action.astype(np.float32),
                           episode_starts=np.arange(count) * length,
                           episode_lengths=np.full(count, length))  # fmt: skip


def test_chunk_targets_against_a_brute_force_loop() -> None:
    rng = np.random.default_rng(1)
    lengths = np.array([3, 5, 1])
    starts = np.array([0, 3, 8])
    actions = rng.normal(size=(9, 2)).astype(np.float32)
    targets, mask = chunk_targets(actions, starts, lengths, horizon=4)
    for s, n in zip(starts, lengths, strict=True):
        for t in range(s, s + n):
            for k in range(4):
                inside = t + k < s + n
                assert mask[t, k] == float(inside)
                np.testing.assert_array_equal(targets[t, k], actions[min(t + k, s + n - 1)])


def test_unselected_steps_are_never_chunk_targets() -> None:
    rng = np.random.default_rng(2)
    lengths, starts = np.array([4, 5]), np.array([0, 4])
    actions = rng.normal(size=(9, 2)).astype(np.float32)
    selected = np.array([1, 0, 1, 1, 0, 0, 1, 1, 0], bool)
    targets, mask = chunk_targets(actions, starts, lengths, 3, selected)
    every, every_mask = chunk_targets(actions, starts, lengths, 3)
    np.testing.assert_array_equal(targets, every)
    for s, n in zip(starts, lengths, strict=True):
        for t in range(s, s + n):
            for k in range(3):
                assert mask[t, k] == float(t + k < s + n and selected[t + k])
    assert (mask <= every_mask).all()


def test_only_the_selected_steps_are_cloned(tmp_path: Path) -> None:
    """A person's corrections among a policy's steps: the policy's actions (here a constant far
    from the person's) must not pull the clone, which they do when every step is cloned."""
    data = episodes(count=8)
    selected = np.arange(len(data.action)) % 2 == 0
    data.action[~selected] = [2.0, -2.0]
    config = BCConfig(hidden_dims=(64, 64), steps=600, eval_every=100, batch_size=64)
    obs = {"x": np.array([0.3, -0.2], np.float32)}
    errors = []
    for name, rows in (("person", selected), ("every", None)):
        result = train_bc(data, OBS, ACT, config, selected=rows)
        (tmp_path / name).mkdir()
        save_bc(tmp_path / name, result, config, OBS, ACT)
        errors.append(float(np.abs(load_bc_policy(tmp_path / name)(obs) - [0.1, 0.5]).max()))
    assert errors[0] < 0.15 < errors[1]
    with pytest.raises(ValueError, match="at least one true"):
        train_bc(data, OBS, ACT, config, selected=np.zeros(len(data.action), bool))


def test_the_split_is_by_whole_episodes_disjoint_and_seeded() -> None:
    train, val = split_episodes(20, 0.1, seed=3)
    assert len(val) == 2 and not set(train) & set(val) and sorted(train + val) == list(range(20))
    assert split_episodes(20, 0.1, seed=3) == (train, val)
    assert split_episodes(2, 0.1, seed=0)[1] and not split_episodes(1, 0.1, seed=0)[1]
    assert split_episodes(5, 0.0, seed=0) == (list(range(5)), [])


def test_it_learns_and_the_checkpoint_acts_as_trained(tmp_path: Path) -> None:
    data = episodes()
    config = BCConfig(hidden_dims=(64, 64), steps=600, eval_every=100, batch_size=64)
    result = train_bc(data, OBS, ACT, config)
    assert result.history[-1]["train_loss"] < 0.2 * result.history[0]["train_loss"]
    assert result.best_val_loss is not None and result.best_val_loss < 0.02
    assert result.val_episodes and not set(result.val_episodes) & set(result.train_episodes)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    save_bc(folder, result, config, OBS, ACT)
    policy = load_bc_policy(folder)
    obs = {"x": np.array([0.3, -0.2], np.float32)}
    np.testing.assert_allclose(policy(obs), [0.1, 0.5], atol=0.15)
    again = load_bc_policy(folder)
    np.testing.assert_array_equal(policy(obs), again(obs))


def test_a_chunked_policy_loads_as_a_chunked_base(tmp_path: Path) -> None:
    config = BCConfig(hidden_dims=(16,), horizon=4, execute=2, steps=50, eval_every=50)
    result = train_bc(episodes(), OBS, ACT, config)
    save_bc(tmp_path, result, config, OBS, ACT)
    base = load_bc_policy(tmp_path)
    assert isinstance(base, ChunkedBase) and base.execute == 2
    for _ in range(5):
        assert base({"x": np.zeros(2, np.float32)}).shape == (2,)
    assert base.queries == 3


def two_ways(count: int = 8, length: int = 16) -> SimpleNamespace:
    """Demonstrations that go two ways from the same observations: half the episodes act
    (+1, x), half (-1, x) (env units, in a [-2, 2] box)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (count * length, 2)).astype(np.float32)
    side = np.repeat(np.where(np.arange(count) % 2 == 0, 1.0, -1.0), length)
    action = np.stack([side, x[:, 0]], 1).astype(np.float32)
    return SimpleNamespace(obs={"x": x}, action=action, episode_starts=np.arange(count) * length,
                           episode_lengths=np.full(count, length))  # fmt: skip


def test_a_flow_policy_keeps_both_ways_the_demonstrations_go_where_regression_averages(
    tmp_path: Path,
) -> None:
    """Where demonstrators split (left or right of an obstacle), regression clones the mean, an
    action nobody took; the flow policy's actions land on one way or the other, chosen by its
    noise, and still follow the observation."""
    data = two_ways()
    obs = {"x": np.array([0.4, -0.3], np.float32)}
    firsts = {}
    for name, flow_steps in (("mse", 0), ("flow", 10)):
        config = BCConfig(hidden_dims=(64, 64), steps=3000, eval_every=100, batch_size=64,
                          val_fraction=0.0, flow_steps=flow_steps, relative_inputs=False)  # fmt: skip
        (tmp_path / name).mkdir()
        save_bc(tmp_path / name, train_bc(data, OBS, ACT, config), config, OBS, ACT)
        policy = load_bc_policy(tmp_path / name)
        assert isinstance(policy, BCPolicy)
        actions = []
        for seed in range(40):
            policy.reset(seed=seed)
            actions.append(policy(obs))
        firsts[name] = np.array(actions)
    assert np.abs(firsts["mse"][:, 0]).max() < 0.4  # the average of +1 and -1
    flow = firsts["flow"]
    assert (np.abs(flow[:, 0]) > 0.5).mean() >= 0.8  # on one way or the other
    assert 0.25 <= (flow[:, 0] > 0).mean() <= 0.75  # and both ways are taken
    np.testing.assert_allclose(np.median(flow[:, 1]), 0.4, atol=0.2)


def test_a_flow_policy_decodes_given_noise_deterministically_and_draws_its_own_by_seed(
    tmp_path: Path,
) -> None:
    config = BCConfig(hidden_dims=(16,), horizon=3, steps=50, eval_every=50, flow_steps=4)
    save_bc(tmp_path, train_bc(episodes(), OBS, ACT, config), config, OBS, ACT)
    base = load_bc_policy(tmp_path)
    assert isinstance(base, ChunkedBase)
    policy = load_bc(tmp_path)
    obs = {"x": np.array([0.1, 0.2], np.float32)}
    noise = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    chunk = policy.decode(obs, noise)
    assert chunk.shape == (3, 2) and np.all(np.abs(chunk) <= 2.0)
    np.testing.assert_array_equal(chunk, policy.decode(obs, noise))
    assert not np.array_equal(chunk, policy.decode(obs, -noise))
    draws = []
    for seed in (5, 5, 6):
        policy.reset(seed=seed)
        draws.append(policy.chunk(obs))
    np.testing.assert_array_equal(draws[0], draws[1])
    assert not np.array_equal(draws[0], draws[2])
    quiet = BCConfig(**{**config.to_json(), "flow_noise": 0.0})
    save_bc(tmp_path, train_bc(episodes(), OBS, ACT, quiet), quiet, OBS, ACT)
    calm = load_bc(tmp_path)
    np.testing.assert_array_equal(calm.chunk(obs), calm.decode(obs, np.zeros((3, 2), np.float32)))


def test_a_folder_that_is_not_a_bc_checkpoint_says_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "state.msgpack").write_bytes(b"")
    with pytest.raises(ValueError, match="SAC checkpoint"):
        load_bc_policy(tmp_path)
    with pytest.raises(ValueError, match="execute"):
        BCConfig(horizon=2, execute=3)
    with pytest.raises(ValueError, match=r"flow_steps=-1.*flow_steps and flow_noise >= 0"):
        BCConfig(flow_steps=-1)
    with pytest.raises(ValueError, match=r"flow_noise=-0\.5"):
        BCConfig(flow_noise=-0.5)


def reaching(count: int = 10, length: int = 11, seed: int = 0) -> SimpleNamespace:
    """Episodes in which a hand goes to an object placed at random: the action is the step
    towards it, a function of the two positions' difference only."""
    rng = np.random.default_rng(seed)
    hand, target, action = [], [], []
    for _ in range(count):
        goal = rng.uniform(0.3, 0.7, 2)
        start = rng.uniform(-0.2, 0.2, 2)
        for t in range(length):
            pos = start + (goal - start) * t / (length - 1)
            hand.append(pos)
            target.append(goal)
            action.append((goal - pos) / 2)
    return SimpleNamespace(obs={"hand_m": np.asarray(hand, np.float32),
                                "object_m": np.asarray(target, np.float32)},
                           action=np.asarray(action, np.float32),
                           episode_starts=np.arange(count) * length,
                           episode_lengths=np.full(count, length))  # fmt: skip


def test_bc_reads_the_differences_the_demonstrations_bring_together(tmp_path: Path) -> None:
    spec = ObsSpec(("hand_m", "object_m"), ((2,), (2,)))
    data = reaching()
    config = BCConfig(hidden_dims=(32,), steps=200, eval_every=100, val_fraction=0.0)
    result = train_bc(data, spec, ACT, config)
    assert result.pairs == ((0, 2), (1, 3)) and result.obs_mean.shape == (6,)
    save_bc(tmp_path, result, config, spec, ACT)
    policy = load_bc_policy(tmp_path)
    obs = {"hand_m": np.array([0.1, 0.2], np.float32), "object_m": np.array([0.5, 0.4], np.float32)}
    assert policy(obs).shape == (2,) and np.isfinite(policy(obs)).all()
    plain = train_bc(data, spec, ACT, BCConfig(hidden_dims=(32,), steps=200, eval_every=100,
                                               val_fraction=0.0, relative_inputs=False))  # fmt: skip
    assert plain.pairs == () and plain.obs_mean.shape == (4,)


def lit_columns(count: int = 40, seed: int = 0) -> SimpleNamespace:
    """One-step episodes of an 8x8 frame with one lit column (of 8) beside a noise state key;
    the action is the column's place in [-2, 2]: only the frame says it."""
    rng = np.random.default_rng(seed)
    column = rng.integers(0, 8, count)
    frames = np.zeros((count, 8, 8, 3), np.uint8)
    frames[np.arange(count), :, column] = 255
    target = (column / 7.0 * 4.0 - 2.0).astype(np.float32)
    return SimpleNamespace(obs={"cam": frames, "x": rng.normal(size=(count, 2)).astype(np.float32)},
                           action=np.stack([target, -target], 1),
                           episode_starts=np.arange(count), episode_lengths=np.ones(count, int))  # fmt: skip


# (2,): a 2x2 patch embedding of stride 2; flow_steps 8: a flow policy (from zero noise)
@pytest.mark.parametrize(("kernels", "flow_steps"), [((), 0), ((2,), 0), ((2,), 8)])
def test_bc_on_a_camera_learns_what_only_the_frame_shows_and_its_checkpoint_acts_on_it(
    tmp_path: Path, kernels: tuple[int, ...], flow_steps: int
) -> None:
    spec = ObsSpec(("cam", "x"), ((8, 8, 3), (2,)), images=("cam",))
    data = lit_columns()
    config = BCConfig(hidden_dims=(32, 32), steps=600 if flow_steps else 300, eval_every=100,
                      batch_size=32, val_fraction=0.0, image_channels=(8,),
                      image_strides=(len(kernels) + 1,), image_kernels=kernels,
                      image_features=16, image_shift=0, relative_inputs=False,
                      flow_steps=flow_steps, flow_noise=0.0)  # fmt: skip
    result = train_bc(data, spec, ACT, config)
    assert set(result.params) >= {"encoder"} and result.obs_mean.shape == (2,)  # the state alone
    if not flow_steps:  # a flow's loss keeps the noise it cannot predict
        assert result.history[-1]["train_loss"] < 0.2 * result.history[0]["train_loss"]
    policy = load_bc_policy(save_bc(tmp_path, result, config, spec, ACT))
    test = lit_columns(count=16, seed=1)
    acted = np.stack([policy({"cam": f, "x": x}) for f, x in zip(test.obs["cam"], test.obs["x"],
                                                                   strict=True)])  # fmt: skip
    assert np.abs(acted - test.action).max() < 0.5  # the columns lie 0.57 apart
    with pytest.raises(
        ValueError, match=r"sees cameras \['cam'\], but its observation has \['x'\]"
    ):
        policy({"x": test.obs["x"][0]})


def test_bc_validates_on_the_frames_as_recorded_never_shifted() -> None:
    """Training shifts frames (``image_shift`` 2); the validation loss is exactly the loss of
    the kept params on the recorded frames, computed here by hand."""
    import jax.numpy as jnp

    spec = ObsSpec(("cam", "x"), ((8, 8, 3), (2,)), images=("cam",))
    data = lit_columns(count=12)
    config = BCConfig(hidden_dims=(16,), steps=10, eval_every=10, batch_size=8, val_fraction=0.5,
                      image_channels=(4,), image_strides=(1,), image_features=4, image_shift=2,
                      relative_inputs=False)  # fmt: skip
    result = train_bc(data, spec, ACT, config)
    net = config.net(ACT.dim, spec.images)
    rows = np.asarray(result.val_episodes)
    x = (data.obs["x"][rows] - result.obs_mean) / result.obs_std
    pred = np.asarray(net.apply({"params": result.params}, jnp.asarray(x),
                                (jnp.asarray(data.obs["cam"][rows]),)))  # fmt: skip
    want = float(np.mean((pred[:, 0] - ACT.from_env(data.action[rows])) ** 2))
    assert result.best_val_loss == pytest.approx(want, rel=1e-4)


def test_the_best_validation_loss_is_that_of_the_params_kept() -> None:
    """Each validation loss is of the params at the end of its block (the kept ones among
    them), computed here by hand."""
    import jax.numpy as jnp

    data = episodes(count=6, length=12)
    config = BCConfig(hidden_dims=(16,), steps=200, eval_every=100, batch_size=16,
                      relative_inputs=False)  # fmt: skip
    result = train_bc(data, OBS, ACT, config)
    rows = np.concatenate([np.arange(e * 12, e * 12 + 12) for e in result.val_episodes])
    x = (data.obs["x"][rows] - result.obs_mean) / result.obs_std
    pred = np.asarray(config.net(ACT.dim).apply({"params": result.params}, jnp.asarray(x)))
    want = float(np.mean((pred[:, 0] - ACT.from_env(data.action[rows])) ** 2))
    assert result.best_val_loss == pytest.approx(want, rel=1e-4)
