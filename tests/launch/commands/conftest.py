"""Fixtures shared by the `handrail record|replay|demos ...` tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from handrail.launch import cli


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three expert episodes of reach, recorded once for the session (tests copy it before changing it)."""
    out = tmp_path_factory.mktemp("rec") / "reach"
    assert (
        cli.main(["record", "--task", "reach", "--episodes", "3", "--out", str(out), "--seed", "5"])
        == 0
    )
    return out
