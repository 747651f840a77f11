"""``handrail train``: local training in one process.

``handrail train --task pick_cube`` starts from the task's preset (every field overridable from
the command line) and trains (:mod:`handrail.app.training` does the work: it checks every input
before it creates anything and writes everything into one run folder).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import tyro

from handrail.app.config import TrainConfig, format_env_kwargs, preset
from handrail.app.training import train
from handrail.launch.cli import option_value

__all__ = ["parse_args", "train"]


def parse_args(argv: Sequence[str]) -> TrainConfig:
    """The TrainConfig of a command line: the preset of its ``--task``, then every option."""
    argv = list(argv)
    task = option_value(argv, "--task") or "pick_cube"
    human = option_value(argv, "--human")  # a person's runs may have their own settings
    default = preset(task, residual_on=option_value(argv, "--residual-on"),
                     **({"human": human} if human else {}))  # fmt: skip
    sac_preset = option_value(argv, "--sac-preset")
    if sac_preset not in (None, "task"):
        from handrail.learners.agents.sac import SACConfig

        if sac_preset not in ("cpu", "rlpd", "hil_serl"):
            raise ValueError(f"--sac-preset {sac_preset!r}: choose task, cpu, rlpd or hil_serl")
        default = dataclasses.replace(default, sac=getattr(SACConfig, sac_preset)())
    if any(a == "--demos" or a.startswith("--demos=") for a in argv):
        default = dataclasses.replace(default, expert_demos=0)  # else the check below refuses
    parsed = tyro.cli(TrainConfig, default=default, args=argv, prog="handrail train",
                      description="Train a policy on a task (defaults: the task's preset).")  # fmt: skip
    env = {**default.env, **parsed.env}  # --env-kwargs adds to the preset's
    return dataclasses.replace(parsed, env_kwargs=format_env_kwargs(env))
