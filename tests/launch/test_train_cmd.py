"""`handrail train` end to end on tiny configs: errors, run folder, eval of the run, resume."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from handrail.launch import eval_cmd, train_cmd
from handrail.launch.eval_cmd import EvalConfig
from handrail.launch.train_config import TrainConfig

TINY = {"hidden_dims": (32, 32), "batch_size": 32, "warmup_steps": 100, "eval_episodes": 1}


def test_discrete_action_env_is_a_clear_error(tmp_path: Path) -> None:
    config = TrainConfig(task="CartPole-v1", steps=10, run_dir=tmp_path / "run", progress=False)
    with pytest.raises(TypeError, match=r"CartPole-v1.*continuous Box action space.*Discrete"):
        train_cmd.train(config)
    assert not (tmp_path / "run").exists()


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
    assert eval_cmd.evaluate(EvalConfig(path=tiny_run, episodes=2)) == 0
    out = capsys.readouterr().out
    assert "2 episodes: return" in out and "length 50.0" in out
    latest = tiny_run / "checkpoints" / "latest"
    assert eval_cmd.evaluate(EvalConfig(path=latest, episodes=1)) == 0
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


def test_split_out_names_stay_importable_from_train_cmd() -> None:
    """Code written against the single-module train_cmd keeps working after the split."""
    from handrail.launch import envs, train_config, train_demos

    homes = {
        envs: ("HANDRAIL_TASKS", "check_spaces", "make_env"),
        eval_cmd: ("EvalConfig", "evaluate", "locate_checkpoint"),
        train_config: ("GENERIC_PRESET", "PRESETS", "ResolvedConfig", "TaskPreset",
                       "TrainConfig", "default_run_dir", "parse_demos", "resolve"),
        train_demos: ("expert_episodes", "load_demos"),
    }  # fmt: skip
    moved = {name for names in homes.values() for name in names}
    assert set(train_cmd.__all__) == moved | {"train"}  # the old module's public names
    for home, names in homes.items():
        for name in names:
            assert getattr(train_cmd, name) is getattr(home, name), name
