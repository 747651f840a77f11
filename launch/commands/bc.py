"""``handrail bc``: behaviour cloning on a Zarr episode store, into a run folder.

``handrail bc --demos STORE`` trains :mod:`handrail.learners.agents.bc` on the store's successful
episodes (the first ``--max-episodes`` of them), checks the store against the task's env first,
writes ``config.json``, ``metrics.jsonl`` (train and validation loss), ``bc_loss.png`` and
``checkpoints/best`` into the run folder, then evaluates the policy on the task and writes
``eval.json``. The checkpoint is a base for residual RL: ``handrail train --residual-on
bc:<run folder>``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tyro

from handrail.launch.commands.common import plot_losses
from handrail.learners.agents.bc import BCConfig


@dataclass(frozen=True)
class BCCommand:
    """Options of ``handrail bc``."""

    demos: Path
    """The Zarr episode store to clone (its successful episodes)."""
    task: str | None = None
    """Task to check the store against and evaluate on (default: the store's task)."""
    max_episodes: int | None = None
    """Use only the first N successful episodes (of those holding a step ``--acted-by`` keeps)."""
    acted_by: tuple[Literal["policy", "human", "scripted"], ...] = ()
    """Clone only the steps these chose (default: every step). ``--acted-by human`` learns a
    person's corrections from a store of training rollouts (``handrail train --human ...
    --record``) without the policy's steps or the random warm-up's; the other steps are
    neither inputs nor chunk targets."""
    run_dir: Path | None = None
    """Run folder (default runs/<task>-bc-s<seed>-<time>)."""
    ignore_obs_keys: tuple[str, ...] = ()
    """Observation keys the policy leaves out (default: the task preset's, as ``handrail train``;
    give the option with no key to keep every key). With few demos, cloning only the relative
    keys generalises far better: on peg_insert the preset's ``proprio peg hole`` keeps
    ``entry_from_tip_dm`` and ``hole_yaw_from_peg_rad``."""
    encoder: Path | None = None
    """A frozen image encoder (``handrail encoder train``) the policy sees the store's cameras
    through, as ``handrail train --encoder`` (the run keeps a copy)."""
    pixels: bool = False
    """Clone from the store's camera fields end to end: each camera through a small conv
    encoder of the policy's own, trained with it on randomly shifted frames (``--bc.image-*``),
    beside the state keys (a handrail task's evaluation renders the store's cameras at its
    frames' size). Leave out object poses with --ignore-obs-keys to clone from cameras and
    proprioception alone."""
    pixels_size: int | None = None
    """With --pixels: the policy reads every camera at this size (square), each frame resized
    once where it enters (the demos, the evaluation, a residual's base); None: as stored."""
    eval_episodes: int = 50
    """Episodes of the final evaluation on the task (0: none)."""
    success_key: str = "success"
    """Info key with the task's success flag, for the evaluation (as ``handrail train``'s)."""
    seed: int = 0
    """Seeds training (--bc.seed is set from it) and the first evaluation episode."""
    labels: Literal["executed", "proposed"] = "executed"
    """Which action of each step to clone: the one the arm executed, or the one proposed before
    something else ran: the scripted expert's own where ``handrail record --noise`` perturbed
    what the arm executed (DART), a policy's where a person corrected it."""
    progress: bool = True
    """Show the progress bar."""
    bc: BCConfig = field(default_factory=BCConfig)
    """Network, chunking and optimisation settings (default: the task's preset, e.g.
    pick_cube's 8-action chunks; BCConfig's defaults on a task without one)."""

    def __post_init__(self) -> None:
        if self.max_episodes is not None and self.max_episodes < 1:
            raise ValueError(f"--max-episodes must be >= 1, got {self.max_episodes}")
        if self.eval_episodes < 0:
            raise ValueError(f"--eval-episodes must be >= 0, got {self.eval_episodes}")
        from handrail.app.config import check_pixel_options

        check_pixel_options(self.pixels, self.pixels_size, {"--encoder": self.encoder is not None})
        if self.bc.seed not in (0, self.seed):  # it would be overwritten by --seed, silently
            raise ValueError(
                f"--bc.seed {self.bc.seed} is set from --seed ({self.seed}); pass --seed "
                f"{self.bc.seed} instead"
            )


def parse_args(argv: Sequence[str]) -> BCCommand:
    """The BCCommand of a command line: the preset of its task (``--task``, else the store's),
    then every option."""
    from handrail.app.config import bc_preset
    from handrail.launch.cli import option_value

    argv = list(argv)
    demos = option_value(argv, "--demos")
    task = option_value(argv, "--task") or (_store_task(Path(demos)) if demos else None)
    prog, about = "handrail bc", "Behaviour cloning on a demo store (defaults: the task's preset)."
    if demos is None or task is None:  # tyro names the missing --demos; bc() the store's problem
        return tyro.cli(BCCommand, args=argv, prog=prog, description=about)
    fields, ignored = bc_preset(task)
    default = BCCommand(demos=Path(demos), ignore_obs_keys=ignored, bc=BCConfig(**fields))
    return tyro.cli(BCCommand, default=default, args=argv, prog=prog, description=about)


def _store_task(path: Path) -> str | None:
    """The task a store names, or None where it cannot be read (``bc`` then says why)."""
    import handrail.demos
    from handrail.demos.errors import StoreError

    try:
        return str(handrail.demos.open_store(path).attrs.get("task") or "") or None
    except (StoreError, OSError, ValueError):
        return None


def bc(cmd: BCCommand) -> int:
    """Behaviour cloning on a demo store; the checkpoint is a base for --residual-on bc:RUN."""
    import dataclasses

    import handrail.demos
    from handrail.app import pixels
    from handrail.app.config import format_env_kwargs, preset
    from handrail.app.envs import make_env, with_cameras
    from handrail.demos.errors import StoreError
    from handrail.demos.finite import require_finite
    from handrail.learners.checkpoint import write_checkpoint_dir
    from handrail.learners.demo_data import check_fields
    from handrail.learners.runlog import RunDir
    from handrail.learners.specs import ActionSpec, ObsSpec

    config = dataclasses.replace(cmd.bc, seed=cmd.seed)
    encoder = pixels.load(cmd.encoder)
    try:
        reader = handrail.demos.open_store(cmd.demos)
        task = cmd.task or str(reader.attrs.get("task") or "")
        if not task:
            raise ValueError("the store names no task; pass --task")
        ids = reader.select(successful_only=True)
        if not ids:
            raise ValueError("the store holds no successful episodes")
        ids = _acted_by(reader, ids, cmd.acted_by)
        ids = ids[: cmd.max_episodes] if cmd.max_episodes else ids
        require_finite(reader, ids)  # nan or inf: named now, not by a loss later
        data = reader.load(episodes=ids)
        if cmd.labels == "proposed":
            data = dataclasses.replace(data, action=data.policy_action)
        cameras = pixels.store_cameras(data, cmd.ignore_obs_keys) if cmd.pixels else encoder
        env_settings = with_cameras(task, preset(task).env, cameras)  # as train and eval
        env = pixels.wrap(make_env(task, **env_settings), encoder)
        data = pixels.encode_demos(data, encoder)
    except (StoreError, ValueError) as exc:
        raise ValueError(f"--demos {cmd.demos}: {exc}") from exc
    try:
        obs_spec = ObsSpec.from_space(env.observation_space, ignore=cmd.ignore_obs_keys,
                                      images=cmd.pixels, image_size=cmd.pixels_size)  # fmt: skip
        obs_spec.state_spec()  # cameras alone: named here
    except (TypeError, ValueError) as exc:
        env.close()
        raise ValueError(f"--ignore-obs-keys {' '.join(cmd.ignore_obs_keys)}: {exc}") from exc
    action_spec = ActionSpec.from_space(env.action_space)
    try:
        check_fields(data, obs_spec, action_spec)
    except ValueError as exc:
        env.close()
        raise ValueError(f"--demos {cmd.demos}: {exc}") from exc
    run_path = _new_run_folder(cmd.run_dir, task, cmd.seed)
    selected = _selected(data.intervention, cmd.acted_by)
    kept = "" if selected is None else f", {int(selected.sum())} by {' or '.join(cmd.acted_by)}"
    print(f"handrail bc: {len(ids)} episodes ({data.num_steps} steps{kept}) of {task}; run "
          f"folder {run_path.resolve()}", file=sys.stderr)  # fmt: skip
    from handrail.learners.agents.bc import save_bc, train_bc

    with RunDir(run_path, tensorboard=False) as run:
        run.write_config({"command": "bc", "demos": str(cmd.demos), "task": task,
                          "episodes": ids, "seed": cmd.seed, "bc": config.to_json(),
                          "acted_by": list(cmd.acted_by), "labels": cmd.labels,
                          "success_key": cmd.success_key,
                          "ignore_obs_keys": list(cmd.ignore_obs_keys),
                          "env_kwargs": list(format_env_kwargs(env_settings)),
                          "encoder": None if cmd.encoder is None else str(cmd.encoder),
                          "pixels": cmd.pixels, "pixels_size": cmd.pixels_size})  # fmt: skip
        pixels.keep_copy(run_path, encoder)

        def log(record: dict[str, Any]) -> None:
            run.log("bc", record["step"], {k: v for k, v in record.items() if k != "step"})

        result = train_bc(data, obs_spec, action_spec, config, progress=cmd.progress,
                          on_eval=log, selected=selected)  # fmt: skip
        write_checkpoint_dir(run.best_dir, lambda p: save_bc(
            p, result, config, obs_spec, action_spec, extra={"task": task}))  # fmt: skip
        plot_losses(
            result.history,
            run_path / "bc_loss.png",
            title=f"handrail bc on {task}",
            ylabel="action MSE (normalised)",
        )
        summary: dict[str, Any] = {"best_val_loss": result.best_val_loss,
                                   "train_episodes": len(result.train_episodes),
                                   "val_episodes": len(result.val_episodes)}  # fmt: skip
        if cmd.eval_episodes:
            from handrail.learners.evaluation import EVAL_SEED_OFFSET, evaluate, run_seed
            from handrail.learners.policies import load_run_policy

            policy = load_run_policy(run.best_dir).policy
            eval_env = make_env(task, **env_settings)
            result_eval = evaluate(eval_env, policy, cmd.eval_episodes,
                                   run_seed(cmd.seed, EVAL_SEED_OFFSET),
                                   success_key=cmd.success_key)  # fmt: skip
            eval_env.close()
            summary["eval"] = result_eval.as_dict()
            print(f"handrail bc: {result_eval.summary()}", file=sys.stderr)
        (run_path / "eval.json").write_text(json.dumps(summary, indent=1))
    env.close()
    print(f"handrail bc: checkpoint {run_path.resolve() / 'checkpoints' / 'best'}; use it with "
          f"handrail train --residual-on bc:{run_path}", file=sys.stderr)  # fmt: skip
    return 0


def _new_run_folder(run_dir: Path | None, task: str, seed: int) -> Path:
    """The bc run's folder, created exclusively: never one that holds another run."""
    from handrail.learners.runlog import create_run_folder

    default = Path("runs") / f"{task}-bc-s{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        return create_run_folder(run_dir or default, numbered=run_dir is None)
    except FileExistsError:
        raise ValueError(
            f"--run-dir {run_dir} already exists: give another --run-dir (a run folder holds "
            "one run)"
        ) from None
    except OSError as exc:
        raise ValueError(
            f"cannot create the run folder {run_dir or default} ({exc.strerror or exc}); choose "
            "a writable folder with --run-dir"
        ) from None


def _selected(intervention: Any, acted_by: tuple[str, ...]) -> Any:
    """The steps ``--acted-by`` keeps, a boolean per step (None: every step)."""
    import numpy as np

    from handrail.control.step import ActedBy

    if not acted_by:
        return None
    return np.isin(np.asarray(intervention), [int(ActedBy[who.upper()]) for who in acted_by])


def _acted_by(reader: Any, ids: list[int], acted_by: tuple[str, ...]) -> list[int]:
    """The episodes of ``ids`` holding a step ``--acted-by`` keeps (all of them without it);
    an error counting who acted in them where none does."""
    if not acted_by:
        return ids
    import numpy as np

    from handrail.demos.format import INTERVENTION_SOURCES

    who = reader.step_column("intervention")  # one small array: no observations loaded
    chosen = _selected(who, acted_by)
    spans = {i: slice(r.start, r.start + r.num_steps) for i, r in enumerate(reader.episodes)}
    keep = [i for i in ids if chosen[spans[i]].any()]
    if not keep:
        codes, counts = np.unique(np.concatenate([who[spans[i]] for i in ids]), return_counts=True)
        by = ", ".join(
            f"{INTERVENTION_SOURCES[int(c)]} {n}" for c, n in zip(codes, counts, strict=True)
        )
        raise ValueError(
            f"--acted-by {' '.join(acted_by)}: none of its {len(ids)} successful episodes holds "
            f"such a step (their steps were chosen by: {by})"
        )
    return keep
