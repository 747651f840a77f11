"""The success classifier: its data, threshold, training, file and the env that rewards by it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import jax
import numpy as np
import pytest

from handrail.demos import FieldSpec, create_store, open_store
from handrail.demos.labels import labels_from_success
from handrail.learners import replay
from handrail.learners.agents import classifier as clf_mod
from handrail.learners.agents.classifier import (
    ClassifierConfig,
    ClassifierResult,
    FramesDataset,
    SuccessClassifier,
    choose_threshold,
    frames_dataset,
    save_classifier,
    split_by_episode,
    train_classifier,
    with_failed_episodes,
)
from handrail.learners.agents.learned_reward import (
    ClassifierReward,
    relabel_replay,
    relabel_rewards,
)
from handrail.learners.images import random_shift, resize
from handrail.learners.replay import ReplayField, ReplayLayout, Rows

SIZE = 16
TINY = ClassifierConfig(image_size=SIZE, channels=(8, 8), strides=(2, 2), features=8,
                        hidden_dims=(16,), steps=120, eval_every=40, batch_size=32,
                        shift_px=1)  # fmt: skip


def frame(lifted: bool, rng: np.random.Generator, size: int = SIZE) -> np.ndarray:
    """Noise, with a bright square high up when the task is achieved, low down otherwise."""
    img = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
    row = 2 if lifted else size - 7
    img[row : row + 5, 5:10] = 250
    return img


def write_store(path: Path, episodes: int, seed: int, size: int = SIZE) -> Path:
    """Episodes of 6 steps whose camera shows the square low, and high after an odd
    episode's last step (those succeed)."""
    rng = np.random.default_rng(seed)
    fields = [FieldSpec("front", "uint8", (size, size, 3)), FieldSpec("state", "float32", (2,))]
    with create_store(path, kind="demo", obs_fields=fields, action_dim=2, control_dt_s=0.1,
                      task="toy", durable=False) as w:  # fmt: skip
        for e in range(episodes):
            w.begin_episode(seed=e)
            for t in range(6):
                obs = {"front": frame(False, rng, size), "state": np.array([t, e], np.float32)}
                w.add_step(obs=obs, action=np.zeros(2, np.float32), reward=0.0,
                           terminated=False, truncated=t == 5)  # fmt: skip
            success = e % 2 == 1
            final = {"front": frame(success, rng, size), "state": np.zeros(2, np.float32)}
            w.end_episode(final_obs=final, success=success)
    return path


@dataclass
class Trained:
    """A classifier trained once for the module, and what its training saw."""

    path: Path
    store: Path
    dataset: FramesDataset
    result: ClassifierResult
    threshold_frames: int
    """How many frames the threshold was chosen on."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """A classifier trained on a toy store, the threshold's inputs spied on."""
    root = tmp_path_factory.mktemp("clf")
    store = write_store(root / "store", 16, seed=0)
    reader = open_store(store)
    dataset = frames_dataset([(reader, labels_from_success(reader), "toy")], TINY)
    seen = {}
    real = clf_mod.choose_threshold

    def spy(prob: np.ndarray, label: np.ndarray, target: float) -> float:
        seen["n"] = len(label)
        return real(prob, label, target)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clf_mod, "choose_threshold", spy)
        result = train_classifier(dataset, TINY)
    path = save_classifier(root / "clf", result, TINY, dataset)
    return Trained(path, store, dataset, result, seen["n"])


def test_random_shift_differs_per_sample_and_keeps_the_shape() -> None:
    frames = np.broadcast_to(np.arange(64, dtype=np.uint8).reshape(1, 8, 8, 1), (16, 8, 8, 1))
    out = np.asarray(random_shift(frames, jax.random.PRNGKey(0), pad=2))
    assert out.shape == frames.shape and out.dtype == np.uint8
    assert len({o.tobytes() for o in out}) > 4  # each sample its own offset
    assert (np.asarray(random_shift(frames, jax.random.PRNGKey(0), pad=0)) == frames).all()
    # Each frame is a crop of itself with its border replicated, by at most 2 pixels.
    padded = np.pad(frames, ((0, 0), (2, 2), (2, 2), (0, 0)), mode="edge")
    crops = {(dy, dx): padded[:, dy : dy + 8, dx : dx + 8] for dy in range(5) for dx in range(5)}
    for i, o in enumerate(out):
        assert any((c[i] == o).all() for c in crops.values()), i


