"""``handrail label STORE --from success|interventions|interactive``: success labels for a
reward classifier.

The labels go into the store itself (``handrail.demos.labels``; FORMAT.md, "Success labels"),
where ``read_labels`` finds them. Interactive labelling shows each episode as a contact sheet
(a PNG of the frames after each step, numbered) and reads the person's answer from stdin.
"""

from __future__ import annotations

import getpass
import math
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
import tyro

from handrail.launch.commands.common import StorePath, guarded, parse_episodes

if TYPE_CHECKING:
    from handrail.demos.labels import Labels
    from handrail.demos.reader import EpisodeReader, EpisodeRecord


def default_labeller() -> str:
    """``user@host`` of whoever runs the command (what ``--by`` defaults to)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name in the environment or the password database
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


Method = Literal["success", "reward", "interventions", "interactive"]
"""Where labels come from (``--from``; stored as the labelling's ``method``)."""


@dataclass(frozen=True)
class LabelConfig:
    """Options of ``handrail label``."""

    path: StorePath
    """Episode store to label (the labels are written into it)."""
    from_: Annotated[Method, tyro.conf.arg(name="from")]
    """Where labels come from: success (recorded success: an episode's last --last steps
    success or all failure), interventions (the --before steps before each human takeover
    failure), reward (a sparse reward recorded per step: positive is success), interactive (a person names the step from which the task is achieved)."""
    last: int = 1
    """Steps at the end of a successful episode labelled success."""
    before: int = 10
    """interventions: steps before each takeover labelled failure."""
    episodes: str = ""
    """Episodes to label, e.g. 0-9,12; empty labels all. Other episodes keep their labels."""
    by: str = field(default_factory=default_labeller)
    """Who labels (user@host), stored with the labels."""


NEXT_STEP = "handrail reward train --demos {store} --out reward.clf"
"""What to run once a store is labelled."""
THUMB_PX = 96
"""Height of one frame on a contact sheet, in pixels."""
SHEET_COLUMNS = 10
"""Frames per row of a contact sheet."""
_CAPTION_PX = 16  # the step number's line below each frame
_GAP_PX = 4  # between frames


def contact_sheet(frames: np.ndarray) -> np.ndarray:
    """One image of an episode's frames, ``SHEET_COLUMNS`` per row, each with its step below it.

    Args:
        frames: (T, H, W, 3) uint8, ``frames[t]`` the observation after step ``t``.

    Returns:
        (rows, columns, 3) uint8: the frames scaled to THUMB_PX high on a dark grey sheet.
    """
    from PIL import Image, ImageDraw, ImageFont  # Pillow comes with matplotlib

    count, height, width = frames.shape[:3]
    thumb_w = max(1, round(width * THUMB_PX / height))
    resample = Image.Resampling.NEAREST if height < THUMB_PX else Image.Resampling.BILINEAR
    columns = min(SHEET_COLUMNS, max(1, count))
    cell_w, cell_h = thumb_w + _GAP_PX, THUMB_PX + _CAPTION_PX + _GAP_PX
    rows = math.ceil(count / columns)
    sheet = Image.new("RGB", (columns * cell_w, rows * cell_h), (40, 40, 40))
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=_CAPTION_PX - 2)
    for t, frame in enumerate(frames):
        y, x = divmod(t, columns)
        y, x = y * cell_h, x * cell_w
        sheet.paste(Image.fromarray(frame).resize((thumb_w, THUMB_PX), resample), (x, y))
        draw.text((x + 2, y + THUMB_PX), str(t), fill=(255, 255, 255), font=font)
    return np.asarray(sheet)


