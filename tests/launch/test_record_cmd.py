"""`handrail record` end to end through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.demos import open_store
from handrail.launch import cli


def test_record_stores_expert_episodes_with_seeds(recorded: Path) -> None:
    reader = open_store(recorded)
    assert reader.num_episodes == 3 and reader.attrs["kind"] == "demo"
    assert [r.seed for r in reader.episodes] == [5, 6, 7]
    assert all(r.task == "reach" for r in reader.episodes)
    assert set(np.unique(reader.load().intervention)) == {2}  # scripted


def test_record_ctrl_c_keeps_finished_episodes(tmp_path: Path, monkeypatch) -> None:
    from handrail import sim

    real = sim.make_expert
    calls = {"n": 0}

    def interrupting(task, env=None):
        expert = real(task, env)

        class Wrapped:
            def reset(self, seed=None):
                expert.reset(seed=seed)

            def __call__(self, obs):
                calls["n"] += 1
                if calls["n"] > 25:  # reach episodes take ~10 steps: stop inside the third
                    raise KeyboardInterrupt
                return expert(obs)

        return Wrapped()

    monkeypatch.setattr(sim, "make_expert", interrupting)
    out = tmp_path / "s"
    assert cli.main(["record", "--task", "reach", "--episodes", "5", "--out", str(out)]) == 130
    reader = open_store(out)
    assert 1 <= reader.num_episodes < 5
    assert reader.num_steps == sum(r.num_steps for r in reader.episodes)
    assert cli.main(["demos", "validate", str(out)]) == 0


def test_human_sources_say_what_they_wait_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["record", "--task", "reach", "--source", "spacemouse", "--out", str(tmp_path / "x")]
    assert cli.main(args) == 2
    assert "interventions" in capsys.readouterr().err
