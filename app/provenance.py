"""Where each setting of a run came from, shown and kept.

``handrail train --print-config`` prints :func:`format_settings` (every setting, its value and
the layer that set it, grouped); every run prints its preset in one line and keeps the same
record as ``settings.json`` beside its ``config.json`` (:func:`write_settings`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from handrail.app.config import LAYERS, Settings, TrainConfig, settings_of
from handrail.demos.commit import write_bytes_atomic

SETTINGS_FILE = "settings.json"
"""The record of a run's settings and their layers, beside its config.json."""


def format_settings(settings: Settings) -> str:
    """A table of every setting, its value and the layer that set it, grouped by config
    (the run's own options, env, sac, loop, hil...), for ``--print-config``."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for path, value in settings.values.items():
        group = path.rpartition(".")[0] or "run"
        groups.setdefault(group, []).append((path, _text(value), settings.layers[path]))
    width = max(len(path) for path in settings.values)
    value_width = min(40, max(len(row[1]) for rows in groups.values() for row in rows))
    lines = [
        f"preset: {settings.preset}",
        f"layers, lowest first: {' < '.join(LAYERS)}",
        "each setting is the option --<setting> (env.KEY: --env-kwargs KEY=VALUE)",
    ]
    for group, rows in groups.items():
        lines += ["", f"{group}:"]
        lines += [
            f"  {path:<{width}}  {text:<{value_width}}  {layer}" for path, text, layer in rows
        ]
    return "\n".join(lines) + "\n"


def record(settings: Settings) -> dict[str, Any]:
    """The JSON record of ``settings``: the preset line, the layers applied and, for every
    setting, its value and layer."""
    return {
        "preset": settings.preset,
        "layers": list(settings.applied),
        "settings": {path: {"value": _jsonable(value), "layer": settings.layers[path]}
                     for path, value in settings.values.items()},
    }  # fmt: skip


def write_settings(run_path: Path, settings: Settings) -> Path:
    """Writes ``settings.json`` into the run folder (atomically)."""
    path = Path(run_path) / SETTINGS_FILE
    write_bytes_atomic(path, (json.dumps(record(settings), indent=2) + "\n").encode())
    return path


def run_settings(config: TrainConfig, run_path: Path, given: Settings | None) -> Settings:
    """The settings to keep for a run of ``config``: ``given`` (the command line's record) where
    it is ``config``'s; on a resumed run, its own record, with ``command line`` for the settings
    changed since; otherwise (a config made in Python) :func:`~handrail.app.config.settings_of`.
    """
    if given is not None and given.config == config:
        return given
    fresh = settings_of(config)
    saved_path = Path(run_path) / SETTINGS_FILE
    if config.resume is None or not saved_path.is_file():
        return fresh
    saved = json.loads(saved_path.read_text())["settings"]
    layers = {path: saved[path]["layer"]
              if path in saved and saved[path]["value"] == _jsonable(value)
              else "command line" for path, value in fresh.values.items()}  # fmt: skip
    mine = ("command line",) if "command line" in layers.values() else ()
    applied = tuple(name for name in fresh.applied if name != "command line") + mine
    return Settings(config, fresh.values, layers, applied)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _jsonable(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists, paths as strings)."""
    return json.loads(json.dumps(value, default=str))
