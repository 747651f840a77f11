"""The remote learner's protocol without Ray: a LearnerService and StepSenders in one process,
joined by a link that can reorder, lose and refuse calls the way a network and a restarting
learner do. Ray itself: tests/app/test_distributed.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from handrail.control.step import Step
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.distributed.protocol import (
    DistConfig,
    LearnerService,
    RemoteParams,
    StepSender,
)
from handrail.learners.learner import LoopConfig
from handrail.learners.specs import ActionSpec, ObsSpec

OBS = {"x": np.zeros(3, np.float32)}


def _sac() -> SAC:
    import gymnasium as gym

    space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (3,), np.float32)})
    action = gym.spaces.Box(-1, 1, (2,), np.float32)
    return SAC(ObsSpec.from_space(space), ActionSpec.from_space(action),
               SACConfig.cpu(hidden_dims=(32, 32), batch_size=32, utd=1))  # fmt: skip


def _steps(n: int, episode: int = 10, start: int = 0) -> list[Step]:
    out = []
    for i in range(start, start + n):
        obs = {"x": np.full(3, i / 1000, np.float32)}
        nxt = {"x": np.full(3, (i + 1) / 1000, np.float32)}
        out.append(Step(obs, np.zeros(2, np.float32), float(i), nxt, False,
                        (i + 1) % episode == 0))  # fmt: skip
    return out


class Future:
    def __init__(self) -> None:
        self.done, self.value, self.error = False, None, False


class Link:
    """Calls run at once, unless ``reorder`` holds an ``add`` back until the next one has run
    (batches arriving out of order), or the learner is ``down`` (every call fails)."""

    def __init__(self, service: LearnerService) -> None:
        self.service = service
        self.down = False
        self.reorder = False
        self.held: list[tuple[Future, tuple[Any, ...]]] = []

    def _run(self, future: Future, method: str, args: tuple[Any, ...]) -> None:
        future.value, future.done = getattr(self.service, method)(*args), True

    def call(self, method: str, *args: Any) -> Future:
        future = Future()
        if self.down:
            future.done = future.error = True
        elif method == "add" and self.reorder and not self.held:
            self.held.append((future, args))
        else:
            self._run(future, method, args)
            if method == "add" and self.held:  # the held batch arrives after this one
                held, held_args = self.held.pop()
                self._run(held, "add", held_args)
        return future

    def ready(self, futures: list[Future]) -> list[Future]:
        return [f for f in futures if f.done]

    def result(self, future: Future) -> Any:
        if future.error:
            raise ConnectionError("learner down")
        return future.value


def _sender(service: LearnerService, link: Link, dist: DistConfig, name: str = "a",
            where: str = "pid 1") -> StepSender:  # fmt: skip
    actor_id, start = service.register(name, "", where)
    return StepSender(link.call, link.ready, link.result, RemoteParams(lambda r: r), actor_id,
                      dist, start)  # fmt: skip


def test_batches_arriving_out_of_order_are_each_taken_once(tmp_path: Path) -> None:
    service = LearnerService(_sac(), LoopConfig(warmup_steps=10**6, normalize_obs=False),
                             DistConfig(send_every=4), seed=0)  # fmt: skip
    link = Link(service)
    link.reorder = True
    sender = _sender(service, link, DistConfig(send_every=4))
    for step in _steps(40):
        sender.add(step)
        link.reorder = sender.sent < 30  # swap batches pairwise for most of the run
    assert sender.drain()
    assert service.wait_for(40)
    service.close()
    assert service.learner.steps == 40 == service.actors[0].acked
    service.learner.flush()
    live = service.learner.replay
    online = int(np.asarray(live.size)[0])
    assert online == 40 + 4  # 40 transitions and the final rows of 4 episodes
    rewards = np.asarray(live.reward)[:online][np.asarray(live.next)[:online] >= 0]
    assert sorted(rewards.tolist()) == [float(i) for i in range(40)]  # each step once, in order


def test_a_learner_that_restarts_from_its_checkpoint_is_sent_what_it_lost(tmp_path: Path) -> None:
    dist = DistConfig(send_every=5, checkpoint_every=30, buffer_steps=1000)
    loop = LoopConfig(warmup_steps=10**6, normalize_obs=False)
    service = LearnerService(_sac(), loop, dist, seed=0, folder=tmp_path)
    link = Link(service)
    sender = _sender(service, link, dist)
    for step in _steps(50):
        sender.add(step)
    assert sender.drain()
    service.save()  # the checkpoint holds 50 steps
    for step in _steps(17, start=50):
        sender.add(step)
    assert sender.drain() and service.learner.steps + service._inbox.qsize() == 67
    service.close()
    link.down = True  # the learner dies: steps 50-66 are gone with it
    for step in _steps(8, start=67):
        sender.add(step)  # the actor goes on, never waiting
    sender.pump()
    assert not sender.connected
    restarted = LearnerService(_sac(), loop, dist, seed=0, folder=tmp_path)
    assert restarted.learner.steps == 50
    # The actor's process is unknown until it registers again: the driver takes "" as no news.
    assert [r["where"] for r in restarted.stats()["actors"].values()] == [""]
    link.service, link.down = restarted, False
    sender._retry_at = 0.0
    assert sender.drain()
    assert restarted.wait_for(75)
    restarted.close()
    assert restarted.learner.steps == 75 == sender.stats.taken  # every step once
    assert sender.stats.resent >= 17 and sender.stats.reconnects == 1  # 50-66, and any failed send
    events = [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").open()]
    assert events[0].startswith("learner started (pid ")
    assert any(
        e.startswith("learner restored from its checkpoint at 50 steps (pid ") for e in events
    )


def test_an_actor_with_other_spaces_is_refused_in_one_line() -> None:
    service = LearnerService(_sac(), LoopConfig(), DistConfig(), seed=0, signature="obs=A")
    with pytest.raises(ValueError, match="actor 'robot-2': its env's spaces differ"):
        service.register("robot-2", "obs=B")
    service.close()


def test_a_restarted_actor_keeps_its_place_and_its_open_episode_is_dropped() -> None:
    loop = LoopConfig(warmup_steps=10**6, normalize_obs=False)
    service = LearnerService(_sac(), loop, DistConfig(send_every=3), seed=0)
    link = Link(service)
    sender = _sender(service, link, DistConfig(send_every=3), "robot")
    for step in _steps(7):  # an episode of 10 steps, cut after 7 by the actor's death
        sender.add(step)
    assert sender.drain()
    assert service.stats()["actors"][0]["where"] == "pid 1"
    again = _sender(service, link, DistConfig(send_every=3), "robot", "pid 2")
    assert again.actor_id == sender.actor_id and again.sent == 7
    assert service.stats()["actors"][0]["where"] == "pid 2"  # the driver sees the restart here
    for step in _steps(10, start=100):
        again.add(step)
    assert again.drain() and service.wait_for(17)
    service.close()
    service.learner.flush()
    assert service.actors[0].acked == 17
    from handrail.learners import replay

    # The cut episode's last transition waits for a next row that never comes: never sampled.
    pending = np.asarray(service.learner.replay.next)[:20]
    assert (pending == replay.PENDING).sum() == 1


def test_a_full_buffer_drops_its_oldest_unsent_steps_and_says_so() -> None:
    loop = LoopConfig(warmup_steps=10**6, normalize_obs=False)
    dist = DistConfig(send_every=4, buffer_steps=10)
    service = LearnerService(_sac(), loop, dist, seed=0)
    link = Link(service)
    sender = _sender(service, link, dist)
    link.down = True
    sender.connected = False
    for step in _steps(25):
        sender.add(step)  # nothing can be sent: the buffer keeps the newest 10
    assert sender.stats.dropped == 15 and sender.stats.taken == 25
    link.down = False
    sender._retry_at = 0.0
    assert sender.drain()
    assert service.wait_for(10)
    service.close()
    assert service.learner.steps == 10
    assert service.stats()["dropped"] == 15


def test_params_are_never_older_than_the_fetch_interval_plus_one_broadcast() -> None:
    """Versions count update blocks. A learner that keeps up runs one block per step and
    broadcasts every ``broadcast_blocks``; an actor that fetches every ``params_every`` of its
    steps acts on params at most ``params_every + broadcast_blocks`` blocks old, plus the blocks
    of one batch in flight (the reference it fetches came with its latest reply)."""
    loop = LoopConfig(warmup_steps=10, normalize_obs=False)
    dist = DistConfig(send_every=5, params_every=20, broadcast_blocks=8)
    service = LearnerService(_sac(), loop, dist, seed=0)
    link = Link(service)
    sender = _sender(service, link, dist)
    age: list[int] = []  # at each step: the learner's version minus the one acted with
    for step in _steps(300):
        sender.add(step)
        if sender.sent == sender.base + len(sender.buffer):  # a batch went: let the learner
            assert service.wait_for(sender.sent)  # catch up, as a learner that keeps up does
        if sender.params.version >= 0:
            age.append(service.learner.version - sender.params.version)
    service.close()
    assert len(sender.stats.staleness) >= 300 // dist.params_every - 1  # fetched on schedule
    assert max(age) <= dist.params_every + dist.broadcast_blocks + dist.send_every
    assert max(age) > dist.params_every // 2  # the bound is near what happens, not vacuous
    assert sender.params.version > 200  # the actor moved on to trained params


def test_camera_steps_reach_the_learners_replay_as_uint8_frames_each_once() -> None:
    """``--actors`` with ``--pixels``: actors send the env's observations, frames and all; the
    learner keeps each frame once, as the uint8 the camera gave, beside the state, and learns
    from them."""
    import gymnasium as gym

    space = gym.spaces.Dict({"cam": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
                             "x": gym.spaces.Box(-1, 1, (3,), np.float32)})  # fmt: skip
    sac = SAC(ObsSpec.from_space(space, images=True), ActionSpec((-1.0, -1.0), (1.0, 1.0)),
              SACConfig.cpu(hidden_dims=(32, 32), batch_size=8, utd=1, image_channels=(4,),
                            image_strides=(2,), image_features=8))  # fmt: skip
    dist = DistConfig(send_every=4)
    service = LearnerService(sac, LoopConfig(warmup_steps=20, normalize_obs=False), dist, seed=0)
    link = Link(service)
    sender = _sender(service, link, dist)

    def obs(i: int) -> dict[str, np.ndarray]:
        return {"cam": np.full((8, 8, 3), i, np.uint8), "x": np.full(3, i / 100, np.float32)}

    for i in range(40):
        sender.add(Step(obs(i), np.zeros(2, np.float32), float(i), obs(i + 1), False,
                        (i + 1) % 10 == 0))  # fmt: skip
    assert sender.drain()
    assert service.wait_for(40)
    service.close()
    live = service.learner.replay
    online = int(np.asarray(live.size)[0])
    frames = np.asarray(live.data["cam"])[:online]
    assert frames.dtype == np.uint8 and online == 44  # 40 steps and 4 episodes' final rows
    firsts = frames[:, 0, 0, 0].tolist()
    assert sorted(firsts) == sorted([*range(41), 10, 20, 30])  # each frame once (and finals)
    assert service.stats()["updates"] > 0
