"""What the ``handrail record``, ``replay``, ``demos ...`` and model-training commands share.

The positional store-path argument, the sim's camera names, episode-id lists, the check of an
existing ``--out``, how a bad input or a damaged store becomes one clear line and exit code 2,
and, for commands that train a model into a folder, writing that folder whole and plotting its
losses.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import tyro

StorePath = Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="PATH")]
"""A positional store path, shown as PATH in --help."""

CAMERAS = ("front", "wrist")
"""Sim cameras a store can hold images from (``--cameras``; replay restores them by name)."""


def fail(command: str, message: str, code: int = 2) -> int:
    """Prints ``handrail COMMAND: MESSAGE`` to stderr and returns the exit ``code``."""
    print(f"handrail {command}: {message}", file=sys.stderr)
    return code


def guarded(command: str, body: Callable[[], int], interrupted: str | None = None) -> int:
    """Runs ``body``; a bad input or a damaged store becomes one clear line and exit code 2.

    Args:
        command: the command's name, for the message.
        body: the command's work.
        interrupted: what Ctrl-C left behind, added to the KeyboardInterrupt as a note (the
            ``handrail`` entry point prints it in its "interrupted" line).
    """
    from handrail.control.device_discovery import DeviceNotFound
    from handrail.demos import StoreError

    try:
        return body()
    except (StoreError, ValueError, TypeError, OSError, ImportError, DeviceNotFound) as exc:
        return fail(command, f"error: {exc}")
    except KeyboardInterrupt as exc:
        if interrupted:
            exc.add_note(interrupted)
        raise


def check_out(out: str, *, overwrite: bool, append: bool | None = None) -> None:
    """Refuses an existing ``--out`` unless ``--overwrite`` says to replace it (``append``:
    the command also has ``--append``, to add to it; True: it is given, so ``out`` must exist).

    Raises:
        FileExistsError: ``out`` exists and neither flag says what to do with it.
        FileNotFoundError: ``--append`` to nothing.
    """
    from handrail.demos.commit import is_empty_dir

    path = Path(out)
    there = (path.exists() or path.is_symlink()) and not is_empty_dir(path)
    if append and not there:
        raise FileNotFoundError(f"--out {out} does not exist: drop --append to create it")
    if there and not overwrite and not append:
        also = "--append to add episodes to it, " if append is not None else ""
        raise FileExistsError(
            f"--out {out} already exists: pass {also}--overwrite to replace it, or choose "
            "another --out"
        )


def parse_episodes(spec: str) -> list[int] | None:
    """``"0,3,5-7"`` -> ``[0, 3, 5, 6, 7]``; an empty string means all episodes (None)."""
    if not spec.strip():
        return None
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise ValueError(f"--episodes {spec!r}: use ids and ranges such as 0,3,5-7")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"--episodes {spec!r}: range {part.strip()} runs backwards")
        out.extend(range(lo, hi + 1))
    return list(dict.fromkeys(out))


def write_folder(out: Path, fill: Callable[[Path], None]) -> None:
    """Fill a new folder beside ``out``, then put it in place (a crash leaves the old one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        fill(stage)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(stage, out)
            shutil.rmtree(old)
        else:
            os.replace(stage, out)
    finally:
        if stage.exists():
            shutil.rmtree(stage)


def plot_losses(
    history: Sequence[Mapping[str, Any]], path: Path, *, title: str, ylabel: str,
    train_label: str = "train", val_label: str = "validation",
) -> None:  # fmt: skip
    """The training and validation losses of ``history`` (``step``, ``train_loss``,
    ``val_loss``: None where there was none) on a log scale, written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 3.2), layout="constrained")
    ax = fig.subplots()
    steps = [h["step"] for h in history]
    ax.plot(steps, [h["train_loss"] for h in history], label=train_label)
    if any(h["val_loss"] is not None for h in history):
        ax.plot(steps, [h["val_loss"] for h in history], label=val_label)
    ax.set_yscale("log")
    ax.set_xlabel("gradient steps")
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.set_title(title)
    fig.savefig(path, dpi=80)
