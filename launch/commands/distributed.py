"""``handrail learner`` and ``handrail actor``: the two sides of a run on several machines.

``handrail learner --task T`` (any ``handrail train`` option; ``--actors N`` adds N local sim
actors) starts the learner on a Ray cluster (``--ray-address``) or on a local Ray runtime and
drives the run folder; ``handrail actor --task T --ray-address HOST:PORT`` runs one env actor
in this process (beside a robot, or on a CPU node) and feeds it. See docs/distributed.md.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import tyro

from handrail.app.config import parse_env_kwargs
from handrail.launch.commands.train import TrainCommand, parse_command


def parse_learner(argv: Sequence[str]) -> TrainCommand:
    """``handrail learner``'s command line: ``handrail train``'s options."""
    return parse_command(argv, prog="handrail learner", description=(
        "Start a run's learner on Ray (handrail train's options; --actors N adds N local sim "
        "actors); env actors join it with handrail actor."))  # fmt: skip


def learner(command: TrainCommand) -> int:
    """``handrail learner``: ``handrail train`` whose actors may join from elsewhere."""
    from handrail.app.config import check_task_options
    from handrail.app.distributed import train_distributed
    from handrail.app.training import resolve_run

    cfg, run_path = resolve_run(command.settings.config)
    check_task_options(cfg)
    return train_distributed(cfg, command.settings, run_path)


@dataclass(frozen=True)
class ActorConfig:
    """Options of ``handrail actor``."""

    ray_address: str
    """HOST:PORT of the Ray cluster the learner runs on (printed by handrail learner)."""
    task: str = "pick_cube"
    """The learner's task (its spaces are checked against the learner's)."""
    env_kwargs: tuple[str, ...] = ()
    """KEY=VALUE keyword arguments for the env, as the learner's."""
    name: str = ""
    """This actor's name at the learner (a restarted actor with the same name takes up its
    place); default: host-pid."""
    seed: int = 0
    """Episode i is reset with seed + i (give each actor its own)."""
    success_key: str = "success"
    """Info key of the success flag."""
    steps: int = 10**12
    """Stop once the learner holds this many steps (default: run until interrupted)."""


def actor(config: Annotated[ActorConfig, tyro.conf.arg(name="")]) -> int:
    """``handrail actor``: one env actor feeding a remote learner."""
    import os

    from handrail.app.distributed import run_actor

    name = config.name or f"{socket.gethostname()}-{os.getpid()}"
    return run_actor(config.task, config.ray_address, name=name, seed=config.seed,
                     env_kwargs=parse_env_kwargs(config.env_kwargs, config.task),
                     success_key=config.success_key, steps=config.steps)  # fmt: skip
