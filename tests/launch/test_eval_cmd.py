"""`handrail eval`: finding the checkpoint and the run config, and option validation.

The end-to-end eval of a freshly trained run is in test_train_cmd.py, next to the tiny run it
evaluates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handrail.launch.eval_cmd import EvalConfig, locate_checkpoint


def test_bad_episodes_names_the_field() -> None:
    with pytest.raises(ValueError, match="episodes"):
        EvalConfig(path=Path("x"), episodes=0)


def test_locate_checkpoint_needs_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no checkpoint"):
        locate_checkpoint(tmp_path)
    (tmp_path / "checkpoints" / "best").mkdir(parents=True)
    with pytest.raises(ValueError, match="no checkpoint"):
        locate_checkpoint(tmp_path)
    (tmp_path / "checkpoints" / "best" / "state.msgpack").write_bytes(b"")
    (tmp_path / "config.json").write_text(json.dumps({"task": "Pendulum-v1"}))
    ckpt, config = locate_checkpoint(tmp_path)
    assert ckpt == tmp_path / "checkpoints" / "best" and config == {"task": "Pendulum-v1"}
    assert locate_checkpoint(ckpt) == (ckpt, config)
