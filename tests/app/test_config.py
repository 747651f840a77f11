"""`handrail train` config: presets, nested overrides from the command line, env kwargs,
validation, JSON round trip, what --resume may change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handrail.app.config import TrainConfig, check_task_options, parse_env_kwargs, preset
from handrail.app.envs import HANDRAIL_TASKS
from handrail.app.presets import TASK_PRESETS
from handrail.app.training import resolve_run
from handrail.launch.commands.train import parse_args
from handrail.learners.agents.sac import SACConfig
from handrail.sim.simulated_human import SimulatedHumanConfig


def test_command_line_starts_from_the_task_preset_and_overrides_nested_fields() -> None:
    cfg = parse_args(["--task", "push", "--seed", "7", "--sac.utd", "3", "--sac.actor-lr",
                      "1e-4", "--loop.offline-ratio", "0.25", "--env-kwargs", "reward=dense"])  # fmt: skip
    base = preset("push")
    assert (cfg.seed, cfg.sac.utd, cfg.sac.actor_lr, cfg.loop.offline_ratio) == (7, 3, 1e-4, 0.25)
    assert cfg.steps == base.steps and cfg.sac.n_step == base.sac.n_step
    assert cfg.sac.gamma == base.sac.gamma  # untouched fields keep the preset's value
    assert cfg.env["reward"] == "dense"
    generic = parse_args(["--task=Pendulum-v1"])
    assert generic.sac.hidden_dims != base.sac.hidden_dims or generic.sac.utd != base.sac.utd


def test_peg_insert_trains_with_a_patient_simulated_person_that_options_still_change() -> None:
    default = SimulatedHumanConfig()
    peg = parse_args(["--task", "peg_insert", "--human", "simulated"]).hil.simulated
    assert (peg.stall_from, peg.judge_direction_below) == ("first-gain", 0.75)
    assert (default.stall_from, default.judge_direction_below) != ("first-gain", 0.75)
    assert peg.budget_steps == default.budget_steps  # the rest is the default person
    assert parse_args(["--task", "pick_cube"]).hil.simulated == default
    eager = parse_args(["--task", "peg_insert", "--hil.simulated.stall-from", "start"])
    assert eager.hil.simulated.stall_from == "start"
    assert eager.hil.simulated.judge_direction_below == 0.75  # the other preset value stays
    again = TrainConfig.from_json(json.loads(json.dumps(preset("peg_insert").to_json())))
    assert again.hil.simulated == peg


def test_peg_insert_with_a_person_steps_its_actor_once_per_block() -> None:
    """A run with a person gets the task's with_person settings (peg_insert: one actor step per
    update block, its SAC alone one per critic step); an option still overrides them, and a run
    without a person or on another task has none of them."""
    for human in ("simulated", "keyboard"):
        assert parse_args(["--task", "peg_insert", "--human", human]).sac.actor_utd == 1
    assert parse_args(["--task", "peg_insert"]).sac.actor_utd == 0
    mine = parse_args(["--task", "peg_insert", "--human", "simulated", "--sac.actor-utd", "0"])
    assert mine.sac.actor_utd == 0
    assert parse_args(["--task", "pick_cube", "--human", "simulated"]).sac.actor_utd == 0
    assert preset("peg_insert", human="simulated").sac.intervention_bc_weight == 8.0


def test_residual_runs_start_from_their_tasks_residual_preset() -> None:
    """--residual-on adds RESIDUAL_SAC, then the task's own residual settings, and options still
    override them; without a base nothing of it applies."""
    pick = preset("pick_cube", residual_on="expert").sac
    assert (pick.algorithm, pick.residual_scale, pick.bc_weight, pick.actor_lr) == ("td3", 0.5,
                                                                                 4.0, 1e-4)  # fmt: skip
    peg = preset("peg_insert", residual_on="expert").sac
    assert (peg.residual_scale, peg.residual_penalty, peg.actor_lr, peg.bc_weight) == (0.1, 10.0,
                                                                                    1e-4, 1.0)  # fmt: skip
    assert preset("reach", residual_on="expert").sac.residual_scale == 0.1  # RESIDUAL_SAC's
    # one actor step per block for a residual, though pick_cube steps its SAC actor every critic
    # step: 8 full-rate Adam steps at once knocked an 85% base down to 6-10%
    assert (pick.actor_utd, preset("pick_cube").sac.actor_utd) == (1, 0)
    assert (peg.actor_utd, preset("peg_insert").sac.actor_utd) == (1, 0)  # the same on peg
    # and 500 warm-up steps (pick_cube's SAC starts at 250): with 250 the actor started on
    # critics that had seen fewer of the base's returns and the 85% base fell to 24-48%
    residual_loop = parse_args(["--task", "pick_cube", "--residual-on", "expert"]).loop
    assert (residual_loop.warmup_steps, preset("pick_cube").loop.warmup_steps) == (500, 250)
    mine = parse_args(["--task", "pick_cube", "--residual-on", "expert",
                       "--sac.residual-scale", "0.2"]).sac  # fmt: skip
    assert (mine.residual_scale, mine.bc_weight, mine.algorithm) == (0.2, 4.0, "td3")
    plain = preset("pick_cube").sac
    assert (plain.algorithm, plain.residual_scale, plain.bc_weight) == ("sac", 0.0, 0.0)
    assert preset("pick_cube").sac.utd == pick.utd == 8  # the task preset stays underneath


def test_env_kwargs_add_to_the_presets_and_parse_literals() -> None:
    cfg = parse_args(["--task", "pick_cube", "--env-kwargs", "episode_steps=80", "cameras=()"])
    assert cfg.env["episode_steps"] == 80 and cfg.env["cameras"] == ()
    for key, value in preset("pick_cube").env.items():
        if key != "episode_steps":
            assert cfg.env[key] == value
    assert parse_env_kwargs(("a=1.5", "b=True", "c=text", "d=(1, 2)")) == {
        "a": 1.5, "b": True, "c": "text", "d": (1, 2)}  # fmt: skip
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_env_kwargs(("reward",))


def test_config_json_round_trip() -> None:
    cfg = preset("reach", expert_demos=5, demos=None, record=Path("rec.zarr"),
                 sac={"hidden_dims": (16, 16)}, loop={"mode": "async"})  # fmt: skip
    again = TrainConfig.from_json(json.loads(json.dumps(cfg.to_json())))
    assert again == cfg
    with pytest.raises(ValueError, match=r"fields \['bogus'\]"):
        TrainConfig.from_json({**cfg.to_json(), "bogus": 1})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"steps": 0}, "--steps"), ({"eval_episodes": 0}, "--eval-episodes"),
     ({"expert_demos": -1}, "--expert-demos"), ({"stop_at_success": 1.5}, "--stop-at-success"),
     ({"demos": Path("d"), "expert_demos": 3}, "exclude each other")],
)  # fmt: skip
def test_bad_options_name_the_option(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)


def test_peers_refuse_td3() -> None:
    """--learner sb3|sbx trains the library's SAC: TD3 asked of it is an error, not ignored."""
    with pytest.raises(ValueError, match=r"--sac\.algorithm td3 needs --learner jax"):
        check_task_options(preset("reach", learner="sbx", sac={"algorithm": "td3"}))


