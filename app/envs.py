"""The environments ``handrail train`` and ``handrail eval`` run on.

A task is a handrail task (``reach``, ``pick_cube``, ...), any ``gymnasium.make`` id, or
``module:EnvId`` (the module is imported first so that it can register ``EnvId``). Its env
settings (``--env-kwargs KEY=VALUE ...``) are a handrail task's config fields, each value parsed
by its field's type, or ``gymnasium.make``'s keyword arguments, each value a Python literal.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib
import inspect
import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from handrail.control.step import EXECUTED_ACTION_KEY
from handrail.sim import TASKS

HANDRAIL_TASKS: tuple[str, ...] = TASKS
"""Tasks that :func:`make_env` builds with ``handrail.sim.make`` (the rest go to gymnasium).

The same object as :data:`handrail.sim.TASKS`: the task files of ``sim/tasks/``.
"""


def make_env(task: str, *, render_mode: str | None = None, **overrides: Any) -> gym.Env:
    """Makes a handrail task, a gymnasium id, or a ``module:EnvId`` env.

    Raises:
        ValueError: If the task cannot be resolved (naming the handrail tasks and the forms).
    """
    if task in HANDRAIL_TASKS:
        import handrail.sim  # without a display it renders through EGL (see its init)

        return handrail.sim.make(task, render_mode=render_mode, **overrides)
    env_id = _gym_id(task, "--task")
    try:
        env = gym.make(env_id, render_mode=render_mode, **overrides)
        return FlatDict(env) if _nested(env.observation_space) else env
    except gym.error.Error as exc:
        raise _unknown_task(task, "--task", f"gymnasium.make failed: {exc}") from exc
    except TypeError as exc:  # the env's constructor refused a keyword argument
        found = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if found is None:
            raise
        key = found.group(1)
        raise ValueError(
            f"--env-kwargs {key}={overrides.get(key)!r}: {task} takes no keyword argument "
            f"{key!r}; it takes {_gym_keywords(env_id)}"
        ) from exc


NESTED_SEPARATOR = "."
"""Joins a nested Dict observation's keys into one (``pixels`` Dict's ``top`` -> ``pixels.top``)."""


class FlatDict(gym.ObservationWrapper):
    """An env whose Dict observation nests Dicts (LeRobot-style envs: a ``pixels`` Dict of
    cameras beside ``agent_pos``) seen as one flat Dict, keys joined by ``.`` (``pixels.top``):
    the form the learners, the encoders and the store read."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Dict)  # make_env wraps only nested Dicts
        self.observation_space = gym.spaces.Dict(_flat(space.spaces))

    def observation(self, observation: Any) -> dict[str, Any]:
        return _flat(observation)


