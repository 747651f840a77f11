"""Loading a run's policy: finding the checkpoint and the run config, the kind of checkpoint.

Loading each kind end to end is tested where a run of that kind is trained (train, bc, the SB3
peers, residual runs as bases).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handrail.learners.policies import checkpoint_kind, locate_checkpoint


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
    learner = tmp_path / "checkpoints" / "latest" / "learner"  # a Trainer.save folder, given itself
    learner.mkdir(parents=True)
    (learner / "state.msgpack").write_bytes(b"")
    assert locate_checkpoint(learner) == (learner, config)
    loose = tmp_path.parent / f"{tmp_path.name}_loose"  # outside any run: no config
    loose.mkdir()
    (loose / "state.msgpack").write_bytes(b"")
    assert locate_checkpoint(loose) == (loose, None)


def test_checkpoint_kind_by_its_files(tmp_path: Path) -> None:
    assert checkpoint_kind(tmp_path) is None
    for name, kind in (("state.msgpack", "sac"), ("bc.msgpack", "bc"), ("model.zip", "sb3")):
        (tmp_path / name).write_bytes(b"")
        assert checkpoint_kind(tmp_path) == kind
