"""`handrail train` end to end on tiny configs: inputs checked before anything is created, the
run folder, eval of the run, resume, recording, the asynchronous mode."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from handrail.app.config import preset
from handrail.launch import cli
from handrail.launch.commands import evaluate as eval_cmd
from handrail.launch.commands import train as train_cmd
from handrail.launch.commands.evaluate import EvalConfig

gym.register(
    "HandrailTinyPendulum-v0",
    entry_point="gymnasium.envs.classic_control:PendulumEnv",
    max_episode_steps=50,
)


def tiny_config(run_dir: Path, **overrides: object):
    sac = {"hidden_dims": (32, 32), "batch_size": 32, **overrides.pop("sac", {})}  # type: ignore[dict-item]
    loop = {"warmup_steps": 50, **overrides.pop("loop", {})}  # type: ignore[dict-item]
    base = dict(steps=100, eval_every=100, eval_episodes=1, run_dir=run_dir, progress=False)
    task = str(overrides.pop("task", "HandrailTinyPendulum-v0"))
    return preset(task, sac=sac, loop=loop, **{**base, **overrides})


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "tiny"
    assert train_cmd.train(tiny_config(run_dir)) == 0
    return run_dir


def test_run_folder_contents(tiny_run: Path) -> None:
    config = json.loads((tiny_run / "config.json").read_text())
    assert config["task"] == "HandrailTinyPendulum-v0" and config["sac"]["hidden_dims"] == [32, 32]
    records = [json.loads(x) for x in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    episodes = [r for r in records if r["kind"] == "episode"]
    assert [r["env_steps"] for r in episodes] == [50, 100]
    assert all(r["length"] == 50 for r in episodes)
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["env_steps"] for r in evals] == [100] and evals[0]["success_rate"] is None
    assert (tiny_run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    latest = tiny_run / "checkpoints" / "latest"
    assert latest.is_symlink() and (latest / "learner" / "state.msgpack").is_file()
    assert {p.name for p in latest.iterdir()} == {"learner", "replay.npz", "trainer.json"}
    assert (tiny_run / "checkpoints" / "best" / "state.msgpack").is_file()
    hidden = [p.name for p in (tiny_run / "checkpoints").iterdir() if p.name.startswith(".")]
    assert len(hidden) == 2  # one generation behind each link, older ones removed


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
    run_dir = tmp_path / "resumed"
    shutil.copytree(tiny_run, run_dir, symlinks=True)
    args = ["train", "--resume", str(run_dir), "--steps", "200", "--no-progress"]
    assert cli.main(args) == 0
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records if r["kind"] == "episode"] == [50, 100, 150, 200]
    assert [r["env_steps"] for r in records if r["kind"] == "eval"] == [100, 200]
    counters = json.loads((run_dir / "checkpoints/latest/trainer.json").read_text())
    assert counters["actor"]["env_steps"] == 200 and counters["actor"]["episodes"] == 4


def test_resume_after_a_crash_logs_each_step_once(tiny_run: Path, tmp_path: Path) -> None:
    """A session that crashed after its last checkpoint logged steps that resume takes again."""
    run_dir = tmp_path / "crashed"
    shutil.copytree(tiny_run, run_dir, symlinks=True)
    with open(run_dir / "metrics.jsonl", "a") as f:  # what the crashed session wrote past 100
        f.write(json.dumps({"kind": "episode", "env_steps": 150, "wall_time_s": 1e6}) + "\n")
        f.write(json.dumps({"kind": "train", "env_steps": 120, "wall_time_s": 1e6}) + "\n")
    assert cli.main(["train", "--resume", str(run_dir), "--steps", "200", "--no-progress"]) == 0
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records if r["kind"] == "episode"] == [50, 100, 150, 200]
    assert all(r["wall_time_s"] < 1e6 for r in records)  # the lost session's clock is gone too


def test_a_budget_that_ends_mid_episode_finishes_the_episode(tmp_path: Path) -> None:
    """Checkpoints and the final evaluation happen between episodes, so the run ends on one."""
    run_dir = tmp_path / "run"
    assert train_cmd.train(tiny_config(run_dir, steps=120, eval_every=1000)) == 0
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records if r["kind"] == "episode"] == [50, 100, 150]
    assert [r["env_steps"] for r in records if r["kind"] == "eval"] == [150]
    counters = json.loads((run_dir / "checkpoints/latest/trainer.json").read_text())
    assert counters["actor"]["env_steps"] == 150


def _one_line_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    assert cli.main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_a_peer_run_says_which_settings_its_sac_runs_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiny_config(tmp_path / "run", learner="sb3", sac={"critic_layer_norm": True})
    assert train_cmd.train(cfg) == 0
    err = capsys.readouterr().err
    assert "--learner sb3 cannot follow every setting" in err and "--sac.critic-layer-norm" in err
    assert "--loop.offline-ratio" not in err  # no demos: nothing to oversample


def test_discrete_action_env_is_one_line_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    line = _one_line_error(capsys, ["train", "--task", "CartPole-v1", "--run-dir", str(run)])
    assert "CartPole-v1" in line and "continuous Box action space" in line
    assert not run.exists()


def test_camera_key_is_named_with_the_fix_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    line = _one_line_error(capsys, ["train", "--task", "reach", "--run-dir", str(run),
                                    "--env-kwargs", "cameras=('front',)", "image_size=16"])  # fmt: skip
    assert "'front'" in line and "--ignore-obs-keys front" in line
    assert not run.exists()


def test_demo_store_of_another_task_is_one_line_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail.demos import FieldSpec, create_store

    store = tmp_path / "demos.zarr"
    with create_store(store, kind="demo", obs_fields=[FieldSpec("proprio", "float32", (7,))],
                      action_dim=1, control_dt_s=0.05, task="other") as writer:  # fmt: skip
        writer.begin_episode(seed=0)
        writer.add_step(obs={"proprio": np.zeros(7, np.float32)}, action=np.zeros(1, np.float32),
                        reward=0.0, terminated=True, truncated=False)  # fmt: skip
        writer.end_episode(final_obs={"proprio": np.zeros(7, np.float32)}, success=True)
    run = tmp_path / "run"
    line = _one_line_error(capsys, ["train", "--task", "HandrailTinyPendulum-v0", "--demos",
                                    str(store), "--run-dir", str(run)])  # fmt: skip
    assert f"--demos {store}" in line and "lacks observation field(s) ['obs']" in line
    assert not run.exists()
    line = _one_line_error(capsys, ["train", "--task", "reach", "--demos",
                                    str(tmp_path / "missing"), "--run-dir", str(run)])  # fmt: skip
    assert "--demos" in line and not run.exists()


def test_record_writes_every_training_episode_and_async_mode_trains(tmp_path: Path) -> None:
    from handrail.demos import open_store

    store = tmp_path / "rollouts"
    config = tiny_config(tmp_path / "run", record=store, loop={"mode": "async"})
    assert train_cmd.train(config) == 0
    data = open_store(store).load()
    assert data.num_episodes == 2 and data.num_steps == 100
    assert np.all(np.abs(data.action) <= 2.0)  # Pendulum's env units
    records = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "eval" for r in records)
    counters = json.loads((tmp_path / "run/checkpoints/latest/trainer.json").read_text())
    assert counters["learner"]["steps"] == 100 and counters["learner"]["version"] > 0


def test_print_config_prints_every_setting_and_its_layer_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a default run folder (runs/...) would go
    assert cli.main(["train", "--task", "pick_cube", "--sac.utd", "3", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("preset: task pick_cube\n")
    assert re.search(r"^  sac\.utd +3 +command line$", out, re.M)
    assert re.search(r"^  sac\.actor_utd +0 +task:pick_cube$", out, re.M)
    assert re.search(r"^  sac\.num_critics +2 +cpu$", out, re.M)
    assert list(tmp_path.iterdir()) == []
    assert "--print-config" in _help(capsys)


def _help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    return capsys.readouterr().out


def test_the_run_folder_keeps_which_layer_set_each_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    argv = ["train", "--task", "HandrailTinyPendulum-v0", "--steps", "100", "--eval-every", "100",
            "--eval-episodes", "1", "--run-dir", str(run), "--no-progress", "--sac.hidden-dims",
            "32", "32", "--sac.batch-size", "32", "--loop.warmup-steps", "50", "--seed", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    assert "handrail train: preset: generic (no preset for HandrailTinyPendulum-v0;" in (
        capsys.readouterr().err)  # fmt: skip
    saved = json.loads((run / "settings.json").read_text())
    assert saved["preset"] == (
        "generic (no preset for HandrailTinyPendulum-v0; neither --demos nor --success-key)"
    )
    settings = saved["settings"]
    assert settings["seed"] == {"value": 0, "layer": "command line"}  # named, though the default
    assert settings["sac.hidden_dims"] == {"value": [32, 32], "layer": "command line"}
    assert settings["sac.utd"] == {"value": 1, "layer": "generic"}
    assert settings["sac.num_critics"] == {"value": 2, "layer": "cpu"}
    config = json.loads((run / "config.json").read_text())
    assert {path: s["value"] for path, s in settings.items() if path.startswith("sac.")} == {
        f"sac.{k}": v for k, v in config["sac"].items()}  # fmt: skip
    assert cli.main(["train", "--resume", str(run), "--steps", "150", "--no-progress"]) == 0
    resumed = json.loads((run / "settings.json").read_text())["settings"]
    assert resumed["steps"] == {"value": 150, "layer": "command line"}
    assert resumed["seed"] == settings["seed"] and resumed["sac.utd"] == settings["sac.utd"]
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run), "--print-config"]) == 0  # the run's own
    table = capsys.readouterr().out
    assert re.search(r"^  sac\.hidden_dims +\(32, 32\) +command line$", table, re.M)
    assert re.search(r"^  steps +150 +command line$", table, re.M)


class _WithSensor(gym.ObservationWrapper):
    """The tiny pendulum with a second key: a sensor that never moves, or gives nan."""

    def __init__(self, value: float) -> None:
        super().__init__(gym.make("HandrailTinyPendulum-v0"))
        self.value = value
        self.observation_space = gym.spaces.Dict({
            "state": self.env.observation_space,
            "sensor": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        })  # fmt: skip

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"state": observation, "sensor": np.array([self.value, 1.0], np.float32)}


gym.register("HandrailConstantSensor-v0", entry_point=lambda render_mode=None: _WithSensor(3.0))
gym.register("HandrailNanSensor-v0",
             entry_point=lambda render_mode=None: _WithSensor(float("nan")))  # fmt: skip


@pytest.mark.parametrize(("task", "expected"), [
    ("HandrailConstantSensor-v0", r"observation key 'sensor' is constant over the 5\d rows"),
    ("HandrailNanSensor-v0", r"observation key 'sensor' has non-finite values \(nan or inf\) in "
                             r"column 0 of the 5\d rows"),
])  # fmt: skip
def test_a_key_the_normalisation_cannot_use_ends_the_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task: str, expected: str
) -> None:
    line = _one_line_error(capsys, ["train", "--task", task, "--steps", "100", "--eval-every",
                                    "100", "--eval-episodes", "1", "--no-progress", "--run-dir",
                                    str(tmp_path / "run"), "--sac.hidden-dims", "32", "32",
                                    "--loop.warmup-steps", "50", "--loop.normalize-obs"])  # fmt: skip
    assert re.search(expected, line) and "--ignore-obs-keys sensor" in line
    assert (tmp_path / "run" / "checkpoints" / "latest").is_dir()  # the run can be continued


gym.register("HandrailScaledSensor-v0",
             entry_point=lambda render_mode=None: _Scaled())  # fmt: skip


class _Scaled(gym.ObservationWrapper):
    """The tiny pendulum with its state beside an encoder in the hundreds."""

    def __init__(self) -> None:
        super().__init__(gym.make("HandrailTinyPendulum-v0"))
        self.observation_space = gym.spaces.Dict({
            "state": self.env.observation_space,
            "ticks": gym.spaces.Box(-np.inf, np.inf, (1,), np.float32),
        })  # fmt: skip

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"state": observation, "ticks": np.array([400.0 + 300.0 * observation[2]],
                                                        np.float32)}  # fmt: skip


def test_eval_and_a_run_base_act_through_the_runs_normalisation(tmp_path: Path) -> None:
    import jax

    from handrail.app.bases import make_base
    from handrail.learners import obs_norm
    from handrail.learners.checkpoint import load_checkpoint, sac_from_checkpoint
    from handrail.learners.policies import load_run_policy

    run = tmp_path / "run"
    config = tiny_config(run, task="HandrailScaledSensor-v0", loop={"normalize_obs": True})
    assert train_cmd.train(config) == 0
    ckpt = run / "checkpoints" / "best"
    sac = sac_from_checkpoint(ckpt)
    state, _ = load_checkpoint(ckpt, sac)
    norm = jax.device_get(state.obs_norm)
    assert not obs_norm.is_identity(norm) and float(norm["scale"][-1]) > 10  # the ticks' scale
    env = gym.make("HandrailScaledSensor-v0")
    obs, _ = env.reset(seed=3)
    expected = sac.action_spec.to_env(
        sac.act(state, sac.obs_spec.flatten(obs), jax.random.PRNGKey(0), deterministic=True)
    )
    np.testing.assert_array_equal(load_run_policy(run).policy(obs), expected)  # handrail eval
    base = make_base(f"run:{run}", "HandrailScaledSensor-v0", env)  # a residual's base
    base.reset()
    np.testing.assert_array_equal(base(obs), expected)
