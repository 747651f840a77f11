"""Loading a run's policy: the one place that turns a run folder or a checkpoint into ``obs ->
action``, whichever command wrote it.

``handrail train`` (handrail's SAC or TD3, residual runs included, and SB3/SBX peers) and
``handrail bc`` write checkpoints of different kinds; :func:`load_run_policy` finds the
checkpoint of a run folder, reads the run's ``config.json`` beside it and rebuilds the policy.
``handrail eval``, residual bases (``bc:RUN``, ``sb3:RUN``, ``run:RUN``), the benchmarks and
the robot's ``actor_node`` all load through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from handrail.learners.checkpoint import STATE_FILE, checkpoint_folder, load_policy, read_json

PolicyKind = Literal["sac", "bc", "sb3"]

_KIND_FILES: tuple[tuple[str, PolicyKind], ...] = (
    ("model.zip", "sb3"),
    ("bc.msgpack", "bc"),
    (STATE_FILE, "sac"),
)
"""Which file marks which kind of checkpoint, in the order they are looked for."""


def run_root(ckpt: Path) -> Path | None:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/...``), if any."""
    for parent in Path(ckpt).parents:
        if parent.name == "checkpoints" and (parent.parent / "config.json").is_file():
            return parent.parent
    return None


def checkpoint_kind(ckpt: Path) -> PolicyKind | None:
    """``sac``, ``bc`` or ``sb3`` by the checkpoint's files; None where it holds none."""
    return next((kind for name, kind in _KIND_FILES if (ckpt / name).is_file()), None)


def locate_checkpoint(path: Path, which: str = "best") -> tuple[Path, dict[str, Any] | None]:
    """The checkpoint folder and the run config (if any) of a run folder or checkpoint path."""
    path = Path(path)
    root = path if (path / "checkpoints").is_dir() else run_root(path)
    ckpt = checkpoint_folder(path, which)
    if checkpoint_kind(ckpt) is None:
        names = ", ".join(name for name, _ in _KIND_FILES)
        raise ValueError(
            f"{path}: no checkpoint at {ckpt} (none of {names}); pass a run folder or a "
            "checkpoint folder"
        )
    run_config = None if root is None else root / "config.json"
    config = read_json(run_config) if run_config and run_config.is_file() else None
    if not isinstance(config, dict) or "task" not in config:
        config = None
    return ckpt, config


@dataclass(frozen=True)
class RunPolicy:
    """A run's (or checkpoint's) policy and what its env needs."""

    checkpoint: Path
    """The checkpoint folder the policy was loaded from."""
    kind: PolicyKind
    """Which command's checkpoint it is: handrail's SAC/TD3 (``sac``), ``bc``, or an SB3 peer."""
    policy: Callable[[Any], Any]
    """``obs -> env action``."""
    task: str | None
    """The task the run trained on (None for a checkpoint outside a run folder)."""
    env_kwargs: tuple[str, ...]
    """The run's ``--env-kwargs`` as saved in its config.json (KEY=VALUE)."""
    success_key: str
    """Info key of the success flag."""
    residual_on: str | None = None
    """The base policy of a residual run (its observations carry the base's action)."""


def load_run_policy(
    path: Path, which: str = "best", *, deterministic: bool = True, seed: int = 0
) -> RunPolicy:
    """The policy of a run folder's ``which`` checkpoint, or of a checkpoint folder.

    Args:
        path: a run folder of ``handrail train`` (any learner) or ``handrail bc``, or one of
            their checkpoint folders.
        which: ``best`` or ``latest``, for a run folder.
        deterministic: act with the mean action (SAC); BC and SB3 policies are deterministic.
        seed: the PRNG seed of a stochastic SAC policy.

    A chunked BC policy keeps its chunk (or its temporal ensemble) from step to step: call its
    ``reset(seed=...)`` at every episode's start, as :class:`~handrail.learners.actor.Actor`
    (and so ``evaluate``, ``actor_node``) does. Stepped across episodes without it, the
    8-action pick_cube base read 76%, not 87%, on the same 100 episodes.
    """
    ckpt, run_config = locate_checkpoint(path, which)
    run_config = run_config or {}
    kind = checkpoint_kind(ckpt)
    if kind == "sb3":
        from handrail.learners.sb3_backend import load_sb3_policy

        policy = load_sb3_policy(ckpt)
    elif kind == "bc":  # chunked BC policies keep their chunk
        from handrail.learners.agents.bc import load_bc_policy

        policy = load_bc_policy(ckpt)
    else:
        policy = load_policy(ckpt, deterministic=deterministic, seed=seed)
    assert kind is not None  # locate_checkpoint refused a folder without a checkpoint
    policy = _with_encoder(policy, run_root(ckpt))
    return RunPolicy(
        ckpt, kind, policy, run_config.get("task"), tuple(run_config.get("env_kwargs", ())),
        run_config.get("success_key", "success"), run_config.get("residual_on"),
    )  # fmt: skip


def _with_encoder(policy: Callable[[Any], Any], root: Path | None) -> Callable[[Any], Any]:
    """``policy`` acting on camera frames through the run's copy of its image encoder
    (``handrail train --encoder``), or itself for a run without one."""
    encoder = run_encoder(root)
    if encoder is None:
        return policy
    from handrail.learners.agents.encoder import encoded_policy

    return encoded_policy(policy, encoder)


def run_encoder(root: Path | None) -> Any:
    """The run's copy of the image encoder its policy reads the cameras through (None for a
    run without one, or no run)."""
    from handrail.learners.agents.encoder import RUN_FOLDER

    if root is None or not (root / RUN_FOLDER).is_dir():
        return None
    from handrail.learners.agents.encoder import ImageEncoder

    return ImageEncoder(root / RUN_FOLDER)