def test_expert_demos_need_a_handrail_task() -> None:
    with pytest.raises(ValueError, match="--expert-demos needs a handrail task"):
        check_task_options(preset("Pendulum-v1", expert_demos=3))


@pytest.mark.parametrize("task", sorted(TASK_PRESETS))
def test_every_preset_is_a_task_whose_config_takes_its_env_kwargs(task: str) -> None:
    """A misspelt preset name would silently train with the generic preset; a bad field would
    fail only once the env is built at the start of a run."""
    from handrail.sim.tasks import discover

    assert task in HANDRAIL_TASKS
    cfg = preset(task)
    assert cfg.loop.warmup_steps < cfg.steps
    env_config = discover()[task].make_config(**cfg.env)
    assert {k: getattr(env_config, k) for k in cfg.env} == cfg.env


def test_resume_reuses_the_saved_config_and_refuses_other_changes(tmp_path: Path) -> None:
    saved = preset("reach", seed=3, steps=900)
    (tmp_path / "config.json").write_text(json.dumps(saved.to_json()))
    cfg, run = resolve_run(parse_args(["--resume", str(tmp_path)]))
    assert run == tmp_path and cfg.seed == 3 and cfg.steps == 900
    cfg, _ = resolve_run(parse_args(["--resume", str(tmp_path), "--steps", "2000"]))
    assert cfg.steps == 2000 and cfg.task == "reach"
    with pytest.raises(ValueError, match=r"only steps, progress, stop_at_success may change.*seed"):
        resolve_run(parse_args(["--resume", str(tmp_path), "--seed", "5"]))
    with pytest.raises(ValueError, match="not a run folder"):
        resolve_run(parse_args(["--resume", str(tmp_path / "nothing")]))


