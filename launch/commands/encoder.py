"""``handrail encoder train``: pretrain a frozen image encoder on recorded frames.

``encoder train --demos STORE [STORE ...] --out PATH`` fits
:mod:`handrail.learners.agents.encoder` (a spatial autoencoder whose keypoints also predict the
recorded actions) on every frame of the stores, and writes the encoder folder with its loss
plot and a picture of its keypoints on validation frames. ``handrail train --encoder PATH``
then learns from the cameras through it.

``encoder import-resnet10 --params resnet10_params.pkl --cameras front wrist --out PATH``
converts SERL's pretrained ResNet-10 into such a folder instead
(:mod:`handrail.learners.agents.resnet`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

from handrail.launch.commands.common import plot_losses, write_folder
from handrail.learners.agents.encoder import META_FILE, EncoderConfig


@dataclass(frozen=True)
class EncoderTrain:
    """Options of ``handrail encoder train``."""

    demos: tuple[Path, ...]
    """Episode stores with camera frames: demonstrations, failures, any recorded episodes
    (frames of the states the policy will visit help)."""
    out: Path
    """Folder to write the encoder into (``handrail train --encoder PATH`` reads it)."""
    overwrite: bool = False
    """Replace ``--out`` if it holds an encoder."""
    progress: bool = True
    """Show the progress bar."""
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    """Cameras, network and optimisation settings."""

    def __post_init__(self) -> None:
        if not self.demos:
            raise ValueError("--demos: give at least one episode store")


def train(cmd: Annotated[EncoderTrain, tyro.conf.arg(name="")]) -> int:
    """Pretrain an image encoder on the stores' frames and write it to ``--out``."""
    from handrail.demos import open_store
    from handrail.demos.errors import StoreError
    from handrail.learners.agents.encoder import frames_and_actions, save_encoder, train_encoder

    out = Path(cmd.out)
    _check_out(out, cmd.overwrite)
    readers = []
    for path in cmd.demos:
        try:
            readers.append(open_store(path))
        except (StoreError, OSError, ValueError) as exc:
            raise ValueError(f"--demos {path}: {exc}") from exc
    data = frames_and_actions(readers, cmd.encoder)
    print(f"handrail encoder: {len(data.episode)} frames of cameras {list(data.frames)} from "
          f"{len(readers)} store(s)", file=sys.stderr)  # fmt: skip
    result = train_encoder(data, cmd.encoder, progress=cmd.progress)

    def fill(folder: Path) -> None:
        save_encoder(folder, result, cmd.encoder, data,
                     extra={"demos": [str(p) for p in cmd.demos]})  # fmt: skip
        plot_losses(result.history, folder / "loss.png", title="handrail encoder train",
                    ylabel="reconstruction + action loss")  # fmt: skip
        _keypoints_picture(folder, data)

    write_folder(out, fill)
    last = result.history[-1]
    print(f"handrail encoder: validation loss {min(h['val_loss'] for h in result.history):.4f} "
          f"(last training loss {last['train_loss']:.4f}); keypoints on validation frames in "
          f"{out / 'keypoints.png'}", file=sys.stderr)  # fmt: skip
    print(f"handrail encoder: encoder {out.resolve()}; train on it with handrail train "
          f"--encoder {out}", file=sys.stderr)  # fmt: skip
    return 0


@dataclass(frozen=True)
class EncoderImport:
    """Options of ``handrail encoder import-resnet10``."""

    params: Path
    """SERL's pretrained ResNet-10 params: its ``resnet10_params.pkl`` (a pickle of nested
    dicts of arrays: load only a file you trust) or an ``.npz`` of ``a/b/kernel`` arrays."""
    cameras: tuple[str, ...]
    """The camera keys the encoder reads (each through the same frozen network)."""
    out: Path
    """Folder to write the encoder into (``handrail train --encoder PATH`` reads it)."""
    image_size: int = 128
    """Frames are resized once to this size where they enter (SERL's: 128; at least 32)."""
    overwrite: bool = False
    """Replace ``--out`` if it holds an encoder."""

    def __post_init__(self) -> None:
        if not self.cameras:
            raise ValueError("--cameras: name at least one camera key (e.g. front wrist)")
        if self.image_size < 32:
            raise ValueError(
                f"--image-size {self.image_size}: a ResNet-10 halves the frame 5 times; give "
                "at least 32 (SERL's is 128)"
            )


def import_resnet10(cmd: Annotated[EncoderImport, tyro.conf.arg(name="")]) -> int:
    """Convert SERL's pretrained ResNet-10 into a frozen encoder folder at ``--out``."""
    from handrail.learners.agents.encoder import ImageEncoder, save_resnet10
    from handrail.learners.agents.resnet import FEATURES, params_from_serl, read_params

    out = Path(cmd.out)
    _check_out(out, cmd.overwrite)
    if not cmd.params.is_file():
        raise ValueError(f"--params {cmd.params}: no such file")
    try:
        params = params_from_serl(read_params(cmd.params))
    except ValueError as exc:
        raise ValueError(f"--params {cmd.params}: {exc}") from exc

    def fill(folder: Path) -> None:
        save_resnet10(folder, params, cmd.cameras, cmd.image_size, str(cmd.params))

    write_folder(out, fill)
    ImageEncoder(out)  # it loads as every encoder does
    print(f"handrail encoder: ResNet-10 from {cmd.params}: {FEATURES} features per camera "
          f"{list(cmd.cameras)} at {cmd.image_size}x{cmd.image_size}; train on it with "
          f"handrail train --encoder {out}", file=sys.stderr)  # fmt: skip
    return 0


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``--out`` that holds something, or an encoder without ``--overwrite``."""
    if out.exists() and not (overwrite and (out / META_FILE).is_file()):
        what = "an encoder: add --overwrite" if (out / META_FILE).is_file() else (
            "something else: choose another --out")  # fmt: skip
        raise ValueError(f"--out {out} already exists and holds {what}")


def _keypoints_picture(folder: Path, data: Any, count: int = 6) -> None:
    """``keypoints.png``: frames spread over the stores, each camera's keypoints on them."""
    import numpy as np
    from PIL import Image, ImageDraw

    from handrail.learners.agents.encoder import ImageEncoder

    encoder = ImageEncoder(folder)
    rows = np.linspace(0, len(data.episode) - 1, count).astype(int)
    feats = encoder.features({c: f[rows] for c, f in data.frames.items()})
    k = encoder.config.keypoints
    scale = 3
    tiles = []
    for i in range(len(rows)):
        column = []
        for j, cam in enumerate(encoder.cameras):
            frame = data.frames[cam][rows[i]]
            if frame.shape[-1] == 1:
                frame = np.repeat(frame, 3, axis=-1)
            img = Image.fromarray(frame[..., :3]).resize((frame.shape[1] * scale,
                                                           frame.shape[0] * scale))  # fmt: skip
            draw = ImageDraw.Draw(img)
            xy = feats[i, j * 2 * k : (j + 1) * 2 * k]
            for x, y in zip(xy[:k], xy[k:], strict=True):
                px, py = (x + 1) / 2 * (img.width - 1), (y + 1) / 2 * (img.height - 1)
                draw.ellipse((px - 3, py - 3, px + 3, py + 3), outline=(0, 255, 255))
            column.append(np.asarray(img))
        tiles.append(np.concatenate(column, axis=0))
    Image.fromarray(np.concatenate(tiles, axis=1)).save(folder / "keypoints.png")