def test_resize_averages_whole_blocks_and_keeps_uint8() -> None:
    frames = np.zeros((2, 4, 4, 3), np.uint8)
    frames[:, :2, :2] = 200
    out = resize(frames, 2)
    assert out.dtype == np.uint8 and out.shape == (2, 2, 2, 3)
    assert out[0, 0, 0, 0] == 200 and out[0, 1, 1, 0] == 0
    assert resize(frames, 4) is frames
    assert resize(np.zeros((3, 3, 3), np.uint8), 5).shape == (5, 5, 3)


def test_threshold_keeps_the_target_precision_with_the_most_recall() -> None:
    prob = np.array([0.99, 0.95, 0.9, 0.8, 0.7, 0.1])
    label = np.array([True, True, False, True, False, False])
    cut = choose_threshold(prob, label, target_precision=1.0)
    assert 0.9 < cut < 0.95  # two kept, both right; halfway (in logits) to the first miss
    cut = choose_threshold(prob, label, target_precision=0.7)
    assert 0.7 < cut < 0.8  # three of four right: 0.75 precision, all recall
    assert choose_threshold(prob, np.zeros(6, bool), 0.95) == 0.5


def test_split_holds_whole_episodes_of_both_kinds_out() -> None:
    episode = np.repeat(np.arange(12), 5)
    label = np.zeros(60, bool)
    label[4::10] = True  # every other episode ends in success
    ds = FramesDataset(frames={}, state=np.zeros((60, 0), np.float32), label=label,
                       episode=episode, frame_shapes={}, state_shapes={})  # fmt: skip
    train, val = split_by_episode(ds, 0.25, seed=0)
    assert not set(episode[train]) & set(episode[val])
    assert len(train) + len(val) == 60
    assert label[val].any() and (~label[val]).any() and label[train].any()


def test_it_learns_a_separable_set_and_the_threshold_comes_from_validation_only(
    trained: Trained,
) -> None:
    dataset, result = trained.dataset, trained.result
    assert len(dataset) == 96 and dataset.label.sum() == 8
    _, val = split_by_episode(dataset, TINY.val_fraction, TINY.seed)
    assert trained.threshold_frames == len(val) == result.counts["val_frames"] < len(dataset)
    assert result.validation["precision"] == 1.0 and result.validation["recall"] == 1.0
    assert result.history[-1]["val_loss"] < result.history[0]["val_loss"]


def test_a_saved_classifier_scores_new_frames_at_any_size(trained: Trained) -> None:
    clf = SuccessClassifier(trained.path)
    rng = np.random.default_rng(7)
    assert clf.detect({"front": frame(True, rng)}) and not clf.detect({"front": frame(False, rng)})
    big = np.stack([frame(True, rng, 32), frame(False, rng, 32)])  # twice the size: resized
    assert (clf.probability({"front": big}) >= clf.threshold).tolist() == [True, False]


def test_bad_inputs_get_one_line_each(trained: Trained, tmp_path: Path) -> None:
    clf = SuccessClassifier(trained.path)
    with pytest.raises(ValueError, match=r"another camera set"):
        clf.check_keys({"wrist": (16, 16, 3)}, "the env's observation")
    with pytest.raises(ValueError, match=r"channels must match"):
        clf.check_keys({"front": (16, 16, 1)}, "the env's observation")
    with pytest.raises(ValueError, match=r"must be uint8 \(H, W, C\)"):
        clf.probability({"front": np.zeros((16, 16, 3), np.float32)})
    with pytest.raises(ValueError, match=r"not a handrail success classifier"):
        SuccessClassifier(tmp_path)
    reader = open_store(trained.store)
    with pytest.raises(ValueError, match=r"no observation field 'wrist'"):
        frames_dataset([(reader, labels_from_success(reader), "")], ClassifierConfig(
            cameras=("wrist",)))  # fmt: skip
    only_failures = np.zeros(reader.num_steps, np.int8)
    data = frames_dataset([(reader, only_failures, "")], TINY)
    with pytest.raises(ValueError, match=r"hold 0 success frame"):
        train_classifier(data, TINY)


