"""Task resolution: handrail tasks, gymnasium ids and module:EnvId, with clear errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from handrail.app.envs import check_tasks, make_env
from handrail.launch import cli


def test_module_envid_form_imports_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "handrail_test_envmod.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            gym.register("HandrailTestPendulum-v0", entry_point="gymnasium.envs.classic_control:PendulumEnv",
                         max_episode_steps=20)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    env = make_env("handrail_test_envmod:HandrailTestPendulum-v0")
    assert env.spec is not None and env.spec.max_episode_steps == 20
    env.close()
    with pytest.raises(ValueError, match="cannot import module 'no_such_module_xyz'"):
        make_env("no_such_module_xyz:Foo-v0")


def test_unknown_task_lists_the_handrail_tasks() -> None:
    with pytest.raises(ValueError, match=r"not a handrail task .*pick_cube"):
        make_env("NoSuchEnv-v9")


def test_a_misspelt_task_suggests_the_handrail_task_it_is_close_to() -> None:
    with pytest.raises(ValueError, match=r"Did you mean .peg_insert.\?"):
        make_env("peg_insrt")
    with pytest.raises(ValueError) as info:
        make_env("NoSuchEnv-v9")
    assert "Did you mean" not in str(info.value)


def test_check_tasks_passes_what_make_env_can_build_and_names_the_option() -> None:
    check_tasks(["pick_cube", "Pendulum-v1"])
    with pytest.raises(ValueError, match=r"^--tasks 'pick_cub' .*Did you mean 'pick_cube'\?"):
        check_tasks(["pick_cube", "pick_cub"])
    with pytest.raises(ValueError, match=r"not a handrail task .*: needs an expert\.$"):
        check_tasks(["pick_cube", "Pendulum-v1"], handrail_only="needs an expert")


@pytest.mark.parametrize(
    ("bench", "task"),
    [("hil", "pick_cub"), ("residual", "Pendulum-v1"), ("learning", "NoSuchEnv-v9")],
)
def test_a_bench_refuses_an_unknown_task_before_starting_any_run(
    bench: str, task: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench"
    argv = ["bench", bench, "--tasks", "pick_cube", task, "--out", str(out), "--jobs", "1"]
    assert cli.main(argv) == 2
    assert f"--tasks '{task}' is not a handrail task" in capsys.readouterr().err
    assert not out.exists()  # nothing was recorded, trained or written


@pytest.mark.parametrize(("bench", "option"), [("hil", "--train-args"), ("residual", "--bc-args")])
def test_a_bench_takes_a_string_of_options_given_as_a_separate_argument(
    bench: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--train-args "--sac.utd 4"`: the shell passes the value as its own argument, which starts
    # with a dash. It must reach the bench (here: its task check), not fail as a missing value.
    assert cli.main(["bench", bench, "--tasks", "pick_cub", option, "--sac.utd 4"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'pick_cube'?" in err and "Missing value" not in err
