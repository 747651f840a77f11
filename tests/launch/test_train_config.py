"""`handrail train` config: presets, field overrides, validation, JSON round trip."""

from __future__ import annotations

import json

import pytest

from handrail.launch.envs import HANDRAIL_TASKS
from handrail.launch.train_config import PRESETS, ResolvedConfig, TrainConfig, parse_demos, resolve


def test_preset_then_field_overrides() -> None:
    cfg = resolve(TrainConfig(task="push", utd=3, seed=7, reward="dense"))
    preset = PRESETS["push"]
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
    again = ResolvedConfig.from_json(json.loads(json.dumps(cfg.to_json())))
    assert again == cfg


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"steps": 0}, "steps"), ({"eval_episodes": 0}, "eval_episodes"),
     ({"demos": "expert:zero"}, "expert:N"), ({"stop_at_success": 1.5}, "stop_at_success")],
)  # fmt: skip
def test_bad_options_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)


def test_parse_demos() -> None:
    assert parse_demos("expert:20") == ("expert", 20)
    assert parse_demos("data/demos.zarr") == ("store", "data/demos.zarr")


@pytest.mark.parametrize("task", sorted(PRESETS))
def test_every_preset_is_a_task_whose_config_takes_its_overrides(task: str) -> None:
    """A misspelt preset name would silently train with GENERIC_PRESET; a bad field would fail
    only once the env is built at the start of a run."""
    from handrail.sim.tasks import discover

    assert task in HANDRAIL_TASKS
    cfg = resolve(TrainConfig(task=task))
    assert cfg.steps == PRESETS[task].steps and cfg.warmup_steps < cfg.steps  # it learns
    env_config = discover()[task].make_config(**cfg.env_overrides)
    assert {k: getattr(env_config, k) for k in cfg.env_overrides} == cfg.env_overrides
