"""``handrail demos info|validate|filter|merge|export|import``: store-only commands.

They never import JAX or MuJoCo. ``handrail record`` and ``handrail replay`` live in
:mod:`handrail.launch.commands.record` and :mod:`handrail.launch.commands.replay` (which import the sim when
they run), their shared pieces in :mod:`handrail.launch.commands.common`; the public names of all
three are re-exported here.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from handrail.launch.commands.common import (
    CAMERAS,
    StorePath,
    check_out,
    guarded,
    parse_episodes,
)
from handrail.launch.commands.record import (
    HUMAN_SOURCES,
    RecordConfig,
    fields_from_space,
    record,
)
from handrail.launch.commands.replay import ReplayConfig, env_overrides, replay

if TYPE_CHECKING:
    from handrail.demos.episodes import ConversionReport

__all__ = [
    "CAMERAS",
    "HUMAN_SOURCES",
    "RecordConfig",
    "ReplayConfig",
    "StorePath",
    "env_overrides",
    "export",
    "fields_from_space",
    "filter_",
    "import_",
    "info",
    "merge",
    "parse_episodes",
    "record",
    "replay",
    "validate",
]

# ----------------------------------------------------------------------------- demos ...


INFO_LISTS_UP_TO = 20
"""``demos info`` lists every episode of a store of at most this many episodes unasked."""


def info(path: StorePath, episodes: str = "") -> int:
    """Summary table of an episode store, then who acted in each episode.

    The per-episode table (steps, human and scripted steps, human share, success) lists every
    episode of a store of at most 20 episodes; of a larger store it lists those named with
    --episodes, and without it one line says how many there are and how to list them.

    Args:
        path: Episode store to summarise.
        episodes: Episodes to list, e.g. 0,3 or 2-5; empty: all in a store of up to 20 episodes.
    """
    from handrail.demos.ops import format_episode_table, format_summary, summarize

    def body() -> int:
        summary = summarize(path)
        wanted = parse_episodes(episodes)
        by_id = {e.episode: e for e in summary.episodes}
        missing = sorted(set(wanted or []) - set(by_id))
        if missing:
            raise ValueError(f"--episodes: {missing} not in {path}; it has {len(by_id)} episodes")
        print(format_summary(summary))
        if wanted is None and len(by_id) > INFO_LISTS_UP_TO:
            print(
                f"\nper episode: {len(by_id)} episodes; list them with --episodes "
                f"0-{len(by_id) - 1} or a subset such as 0-9"
            )
        elif by_id:
            print("\n" + format_episode_table([by_id[e] for e in wanted or by_id]))
        return 0

    return guarded("demos info", body)


def validate(path: StorePath) -> int:
    """Validate an episode store: read every chunk and check it; exit 1 on any problem.

    Args:
        path: Episode store to validate.
    """
    from handrail.demos.ops import validate_store

    problems = validate_store(path)
    if problems:
        print(f"{path}: {len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(f"{path}: OK (every chunk read and checked)")
    return 0


def filter_(
    path: StorePath,
    out: str,
    successful_only: bool = False,
    interventions_only: bool = False,
    episodes: str = "",
    overwrite: bool = False,
) -> int:
    """Copy a filtered subset of a store into a new store.

    Args:
        path: Source episode store.
        out: New store to write.
        successful_only: Keep only episodes marked successful.
        interventions_only: Keep only episodes with at least one intervened step.
        episodes: Episode ids to keep, e.g. 0,3,5-7; empty keeps all.
        overwrite: Replace an existing store at --out.
    """
    from handrail.demos.ops import filter_store

    def body() -> int:
        check_out(out, overwrite=overwrite)
        n = filter_store(
            path,
            out,
            successful_only=successful_only,
            interventions_only=interventions_only,
            episodes=parse_episodes(episodes),
            overwrite=overwrite,
        )
        print(f"wrote {n} episodes to {out}")
        return 0

    return guarded("demos filter", body, _untouched(out))


def merge(
    stores: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="STORE")],
    out: str,
    overwrite: bool = False,
) -> int:
    """Merge several stores (same fields, action size and control period) into a new store.

    Args:
        stores: Stores to merge, in order.
        out: New store to write.
        overwrite: Replace an existing store at --out.
    """
    from handrail.demos.ops import merge_stores

    def body() -> int:
        check_out(out, overwrite=overwrite)
        n = merge_stores(list(stores), out, overwrite=overwrite)
        print(f"merged {len(stores)} stores: {n} episodes into {out}")
        return 0

    return guarded("demos merge", body, _untouched(out))


def export(
    path: StorePath,
    format: Literal["robomimic", "lerobot", "mcap"],
    out: str,
    overwrite: bool = False,
) -> int:
    """Export a store to robomimic HDF5, a LeRobotDataset v3 folder, or ROS 2 messages in MCAP.

    Args:
        path: Episode store to export.
        format: Target format (mcap: opens in Foxglove and rosbag2 tools).
        out: Output file (robomimic, mcap) or folder (lerobot).
        overwrite: Replace an existing output.
    """

    def body() -> int:
        check_out(out, overwrite=overwrite)
        if format == "robomimic":
            from handrail.demos.io.robomimic import export_robomimic as run
        elif format == "mcap":
            from handrail.demos.io.mcap import export_mcap as run
        else:
            from handrail.demos.io.lerobot import export_lerobot as run
        print(run(path, out, overwrite=overwrite).format())
        return 0

    return guarded("demos export", body, _untouched(out))


def import_(
    src: StorePath,
    format: Literal["robomimic", "lerobot", "diffusion_policy", "mcap"],
    out: str,
    task: str | None = None,
    control_dt_s: float | None = None,
    mark_successful: bool = False,
    overwrite: bool = False,
) -> int:
    """Import robomimic HDF5, LeRobotDataset v3, a diffusion_policy zarr buffer, or an MCAP file
    (written by `demos export --format mcap`, or a recording of an arm's ROS 2 topics: ee_pose,
    gripper_state, and action or cmd/target_pose), into a store.

    Args:
        src: File or folder to import.
        format: Source format.
        out: New episode store to write.
        task: Task name to record (default: taken from the source, where it has one).
        control_dt_s: Control period in seconds where the source does not state one (mcap
            arm recordings: default the median step interval).
        mark_successful: diffusion_policy only: mark every episode successful.
        overwrite: Replace an existing store at --out.
    """

    def body() -> int:
        check_out(out, overwrite=overwrite)
        report = _import_store(src, format, out, task, control_dt_s, mark_successful, overwrite)
        print(report.format())
        return 0

    return guarded("demos import", body, _untouched(out))


def _untouched(out: str) -> str:
    """What Ctrl-C during a command that writes ``--out`` prints: the output is written beside
    it and moved there only when complete (``demos.commit.staged_output``)."""
    return f"nothing was written to {out} (it is as before)"


def _import_store(
    src: StorePath,
    format: str,
    out: str,
    task: str | None,
    control_dt_s: float | None,
    mark_successful: bool,
    overwrite: bool,
) -> ConversionReport:
    """Run the importer of ``format``; returns its report."""
    if format == "robomimic":
        from handrail.demos.io.robomimic import import_robomimic

        return import_robomimic(src, out, task=task, control_dt_s=control_dt_s, overwrite=overwrite)
    if format == "lerobot":
        from handrail.demos.io.lerobot import import_lerobot

        return import_lerobot(src, out, task=task, overwrite=overwrite)
    if format == "mcap":
        from handrail.demos.io.mcap import import_mcap

        return import_mcap(src, out, task=task, control_dt_s=control_dt_s, overwrite=overwrite)
    from handrail.demos.io.diffusion_policy import import_diffusion_policy

    return import_diffusion_policy(
        src,
        out,
        task=task or "unknown",
        control_dt_s=control_dt_s,
        mark_successful=mark_successful,
        overwrite=overwrite,
    )
