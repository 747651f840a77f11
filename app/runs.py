"""A run's env: the task a run folder's policy acts in, with the settings it trained with."""

from __future__ import annotations

from typing import Any

from handrail.app.config import parse_env_kwargs
from handrail.app.envs import make_env
from handrail.learners.policies import RunPolicy


def run_env(run: RunPolicy, task: str | None = None, render_mode: str | None = None) -> Any:
    """The env ``run``'s policy acts in: its task (or ``task``) with the run's env settings
    (none on another task), the base's action observed if the run is residual."""
    task = task or run.task
    if task is None:
        raise ValueError(f"{run.checkpoint}: no run config.json to read the task from; pass --task")
    env_kwargs = parse_env_kwargs(run.env_kwargs) if task == run.task else {}
    env = make_env(task, render_mode=render_mode, **env_kwargs)
    if run.residual_on is None:
        return env
    from handrail.app.bases import make_base
    from handrail.learners.agents.residual import ResidualObservation

    return ResidualObservation(env, make_base(run.residual_on, task, env))