class Toy(gym.Env):
    """The camera shows the square high once ``state`` passes 3 (the task's success)."""

    observation_space = gym.spaces.Dict({
        "front": gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8),
        "state": gym.spaces.Box(-10, 10, (2,), np.float32),
    })  # fmt: skip
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def __init__(self, lie_at: int | None = None, hide: bool = False) -> None:
        self.rng, self.lie_at, self.hide = np.random.default_rng(0), lie_at, hide

    def _obs(self) -> dict[str, np.ndarray]:
        # lie_at: the frame shows success before the task has it; hide: it never shows it
        shown = (self.t > 3 and not self.hide) or self.t == self.lie_at
        return {"front": frame(shown, self.rng), "state": np.array([self.t, 0], np.float32)}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {"success": False}

    def step(self, action):
        self.t += 1 if action[0] > 0 else 0
        return self._obs(), 0.0, False, self.t >= 8, {"success": self.t > 3}


def test_the_env_rewards_and_ends_where_the_classifier_fires(trained: Trained) -> None:
    clf = SuccessClassifier(trained.path)
    env = ClassifierReward(Toy(), clf)
    assert "front" not in env.observation_space.spaces and "state" in env.observation_space.spaces
    obs, _ = env.reset()
    assert set(obs) == {"state"}
    rewards, ended = [], False
    while not ended:
        obs, reward, terminated, truncated, info = env.step(np.ones(1))
        rewards.append(reward)
        ended = terminated or truncated
    assert rewards == [0.0, 0.0, 0.0, 1.0] and terminated and info["classifier_success"]
    assert env.stats.true_positives == 1 and env.stats.false_positives == 0
    liar = ClassifierReward(Toy(lie_at=2), clf)  # fires at step 2, the task says not yet
    liar.reset()
    assert liar.step(np.ones(1))[2] is False and liar.step(np.ones(1))[2] is True
    assert liar.stats.false_positives == 1
    blind = ClassifierReward(Toy(hide=True), clf)  # the task succeeds, the frames never say so
    blind.reset()
    for _ in range(8):
        blind.step(np.ones(1))
    assert blind.stats.episodes == 1 and blind.stats.false_negatives == 1
    assert "1 false negatives" in blind.stats.describe()
    with pytest.raises(ValueError, match=r"Dict observation holding the cameras"):
        ClassifierReward(gym.make("Pendulum-v1").unwrapped, clf)


def test_demonstrations_are_relabelled_by_the_classifier(trained: Trained) -> None:
    clf = SuccessClassifier(trained.path)
    data = open_store(trained.store).load()
    relabelled = relabel_rewards(data, clf)
    ends = data.episode_starts + data.episode_lengths - 1
    successful = np.array([r.success for r in data.records])
    assert relabelled.reward[ends].tolist() == successful.astype(float).tolist()
    assert relabelled.terminated.sum() == successful.sum() and relabelled.reward.sum() == 8
    assert not relabelled.truncated[ends[successful]].any()


def test_corrections_are_failures_kept_in_training_and_the_split_stays(trained: Trained) -> None:
    rng = np.random.default_rng(3)

    def fooled(n: int) -> dict[str, np.ndarray]:
        """The square high up, 3 pixels left of where success puts it."""
        return {"front": np.stack([np.roll(frame(True, rng), -3, axis=1) for _ in range(n)])}

    before = SuccessClassifier(trained.path)
    assert (before.probability(fooled(8)) >= before.threshold).all()  # taken for success
    more = with_failed_episodes(trained.dataset, [fooled(6) for _ in range(3)], TINY)
    n = len(trained.dataset)
    assert len(more) == n + 18 and not more.label[n:].any()
    assert more.train_only is not None and more.train_only[n:].all()
    assert not more.train_only[:n].any()
    train, val = split_by_episode(more, TINY.val_fraction, TINY.seed)
    before_train, before_val = split_by_episode(trained.dataset, TINY.val_fraction, TINY.seed)
    assert val.tolist() == before_val.tolist()  # the threshold's episodes are the same
    assert sorted(train.tolist()) == sorted([*before_train.tolist(), *range(n, n + 18)])
    # A classifier retrained with them no longer takes such frames for success; success stays.
    config = dataclasses.replace(TINY, steps=200)
    result = train_classifier(more, config)
    corrected = SuccessClassifier(
        save_classifier(trained.path.parent / "corrected", result, config, more)
    )
    assert not (corrected.probability(fooled(8)) >= corrected.threshold).any()
    assert corrected.detect({"front": frame(True, rng)})
    with pytest.raises(ValueError, match=r"lacks \['front'\]"):
        with_failed_episodes(trained.dataset, [{"wrist": fooled(2)["front"]}], TINY)


