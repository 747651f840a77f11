"""`handrail train` / `handrail eval`: config resolution, task resolution, errors, run folder."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import gymnasium as gym
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
    cfg = resolve(TrainConfig(task="push", utd=3, seed=7, reward="dense"))
    preset = train_cmd.PRESETS["push"]
    assert cfg.sac.utd == 3 and cfg.seed == 7
    assert cfg.steps == preset.steps and cfg.sac.n_step == preset.sac["n_step"]
    assert cfg.sac.backup_entropy is False and cfg.env_overrides == {"reward": "dense"}
    with pytest.raises(ValueError, match="--episode-steps applies to handrail tasks only"):
        resolve(TrainConfig(task="Pendulum-v1", episode_steps=10))
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


# ---------------------------------------------------------------------------- end to end (tiny)
gym.register(
    "HandrailTinyPendulum-v0",
    entry_point="gymnasium.envs.classic_control:PendulumEnv",
    max_episode_steps=50,
)


def tiny_config(run_dir: Path, **overrides: object) -> TrainConfig:
    base = dict(task="HandrailTinyPendulum-v0", steps=100, eval_every=100, run_dir=run_dir,
                progress=False, **TINY)  # fmt: skip
    return TrainConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "tiny"
    assert train_cmd.train(tiny_config(run_dir, warmup_steps=50)) == 0
    return run_dir


def test_run_folder_contents(tiny_run: Path) -> None:
    config = json.loads((tiny_run / "config.json").read_text())
    assert config["task"] == "HandrailTinyPendulum-v0" and config["sac"]["hidden_dims"] == [32, 32]
    records = [json.loads(x) for x in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    episodes = [r for r in records if r["kind"] == "episode"]
    assert [r["env_steps"] for r in episodes] == [50, 100]
    assert all(r["length"] == 50 and np.isfinite(r["return"]) for r in episodes)
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["env_steps"] for r in evals] == [100] and evals[0]["success_rate"] is None
    assert (tiny_run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (tiny_run / "checkpoints" / "best" / "state.msgpack").is_file()
    assert (tiny_run / "checkpoints" / "latest" / "learner" / "state.msgpack").is_file()
    assert list((tiny_run / "tb").glob("events.out.tfevents.*"))


def test_eval_command_on_run_and_checkpoint(
    tiny_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert train_cmd.evaluate(EvalConfig(path=tiny_run, episodes=2)) == 0
    out = capsys.readouterr().out
    assert "2 episodes: return" in out and "length 50.0" in out
    latest = tiny_run / "checkpoints" / "latest"
    assert train_cmd.evaluate(EvalConfig(path=latest, episodes=1)) == 0
    assert "1 episodes" in capsys.readouterr().out


def test_resume_continues_the_run(tiny_run: Path, tmp_path: Path) -> None:
    import shutil

    run_dir = tmp_path / "resumed"
    shutil.copytree(tiny_run, run_dir)
    assert train_cmd.train(TrainConfig(resume=run_dir, steps=200, progress=False)) == 0
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records if r["kind"] == "episode"] == [50, 100, 150, 200]
    assert [r["env_steps"] for r in records if r["kind"] == "eval"] == [100, 200]
    saved = json.loads((run_dir / "checkpoints/latest/learner/config.json").read_text())
    assert saved["extra"]["env_steps"] == 200 and saved["extra"]["episodes"] == 4


def test_demo_store_with_other_fields_is_a_clear_error(tmp_path: Path) -> None:
    from handrail.demos import FieldMismatchError, FieldSpec, create_store

    store = tmp_path / "demos.zarr"
    with create_store(store, kind="demo", obs_fields=[FieldSpec("proprio", "float32", (7,))],
                      action_dim=1, control_dt_s=0.05, task="other") as writer:  # fmt: skip
        writer.begin_episode(seed=0)
        writer.add_step(obs={"proprio": np.zeros(7, np.float32)}, action=np.zeros(1, np.float32),
                        reward=0.0, terminated=True, truncated=False)  # fmt: skip
        writer.end_episode(final_obs={"proprio": np.zeros(7, np.float32)}, success=True)
    with pytest.raises(FieldMismatchError, match=r"lacks observation field\(s\) \['obs'\]"):
        train_cmd.train(tiny_config(tmp_path / "run", demos=str(store)))


def test_expert_demos_load_like_a_store() -> None:
    """`--demos expert:N` yields the same EpisodeData a store loads, so one converter serves both."""
    from handrail.demos import EpisodeData
    from handrail.learners.demo_data import to_transitions
    from handrail.learners.specs import ActionSpec, ObsSpec

    data = train_cmd.expert_episodes("reach", 3, seed=5)
    assert isinstance(data, EpisodeData)
    assert data.num_episodes == 3 and np.all(data.intervention == 2)  # 2: scripted
    assert [r.start for r in data.records] == data.episode_starts.tolist()
    assert [r.num_steps for r in data.records] == data.episode_lengths.tolist()
    assert all(r.success for r in data.records) and data.records[0].seed == 5
    env = train_cmd.make_env("reach")
    transitions = to_transitions(
        data, ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space)
    )
    assert len(transitions.reward) == data.num_steps
