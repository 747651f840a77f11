"""robomimic HDF5 import and export.

robomimic's layout (one file): group ``data`` with attributes ``total`` (steps over all demos)
and ``env_args`` (JSON: ``env_name``, ``type``, ``env_kwargs``); one group ``data/demo_<i>`` per
episode with attribute ``num_samples`` and datasets ``actions`` (T, A), ``rewards`` (T,),
``dones`` (T,), ``obs/<key>`` (T, ...) and ``next_obs/<key>`` (T, ...); optional ``mask/<filter>``
lists of demo names.

What robomimic has no place for (policy action, intervention source, terminated vs truncated,
timestamps, success, seed, units) is written next to it, in ``data/demo_<i>/handrail/*`` datasets,
demo attributes and a ``handrail`` JSON attribute on ``data``; robomimic ignores them, and importing
the file back restores them exactly. ``states`` (flattened simulator states) is not imported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from handrail.demos import FieldSpec
from handrail.demos.episodes import (
    ConversionReport,
    Episode,
    StoreMeta,
    export_store,
    import_into_store,
    require,
)

GYM_ENV_TYPE = 2
"""robomimic's EnvType for a Gym(nasium) env (1 robosuite, 2 gym, 3 iGibson)."""
DEFAULT_CONTROL_DT_S = 0.05
"""Assumed control period for foreign files that do not state one (robosuite's 20 Hz)."""
_DEMO = re.compile(r"demo_(\d+)\Z")


def _h5py() -> Any:
    return require("h5py", "robomimic HDF5 import/export")


def _meta_json(meta: StoreMeta) -> str:
    fields = [
        {"name": f.name, "dtype": str(f.dtype), "shape": list(f.shape), "units": f.units}
        for f in meta.obs_fields
    ]
    return json.dumps(
        {
            "format": "handrail",
            "kind": meta.kind,
            "task": meta.task,
            "robot": meta.robot,
            "control_dt_s": meta.control_dt_s,
            "action_dim": meta.action_dim,
            "fields": fields,
        }
    )


def _write_demo(group: Any, ep: Episode) -> None:
    group.attrs["num_samples"] = ep.num_steps
    group.attrs["success"] = bool(ep.success)
    group.attrs["seed"] = -1 if ep.seed is None else int(ep.seed)
    group.attrs["task"] = ep.task or ""
    group.create_dataset("actions", data=ep.action)
    group.create_dataset("rewards", data=ep.reward.astype(np.float64))
    group.create_dataset("dones", data=ep.terminated.astype(np.int64))
    for key, arr in ep.obs.items():
        group.create_dataset(f"obs/{key}", data=arr)
        nxt = np.concatenate([arr[1:], ep.final_obs[key][None]], axis=0)
        group.create_dataset(f"next_obs/{key}", data=nxt)
    extras = {
        "policy_action": ep.policy_action,
        "intervention": ep.intervention,
        "terminated": ep.terminated,
        "truncated": ep.truncated,
        "timestamp": ep.timestamp,
    }
    for name, extra in extras.items():
        if extra is not None:
            group.create_dataset(f"handrail/{name}", data=extra)


def write_robomimic(
    path: str | Path, meta: StoreMeta, episodes: Iterable[Episode], *, overwrite: bool = False
) -> ConversionReport:
    """Writes ``episodes`` as a robomimic HDF5 file at ``path``."""
    h5py = _h5py()
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (--overwrite) to replace it")
    report = ConversionReport()
    successful: list[str] = []
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        for i, ep in enumerate(episodes):
            _write_demo(data.create_group(f"demo_{i}"), ep)
            if ep.success:
                successful.append(f"demo_{i}")
            report.episodes += 1
            report.steps += ep.num_steps
        data.attrs["total"] = report.steps
        env_args = {"env_name": meta.task, "type": GYM_ENV_TYPE, "env_kwargs": {}}
        data.attrs["env_args"] = json.dumps(env_args)
        data.attrs["handrail"] = _meta_json(meta)
        f.create_dataset("mask/successful", data=np.array(successful, dtype="S"))
    return report


def export_robomimic(
    store: str | Path, out: str | Path, *, overwrite: bool = False
) -> ConversionReport:
    """Exports every episode of a handrail store to a robomimic HDF5 file."""
    return export_store(write_robomimic, store, out, overwrite=overwrite)


def _demo_names(data: Any) -> list[str]:
    names = [n for n in data if _DEMO.match(n)]
    if not names:
        raise ValueError("no data/demo_<i> groups found: not a robomimic dataset")
    return sorted(names, key=lambda n: int(_DEMO.match(n).group(1)))  # type: ignore[union-attr]