def test_the_env_keeps_a_false_positive_episode_for_a_correction(trained: Trained) -> None:
    clf = SuccessClassifier(trained.path)
    liar = ClassifierReward(Toy(lie_at=2), clf, keep_false_positives=True)
    liar.reset()
    liar.step(np.ones(1))
    assert liar.step(np.ones(1))[2] is True and liar.false_positive is not None
    assert liar.false_positive["front"].shape == (2, SIZE, SIZE, 3)  # the frames after 2 steps
    honest = ClassifierReward(Toy(), clf, keep_false_positives=True)
    honest.reset()
    while not honest.step(np.ones(1))[2]:
        pass
    assert honest.false_positive is None and honest.stats.true_positives == 1
    with pytest.raises(ValueError, match=r"reads \('wrist',\)"):
        fake = type("Fake", (), {"cameras": ("wrist",), "state_keys": ()})()
        honest.use(fake)


def test_a_persons_verdict_on_an_ended_episode_is_the_tasks_success(trained: Trained) -> None:
    # On a robot the person watching judges the episodes the classifier ends: their word wins
    # over the env's own flag, and no word (None) leaves the flag standing.
    clf = SuccessClassifier(trained.path)
    asked: list[int] = []

    def run(env: ClassifierReward) -> dict:
        env.reset()
        while True:
            *_, terminated, truncated, info = env.step(np.ones(1))
            if terminated or truncated:
                return info

    def verdict(word: bool | None):
        return lambda: asked.append(1) or word

    no = ClassifierReward(Toy(), clf, keep_false_positives=True, verdict=verdict(False))
    assert run(no)["success"] is False and no.stats.false_positives == 1
    assert no.false_positive is not None and len(asked) == 1  # asked once, at the fire
    yes = ClassifierReward(Toy(lie_at=2), clf, keep_false_positives=True, verdict=verdict(True))
    assert run(yes)["success"] is True and yes.stats.true_positives == 1
    assert yes.false_positive is None
    silent = ClassifierReward(Toy(lie_at=2), clf, keep_false_positives=True,
                              verdict=verdict(None))  # fmt: skip
    assert run(silent)["success"] is False and silent.stats.false_positives == 1
    unasked = ClassifierReward(Toy(hide=True), clf, verdict=verdict(False))
    run(unasked)  # the classifier never fires: nobody is asked
    assert len(asked) == 3 and unasked.stats.false_negatives == 1


def test_a_replay_is_relabelled_by_the_classifier_on_each_next_frame(trained: Trained) -> None:
    clf = SuccessClassifier(trained.path)
    layout = ReplayLayout((ReplayField("obs", (1,), "float32"),
                           ReplayField("front", (SIZE, SIZE, 3), "uint8"),
                           ReplayField("action", (1,), "float32", "step")),
                          (("online", 16),))  # fmt: skip
    rng = np.random.default_rng(5)
    shown = [False, False, True, False, False, True]  # the frame of each row
    final = [False, False, False, False, False, True]  # one episode, its final row last
    k = len(shown)
    rows = Rows(
        data={"obs": np.zeros((k, 1), np.float32),
              "front": np.stack([frame(s, rng) for s in shown]),
              "action": np.zeros((k, 1), np.float32)},
        reward=np.ones(k, np.float32), terminated=np.ones(k, bool), final=np.array(final),
        first=np.eye(k, dtype=bool)[0], actor=np.zeros(k, np.int32), valid=np.ones(k, bool),
    )  # fmt: skip
    state = replay.insert(layout, replay.init(layout), 0, rows)
    state, changed = relabel_replay(layout, state, clf)
    # Row t's transition leads to row t + 1's frame; the final row is not a transition.
    assert np.asarray(state.reward)[:5].tolist() == [0.0, 1.0, 0.0, 0.0, 1.0]
    assert np.asarray(state.terminated)[:5].tolist() == [False, True, False, False, True]
    assert changed == 3 and float(state.reward[5]) == 1.0  # untouched: not a transition
    bare = ReplayLayout((ReplayField("obs", (1,), "float32"),), (("online", 4),))
    with pytest.raises(ValueError, match=r"needs the classifier's cameras \['front'\]"):
        relabel_replay(bare, replay.init(bare), clf)
