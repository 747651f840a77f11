"""The ``handrail`` command line.

Each command is a plain function whose signature (usually a frozen config dataclass) is turned
into options by tyro. Commands are looked up in a static table and imported lazily, so that
``handrail demos info`` never pays for importing JAX or MuJoCo.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tyro


@dataclass(frozen=True)
class Command:
    """One entry of the command table."""

    target: str
    """``module:function`` (a full module path); the function takes tyro-parsed args."""
    summary: str
    """One line for ``handrail --help``."""
    parse: str | None = None
    """``module:function`` turning the command's argv into the target's one argument (for
    defaults that depend on other options, like ``train``'s task presets); None: tyro."""


# (group, name) -> Command. A group of "" means a top-level command such as `handrail train`.
COMMANDS: dict[tuple[str, ...], Command] = {
    ("train",): Command(
        "handrail.launch.commands.train:run",
        "Train a policy (SAC/RLPD in JAX, or SB3) on a task.",
        parse="handrail.launch.commands.train:parse_command",
    ),
    ("learner",): Command(
        "handrail.launch.commands.distributed:learner",
        "Start a run's learner on Ray; env actors join it (handrail actor).",
        parse="handrail.launch.commands.distributed:parse_learner",
    ),
    ("actor",): Command(
        "handrail.launch.commands.distributed:actor",
        "Run one env actor here, feeding a learner on a Ray cluster.",
    ),
    ("eval",): Command(
        "handrail.launch.commands.evaluate:evaluate",
        "Evaluate a run or checkpoint: success rate with CI.",
    ),
    ("sim", "rollout"): Command(
        "handrail.launch.commands.sim:rollout",
        "Run episodes with a policy, print success, write a video.",
    ),
    ("sim", "view"): Command(
        "handrail.launch.commands.sim:view", "Open the interactive MuJoCo viewer on a task."
    ),
    ("record",): Command(
        "handrail.launch.commands.record:record", "Record episodes into a Zarr episode store."
    ),
    ("replay",): Command(
        "handrail.launch.commands.replay:replay",
        "Replay recorded actions in the sim; report drift; render.",
    ),
    ("teleop", "check"): Command(
        "handrail.launch.commands.teleop:check",
        "Show a teleop device's live state: found, readable, mapped?",
    ),
    ("teleop", "map"): Command(
        "handrail.launch.commands.teleop:map_",
        "Print a teleop device's default mapping as TOML, to edit.",
    ),
    ("demos", "info"): Command(
        "handrail.launch.commands.demos:info", "Summary table of an episode store."
    ),
    ("demos", "validate"): Command(
        "handrail.launch.commands.demos:validate",
        "Validate an episode store; non-zero exit on problems.",
    ),
    ("demos", "filter"): Command(
        "handrail.launch.commands.demos:filter_",
        "Copy a filtered subset of a store into a new store.",
    ),
    ("demos", "merge"): Command(
        "handrail.launch.commands.demos:merge", "Merge several stores into a new store."
    ),
    ("demos", "export"): Command(
        "handrail.launch.commands.demos:export", "Export a store to robomimic HDF5 or LeRobot."
    ),
    ("demos", "import"): Command(
        "handrail.launch.commands.demos:import_",
        "Import robomimic HDF5, LeRobot or diffusion_policy zarr.",
    ),
    ("label",): Command(
        "handrail.launch.commands.label:label",
        "Label success and failure frames for a reward classifier.",
    ),
    ("reward", "train"): Command(
        "handrail.launch.commands.reward:train",
        "Train a success classifier on labelled camera frames (--reward classifier:PATH).",
    ),
    ("reward", "eval"): Command(
        "handrail.launch.commands.reward:evaluate",
        "Score a success classifier on other episodes: precision, recall, false positives.",
    ),
    ("encoder", "train"): Command(
        "handrail.launch.commands.encoder:train",
        "Pretrain a frozen image encoder on recorded frames (handrail train --encoder PATH).",
    ),
    ("encoder", "import-resnet10"): Command(
        "handrail.launch.commands.encoder:import_resnet10",
        "Convert SERL's pretrained ResNet-10 params into a frozen encoder (--encoder PATH).",
    ),
    ("bench", "sim"): Command(
        "handrail.bench.sim:bench_sim", "Env steps/s per task and share of time in mj_step."
    ),
    ("bench", "learner"): Command(
        "handrail.bench.learner:bench_learner", "Learner throughput side by side with SBX and SB3."
    ),
    ("bench", "learning"): Command(
        "handrail.bench.learning:bench_learning",
        "Sparse-reward learning: steps and minutes to 90% sustained, vs SB3 and SBX.",
    ),
    ("bench", "distributed"): Command(
        "handrail.bench.distributed:bench_distributed",
        "Ray: overhead vs one process, scaling with actors, learner restart, staleness.",
    ),
    ("bench", "store"): Command(
        "handrail.bench.store:bench_store", "Episode-store latency and throughput vs naive zarr."
    ),
    ("bench", "hil"): Command(
        "handrail.bench.hil:bench_hil",
        "Env steps to 90% with and without the simulated human in the loop (HIL-SERL's effect).",
    ),
    ("bc",): Command(
        "handrail.launch.commands.bc:bc",
        "Behaviour cloning on a demo store (a base policy for train --residual-on bc:RUN).",
        parse="handrail.launch.commands.bc:parse_args",
    ),
    ("bench", "ros"): Command(
        "handrail.bench.ros:bench_ros",
        "Control-loop jitter, observation age and latency through ROS 2 against sim_robot.",
    ),
    ("bench", "vision"): Command(
        "handrail.bench.vision:bench_vision",
        "A learned success classifier in place of the task's reward, judged by the task.",
    ),
    ("bench", "residual"): Command(
        "handrail.bench.residual:bench_residual",
        "Residual RL on an imperfect BC base against SAC from scratch, same demonstrations.",
    ),
    ("launch",): Command(
        "handrail.launch.ros.runner:launch",
        "Start a ROS 2 XML launch file's nodes (where `ros2 launch` is not installed).",
        parse="handrail.launch.ros.runner:parse_argv",
    ),
}


_USER_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, FileNotFoundError)
"""Bad input (config validation, wrong paths): reported as one line, with the episode store's
:class:`handrail.demos.errors.StoreError` (locked, damaged, mismatched or not a store) and a
missing teleop device (:class:`handrail.control.device_discovery.DeviceNotFound`)."""


