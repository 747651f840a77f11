"""`handrail train` / `handrail eval`: config resolution, task resolution, errors, run folder."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from handrail.launch import train_cmd
from handrail.launch.train_cmd import (
    EvalConfig,
    TrainConfig,
    locate_checkpoint,
    make_env,
    parse_demos,
    resolve,
)

TINY = {"hidden_dims": (32, 32), "batch_size": 32, "warmup_steps": 100, "eval_episodes": 1}


def test_preset_then_field_overrides() -> None:
    cfg = resolve(TrainConfig(task="pick_cube", utd=3, seed=7))
    preset = train_cmd.PRESETS["pick_cube"]
    assert cfg.sac.utd == 3 and cfg.seed == 7
    assert cfg.steps == preset.steps and cfg.sac.n_step == preset.sac["n_step"]
    assert cfg.sac.backup_entropy is False
    generic = resolve(TrainConfig(task="Pendulum-v1", num_critics=1))
    assert generic.sac.num_critics == 1 and generic.sac.critic_subset == 1
    assert resolve(TrainConfig(sac_preset="rlpd")).sac.num_critics == 10


def test_resolved_config_json_round_trip() -> None:
    cfg = resolve(TrainConfig(task="reach", demos="expert:5"))
    again = train_cmd.ResolvedConfig.from_json(json.loads(json.dumps(cfg.to_json())))
    assert again == cfg


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"steps": 0}, "steps"), ({"eval_episodes": 0}, "eval_episodes"),
     ({"demos": "expert:zero"}, "expert:N"), ({"stop_at_success": 1.5}, "stop_at_success")],
)  # fmt: skip
def test_bad_options_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)
    with pytest.raises(ValueError, match="episodes"):
        EvalConfig(path=Path("x"), episodes=0)


def test_parse_demos() -> None:
    assert parse_demos("expert:20") == ("expert", 20)
    assert parse_demos("data/demos.zarr") == ("store", "data/demos.zarr")


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


def test_discrete_action_env_is_a_clear_error(tmp_path: Path) -> None:
    config = TrainConfig(task="CartPole-v1", steps=10, run_dir=tmp_path / "run", progress=False)
    with pytest.raises(TypeError, match=r"CartPole-v1.*continuous Box action space.*Discrete"):
        train_cmd.train(config)
    assert not (tmp_path / "run").exists()


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
    assert np.isfinite(train_cmd.PRESETS["reach"].steps)
