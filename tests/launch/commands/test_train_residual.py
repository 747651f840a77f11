"""`handrail train --residual-on BASE` end to end: every base kind loads, the untrained residual
acts exactly as its base, the base never changes, `handrail eval` shows base and base + residual
side by side, and bad base specs are one-line errors that create nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from handrail.app import training
from handrail.app.bases import make_base
from handrail.app.config import preset
from handrail.app.envs import make_env
from handrail.control.base_policy import BASE_ACTION_KEY
from handrail.launch import cli
from handrail.launch.commands import train as train_cmd
from handrail.learners.agents.residual import ResidualObservation
from handrail.learners.agents.sac import SAC, SACConfig
from handrail.learners.specs import ActionSpec, ObsSpec


def toward_goal(obs: Any) -> np.ndarray:
    """A module-level callable base for ``module:attr`` (reach: move towards the goal)."""
    return np.clip(np.r_[obs["goal_from_tcp_dm"] * 2.0, -1.0], -1, 1).astype(np.float32)


def away_from_goal(obs: Any) -> np.ndarray:
    """A base that never reaches (reach: away from the goal), for failed episodes."""
    return -toward_goal(obs)


def residual_config(run_dir: Path, base: str, **overrides: Any) -> Any:
    sac = {"hidden_dims": (32, 32), "batch_size": 32, "utd": 1, "actor_delay_blocks": 5}
    return preset("reach", residual_on=base, sac=sac,
                  loop={"warmup_steps": 40}, steps=80, eval_every=80, eval_episodes=2,
                  run_dir=run_dir, progress=False, **overrides)  # fmt: skip


@pytest.fixture(scope="module")
def residual_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "residual"
    assert train_cmd.train(residual_config(run_dir, "expert")) == 0
    return run_dir


@pytest.fixture(scope="module")
def sb3_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stable_baselines3 import SAC as SB3SAC

    env = make_env("reach")
    model = SB3SAC("MultiInputPolicy", env, policy_kwargs={"net_arch": [16]}, device="cpu")
    path = tmp_path_factory.mktemp("sb3") / "model.zip"
    model.save(path)
    return path


@pytest.fixture(scope="module")
def bc_run(tmp_path_factory: pytest.TempPathFactory, recorded: Path) -> Path:
    run = tmp_path_factory.mktemp("bc") / "bc"
    argv = ["bc", "--demos", str(recorded), "--run-dir", str(run), "--no-progress",
            "--eval-episodes", "0", "--bc.steps", "100", "--bc.horizon", "4", "--bc.execute", "2"]  # fmt: skip
    assert cli.main(argv) == 0
    return run


def test_every_base_kind_is_its_own_action_under_a_fresh_residual(
    residual_run: Path, sb3_zip: Path, bc_run: Path
) -> None:
    specs = ["expert", f"{__name__}:toward_goal", f"sb3:{sb3_zip}", f"run:{residual_run}",
             f"bc:{bc_run}"]  # fmt: skip
    for spec in specs:
        env = make_env("reach")
        wrapped = ResidualObservation(env, make_base(spec, "reach", env))
        sac = SAC(ObsSpec.from_space(wrapped.observation_space),
                  ActionSpec.from_space(wrapped.action_space),
                  SACConfig(hidden_dims=(16,), num_critics=2, residual_scale=0.1))  # fmt: skip
        params = sac.init(jax.random.PRNGKey(0)).actor_params
        obs, _ = wrapped.reset(seed=0)
        for _ in range(5):
            flat = sac.obs_spec.flatten(obs)
            action = np.asarray(sac.mode_fn(params, jnp.asarray(flat)))
            np.testing.assert_array_equal(action, obs[BASE_ACTION_KEY], err_msg=spec)
            obs, *_ = wrapped.step(sac.action_spec.to_env(action))


def test_a_residual_run_as_a_base_brings_its_own_base(residual_run: Path) -> None:
    """run:PATH of a residual run = that run's policy on top of its expert."""
    from handrail.app.runs import run_env
    from handrail.learners.policies import load_run_policy

    run = load_run_policy(residual_run)
    assert run.residual_on == "expert"
    direct = run_env(run)
    env = make_env("reach")
    stacked = make_base(f"run:{residual_run}", "reach", env)
    obs, _ = direct.reset(seed=3)
    raw, _ = env.reset(seed=3)
    stacked.reset(seed=3)
    for _ in range(10):
        expected = run.policy(obs)
        np.testing.assert_allclose(stacked(raw), expected, atol=1e-6)
        obs, *_ = direct.step(expected)
        raw, *_ = env.step(expected)


