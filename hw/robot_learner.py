"""The learner beside the robot: handrail's asynchronous trainer, fed by the actor node's steps.

``actor_node`` with ``learner:=local`` runs :class:`~handrail.learners.loop.AsyncTrainer` over the
ROS env: the actor acts with the newest published parameters at the control rate, and the
learner thread updates in the background at the configured UTD without ever making the actor
wait (the trainer's transition sink is a queue). The algorithm and loop settings and the
observation keys the learner leaves out come from a ``handrail train`` run's ``config.json`` (its
``sac``, ``loop`` and ``ignore_obs_keys``), so a config tuned in sim is the one used on the arm;
demonstrations (e.g. recorded through this same stack with ``policy:=expert`` or by a person)
come from a Zarr store and fill half of every batch.

The learner's checkpoints go to ``<run_dir>/checkpoints/latest`` (the layout of ``handrail train``,
so ``handrail eval`` and ``policy:=<run_dir>`` read them), after every ``save_every`` episodes and
at shutdown.

On a learned success classifier's reward (the env wrapped in
:class:`~handrail.learners.agents.learned_reward.ClassifierReward`), up to ``corrections`` of the
episodes the person says it ended wrongly retrain it between episodes
(:class:`~handrail.learners.agents.corrections.Corrections`); the counts, the corrected
classifier and the corrections go into every checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from handrail.learners.agents.corrections import Corrections
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.checkpoint import write_checkpoint_dir
from handrail.learners.learner import LoopConfig
from handrail.learners.loop import AsyncTrainer
from handrail.learners.obs_norm import demo_pairs
from handrail.learners.specs import ActionSpec, ObsSpec

__all__ = ["RobotLearner", "load_train_config"]


def load_train_config(path: str | Path) -> tuple[SACConfig, LoopConfig, tuple[str, ...]]:
    """The ``sac`` and ``loop`` sections of a ``handrail train`` run's ``config.json``, and the
    observation keys its learner left out (``ignore_obs_keys``; none in a config without it).

    The loop always runs asynchronously here (the control loop must keep its rate).

    Raises:
        ValueError: the file is missing, not JSON, or has no ``sac``/``loop`` section.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        data = json.loads(file.read_text())
        sac = SACConfig.from_json(data["sac"])
        fields = {f.name for f in dataclasses.fields(LoopConfig)}
        loop = LoopConfig(**{k: v for k, v in data["loop"].items() if k in fields})
        ignored = tuple(str(k) for k in data.get("ignore_obs_keys", ()))
    except FileNotFoundError:
        raise ValueError(
            f"learner_config {str(file)!r} does not exist: give the config.json of a "
            "`handrail train` run (e.g. runs/<name>/config.json)"
        ) from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(
            f"learner_config {str(file)!r} is not a `handrail train` config.json with sac and "
            f"loop sections ({exc!r})"
        ) from None
    return sac, dataclasses.replace(loop, mode="async"), ignored


class RobotLearner:
    """An :class:`AsyncTrainer` over the ROS env, with checkpoints in ``run_dir``.

    Args:
        env: the actor's env (RosArmEnv inside InterventionEnv).
        config_path: a ``handrail train`` run's config.json (or its run folder).
        run_dir: where checkpoints go.
        seed: seeds the learner and the policy noise.
        demos: a Zarr store of demonstrations ("" for none).
        sinks: more transition sinks (the Zarr recorder).
        save_every: episodes between checkpoints.
        ignore_obs_keys: observation keys the learner does not see besides the config's
            (camera images: the learner is state-based).
        corrections: at most this many classifier corrections (0: none).
        corrections_every: at least this many env steps between two.
        say: prints a line of what the corrections do (the node's logger).

    Raises:
        ValueError: the config, the demos or the classifier's training stores are unusable
            (naming which).
    """

    def __init__(
        self,
        env: Any,
        config_path: str,
        run_dir: str,
        *,
        seed: int,
        demos: str = "",
        sinks: Sequence[Any] = (),
        save_every: int = 10,
        ignore_obs_keys: Sequence[str] = (),
        corrections: int = 0,
        corrections_every: int = 1000,
        say: Callable[[str], None] = print,
    ) -> None:
        sac_config, loop, ignored = load_train_config(config_path)
        ignored += tuple(k for k in ignore_obs_keys if k not in ignored)
        obs_spec = ObsSpec.from_space(env.observation_space, ignore=ignored)
        specs = obs_spec, ActionSpec.from_space(env.action_space)
        rows = _demo_rows(demos, *specs) if demos else None
        self.sac = SAC(*specs, sac_config, pairs=demo_pairs(obs_spec, rows, loop.relative_inputs))
        self.trainer = AsyncTrainer(env, self.sac, loop, seed=seed, demos=rows, sinks=sinks)
        # Compile before the first episode: tracing holds the GIL for seconds, and the actor
        # in this process must keep its control rate (its observations would go stale).
        self.trainer.learner.compile()
        self.trainer.policy(_example_obs(env.observation_space))
        self.run_dir = Path(run_dir)
        self.corrections = Corrections(env, self.trainer, self.run_dir, episodes=corrections,
                                       every=corrections_every, say=say,
                                       option="corrections")  # fmt: skip
        self.save_every = max(1, save_every)
        self.episodes = 0

    @property
    def actor(self) -> Any:
        """The trainer's actor (it acts with the newest params)."""
        return self.trainer.actor

    def episode_ended(self) -> dict[str, Any] | None:
        """Count an episode, take a classifier correction if one is due (its record is
        returned), and save a checkpoint every ``save_every``."""
        self.episodes += 1
        record = self.corrections.after_episode(self.trainer.env_steps)
        if self.episodes % self.save_every == 0:
            self.save()
        return record

    def save(self) -> Path:
        """Write ``run_dir/checkpoints/latest`` (between episodes only)."""

        def save_into(folder: Path) -> None:
            self.trainer.save_into(folder)
            self.corrections.save_into(folder)

        return write_checkpoint_dir(self.run_dir / "checkpoints" / "latest", save_into)

    def close(self) -> None:
        """Save and stop the learner thread."""
        try:
            if self.trainer.actor.at_episode_start:
                self.save()
        finally:
            self.trainer.close()


def _example_obs(space: Any) -> dict[str, np.ndarray]:
    """A zero observation of a Dict space (compiles the policy)."""
    return {key: np.zeros(box.shape, box.dtype) for key, box in space.spaces.items()}


def _demo_rows(path: str, obs_spec: ObsSpec, action_spec: ActionSpec) -> Any:
    """Successful episodes of a store as replay rows, checked against the learner's specs."""
    import handrail.demos
    from handrail.demos.finite import require_finite
    from handrail.learners.demo_data import check_fields, to_rows

    reader = handrail.demos.open_store(path)
    require_finite(reader, reader.select(successful_only=True))  # named before the first update
    data = reader.load(successful_only=True)
    if data.num_episodes == 0:
        raise ValueError(f"demos {path!r}: the store holds no successful episode")
    check_fields(data, obs_spec, action_spec)
    return to_rows(data, obs_spec, action_spec)