def test_a_demo_store_replaces_the_presets_expert_demos() -> None:
    assert preset("pick_cube").expert_demos == 20
    assert parse_args(["--demos", "store.zarr"]).expert_demos == 0
    assert preset("pick_cube", demos=Path("store.zarr")).expert_demos == 0
    with pytest.raises(ValueError, match="exclude each other"):  # both at once: one line
        parse_args(["--demos", "store.zarr", "--expert-demos", "3"])


def test_sac_preset_starts_the_learner_from_a_named_preset() -> None:
    rlpd = parse_args(["--task", "pick_cube", "--sac-preset", "rlpd", "--sac.utd", "10"])
    assert (rlpd.sac.num_critics, rlpd.sac.hidden_dims, rlpd.sac.utd) == (10, (256, 256), 10)
    assert rlpd.sac_preset == "rlpd" and rlpd.expert_demos == 20  # the rest is the task's
    assert parse_args(["--sac-preset=hil_serl"]).sac.gamma == 0.97


def test_sac_preset_no_longer_drops_the_task_person_and_residual_settings() -> None:
    """--sac-preset used to replace the whole SACConfig: pick_cube's gamma 0.95 and n-step 3,
    a person's and a residual's settings were dropped without a word. docs/presets.md's recipe
    for the old config gives it back."""
    rlpd = parse_args(["--task", "pick_cube", "--sac-preset", "rlpd"]).sac
    assert (rlpd.gamma, rlpd.n_step, rlpd.actor_utd) == (0.95, 3, 0)  # the task's, kept
    assert (rlpd.utd, rlpd.num_critics, rlpd.batch_size) == (20, 10, 256)  # RLPD's sizes
    peg = parse_args(["--task", "peg_insert", "--human", "simulated", "--sac-preset", "cpu"]).sac
    assert (peg.actor_utd, peg.utd, peg.late_target_entropy) == (1, 4, -8.0)
    residual = parse_args(["--task", "reach", "--residual-on", "expert", "--sac-preset", "rlpd"])
    check_task_options(residual)  # was refused: the reset dropped the residual scale
    assert (residual.sac.algorithm, residual.sac.residual_scale) == ("td3", 0.1)
    old = parse_args(["--task", "pick_cube", "--sac-preset", "rlpd", "--sac.gamma", "0.99",
                      "--sac.n-step", "1", "--sac.backup-entropy", "--sac.init-temperature",
                      "1.0", "--sac.actor-utd", "1", "--sac.intervention-bc-weight", "0",
                      "--sac.entropy-rows", "all"])  # fmt: skip
    assert old.sac == SACConfig.rlpd()


def test_env_kwargs_from_the_command_line_are_parsed_by_the_tasks_field_types() -> None:
    cfg = parse_args(["--task", "reach", "--env-kwargs", "terminate_on_success=false",
                      "episode_steps=80"])  # fmt: skip
    assert cfg.env == {"reward": "dense", "terminate_on_success": False, "episode_steps": 80}
    assert TrainConfig.from_json(json.loads(json.dumps(cfg.to_json()))).env == cfg.env
    with pytest.raises(ValueError, match=r"^--env-kwargs terminate_on_success=maybe: "
                                         r"terminate_on_success takes a bool"):  # fmt: skip
        parse_args(["--task", "reach", "--env-kwargs", "terminate_on_success=maybe"])
