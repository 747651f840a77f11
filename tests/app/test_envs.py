"""Task resolution: handrail tasks, gymnasium ids and module:EnvId, with clear errors."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from handrail.app.envs import check_tasks, make_env, parse_env_kwargs
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


def test_env_kwargs_of_a_handrail_task_are_parsed_by_the_fields_type() -> None:
    """Read as Python literals, `terminate_on_success=false` was the (truthy) string 'false',
    `=maybe` was accepted and `episode_steps=1.5` made 2-step episodes."""
    parsed = parse_env_kwargs(("terminate_on_success=false", "reward=Dense", "home_noise_rad=0",
                               "cameras=front,wrist", "hole_low_m=(0.1, 0.2)"), "peg_insert")  # fmt: skip
    assert parsed == {"terminate_on_success": False, "reward": "dense", "home_noise_rad": 0.0,
                      "cameras": ("front", "wrist"), "hole_low_m": (0.1, 0.2)}  # fmt: skip
    assert type(parsed["home_noise_rad"]) is float
    for text, value in (("No", False), ("1", True), ("YES", True), ("0", False)):
        assert parse_env_kwargs((f"terminate_on_success={text}",), "reach") == {
            "terminate_on_success": value}  # fmt: skip
    assert parse_env_kwargs(("cameras=()", "episode_steps=80"), "reach") == {
        "cameras": (), "episode_steps": 80}  # fmt: skip


@pytest.mark.parametrize(
    ("item", "match"),
    [("terminate_on_success=maybe", "terminate_on_success takes a bool .*got 'maybe'"),
     ("episode_steps=1.5", r"episode_steps takes an integer \(int\), got '1\.5'"),
     ("episode_steps=abc", r"episode_steps takes an integer \(int\), got 'abc'"),
     ("reward=shaped", "reward takes one of sparse, dense, got 'shaped'"),
     ("render_size_px=1", "render_size_px takes a tuple of 2 items, each an integer"),
     ("goal_low_m=(0.1, 0.2)", "goal_low_m takes a tuple of 3 items, each a number"),
     ("epsiode_steps=3", "reach has no setting 'epsiode_steps'; did you mean episode_steps\\? "
                         "reach's settings are control_dt_s, .*success_tolerance_m"),
     ("action=1", "'action' is reach's nested ActionConfig")],
)  # fmt: skip
def test_a_bad_env_kwarg_names_the_key_the_type_and_the_value(item: str, match: str) -> None:
    with pytest.raises(ValueError, match=f"^--env-kwargs {re.escape(item)}: {match}"):
        parse_env_kwargs((item,), "reach")


def test_a_bad_env_kwarg_is_one_line_before_anything_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    argv = ["train", "--task", "pick_cube", "--env-kwargs", "episode_steps=abc",
            "--run-dir", str(run)]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["handrail train: error: --env-kwargs episode_steps=abc: episode_steps takes "
                   "an integer (int), got 'abc'"]  # fmt: skip
    assert not run.exists()


def test_env_kwargs_of_a_gymnasium_id_go_to_gymnasium_make() -> None:
    """The README promised gymnasium.make's keyword arguments; every one was refused."""
    from handrail.launch.commands.train import parse_args

    config = parse_args(["--task", "Pendulum-v1", "--env-kwargs", "g=9.0", "max_episode_steps=7"])
    assert config.env == {"g": 9.0, "max_episode_steps": 7}
    env = make_env(config.task, **config.env)
    assert env.unwrapped.g == 9.0 and env.spec is not None and env.spec.max_episode_steps == 7
    env.close()
    with pytest.raises(ValueError, match=r"^--env-kwargs foo=1: Pendulum-v1 takes no keyword "
                                         r"argument 'foo'; it takes g \(its own\) and "
                                         r"max_episode_steps"):  # fmt: skip
        make_env("Pendulum-v1", foo=1)


class _LeRobotStyle(gym.Env):
    """Observations as LeRobot-style envs give them: a ``pixels`` Dict of cameras beside the
    state."""

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Dict({
            "pixels": gym.spaces.Dict({"top": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)}),
            "agent_pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        })  # fmt: skip
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: np.ndarray) -> tuple:
        return self.observation_space.sample(), 0.0, False, False, {}


gym.register("HandrailNestedObs-v0", entry_point=_LeRobotStyle)


def test_a_nested_dict_observation_is_seen_flat_with_joined_keys() -> None:
    from handrail.learners.specs import ObsSpec

    env = make_env("HandrailNestedObs-v0")
    assert sorted(env.observation_space.spaces) == ["agent_pos", "pixels.top"]
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"pixels.top", "agent_pos"} and obs["pixels.top"].shape == (8, 8, 3)
    assert env.observation_space.contains(obs)
    step_obs = env.step(env.action_space.sample())[0]
    assert env.observation_space.contains(step_obs)
    spec = ObsSpec.from_space(env.observation_space, ignore=["pixels.top"])
    assert spec.keys == ("agent_pos",)
    with pytest.raises(TypeError, match=r"--ignore-obs-keys pixels\.top"):
        ObsSpec.from_space(env.observation_space)
    # --pixels reads the nested camera end to end; the replay's fields join back to the flat obs
    pixels = ObsSpec.from_space(env.observation_space, images=True)
    assert pixels.images == ("pixels.top",)
    fields = pixels.split(obs)
    assert fields["pixels.top"].dtype == np.uint8 and fields["obs"].shape == (2,)
    np.testing.assert_array_equal(pixels.join(fields), pixels.flatten(obs))
