"""`handrail bc` end to end: 20 scripted demos of reach -> a run folder with the loss curve, a
checkpoint usable as a residual base, and the stated success; bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handrail.launch import cli

REACH_SUCCESS = 0.9
"""What `handrail bc` reaches on reach from 20 demos with its defaults: reach's preset, the
goal from the gripper alone. Measured: 100% of 50 episodes with --seed 0, 1 and 2, on these
demos and on another 20. On every key (BCConfig's defaults alone) 24% and 28% with --seed 0
and 1: reach's demos are ~10 steps, so 20 of them are ~200 samples."""


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bc") / "reach"
    argv = ["record", "--task", "reach", "--episodes", "20", "--seed", "1000000", "--out", str(out)]
    assert cli.main(argv) == 0
    return out


def test_bc_on_reach_from_20_demos(
    reach_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "bc"
    argv = ["bc", "--demos", str(reach_demos), "--run-dir", str(run), "--no-progress"]
    assert cli.main(argv) == 0
    for name in ("config.json", "metrics.jsonl", "bc_loss.png", "eval.json"):
        assert (run / name).is_file(), name
    assert (run / "checkpoints" / "best" / "bc.msgpack").is_file()
    summary = json.loads((run / "eval.json").read_text())
    assert summary["val_episodes"] == 2 and summary["train_episodes"] == 18
    assert summary["eval"]["episodes"] == 50
    assert summary["eval"]["success_rate"] >= REACH_SUCCESS
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["kind"] == "bc" and r["val_loss"] is not None for r in records)
    # `handrail eval` takes the bc run as it takes a train run: on the episodes bc evaluated on
    # (its --seed + 10000) and its env settings (reach's dense reward), the same numbers
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--episodes", "50", "--seed", "10000"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    from handrail.learners.evaluation import EvalResult

    own = summary["eval"]
    expected = EvalResult(**{**own, "returns": (), "successes": ()}).summary()
    assert line == f"{run / 'checkpoints' / 'best'}: {expected}"


def test_the_checkpoint_is_a_residual_base(reach_demos: Path, tmp_path: Path) -> None:
    from handrail.app.bases import make_base
    from handrail.app.envs import make_env

    run = tmp_path / "bc"
    argv = ["bc", "--demos", str(reach_demos), "--run-dir", str(run), "--no-progress",
            "--eval-episodes", "0", "--bc.steps", "100", "--bc.horizon", "3"]  # fmt: skip
    assert cli.main(argv) == 0
    env = make_env("reach")
    base = make_base(f"bc:{run}", "reach", env)
    obs, _ = env.reset(seed=0)
    base.reset(seed=0)
    assert base(obs).shape == env.action_space.shape
    as_run = make_base(f"run:{run}", "reach", env)  # any handrail checkpoint, the BC policy too
    as_run.reset(seed=0)
    np.testing.assert_array_equal(as_run(obs), make_base(f"bc:{run}", "reach", env)(obs))


def test_ignored_keys_are_left_out_of_the_policy_but_not_of_the_observation(
    reach_demos: Path, tmp_path: Path
) -> None:
    from handrail.app.bases import make_base
    from handrail.app.envs import make_env

    run = tmp_path / "bc"
    argv = ["bc", "--demos", str(reach_demos), "--run-dir", str(run), "--no-progress",
            "--eval-episodes", "0", "--bc.steps", "50", "--ignore-obs-keys", "proprio", "goal"]  # fmt: skip
    assert cli.main(argv) == 0
    meta = json.loads((run / "checkpoints" / "best" / "bc.json").read_text())
    assert meta["obs_spec"]["keys"] == ["goal_from_tcp_dm"]
    assert json.loads((run / "config.json").read_text())["ignore_obs_keys"] == ["proprio", "goal"]
    env = make_env("reach")
    base = make_base(f"bc:{run}", "reach", env)
    obs, _ = env.reset(seed=0)
    base.reset(seed=0)
    action = base(obs)  # the env's full observation: the policy picks its keys out
    moved = dict(obs, proprio=obs["proprio"] + 1.0, goal=obs["goal"] + 1.0)
    np.testing.assert_array_equal(base(moved), action)  # the left-out keys change nothing


def test_acted_by_clones_only_the_steps_those_chose(
    reach_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rollout store with a person's corrections: `--acted-by human` keeps the person's steps
    (and the episodes holding one), and an expert store, where a script chose every step, says
    who chose them."""
    import dataclasses

    import handrail.demos
    from handrail.demos.episodes import iter_store_episodes, store_meta, write_store

    reader = handrail.demos.open_store(reach_demos)
    episodes = []
    for i, (_, ep) in enumerate(iter_store_episodes(reader)):
        who = np.zeros(ep.num_steps, np.int8)
        who[::2] = 1 if i % 2 == 0 else 0  # odd episodes: the policy alone
        episodes.append(dataclasses.replace(ep, intervention=who))
    mixed = tmp_path / "mixed"
    meta = dataclasses.replace(store_meta(reader), kind="intervention")
    write_store(mixed, meta, episodes)
    human = sum(int((ep.intervention == 1).sum()) for ep in episodes)
    run = tmp_path / "bc"
    argv = ["bc", "--demos", str(mixed), "--run-dir", str(run), "--no-progress",
            "--eval-episodes", "0", "--bc.steps", "100", "--acted-by", "human"]  # fmt: skip
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert f"10 episodes ({sum(ep.num_steps for ep in episodes[::2])} steps, {human} by human)" in (
        capsys.readouterr().err)  # fmt: skip
    config = json.loads((run / "config.json").read_text())
    assert config["acted_by"] == ["human"] and config["episodes"] == list(range(0, 20, 2))
    argv = ["bc", "--demos", str(reach_demos), "--run-dir", str(tmp_path / "none"),
            "--no-progress", "--acted-by", "human", "policy"]  # fmt: skip
    assert cli.main(argv) == 2
    steps = sum(ep.num_steps for ep in episodes)
    assert ("--acted-by human policy: none of its 20 successful episodes holds such a step "
            f"(their steps were chosen by: scripted {steps})") in capsys.readouterr().err  # fmt: skip
    assert not (tmp_path / "none").exists()


def test_labels_proposed_clones_the_action_proposed_not_the_one_executed(
    reach_demos: Path, tmp_path: Path
) -> None:
    """A store whose arm executed something else than proposed (``handrail record --noise``;
    here a constant): ``--labels proposed`` clones the expert's own actions, the default the
    executed ones."""
    import dataclasses

    import handrail.demos
    import handrail.sim
    from handrail.app.bases import make_base
    from handrail.app.envs import make_env
    from handrail.demos.episodes import iter_store_episodes, store_meta, write_store

    reader = handrail.demos.open_store(reach_demos)
    constant = np.array([0.5, -0.5, 0.5, 0.0], np.float32)
    episodes = [dataclasses.replace(ep, policy_action=ep.action,
                                    action=np.tile(constant, (ep.num_steps, 1)))
                for _, ep in iter_store_episodes(reader)]  # fmt: skip
    store = tmp_path / "noisy"
    write_store(store, store_meta(reader), episodes)
    env = make_env("reach")
    obs, _ = env.reset(seed=3)
    expert = handrail.sim.make_expert("reach", env)
    expert.reset(seed=3)
    wanted = np.asarray(expert(obs))
    acted = {}
    for labels in ("proposed", "executed"):
        run = tmp_path / labels
        argv = ["bc", "--demos", str(store), "--run-dir", str(run), "--no-progress",
                "--eval-episodes", "0", "--labels", labels]  # fmt: skip
        assert cli.main(argv) == 0
        assert json.loads((run / "config.json").read_text())["labels"] == labels
        base = make_base(f"bc:{run}", "reach", env)
        base.reset(seed=3)
        acted[labels] = base(obs)
    assert np.abs(acted["executed"] - constant).max() < 0.05
    assert np.abs(acted["proposed"] - wanted).max() < 0.3 < np.abs(wanted - constant).max()


def test_defaults_are_the_task_preset(reach_demos: Path, tmp_path: Path) -> None:
    """`handrail bc` starts from its task's preset as `handrail train` does (the store's task, or
    --task), then every option given: a user cloning pick_cube gets the measured recipe."""
    from handrail.launch.commands.bc import BCCommand, parse_args

    pick = tmp_path / "pick"
    assert cli.main(["record", "--task", "pick_cube", "--episodes", "1", "--out", str(pick)]) == 0
    cmd = parse_args(["--demos", str(pick)])
    assert cmd.ignore_obs_keys == ("object",)
    assert (cmd.bc.horizon, cmd.bc.temporal_ensemble, cmd.bc.val_fraction, cmd.bc.steps) == (
        8, True, 0.0, 2000)  # fmt: skip
    cmd = parse_args(["--demos", str(pick), "--bc.horizon", "4", "--ignore-obs-keys"])
    assert (cmd.bc.horizon, cmd.bc.temporal_ensemble, cmd.ignore_obs_keys) == (4, True, ())
    on_reach = BCCommand(demos=reach_demos, ignore_obs_keys=("proprio", "goal"))
    assert parse_args(["--demos", str(reach_demos)]) == on_reach  # reach's keys, no BC preset
    on_peg = parse_args(["--demos", str(reach_demos), "--task", "peg_insert"])
    assert on_peg.ignore_obs_keys == ("proprio", "peg", "hole") and on_peg.bc.horizon == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--demos", "/no/such/store"], "--demos /no/such/store"),
        (["--task", "pick_cube"], "lacks observation field"),
        (["--bc.horizon", "2", "--bc.execute", "3"], "execute"),
        (["--max-episodes", "0"], "--max-episodes"),
        (["--bc.seed", "3"], "--bc.seed 3 is set from --seed (0); pass --seed 3"),
        (
            ["--ignore-obs-keys", "goal", "cube"],
            "--ignore-obs-keys goal cube: ObsSpec: cannot ignore",
        ),
    ],
)
def test_bad_input_is_one_line(
    reach_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
    message: str,
) -> None:  # fmt: skip
    demos = [] if "--demos" in args else ["--demos", str(reach_demos)]
    argv = ["bc", *demos, "--run-dir", str(tmp_path / "r"), "--no-progress", *args]
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # option checks fail while tyro parses: same code and line
        code = exit_.code  # type: ignore[assignment]
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_demo_store_holding_nan_is_one_line_before_the_run_folder(
    nan_demo_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bc", "--demos", str(nan_demo_store), "--run-dir", str(tmp_path / "r"), "--no-progress"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "episode 1: action is nan at step 2" in err and "--episodes 0" in err
    assert not (tmp_path / "r").exists()


def test_an_existing_run_dir_is_refused_and_left_as_it_was(
    reach_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bc run never writes into another run's folder (it replaced its config and checkpoint)."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text('{"task": "reach"}')
    argv = ["bc", "--demos", str(reach_demos), "--run-dir", str(run), "--no-progress"]
    assert cli.main(argv) == 2
    assert f"--run-dir {run} already exists" in capsys.readouterr().err
    assert [p.name for p in run.iterdir()] == ["config.json"]
    assert (run / "config.json").read_text() == '{"task": "reach"}'