def _read_demo(group: Any, task: str, report: ConversionReport) -> Episode:
    action = np.asarray(group["actions"], dtype=np.float32)
    steps = len(action)
    obs = {k: np.asarray(v) for k, v in group["obs"].items()} if "obs" in group else {}
    if "next_obs" in group:
        final = {k: np.asarray(group["next_obs"][k][-1]) for k in obs}
    else:
        report.note("no next_obs: each episode's final observation is taken as its last obs")
        final = {k: v[-1].copy() for k, v in obs.items()}
    extra = group.get("handrail", None)
    if "states" in group:
        report.drop("states (flattened simulator states)")
    dones = np.asarray(group["dones"], dtype=bool) if "dones" in group else np.zeros(steps, bool)
    if extra is not None:
        terminated = np.asarray(extra["terminated"], dtype=bool)
        truncated = np.asarray(extra["truncated"], dtype=bool)
    else:
        terminated = dones
        truncated = np.zeros(steps, bool)
        truncated[-1] = not terminated[-1]
        report.note("terminated taken from dones; an episode not done at its end is truncated")
    reward = np.asarray(group["rewards"], dtype=np.float32) if "rewards" in group else None
    if reward is None:
        report.note("no rewards: stored as 0")
        reward = np.zeros(steps, np.float32)
    seed = int(group.attrs.get("seed", -1))
    success = group.attrs.get("success")
    if success is None:
        report.note("no success flag: an episode is successful if it ends done")
        success = bool(dones[-1])
    return Episode(
        obs=obs,
        final_obs=final,
        action=action,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        policy_action=None if extra is None else np.asarray(extra["policy_action"]),
        intervention=None if extra is None else np.asarray(extra["intervention"], np.int8),
        timestamp=None if extra is None else np.asarray(extra["timestamp"]),
        success=bool(success),
        seed=None if seed < 0 else seed,
        task=str(group.attrs.get("task", "")) or task,
    )


def _foreign_meta(
    data: Any, first: Any, task: str | None, control_dt_s: float | None, report: ConversionReport
) -> StoreMeta:
    env_args = json.loads(data.attrs.get("env_args", "{}") or "{}")
    kwargs = env_args.get("env_kwargs", {}) or {}
    if control_dt_s is None and kwargs.get("control_freq"):
        control_dt_s = 1.0 / float(kwargs["control_freq"])
    if control_dt_s is None:
        control_dt_s = DEFAULT_CONTROL_DT_S
        report.note(f"file states no control period: assumed {control_dt_s} s (--control-dt-s)")
    obs = first.get("obs", {})
    fields = tuple(
        FieldSpec(name=k, dtype=str(v.dtype), shape=tuple(v.shape[1:])) for k, v in obs.items()
    )
    return StoreMeta(
        kind="demo",
        task=task or str(env_args.get("env_name", "unknown")),
        obs_fields=fields,
        action_dim=int(first["actions"].shape[1]),
        control_dt_s=control_dt_s,
        robot="unknown",
    )


def _meta_from_file(
    data: Any, first: Any, task: str | None, control_dt_s: float | None, report: ConversionReport
) -> StoreMeta:
    if "handrail" not in data.attrs:
        report.note("not written by handrail: policy_action = action, intervention = policy")
        return _foreign_meta(data, first, task, control_dt_s, report)
    m = json.loads(data.attrs["handrail"])
    fields = tuple(
        FieldSpec(name=f["name"], dtype=f["dtype"], shape=tuple(f["shape"]), units=f["units"])
        for f in m["fields"]
    )
    return StoreMeta(
        kind=m["kind"],
        task=task or m["task"],
        obs_fields=fields,
        action_dim=int(m["action_dim"]),
        control_dt_s=float(control_dt_s or m["control_dt_s"]),
        robot=m["robot"],
    )


def read_robomimic(
    path: str | Path,
    *,
    task: str | None = None,
    control_dt_s: float | None = None,
    report: ConversionReport | None = None,
) -> tuple[StoreMeta, Iterator[Episode]]:
    """Opens a robomimic file; returns its meta and a generator over its episodes.

    The file stays open until the generator is exhausted or closed.
    """
    h5py = _h5py()
    report = report if report is not None else ConversionReport()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not a file; robomimic datasets are one .hdf5 file")
    f = h5py.File(path, "r")
    if "data" not in f:
        f.close()
        raise ValueError(f"{path} has no 'data' group: not a robomimic dataset")
    names = _demo_names(f["data"])
    meta = _meta_from_file(f["data"], f["data"][names[0]], task, control_dt_s, report)

    def episodes() -> Iterator[Episode]:
        try:
            for name in names:
                yield _read_demo(f["data"][name], meta.task, report)
        finally:
            f.close()

    return meta, episodes()


def import_robomimic(
    src: str | Path,
    out: str | Path,
    *,
    task: str | None = None,
    control_dt_s: float | None = None,
    overwrite: bool = False,
) -> ConversionReport:
    """Imports a robomimic HDF5 file into a new handrail store at ``out``."""
    report = ConversionReport()
    meta, eps = read_robomimic(src, task=task, control_dt_s=control_dt_s, report=report)

    return import_into_store(out, meta, eps, report, overwrite=overwrite)
