"""``handrail train``: local training in one process.

``handrail train --task pick_cube`` starts from the task's presets (every field overridable from
the command line) and trains (:mod:`handrail.app.training` does the work: it checks every input
before it creates anything and writes everything into one run folder). ``--print-config``
prints every setting, its value and the layer that set it (the task's preset, a person's, a
residual's, a named SAC preset, the command line...), then exits without creating anything.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro

from handrail.app.config import Settings, TrainConfig, resolve
from handrail.app.provenance import format_settings, run_settings
from handrail.app.training import resolve_run, train
from handrail.launch.cli import option_value

__all__ = ["TrainCommand", "parse_args", "parse_command", "run", "train"]


@dataclass(frozen=True)
class _Options:
    """What the command line sets: TrainConfig's options (unprefixed) and --print-config."""

    config: Annotated[TrainConfig, tyro.conf.arg(name="")]
    """The run's settings."""
    print_config: bool = False
    """Print every setting, its value and the layer that set it (default, cpu, the task's
    preset, a named SAC preset, with_person, residual, task residual, command line), then exit
    without creating anything."""


@dataclass(frozen=True)
class TrainCommand:
    """A parsed ``handrail train`` command line."""

    settings: Settings
    """The run's config and the layer that set each of its settings."""
    print_config: bool = False
    """Print the settings instead of training."""


def parse_command(argv: Sequence[str], prog: str = "handrail train",
                  description: str = "Train a policy on a task (defaults: the task's preset)."
                  ) -> TrainCommand:  # fmt: skip
    """The settings of a command line: its ``--task``'s presets (with those of ``--pixels``,
    ``--human``, ``--residual-on`` and ``--sac-preset``), then every option it names, as
    ``command line`` (even where the value equals the layer below)."""
    argv = list(argv)
    task = option_value(argv, "--task") or "pick_cube"
    selected: dict[str, Any] = {
        "residual_on": option_value(argv, "--residual-on"),
        "human": option_value(argv, "--human") or "none",  # a person's runs have their own
        "sac_preset": option_value(argv, "--sac-preset") or "task",
    }
    demos = option_value(argv, "--demos")  # a store replaces the preset's expert demos
    first: dict[str, Any] = {"demos": Path(demos)} if demos else {}
    if "--pixels" in argv:  # a run on cameras has its own layer
        first["pixels"] = True
    default = resolve(task, **selected, overrides=first)
    options = tyro.cli(_Options, default=_Options(default.config), args=argv, prog=prog,
                       description=description)  # fmt: skip
    named = _named(argv, {*default.values, "env_kwargs"})
    overrides = {path: functools.reduce(getattr, path.split("."), options.config) for path in named}
    return TrainCommand(resolve(task, **selected, overrides=overrides), options.print_config)


def parse_args(argv: Sequence[str]) -> TrainConfig:
    """The TrainConfig of a command line (:func:`parse_command`'s)."""
    return parse_command(argv).settings.config


def run(command: TrainCommand) -> int:
    """``handrail train``: prints the settings (``--print-config``) or trains."""
    if command.print_config:
        settings = command.settings
        if settings.config.resume is not None:  # the run's own settings, as a resume reads them
            settings = run_settings(*resolve_run(settings.config), settings)
        print(format_settings(settings), end="")
        return 0
    return train(command.settings.config, command.settings)


def _named(argv: Sequence[str], paths: set[str]) -> list[str]:
    """The settings a command line names (``--sac.actor-lr`` is ``sac.actor_lr``,
    ``--no-progress`` is ``progress``), in the order given."""
    named: list[str] = []
    for arg in argv:
        if not arg.startswith("--"):
            continue
        name = arg[2:].split("=", 1)[0].replace("-", "_")
        head, dot, last = name.rpartition(".")
        negated = f"{head}{dot}{last.removeprefix('no_')}"
        for path in (name, negated):
            if path in paths and path not in named:
                named.append(path)
                break
    return named
