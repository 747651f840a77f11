"""Episode-id lists of `--episodes`."""

from __future__ import annotations

import pytest

from handrail.launch.commands.common import parse_episodes


def test_parse_episodes() -> None:
    with pytest.raises(ValueError, match="--episodes"):
        parse_episodes("1,x")
    assert parse_episodes("0,3,5-7") == [0, 3, 5, 6, 7]
    assert parse_episodes("") is None
