"""Episode-id lists of `--episodes`."""

from __future__ import annotations

import pytest

from handrail.launch.commands.common import parse_episodes


def test_parse_episodes() -> None:
    with pytest.raises(ValueError, match="--episodes"):
        parse_episodes("1,x")
    assert parse_episodes("0,3,5-7") == [0, 3, 5, 6, 7]
    assert parse_episodes("") is None


def test_episode_ranges_read_back_as_written() -> None:
    from handrail.demos.finite import format_ids

    ids = [0, 1, 2, 5, 7, 8, 11]
    assert parse_episodes(format_ids(ids)) == ids


def test_an_existing_out_needs_a_flag_that_says_what_to_do_with_it(tmp_path) -> None:
    from handrail.launch.commands.common import check_out

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("")
    with pytest.raises(FileExistsError, match="pass --overwrite to replace it, or choose"):
        check_out(str(taken), overwrite=False)
    with pytest.raises(FileExistsError, match="pass --append to add episodes to it, --overwrite"):
        check_out(str(taken), overwrite=False, append=False)
    check_out(str(taken), overwrite=True)
    check_out(str(taken), overwrite=False, append=True)
    (tmp_path / "empty").mkdir()
    check_out(str(tmp_path / "empty"), overwrite=False)  # an empty folder is free to take
    with pytest.raises(FileNotFoundError, match="drop --append to create it"):
        check_out(str(tmp_path / "nothing"), overwrite=False, append=True)