def test_the_run_folder_records_the_base_and_eval_reports_both(
    residual_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = json.loads((residual_run / "config.json").read_text())
    assert config["residual_on"] == "expert" and config["sac"]["residual_scale"] == 0.1
    assert cli.main(["eval", str(residual_run), "--episodes", "3", "--checkpoint", "latest"]) == 0
    out = capsys.readouterr().out
    assert "base expert alone: 3 episodes: success" in out and "base + residual" in out


def test_the_base_alone_is_measured_first_and_kept_as_best_until_matched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before its first step a residual run evaluates its untrained policy, which is exactly
    the base alone (the same returns as the base on the same evaluation episodes), saves it as
    ``best`` and compares every evaluation with it at the end."""
    from handrail.learners.agents.residual import base_only
    from handrail.learners.evaluation import EVAL_SEED_OFFSET, evaluate, run_seed

    run_dir = tmp_path / "run"
    base = f"{__name__}:toward_goal"
    assert train_cmd.train(residual_config(run_dir, base, seed=3)) == 0
    err = capsys.readouterr().err
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    [baseline] = [r for r in metrics if r["kind"] == "baseline"]
    assert baseline["env_steps"] == 0 and baseline["policy"] == "the base alone"
    env = make_env("reach", **preset("reach").env)  # the evaluation env of the run
    env = ResidualObservation(env, make_base(base, "reach", env))
    alone = evaluate(env, base_only(ActionSpec.from_space(env.action_space)), 2,
                     run_seed(3, EVAL_SEED_OFFSET))  # fmt: skip
    assert baseline["mean_return"] == pytest.approx(alone.mean_return, rel=1e-6)
    assert baseline["success_rate"] == alone.success_rate
    assert baseline["mean_length"] == alone.mean_length
    assert f"the base alone: {alone.success_rate:.0%} on the 2 evaluation episodes" in err
    assert f"against the base alone's {alone.success_rate:.0%} on the same 2 episodes" in err
    assert "checkpoints/best holds" in err and (run_dir / "checkpoints" / "best").is_dir()


def test_eval_says_when_best_is_the_base_alone(
    tmp_path: Path, residual_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A residual run's ``best`` saved before the first step (no evaluation matched the base)
    is the base alone, and ``handrail eval`` says so; a best saved later is not."""
    import shutil

    assert cli.main(["eval", str(residual_run), "--episodes", "1"]) == 0
    assert "saved before the first step" not in capsys.readouterr().out
    copy = tmp_path / "unmatched"
    shutil.copytree(residual_run, copy)
    meta_path = copy / "checkpoints" / "best" / "config.json"
    meta = json.loads(meta_path.read_text())
    assert meta["extra"]["env_steps"] > 0
    meta["extra"]["env_steps"] = 0  # as the monitor saves the base alone
    meta_path.write_text(json.dumps(meta))
    assert cli.main(["eval", str(copy), "--episodes", "1"]) == 0
    assert "(best was saved before the first step: it is the base alone)" in capsys.readouterr().out


def test_eval_failures_lists_every_failed_seed_and_records_the_first(
    tmp_path: Path, residual_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``handrail eval --failures N``: the seeds of every failed episode, of the base alone and
    of base + residual, and a video of each of the first N, named by its seed."""
    import shutil

    import imageio.v2 as imageio

    run_dir = tmp_path / "run"  # the trained run, around a base that never reaches
    shutil.copytree(residual_run, run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    config["residual_on"] = f"{__name__}:away_from_goal"
    (run_dir / "config.json").write_text(json.dumps(config))
    argv = ["eval", str(run_dir), "--episodes", "3", "--seed", "40", "--failures", "2"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("failed: 3 of 3 (episode seeds: 40, 41, 42)") == 2, out
    # reach names where the tool stopped: away from the goal, 3 tolerances off or more
    assert out.count("how the 3 failed episodes ended: stopped far from the goal 3") == 2, out
    videos = run_dir / "videos"
    names = sorted(p.name for p in videos.glob("*failed*.mp4"))
    assert names == ["base_alone_failed_seed40.mp4", "base_alone_failed_seed41.mp4",
                     "eval_best_failed_seed40.mp4", "eval_best_failed_seed41.mp4"]  # fmt: skip
    length = int(float(out.split("length ")[-1].split()[0]))
    for name in names:
        assert f"video: {videos / name}" in out
        with imageio.get_reader(videos / name) as mp4:
            assert mp4.count_frames() == length + 1  # the reset's frame and one per step
    # a run whose episodes all succeed: no failed seed, no video
    assert cli.main(["eval", str(residual_run), "--episodes", "2", "--failures", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("failed: 0 of 2 (episode seeds: none)") == 2, out
    assert "how the" not in out
    assert not list((residual_run / "videos").glob("*failed*"))
    assert cli.main(["eval", str(residual_run), "--failures", "-1"]) == 2  # one line, no run
    assert "failures must be >= 0" in capsys.readouterr().err


def test_the_base_never_changes_during_training(tmp_path: Path, residual_run: Path) -> None:
    """A handrail run as the base: its checkpoint files are byte-identical after training."""
    ckpt = residual_run / "checkpoints" / "latest" / "learner" / "state.msgpack"
    before = ckpt.read_bytes()
    cfg = residual_config(tmp_path / "stacked", f"run:{residual_run}")
    assert train_cmd.train(cfg) == 0
    assert ckpt.read_bytes() == before


def test_residual_preset_and_demos_relabelled(tmp_path: Path, recorded: Path) -> None:
    """--residual-on starts from the residual preset; recorded demos get the base's action."""
    cfg = train_cmd.parse_args(["--task", "reach", "--residual-on", "expert"])
    assert cfg.sac.residual_scale == 0.1 and cfg.sac.actor_delay_blocks > 0
    run_dir = tmp_path / "with_demos"
    assert train_cmd.train(residual_config(run_dir, "expert", demos=recorded)) == 0
    assert (run_dir / "checkpoints" / "latest").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--residual-on", "bc:/no/such/folder"], "does not exist"),
        (["--residual-on", "nonsense"], "expected one of expert"),
        (["--residual-on", "handrail_no_such_module:policy"], "cannot import"),
        (["--residual-on", "expert", "--sac.residual-scale", "0"], "residual-scale > 0"),
        (["--task", "Pendulum-v1", "--residual-on", "expert"], "needs a handrail task"),
        (["--sac.residual-q-filter", "deploy"], "needs a base policy to fall back on"),
    ],
)
def test_bad_base_specs_are_one_line_errors_that_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    run_dir = tmp_path / "run"
    task = [] if "--task" in args else ["--task", "reach"]
    argv = ["train", *task, "--steps", "10", "--run-dir", str(run_dir), *args]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not run_dir.exists()