def _is_user_error(err: Exception) -> bool:
    """Whether ``err`` is the user's to fix (a bad input or store), not a bug in handrail."""
    if isinstance(err, _USER_ERRORS):
        return True
    # A StoreError exists only if its module was imported. Looking it up rather than importing
    # it keeps zarr (which `import handrail.demos` loads) out of commands that open no store.
    store_errors = sys.modules.get("handrail.demos.errors")
    if store_errors is not None and isinstance(err, store_errors.StoreError):
        return True
    # Likewise a teleop device that is missing or not readable (its message has the fix).
    discovery = sys.modules.get("handrail.control.device_discovery")
    return discovery is not None and isinstance(err, discovery.DeviceNotFound)


def _resolve(target: str) -> Callable[..., object]:
    module_name, func_name = target.split(":")
    module = importlib.import_module(module_name)
    return getattr(module, func_name)


def _usage(prefix: tuple[str, ...] = ()) -> str:
    lines = [
        "usage: handrail " + " ".join(prefix) + (" " if prefix else "") + "COMMAND [OPTIONS]",
        "",
    ]
    lines.append("commands:")
    for key, cmd in COMMANDS.items():
        if key[: len(prefix)] == prefix:
            lines.append(f"  {' '.join(key):<16} {cmd.summary}")
    lines.append("")
    lines.append("Run `handrail COMMAND --help` for the options of one command.")
    return "\n".join(lines)


def option_value(argv: Sequence[str], name: str) -> str | None:
    """The value given to ``name`` on a command line (``--name V`` or ``--name=V``), if any: for
    a command whose defaults depend on it (``train --task``'s preset)."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


_OPTION_STRINGS = ("--train-args", "--bc-args")
"""Options whose value is itself a string of options (the benches pass it on to the runs)."""


def _join_option_strings(args: list[str]) -> list[str]:
    """``--train-args "--sac.utd 4"`` as ``--train-args=--sac.utd 4``: the argument parser takes a
    separate value that starts with a dash for an option and reports the value as missing."""
    out: list[str] = []
    for arg in args:
        if out and out[-1] in _OPTION_STRINGS and arg.startswith("-"):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _match(argv: Sequence[str]) -> tuple[tuple[str, ...], Command] | None:
    for length in (2, 1):
        key = tuple(argv[:length])
        if key in COMMANDS:
            return key, COMMANDS[key]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``handrail`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] in ("-V", "--version"):
        from handrail import __version__

        print(f"handrail {__version__}")
        return 0
    found = _match(args)
    if found is None:
        groups = {key[0] for key in COMMANDS if len(key) == 2}
        if args[0] in groups:
            print(_usage((args[0],)), file=sys.stderr if len(args) > 1 else sys.stdout)
            if len(args) > 1 and args[1] not in ("-h", "--help"):
                print(f"\nhandrail: unknown command '{' '.join(args[:2])}'", file=sys.stderr)
                return 2
            return 0
        print(_usage(), file=sys.stderr)
        print(f"\nhandrail: unknown command '{args[0]}'", file=sys.stderr)
        return 2
    key, command = found
    func = _resolve(command.target)
    try:
        if command.parse is not None:
            result = func(_resolve(command.parse)(args[len(key) :]))
        else:
            result = tyro.cli(
                func,
                args=_join_option_strings(args[len(key) :]),
                prog="handrail " + " ".join(key),
                description=command.summary,
            )
    except Exception as err:
        # Bad input (config validation, wrong paths, locked, damaged or mismatched stores) is the
        # user's to fix: one clear line, not a traceback. HANDRAIL_DEBUG=1 shows where it came from.
        if not _is_user_error(err) or os.environ.get("HANDRAIL_DEBUG"):
            raise
        notes = "".join(f" {note}" for note in getattr(err, "__notes__", ()))
        print(f"handrail {' '.join(key)}: error: {err}{notes}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C: one line, with what was kept where a command says
        if os.environ.get("HANDRAIL_DEBUG"):
            raise
        notes = "".join(f"; {note}" for note in getattr(err, "__notes__", ()))
        print(f"\nhandrail {' '.join(key)}: interrupted{notes}", file=sys.stderr)
        return 130
    return int(result) if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
