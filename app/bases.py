"""Base policies for ``handrail train --residual-on BASE`` and ``handrail eval``.

``BASE`` is one of:

- ``expert``: the task's scripted expert (handrail tasks);
- ``bc:PATH``: a ``handrail bc`` run folder or checkpoint (chunked policies are queried every
  ``execute`` steps, or temporally ensembled, as trained);
- ``sb3:PATH``: a Stable-Baselines3 (or SBX) model: a ``.zip`` saved by ``model.save`` (SAC,
  TD3, DDPG, PPO or A2C), or a ``handrail train --learner sb3|sbx`` run folder or checkpoint;
- ``run:PATH``: any handrail run folder or checkpoint (an earlier run, another residual);
- ``module:attr``: a Python callable ``obs -> action`` (env units); a class is instantiated
  with the env first.

Every base is frozen: it is queried, never trained. :func:`make_base` builds a fresh instance
(stateful bases, such as an expert's phase or a chunk in flight, must not be shared between
the training and the evaluation env).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from handrail.control.base_policy import BASE_ACTION_KEY, BasePolicy, CallableBase

KINDS = ("expert", "bc:PATH", "sb3:PATH", "run:PATH", "module:attr")
"""The forms of a base spec, for error messages."""


def make_base(spec: str, task: str, env: Any) -> BasePolicy:
    """The frozen base policy of ``spec`` (see the module docstring) for ``task``'s ``env``.

    Raises:
        ValueError: the spec is malformed, its file is missing or is not that kind of policy,
            or the base's actions do not fit the env (the message names the fix).
    """
    kind, _, rest = spec.partition(":")
    if spec == "expert":
        return _expert(task, env)
    if kind in ("bc", "sb3", "run") and rest:
        path = Path(rest)
        if not path.exists():
            raise ValueError(f"--residual-on {spec}: {path} does not exist")
        loader = {"bc": _bc, "sb3": _sb3, "run": _run}[kind]
        base = loader(path, task, env)
        return base if kind == "sb3" else _probed(base, spec, env)  # sb3 checks its spaces
    if rest and kind not in ("bc", "sb3", "run"):
        return _callable(kind, rest, env)
    raise ValueError(f"--residual-on {spec!r}: expected one of {', '.join(KINDS)}")


def _probed(base: BasePolicy, spec: str, env: Any) -> BasePolicy:
    """``base`` once it has acted on an observation of ``env``'s space (then reset): a learned
    base that cannot read the env's observations (cameras the env does not render, a key of
    another shape) stops here, before a run folder exists, not at the first step."""
    try:
        base(env.observation_space.sample())
    except ValueError as exc:
        raise ValueError(f"--residual-on {spec}: {exc}") from exc
    base.reset(seed=None)
    return base


def _expert(task: str, env: Any) -> BasePolicy:
    from handrail.app.envs import HANDRAIL_TASKS

    if task not in HANDRAIL_TASKS:
        raise ValueError(
            f"--residual-on expert needs a handrail task {HANDRAIL_TASKS} (they have scripted "
            f"experts), got {task!r}; use bc:PATH, sb3:PATH, run:PATH or module:attr"
        )
    import handrail.sim

    return CallableBase(handrail.sim.make_expert(task, env.unwrapped), name=f"{task} expert")


def _bc(path: Path, task: str, env: Any) -> BasePolicy:
    from handrail.learners.agents.bc import load_bc_policy
    from handrail.learners.checkpoint import checkpoint_folder
    from handrail.learners.policies import run_encoder, run_root

    try:
        folder = checkpoint_folder(path)
        return load_bc_policy(folder, run_encoder(run_root(folder)))
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"--residual-on bc:{path}: {exc}") from exc


def _sb3(path: Path, task: str, env: Any) -> BasePolicy:
    if path.is_dir():  # a handrail run folder or checkpoint of --learner sb3|sbx
        from handrail.learners.policies import load_run_policy

        run = load_run_policy(path)
        if run.kind != "sb3":
            raise ValueError(
                f"--residual-on sb3:{path}: not an SB3 model (no model.zip); use run:{path} "
                "for a handrail checkpoint"
            )
        return CallableBase(run.policy, name=f"sb3:{path}")
    return CallableBase(_sb3_zip(path, env), name=f"sb3:{path}")


def _sb3_zip(path: Path, env: Any) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
    """A raw SB3 ``.zip``: the first algorithm class that loads it, predicting deterministically."""
    import gymnasium as gym
    import stable_baselines3 as sb3

    from handrail.learners.specs import ObsSpec

    errors = []
    for name in ("SAC", "TD3", "DDPG", "PPO", "A2C"):
        try:
            model = getattr(sb3, name).load(path, device="cpu")
            break
        except Exception as exc:  # each class rejects the others' files
            errors.append(f"{name}: {type(exc).__name__}")
    else:
        raise ValueError(
            f"--residual-on sb3:{path}: no SB3 algorithm loads it ({'; '.join(errors)}); save "
            "the model with model.save(path) from SAC, TD3, DDPG, PPO or A2C"
        )
    if model.action_space.shape != env.action_space.shape:
        raise ValueError(
            f"--residual-on sb3:{path}: the model acts in {model.action_space}, the env in "
            f"{env.action_space}; the base must act in the task's action space"
        )
    model_space = model.observation_space
    flat = ObsSpec.from_space(env.observation_space, ignore=_base_key(env.observation_space))
    if isinstance(model_space, gym.spaces.Box) and model_space.shape != (flat.dim,):
        raise ValueError(
            f"--residual-on sb3:{path}: the model observes {model_space.shape}, the task's "
            f"observation flattens to ({flat.dim},) ({', '.join(flat.keys)})"
        )

    def policy(obs: Mapping[str, np.ndarray]) -> np.ndarray:
        given: Any = dict(obs) if isinstance(model_space, gym.spaces.Dict) else flat.flatten(obs)
        if isinstance(given, dict):
            given = {k: v for k, v in given.items() if k in model_space.spaces}
        action, _ = model.predict(given, deterministic=True)
        return np.asarray(action, np.float32)

    return policy


def _base_key(space: Any) -> tuple[str, ...]:
    spaces = getattr(space, "spaces", {})
    return (BASE_ACTION_KEY,) if BASE_ACTION_KEY in spaces else ()


def _run(path: Path, task: str, env: Any) -> BasePolicy:
    """A handrail run or checkpoint; a residual run brings its own base along."""
    from handrail.learners.policies import load_run_policy

    run = load_run_policy(path)
    inner_spec = _residual_spec(run.checkpoint)
    if inner_spec is None:
        return CallableBase(run.policy, name=f"run:{path}")
    from handrail.learners.specs import ActionSpec

    inner = make_base(inner_spec, task, env)
    spec = ActionSpec.from_space(env.action_space)

    class _Stacked:
        def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
            base = spec.from_env(np.asarray(inner(obs), np.float32))
            return np.asarray(run.policy({**obs, BASE_ACTION_KEY: base}), np.float32)

        def reset(self, seed: int | None = None) -> None:
            inner.reset(seed=seed)

    return CallableBase(_Stacked(), name=f"run:{path}")


def _residual_spec(ckpt: Path) -> str | None:
    """The ``--residual-on`` spec a checkpoint's run trained with (None: not a residual)."""
    for folder in (ckpt, *ckpt.parents):
        config = folder / "config.json"
        if config.is_file() and (folder / "checkpoints").is_dir():
            from handrail.learners.checkpoint import read_json  # names a damaged file

            return read_json(config).get("residual_on")
    return None


def _callable(module: str, attr: str, env: Any) -> BasePolicy:
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--residual-on {module}:{attr}: cannot import it ({exc})") from exc
    if isinstance(obj, type):
        obj = obj(env)
    return CallableBase(obj, name=f"{module}:{attr}")