def _nested(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict) and any(
        isinstance(sub, gym.spaces.Dict) for sub in space.spaces.values()
    )


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping (of spaces, or of values) as one level, keys joined."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        inner = value.spaces if isinstance(value, gym.spaces.Dict) else value
        if isinstance(inner, dict):
            out.update(_flat(inner, f"{prefix}{key}{NESTED_SEPARATOR}"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def with_cameras(task: str, kwargs: dict[str, Any], model: Any) -> dict[str, Any]:
    """``kwargs`` with, on a handrail task, the cameras a camera model reads (a success
    classifier, an image encoder: its ``cameras`` and ``frame_shapes``) at its frames' size;
    the run's own ``--env-kwargs`` win. ``kwargs`` itself without a model or on other envs."""
    if model is None or task not in HANDRAIL_TASKS:
        return kwargs
    kwargs = dict(kwargs)
    cameras = tuple(kwargs.get("cameras", ()))
    kwargs["cameras"] = cameras + tuple(c for c in model.cameras if c not in cameras)
    sizes = {shape[0] for shape in model.frame_shapes.values()}
    if "image_size" not in kwargs and len(sizes) == 1:
        kwargs["image_size"] = sizes.pop()
    return kwargs


def parse_env_kwargs(items: Iterable[str], task: str | None = None) -> dict[str, Any]:
    """``("reward=dense", "episode_steps=50")`` -> ``{"reward": "dense", "episode_steps": 50}``.

    On a handrail ``task`` each value is parsed by the type of the task config's field of that
    name: bool (true/false, 1/0, yes/no, any case), int (integers only), float, one of a
    Literal's values, tuples (``(0.1, 0.2)`` or ``0.1,0.2``). Otherwise (a gymnasium id, or no
    task) each value is read as a Python literal, else kept as a string.

    Raises:
        ValueError: An item is not KEY=VALUE; a key is not one of the task's settings (the
            message lists them); a value is not of its field's type (key, type and value named).
    """
    fields = _task_fields(task) if task in HANDRAIL_TASKS else None
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--env-kwargs {item!r}: expected KEY=VALUE, e.g. reward=dense")
        if fields is None:
            out[key] = _literal(text)
            continue
        if key not in fields or dataclasses.is_dataclass(fields[key]):
            plain = [name for name, kind in fields.items() if not dataclasses.is_dataclass(kind)]
            close = difflib.get_close_matches(key, plain, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            what = (
                f"{task} has no setting {key!r}"
                if key not in fields
                else f"{key!r} is {task}'s nested {fields[key].__name__}, not a plain setting"
            )
            raise ValueError(f"--env-kwargs {item}: {what}; {hint}{task}'s settings are "
                             f"{', '.join(plain)}")  # fmt: skip
        try:
            out[key] = _parse_as(fields[key], text.strip())
        except ValueError:
            raise ValueError(
                f"--env-kwargs {item}: {key} takes {_describe(fields[key])}, got {text!r}"
            ) from None
    return out


@functools.cache
def _task_fields(task: str) -> dict[str, Any]:
    """The types of a handrail task's config fields, by name."""
    from handrail.sim.tasks import discover

    return typing.get_type_hints(discover()[task].config_cls)


def _literal(text: str) -> Any:
    """A Python literal (numbers, booleans, tuples...), else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _parse_as(kind: Any, text: str) -> Any:
    """``text`` as a value of type ``kind``; ValueError if it is not one."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        for choice in args:
            if str(choice) == text or str(choice).lower() == text.lower():
                return choice
        raise ValueError(text)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        if text.lower() == "none":
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _parse_as(inner, text)
    if kind is bool:
        if text.lower() not in _BOOLS:
            raise ValueError(text)
        return _BOOLS[text.lower()]
    if kind in (int, float, str):
        return kind(text)
    if origin is tuple:
        parts = _elements(text)
        kinds = [args[0]] * len(parts) if args[-1] is Ellipsis else list(args)
        if len(kinds) != len(parts):
            raise ValueError(text)
        return tuple(_parse_as(k, part) for k, part in zip(kinds, parts, strict=True))
    return _literal(text)


def _elements(text: str) -> list[str]:
    """The items of a tuple given as ``(a, b)``, ``[a, b]`` or ``a,b``, each as text."""
    value = _literal(text)
    if isinstance(value, tuple | list):
        return [item if isinstance(item, str) else repr(item) for item in value]
    inner = text[1:-1] if text[:1] in "([" and text[-1:] in ")]" else text
    return [part.strip() for part in inner.split(",") if part.strip()]


def _describe(kind: Any) -> str:
    """What a value of type ``kind`` looks like, for an error message."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return "one of " + ", ".join(str(choice) for choice in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("none" if a is type(None) else _describe(a) for a in args)
    if origin is tuple:
        if args[-1] is Ellipsis:
            return f"a tuple of {_describe(args[0])} items, e.g. (a, b) or a,b"
        return f"a tuple of {len(args)} items, each {_describe(args[0])}, e.g. (a, b) or a,b"
    names = {bool: "a bool (true/false, 1/0, yes/no)", int: "an integer (int)",
             float: "a number (float)", str: "text (str)"}  # fmt: skip
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _gym_keywords(env_id: str) -> str:
    """The keyword arguments a gymnasium id's env and ``gymnasium.make`` take, for a message."""
    own: list[str] = []
    try:
        entry = gym.spec(env_id).entry_point
        creator = entry if callable(entry) else gym.envs.registration.load_env_creator(str(entry))
        own = [name for name, p in inspect.signature(creator).parameters.items()
               if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and name != "render_mode"]  # fmt: skip
    except (gym.error.Error, TypeError, ValueError, ImportError, AttributeError):
        pass
    make = [name for name, p in inspect.signature(gym.make).parameters.items()
            if p.kind == p.KEYWORD_ONLY or (p.default is not p.empty and name != "render_mode")]  # fmt: skip
    listed = f"{', '.join(own)} (its own) and " if own else ""
    return f"{listed}{', '.join(make)} (gymnasium.make's)"


def check_tasks(tasks: Sequence[str], *, handrail_only: str = "") -> None:
    """Fails before any work starts, saying how to fix it, for a ``--tasks`` entry that
    :func:`make_env` cannot build (a bench checks them all before launching a run per seed).

    Args:
        handrail_only: if given, only handrail tasks will do, for this reason (e.g. "the
            simulated person is a handrail task's scripted expert").

    Raises:
        ValueError: If a task is unknown, or not a handrail task where one is needed.
    """
    for task in tasks:
        if task in HANDRAIL_TASKS:
            continue
        if handrail_only:
            message = f"--tasks {task!r} is not a handrail task {HANDRAIL_TASKS}: {handrail_only}."
            raise ValueError(f"{message} {_did_you_mean(task)}".rstrip())
        try:
            gym.spec(_gym_id(task, "--tasks"))
        except gym.error.Error as exc:
            raise _unknown_task(task, "--tasks", f"gymnasium does not know it: {exc}") from exc


def _gym_id(task: str, option: str) -> str:
    """The gymnasium id of ``task``, importing the module of a ``module:EnvId`` first."""
    if ":" not in task:
        return task
    module, env_id = task.split(":", 1)
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(
            f"{option} {task!r}: cannot import module {module!r} ({exc}); the module:EnvId "
            "form imports the module (which registers EnvId) before gymnasium.make"
        ) from exc
    return env_id


def _did_you_mean(task: str) -> str:
    close = difflib.get_close_matches(task, HANDRAIL_TASKS, n=1)
    return f"Did you mean {close[0]!r}? " if close else ""


def _unknown_task(task: str, option: str, why: str) -> ValueError:
    return ValueError(
        f"{option} {task!r} is not a handrail task {HANDRAIL_TASKS} and {why.rstrip('.')}. "
        f"{_did_you_mean(task)}Use a handrail task, a registered gymnasium id, or module:EnvId"
    )


def learner_specs(env: Any, cfg: Any) -> tuple[Any, Any]:
    """ObsSpec/ActionSpec of the env, with errors that name the task and the fix."""
    from handrail.learners.specs import ActionSpec, ObsSpec

    pixels = getattr(cfg, "pixels", False)  # TrainConfig's; other commands read no camera
    try:
        obs_spec = ObsSpec.from_space(env.observation_space, ignore=cfg.ignore_obs_keys,
                                      images=pixels, image_size=getattr(cfg, "pixels_size", None))  # fmt: skip
        obs_spec.state_spec()  # cameras alone: name it here
        if pixels and not obs_spec.images:
            raise ValueError(
                "--pixels: the observation has no camera key (uint8 H x W x 3); a handrail "
                "task renders them with --env-kwargs cameras=('front','wrist') image_size=64"
            )
        return obs_spec, ActionSpec.from_space(env.action_space)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--task {cfg.task!r}: {exc}") from exc


class ExecutionNoise(gym.Wrapper):
    """``env`` executing each action plus N(0, ``noise``^2) per dimension in normalised units,
    clipped to the action space (``--noise``); each episode's noise is drawn from its reset
    seed. The action executed is reported in ``info`` (the store's action; the one given is
    the proposed action)."""

    def __init__(self, env: Any, noise: float) -> None:
        from handrail.learners.specs import ActionSpec

        super().__init__(env)
        self.action_spec, self.noise = ActionSpec.from_space(env.action_space), noise
        self.rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.rng = np.random.default_rng(None if seed is None else [seed, 1])
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        given = self.action_spec.from_env(np.asarray(action, np.float32))
        noisy = np.clip(given + self.noise * self.rng.standard_normal(given.shape), -1.0, 1.0)
        executed = self.action_spec.to_env(noisy.astype(np.float32))
        obs, reward, terminated, truncated, info = self.env.step(executed)
        return obs, reward, terminated, truncated, {**info, EXECUTED_ACTION_KEY: executed}
