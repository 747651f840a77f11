"""What the ``handrail record``, ``replay`` and ``demos ...`` commands share.

The positional store-path argument, the sim's camera names, episode-id lists, the check of an
existing ``--out``, and how a bad input or a damaged store becomes one clear line and exit code 2.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

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