def test_a_resumed_run_continues_the_progressive_schedule(tmp_path: Path) -> None:
    import gymnasium as gym

    env = make_env("reach")
    inner = ResidualObservation(env, make_base("expert", "reach", env), enable_steps=1000)
    outer = gym.wrappers.RecordEpisodeStatistics(inner)
    training._resume_wrappers(outer, 640)
    assert inner.steps == 640
    cfg = residual_config(tmp_path / "run", "expert", residual_enable_steps=1000)
    assert train_cmd.train(cfg) == 0
    resumed = cli.main(["train", "--resume", str(tmp_path / "run"), "--steps", "120",
                        "--no-progress"])  # fmt: skip
    assert resumed == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["residual_enable_steps"] == 1000 and config["steps"] == 120
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert metrics.count('"kind": "baseline"') == 1  # measured once, before the first step


def test_a_run_says_how_its_evaluations_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every evaluation record counts how its failed episodes ended, the closing lines say it
    for the last one, and the learning curve gains a row that stacks them."""
    import imageio.v2 as imageio

    run_dir = tmp_path / "run"
    assert train_cmd.train(residual_config(run_dir, f"{__name__}:away_from_goal")) == 0
    err = capsys.readouterr().err
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] in ("baseline", "eval")]
    assert len(evals) == 2 and all(r["success_rate"] == 0.0 for r in evals)  # it never reaches
    assert all(r["failed_outcomes"] == {"stopped far from the goal": 2} for r in evals)
    assert "handrail train: how its failed episodes ended: stopped far from the goal 2" in err
    height = imageio.imread(run_dir / "learning_curve.png").shape[0]
    assert height == 3 * 3.25 * 80  # three rows of 3.25 inches at 80 dpi: the failures' row