class _Person:
    """``ask`` for ``label_interactively``: shows an episode and reads the answer from stdin."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._shown: int | None = None

    def __call__(self, record: EpisodeRecord, frames: np.ndarray | None) -> str:
        steps = record.num_steps
        if record.id == self._shown:  # the last answer was not understood
            print(f"  answer a step 0..{steps - 1}, n, k (or Enter) or q")
        else:
            self._shown = record.id
            self._show(record, frames)
        try:
            return input(f"  achieved from step (0..{steps - 1}), n never, Enter/k keep, q stop: ")
        except EOFError:  # stdin ran out: stop, keeping the answers given
            print()
            return "q"

    def _show(self, record: EpisodeRecord, frames: np.ndarray | None) -> None:
        success = "yes" if record.success else "no"
        cut = ", cut short by a crash" if record.recovered else ""
        print(f"episode {record.id}: {record.num_steps} steps, recorded success: {success}{cut}")
        if frames is not None:
            from PIL import Image

            png = self.folder / f"episode_{record.id:04d}_steps_0-{record.num_steps - 1}.png"
            Image.fromarray(contact_sheet(frames)).save(png)
            print(f"  sheet: {png} (frame t: after step t)")


def _label(cfg: LabelConfig) -> int:
    from handrail.demos import open_store
    from handrail.demos.labels import (
        UNLABELLED,
        check_writable,
        labels_from_interventions,
        labels_from_reward,
        labels_from_success,
        write_labels,
    )

    reader = open_store(cfg.path)
    ids = parse_episodes(cfg.episodes)
    check_writable(cfg.path)  # a recorder writing now: say so before anyone labels
    if cfg.from_ == "success":
        new = labels_from_success(reader, cfg.last, ids)
    elif cfg.from_ == "reward":
        new = labels_from_reward(reader, ids)
    elif cfg.from_ == "interventions":
        new = labels_from_interventions(reader, cfg.before, cfg.last, ids)
    else:
        new = _ask_person(reader, ids)
    now = open_store(cfg.path)  # episodes committed meanwhile (a recorder) stay unlabelled
    new = np.concatenate([new, np.full(max(0, now.num_steps - len(new)), UNLABELLED, np.int8)])
    labels = write_labels(cfg.path, new, by=cfg.by, method=cfg.from_)
    print(f"{cfg.path}: labelled {int(np.count_nonzero(new != UNLABELLED))} steps from {cfg.from_}")
    _print_counts(now, labels, ids)
    return 0


def _ask_person(reader: EpisodeReader, ids: list[int] | None) -> np.ndarray:
    """``label_interactively`` with a person at this terminal; sheets in a temp folder."""
    from handrail.demos.labels import camera_field, label_interactively

    folder = Path(tempfile.mkdtemp(prefix="handrail-label-"))
    try:
        camera = camera_field(reader)
        if camera is not None:
            print(f"contact sheets of camera {camera!r} go to {folder} (deleted at the end)")
        else:
            print(
                f"{reader.path} has no camera field (uint8 HxWx3): no contact sheets; judge "
                "each episode by its recorded success and length"
            )
        return label_interactively(reader, _Person(folder), ids)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _print_counts(reader: EpisodeReader, labels: Labels, ids: list[int] | None) -> None:
    """Per-episode counts of the episodes asked for, the store's totals, and what to run next."""
    from handrail.demos.labels import FAILURE, SUCCESS, UNLABELLED
    from handrail.launch.commands.demos import INFO_LISTS_UP_TO

    shown = list(range(reader.num_episodes)) if ids is None else ids
    print(f"{'episode':>7} {'steps':>6} {'success':>8} {'failure':>8} {'unlabelled':>10}  recorded")
    for e in shown[:INFO_LISTS_UP_TO]:
        rec = reader.episodes[e]
        ep = labels.success[rec.start : rec.start + rec.num_steps]
        counts = [int(np.count_nonzero(ep == v)) for v in (SUCCESS, FAILURE, UNLABELLED)]
        print(
            f"{e:>7} {rec.num_steps:>6} {counts[0]:>8} {counts[1]:>8} {counts[2]:>10}  "
            f"{'success' if rec.success else 'failure'}"
        )
    if len(shown) > INFO_LISTS_UP_TO:
        print(f"... and {len(shown) - INFO_LISTS_UP_TO} more episodes")
    total = labels.counts()
    print(
        f"store: {total['success']} success frames, {total['failure']} failure frames, "
        f"{total['unlabelled']} unlabelled ({len(labels.success)} steps)"
    )
    if not total["success"] or not total["failure"]:
        print("note: a classifier needs frames of both kinds; label more episodes")
    print(f"next: {NEXT_STEP.format(store=reader.path)}")


def label(cfg: Annotated[LabelConfig, tyro.conf.arg(name="")]) -> int:
    """Label success and failure frames of a store for a reward classifier."""
    return guarded("label", lambda: _label(cfg), f"no labels were written to {cfg.path}")


__all__ = ["LabelConfig", "contact_sheet", "default_labeller", "label"]
