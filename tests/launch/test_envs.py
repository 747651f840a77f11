"""Task resolution: handrail tasks, gymnasium ids and module:EnvId, with clear errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from handrail.launch.envs import make_env


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
