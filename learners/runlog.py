"""One run folder per training run: config, checkpoints, metrics, plots and videos.

Layout of a run folder::

    RUN/
      config.json            resolved training config (written once, read back by eval/resume)
      metrics.jsonl          one JSON object per line: {"kind", "env_steps", "wall_time_s", ...}
      tb/                    TensorBoard event files (tensorboardX)
      learning_curve.png     success rate and return vs env steps and vs wall clock (and
                             how the evaluations' failed episodes ended, where the env says)
      checkpoints/latest/    most recent checkpoint (learner-specific format)
      checkpoints/best/      checkpoint with the best evaluation success rate (then return);
                             a residual run's starts as its base alone (the ``baseline``
                             record) and is replaced only by an evaluation matching it
      videos/                evaluation videos (mp4)

Everything is written so that a crash at any moment leaves a readable folder: each JSONL line is
flushed as it is written (a torn last line is skipped when reading), and the PNG, the config and
videos are written to a temporary file and renamed into place (a write that fails, on a full
disk, removes its temporary file). A new run gets a folder of its own
(:func:`create_run_folder`): two runs never write into one.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from handrail.demos.commit import write_bytes_atomic

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "learning_curve.png"


def _jsonable(value: Any) -> Any:
    """Converts numpy/jax scalars and arrays to plain Python for ``json.dumps``."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # numpy / jax arrays and scalars
        return _jsonable(np.asarray(value).tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    return value


class RunDir:
    """A run folder (created if missing; reopened and appended to on resume).

    One process writes a run folder at a time: the folder is locked while a RunDir of it is
    open (the OS drops the lock when the process dies).

    Args:
        path: The folder. Created with parents if it does not exist.
        tensorboard: Also write TensorBoard event files under ``tb/``.
    """

    def __init__(self, path: str | os.PathLike[str], *, tensorboard: bool = True) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock: int | None = _lock_folder(self.path)
        self.checkpoints_dir.mkdir(exist_ok=True)
        previous = self.read_metrics()
        # On resume, wall clock continues from where the previous session stopped.
        self._wall_offset_s = _last_wall_time(previous)
        self._t0 = time.monotonic()
        self._metrics_file = open(self.metrics_path, "a", encoding="utf-8")  # noqa: SIM115
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(logdir=str(self.path / "tb"))

    # ----------------------------------------------------------------- paths
    @property
    def config_path(self) -> Path:
        """``config.json``: the resolved config of this run."""
        return self.path / CONFIG_FILE

    @property
    def metrics_path(self) -> Path:
        """``metrics.jsonl``: every logged record, one JSON object per line."""
        return self.path / METRICS_FILE

    @property
    def plot_path(self) -> Path:
        """``learning_curve.png``."""
        return self.path / PLOT_FILE

    @property
    def checkpoints_dir(self) -> Path:
        """``checkpoints/``."""
        return self.path / "checkpoints"

    @property
    def latest_dir(self) -> Path:
        """``checkpoints/latest``: the most recent checkpoint."""
        return self.checkpoints_dir / "latest"

    @property
    def best_dir(self) -> Path:
        """``checkpoints/best``: the checkpoint with the best evaluation so far."""
        return self.checkpoints_dir / "best"

    @property
    def videos_dir(self) -> Path:
        """``videos/``: evaluation videos."""
        return self.path / "videos"

    # ----------------------------------------------------------------- config
    def write_config(self, config: Mapping[str, Any]) -> Path:
        """Writes the resolved config as ``config.json`` (atomically)."""
        text = json.dumps(_jsonable(config), indent=2, sort_keys=True) + "\n"
        write_bytes_atomic(self.config_path, text.encode())
        return self.config_path

    def read_config(self) -> dict[str, Any]:
        """Reads ``config.json``; ValueError if this folder has none."""
        if not self.config_path.is_file():
            raise ValueError(f"{self.path} is not a handrail run folder: no {CONFIG_FILE} in it")
        return json.loads(self.config_path.read_text())

    # ----------------------------------------------------------------- metrics
    def wall_time_s(self) -> float:
        """Seconds of training wall clock, summed over resumed sessions."""
        return self._wall_offset_s + (time.monotonic() - self._t0)

    def log(self, kind: str, env_steps: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Appends one record to ``metrics.jsonl`` (flushed) and to TensorBoard.

        Args:
            kind: Record type, e.g. ``"train"``, ``"episode"`` or ``"eval"``.
            env_steps: Env steps taken so far; the x axis of every curve.
            metrics: Scalar values; namespaced keys like ``"critic/loss"`` are kept as-is.

        Returns:
            The record as written.
        """
        record = {"kind": kind, "env_steps": int(env_steps), "wall_time_s": self.wall_time_s()}
        record.update(_jsonable(dict(metrics)))
        self._metrics_file.write(json.dumps(record) + "\n")
        self._metrics_file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key in ("kind", "env_steps") or not isinstance(value, int | float | bool):
                    continue
                self._tb.add_scalar(f"{kind}/{key}", float(value), int(env_steps))
        return record

    def rewind(self, env_steps: int) -> int:
        """Drops the records logged after ``env_steps``; returns how many were dropped.

        A resumed run continues from its latest checkpoint, so the steps a crashed or stopped
        session took after that checkpoint are taken again: their records would otherwise be
        in ``metrics.jsonl`` twice. The file is replaced atomically, and the wall clock goes
        back to that of the last record kept.
        """
        from handrail.demos.commit import write_bytes_atomic

        records = self.read_metrics()
        kept = [r for r in records if int(r.get("env_steps", 0)) <= env_steps]
        if len(kept) == len(records):
            return 0
        self._metrics_file.close()
        write_bytes_atomic(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept).encode())
        self._metrics_file = open(self.metrics_path, "a", encoding="utf-8")  # noqa: SIM115
        self._wall_offset_s = _last_wall_time(kept)
        self._t0 = time.monotonic()
        return len(records) - len(kept)

    def read_metrics(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Reads back ``metrics.jsonl`` (a torn last line from a crash is skipped)."""
        if not self.metrics_path.is_file():
            return []
        records = []
        with open(self.metrics_path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if kind is None or record.get("kind") == kind:
                    records.append(record)
        return records

    # ----------------------------------------------------------------- plot
    def write_plot(self, title: str = "") -> Path:
        """Redraws ``learning_curve.png`` from ``metrics.jsonl`` (atomic replace).

        Success rate and return against env steps (left) and wall-clock minutes (right); eval
        records as markers, a running mean of training episodes as a thin line, a ``baseline``
        record (a residual's base alone) as a dashed level. With a human in
        the loop, another row shows the share of steps the person acted, and the training
        success of episodes with and without an intervention. Where the evaluations say how
        their failed episodes ended (``failed_outcomes``: the sim tasks), a last row stacks
        the share of evaluation episodes that failed each way (:func:`failure_shares`).
        """
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure

        evals = self.read_metrics("eval")
        episodes = self.read_metrics("episode")
        baselines = self.read_metrics("baseline")
        baseline = baselines[-1] if baselines else None
        human = [{**e, "human_share": e["human_steps"] / max(int(e["length"]), 1),
                  "helped": e.get("success") if e["human_steps"] else None,
                  "alone": None if e["human_steps"] else e.get("success")}
                 for e in episodes if "human_steps" in e]  # fmt: skip
        failed = failure_shares([*baselines[-1:], *evals])
        rows = 2 + bool(human) + bool(failed[0])
        fig = Figure(figsize=(10, 3.25 * rows), layout="constrained")
        axes = fig.subplots(rows, 2)
        for col, (xkey, xlabel, scale) in enumerate(
            (("env_steps", "env steps", 1.0), ("wall_time_s", "wall clock (min)", 1 / 60))
        ):
            for row, (ekey, tkey, ylabel) in enumerate(
                (("success_rate", "success", "success rate"), ("mean_return", "return", "return"))
            ):
                ax = axes[row, col]
                _plot_series(ax, episodes, xkey, tkey, scale, "train (running mean)", smooth=True)
                _plot_series(ax, evals, xkey, ekey, scale, "eval", smooth=False)
                if baseline is not None and baseline.get(ekey) is not None:
                    ax.axhline(float(baseline[ekey]), color="0.4", linestyle="--", linewidth=1,
                               label=f"{baseline.get('policy', 'baseline')} (eval)")  # fmt: skip
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                if row == 0:
                    ax.set_ylim(-0.03, 1.03)
                ax.grid(alpha=0.3)
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(loc="best", fontsize=8)
            if human:
                ax = axes[2, col]
                for key, label in (("human_share", "human share of steps"),
                                   ("helped", "success, intervened episodes"),
                                   ("alone", "success, policy alone")):  # fmt: skip
                    _plot_series(ax, human, xkey, key, scale, label, smooth=True)
                ax.set(xlabel=xlabel, ylabel="interventions (running mean)", ylim=(-0.03, 1.03))
                ax.grid(alpha=0.3)
                ax.legend(loc="best", fontsize=8)
            if failed[0]:
                _plot_failures(axes[rows - 1, col], failed, col, xlabel, scale)
        if title:
            fig.suptitle(title)
        tmp = self.plot_path.with_name(f".{PLOT_FILE}.tmp.png")
        _replace_from_temp(tmp, self.plot_path, lambda out: fig.savefig(out, dpi=80))
        return self.plot_path

    # ----------------------------------------------------------------- video
    def write_video(self, frames: Sequence[np.ndarray], name: str, fps: float) -> Path:
        """Writes ``videos/<name>.mp4`` at ``fps`` (see :func:`write_video`)."""
        return write_video(self.videos_dir, frames, name, fps)

    def close(self) -> None:
        """Flushes and closes the metrics and TensorBoard files; unlocks the folder."""
        if not self._metrics_file.closed:
            self._metrics_file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __del__(self) -> None:  # an unclosed RunDir does not keep its folder locked
        if getattr(self, "_lock", None) is not None:
            os.close(self._lock)  # type: ignore[arg-type]

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lock_folder(path: Path) -> int:
    """An exclusive lock on the folder itself, held by the descriptor returned.

    Raises:
        ValueError: another process (or another open RunDir) holds it.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(
            f"{path} is in use by another process (a run folder has one writer at a time): "
            "wait for it to end, or stop it"
        ) from None
    return fd


def create_run_folder(path: str | os.PathLike[str], *, numbered: bool = False) -> Path:
    """Creates the folder of a new run, exclusively: never one that exists.

    Args:
        path: The folder (its parents are created).
        numbered: If ``path`` exists, take the first free ``<path>-2``, ``<path>-3``... (for
            default names, which two runs started in the same second share).

    Returns:
        The folder created.

    Raises:
        FileExistsError: ``path`` exists (and ``numbered`` is false).
        OSError: the folder cannot be created (a read-only or full disk, a file in the way).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where the parent folder should be
        raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", str(path.parent)) from None
    candidate, n = path, 1
    while True:
        try:
            candidate.mkdir()  # atomic: of two runs creating one folder, one gets it
            return candidate
        except FileExistsError:
            if not numbered:
                raise
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")


def _replace_from_temp(tmp: Path, path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)``, then rename it over ``path``; a failed write leaves no ``tmp`` behind."""
    try:
        write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def _last_wall_time(records: Iterable[Mapping[str, Any]]) -> float:
    """The wall clock a run folder continues from: the latest ``wall_time_s`` logged."""
    return max((float(r.get("wall_time_s") or 0.0) for r in records), default=0.0)


def failure_shares(
    records: Sequence[Mapping[str, Any]],
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """How the evaluations' episodes failed, as shares of each evaluation's episodes.

    Args:
        records: ``eval`` (and ``baseline``) records in order; those with ``episodes`` count,
            and their ``failed_outcomes`` ({outcome: episodes}) say how the failed ones ended
            (none: none failed, or the env does not say).

    Returns:
        (outcomes, most frequent over all records first; xy: (records, 2) of each record's
        ``env_steps`` and ``wall_time_s``; shares: (outcomes, records)). No outcomes at all if no
        record names one.
    """
    kept = [r for r in records if r.get("episodes")]
    totals: dict[str, int] = {}
    for record in kept:
        for outcome, count in (record.get("failed_outcomes") or {}).items():
            totals[outcome] = totals.get(outcome, 0) + int(count)
    outcomes = sorted(totals, key=lambda name: (-totals[name], name))
    xy = np.array([[float(r.get("env_steps") or 0), float(r.get("wall_time_s") or 0)]
                   for r in kept]).reshape(-1, 2)  # fmt: skip
    shares = np.array([[float((r.get("failed_outcomes") or {}).get(name, 0)) / int(r["episodes"])
                        for r in kept] for name in outcomes]).reshape(len(outcomes), len(kept))  # fmt: skip
    return outcomes, xy, shares


def _plot_failures(
    ax: Any, failed: tuple[list[str], np.ndarray, np.ndarray], col: int, xlabel: str, scale: float
) -> None:
    """The last row of the learning curve: each way the evaluation episodes failed, stacked."""
    outcomes, xy, shares = failed
    ax.stackplot(xy[:, col] * scale, shares, labels=outcomes, alpha=0.8)
    top = max(float(shares.sum(axis=0).max()) * 1.15, 0.05)  # the failures, not the axis
    ax.set(xlabel=xlabel, ylabel="share of eval episodes failed", ylim=(0.0, top))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=7)


def _plot_series(
    ax: Any,
    records: Iterable[Mapping[str, Any]],
    xkey: str,
    ykey: str,
    scale: float,
    label: str,
    *,
    smooth: bool,
) -> None:
    pts = [
        (float(r[xkey]) * scale, float(r[ykey]))
        for r in records
        if r.get(ykey) is not None and r.get(xkey) is not None
    ]
    if not pts:
        return
    x, y = np.asarray(pts).T
    if smooth:
        window = max(1, min(20, len(y) // 5))
        csum = np.concatenate([[0.0], np.cumsum(y)])
        lo = np.maximum(np.arange(len(y)) + 1 - window, 0)
        y = (csum[1:] - csum[lo]) / (np.arange(len(y)) + 1 - lo)  # trailing running mean
        ax.plot(x, y, lw=1, alpha=0.6, label=label)
    else:
        ax.plot(x, y, marker="o", ms=3, label=label)


def write_video(
    directory: str | os.PathLike[str], frames: Sequence[np.ndarray], name: str, fps: float
) -> Path:
    """Writes ``<directory>/<name>.mp4`` from HxWx3 uint8 frames (temp file, then rename).

    Every handrail video goes through here. ``fps`` is the rate the frames were taken at (for
    env frames, :func:`handrail.learners.evaluation.env_fps`), so the video plays at real speed.
    """
    if len(frames) == 0:
        raise ValueError(f"write_video({name!r}): no frames; render the env with rgb_array")
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"write_video({name!r}): fps must be a positive number, got {fps}")
    import imageio.v2 as imageio

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path, tmp = folder / f"{name}.mp4", folder / f".{name}.tmp.mp4"
    rgb: list[ArrayLike] = [np.asarray(f, dtype=np.uint8) for f in frames]  # mimwrite's type
    with warnings.catch_warnings():
        # imageio starts ffmpeg with subprocess (fork, then exec at once: no Python runs in the
        # child), so JAX's warning that a fork of a multithreaded process may deadlock does not
        # apply; without this filter every run that writes a video printed it
        warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
        _replace_from_temp(tmp, path, lambda out: imageio.mimwrite(out, rgb, fps=fps))
    return path
