"""Run folders: a new run's own folder, resuming one from its latest checkpoint, what a stopped
run kept, and the env a run's policy acts in.

A run folder holds one run (:func:`new_run_folder` never reuses one). Its latest checkpoint is
the trainer's files and, for a run that records its episodes (``--record``), ``record.json``:
how many episodes the store held when it was saved, so that a resume rolls the store back to
them (:func:`resume_recording`) and takes the steps after the checkpoint again without storing
an episode twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from handrail.app.envs import HANDRAIL_TASKS, check_tasks, make_env, parse_env_kwargs
from handrail.learners.checkpoint import CheckpointError, read_json
from handrail.learners.policies import RunPolicy

RECORD_FILE = "record.json"
"""In a latest checkpoint of a run with ``--record``: the store and the episodes it held."""


def new_run_folder(path: Path, *, numbered: bool) -> Path:
    """Creates a new run's folder, never an existing one (two runs would write into one).

    Args:
        path: The folder.
        numbered: A default name: if it exists, take ``-2``, ``-3``... (default names have
            one-second resolution, so two runs started together share one).

    Raises:
        ValueError: ``path`` exists, or cannot be created (read-only, a file in the way).
    """
    from handrail.learners.runlog import create_run_folder

    try:
        return create_run_folder(path, numbered=numbered)
    except FileExistsError:
        raise ValueError(exists_message(path)) from None
    except OSError as exc:
        raise ValueError(
            f"cannot create the run folder {path} ({exc.strerror or exc}); choose a writable "
            "folder with --run-dir"
        ) from None


def exists_message(path: Path) -> str:
    """The error of a new run given the folder of another: what to do instead."""
    return (
        f"--run-dir {path} already exists: continue that run with --resume {path}, or give "
        "another --run-dir to start a new one (a run folder holds one run)"
    )


def kept_checkpoint(run_path: Path | None) -> str:
    """What a stopped run keeps, in words: its latest checkpoint and the env step of it (None:
    the run had no folder of its own yet)."""
    from handrail.learners.loop import TRAINER_FILE

    if run_path is None:
        return "nothing was saved: the run folder was not created yet"
    latest = Path(run_path) / "checkpoints" / "latest"
    if not latest.exists():
        return f"no checkpoint was saved in {run_path}"
    try:
        steps = int(read_json(latest / TRAINER_FILE)["actor"]["env_steps"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return f"kept: the checkpoint {latest}"
    return f"kept: the checkpoint {latest} at env step {steps} (continue: --resume {run_path})"


def load_latest(trainer: Any, run_path: Path) -> int | None:
    """Loads the run's latest checkpoint into ``trainer``; returns the episodes the ``--record``
    store held when it was saved (None: the checkpoint does not say).

    Raises:
        CheckpointError: a file of the checkpoint is missing or damaged; its note says what to
            do (the run's best policy, a fresh run).
    """
    latest = run_path / "checkpoints" / "latest"
    try:
        trainer.load(latest)
        return _recorded_episodes(latest / RECORD_FILE)
    except CheckpointError as exc:
        best = run_path / "checkpoints" / "best"
        use_best = (
            f" Its best policy is in {best} (handrail eval {run_path})." if best.exists() else ""
        )
        exc.add_note(f"--resume {run_path} cannot continue from {latest}.{use_best} To train "
                     "on, start afresh with another --run-dir.")  # fmt: skip
        raise


def _recorded_episodes(path: Path) -> int | None:
    """The episode count a checkpoint's ``record.json`` holds (None: it has none)."""
    if not path.exists():
        return None
    record = read_json(path)
    count = record.get("episodes") if isinstance(record, dict) else None
    if not isinstance(count, int) or count < 0:
        raise CheckpointError(f"{path} is damaged: no episode count in it")
    return count


def resume_recording(store: Path, kept: int | None, next_seed: int, *, person: bool) -> None:
    """Rolls the ``--record`` store of a resumed run back to the ``kept`` episodes it held at
    the checkpoint, since the run takes the episodes after it again.

    Only the run's own episodes are dropped: their seeds go on from ``next_seed`` (a run resets
    episode ``i`` with ``seed + i``), one after the other (with gaps where a ``person`` had an
    episode recorded again). Anything else in their place was recorded by another run: an error.

    Raises:
        ValueError: the store is gone, or holds another run's episodes after the checkpoint.
        StoreError: it holds fewer episodes than ``kept``, or is locked or damaged.
    """
    import sys

    from handrail.demos import open_store
    from handrail.demos.rollback import roll_back

    if kept is None:  # a checkpoint from before record.json: the count is unknown
        if Path(store).exists():
            print(f"handrail train: --record {store}: the checkpoint does not say how many "
                  "episodes the store held; episodes recorded after it may be in it twice",
                  file=sys.stderr)  # fmt: skip
        return
    if not Path(store).exists():
        if kept == 0:
            return
        raise ValueError(
            f"--record {store}: the store is gone, but it held {kept} episodes of this run at the "
            "checkpoint; put it back, or start afresh with another --run-dir"
        )
    later = [r.seed for r in open_store(store).episodes[kept:]]
    ours = range(next_seed, next_seed + len(later))
    if later != list(ours) and not (person and _increasing_from(later, next_seed)):
        raise ValueError(
            f"--record {store}: after the {kept} episodes it held at the checkpoint it holds "
            f"{len(later)} that this run did not record (seeds {later[:5]}..., this run's next "
            f"is {next_seed}): another run records into it. Nothing was dropped; resume with a "
            "copy of the store as it was, or start afresh with another --run-dir"
        )
    dropped = roll_back(store, kept)
    if dropped:
        print(f"handrail train: --record {store}: dropped the {dropped} episodes recorded after "
              "the checkpoint (they are taken again)", file=sys.stderr)  # fmt: skip


def _increasing_from(seeds: list[int | None], first: int) -> bool:
    """Seeds that go up from ``first`` (a person may have had episodes recorded again)."""
    known = [s for s in seeds if s is not None]
    return (
        len(known) == len(seeds)
        and known == sorted(set(known))
        and min(known, default=first) >= first
    )


def save_trainer(trainer: Any, recorder: Any, folder: Path, *,
                 also: Callable[[Path], None] | None = None) -> None:  # fmt: skip
    """Writes a latest checkpoint into ``folder``: the trainer's files, ``also``'s (the learned
    reward's) and, with ``--record``, how many episodes the store holds, all of them
    committed first."""
    trainer.save_into(folder)
    if also is not None:
        also(folder)
    if recorder is not None:
        recorder.flush()
        text = json.dumps({"store": str(recorder.path), "episodes": recorder.num_episodes})
        (folder / RECORD_FILE).write_text(text)


def run_env(run: RunPolicy, task: str | None = None, render_mode: str | None = None) -> Any:
    """The env ``run``'s policy acts in: its task (or ``task``) with the run's env settings
    (none on another task), the base's action observed if the run is residual.

    Raises:
        ValueError: no task is known (a checkpoint outside a run folder), or the run's task is
            not one this process can make: both say to give one with ``--task``.
    """
    task = task or run.task
    if task is None:
        raise ValueError(f"{run.checkpoint}: no run config.json to read the task from; pass --task")
    if task == run.task and task not in HANDRAIL_TASKS:
        try:
            check_tasks([task])
        except ValueError as exc:
            raise ValueError(
                f"{run.checkpoint}: the run trained on {task!r}, a task unknown here "
                f"({exc.__cause__ or exc}); give the task with --task: a handrail task "
                f"{HANDRAIL_TASKS}, a registered gymnasium id, or module:EnvId (the module "
                "registers EnvId)"
            ) from None
    env_kwargs = parse_env_kwargs(run.env_kwargs, task) if task == run.task else {}
    env = make_env(task, render_mode=render_mode, **env_kwargs)
    if run.residual_on is None:
        return env
    from handrail.app.bases import make_base
    from handrail.learners.agents.residual import ResidualObservation

    return ResidualObservation(env, make_base(run.residual_on, task, env))
