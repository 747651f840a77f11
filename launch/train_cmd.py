"""``handrail train`` and ``handrail eval``: local training in one process, and evaluation.

``handrail train --task pick_cube`` resolves the task's preset (overridable field by field), makes
the env (a handrail task, any ``gymnasium.make`` id, or ``module:EnvId``), optionally preloads
demonstrations (a Zarr episode store or ``expert:N`` scripted episodes), and trains with
handrail's JAX SAC (or SB3's SAC with ``--learner sb3``), writing everything into one run folder
(see :mod:`handrail.learners.runlog`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
import tyro

from handrail.demos import EpisodeData, EpisodeRecord
from handrail.demos.format import INTERVENTION_SOURCES
from handrail.learners.evaluation import EvalResult
from handrail.learners.sac import SACConfig

HANDRAIL_TASKS = ("reach", "pick_cube", "peg_insert", "push")


@dataclass(frozen=True)
class TaskPreset:
    """Defaults for one task; every field can be overridden from the command line."""

    steps: int
    warmup_steps: int
    eval_every: int
    eval_episodes: int
    sac: dict[str, Any]
    env: dict[str, Any] = dataclasses.field(default_factory=dict)


_CPU_SAC = {"hidden_dims": (64, 64), "num_critics": 2, "batch_size": 128, "utd": 1}
# Tuned on this 2-core CPU (see tests/learners/test_learning.py): small nets at a high UTD, a
# short horizon (gamma 0.95: the tasks take 10-30 steps) and a low initial temperature.
_ARM_SAC = {
    **_CPU_SAC,
    "hidden_dims": (128, 128),
    "utd": 8,
    "gamma": 0.95,
    "init_temperature": 0.05,
}
_SPARSE_SAC = {**_ARM_SAC, "n_step": 3, "backup_entropy": False}
PRESETS: dict[str, TaskPreset] = {
    "reach": TaskPreset(
        steps=15_000, warmup_steps=500, eval_every=1_000, eval_episodes=20,
        sac=_ARM_SAC, env={"reward": "dense"},
    ),
    # Dense reward with a wide reach basin and no termination on success: on this CPU it learned
    # faster from 20 expert demos than the sparse reward (55% vs 0-10% after 20k env steps).
    # A TD3+BC-scaled BC term on the demo rows: bc_weight 2 reached 80% at 10-12k env steps on
    # seeds 0-3 (bc_weight 1: seed 3 peaked at 75%); tests/learners/test_learning.py has numbers.
    "pick_cube": TaskPreset(
        steps=30_000, warmup_steps=500, eval_every=1_000, eval_episodes=20,
        sac={**_ARM_SAC, "bc_weight": 2.0},
        env={"reward": "dense", "terminate_on_success": False, "reach_scale_1_m": 3.0,
             "episode_steps": 50},
    ),
    "peg_insert": TaskPreset(
        steps=50_000, warmup_steps=1_000, eval_every=2_500, eval_episodes=20, sac=_SPARSE_SAC,
    ),
    "push": TaskPreset(
        steps=50_000, warmup_steps=1_000, eval_every=2_500, eval_episodes=20, sac=_SPARSE_SAC,
    ),
}  # fmt: skip
GENERIC_PRESET = TaskPreset(
    steps=50_000, warmup_steps=1_000, eval_every=5_000, eval_episodes=10, sac=dict(_CPU_SAC)
)


@dataclass(frozen=True)
class TrainConfig:
    """Options of ``handrail train``; unset (None) options come from the task's preset."""

    task: str = "pick_cube"
    """A handrail task (reach, pick_cube, peg_insert, push), a gymnasium id, or module:EnvId."""
    steps: int | None = None
    """Env steps to train for (total, including warm-up and steps before a resume)."""
    seed: int = 0
    """Seed of the env, the learner, warm-up and evaluations."""
    learner: Literal["jax", "sb3"] = "jax"
    """jax: handrail's SAC/RLPD; sb3: Stable-Baselines3's SAC, same run folder, for comparison."""
    demos: str | None = None
    """Demonstrations: a Zarr episode store path, or expert:N to generate N with the task expert."""
    resume: Path | None = None
    """Resume a run folder from its latest checkpoint (its config.json is reused)."""
    run_dir: Path | None = None
    """Run folder to write; default runs/<task>-<learner>-s<seed>-<time>."""
    sac_preset: Literal["cpu", "rlpd", "hil_serl"] | None = None
    """Start the learner config from a SACConfig preset instead of the task's own."""
    utd: int | None = None
    """Gradient updates per env step."""
    num_critics: int | None = None
    """Critic ensemble size."""
    hidden_dims: tuple[int, ...] | None = None
    """MLP hidden layer sizes of actor and critics."""
    batch_size: int | None = None
    """Minibatch size per gradient step."""
    n_step: int | None = None
    """n of the n-step return."""
    gamma: float | None = None
    """Discount factor."""
    backup_entropy: bool | None = None
    """Keep the entropy term in the critic target (False suits sparse rewards)."""
    demo_ratio: float | None = None
    """Fraction of each batch drawn from demonstrations."""
    init_temperature: float | None = None
    """Initial entropy temperature (alpha)."""
    bc_weight: float | None = None
    """Behaviour-cloning weight on demo rows in the actor loss (TD3+BC-scaled; 0 = off)."""
    pretrain_steps: int | None = None
    """Demo-only update steps (critic + BC actor) before online training; needs --demos."""
    warmup_steps: int | None = None
    """Random-action env steps before updates start."""
    episode_steps: int | None = None
    """Time limit of a handrail task's episodes, in env steps (default: the task's own)."""
    reward: Literal["sparse", "dense"] | None = None
    """Reward of a handrail task: sparse (1 on success) or dense (the task's shaped reward)."""
    terminate_on_success: bool | None = None
    """Whether a handrail task's episode ends at the first successful step."""
    buffer_capacity: int = 1_000_000
    """Online replay capacity in transitions."""
    eval_every: int | None = None
    """Env steps between evaluations (also saves checkpoints/latest and refreshes the plot)."""
    eval_episodes: int | None = None
    """Episodes per evaluation."""
    video: bool = False
    """Record the first episode of every evaluation as an mp4 in the run folder."""
    success_key: str = "success"
    """Info key with the success flag (info['is_success'] is the fallback)."""
    stop_at_success: float | None = None
    """Stop early once an evaluation's success rate reaches this value (0..1)."""
    progress: bool = True
    """Show the progress bar."""

    def __post_init__(self) -> None:
        for name in ("steps", "utd", "num_critics", "batch_size", "n_step", "eval_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {value}")
        if self.eval_episodes is not None and self.eval_episodes < 1:
            raise ValueError(f"TrainConfig.eval_episodes must be >= 1, got {self.eval_episodes}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"TrainConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.stop_at_success is not None and not 0 < self.stop_at_success <= 1:
            raise ValueError(
                f"TrainConfig.stop_at_success must be in (0, 1], got {self.stop_at_success}"
            )
        if self.demos is not None:
            parse_demos(self.demos)


def parse_demos(spec: str) -> tuple[str, int | str]:
    """``expert:N`` -> ("expert", N); anything else -> ("store", path)."""
    if spec.startswith("expert:"):
        count = spec.split(":", 1)[1]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"--demos {spec!r}: expected expert:N with N >= 1, e.g. expert:20")
        return "expert", int(count)
    return "store", spec


@dataclass(frozen=True)
class ResolvedConfig:
    """Everything a run needs, with presets applied; saved as the run's config.json."""

    task: str
    learner: str
    steps: int
    seed: int
    warmup_steps: int
    buffer_capacity: int
    eval_every: int
    eval_episodes: int
    video: bool
    success_key: str
    stop_at_success: float | None
    demos: str | None
    env_overrides: dict[str, Any]
    sac: SACConfig

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict (``sac`` via SACConfig.to_json)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["sac"] = self.sac.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResolvedConfig:
        """Inverse of :meth:`to_json`."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in names},
                      "sac": SACConfig.from_json(data["sac"])})  # fmt: skip


def resolve(config: TrainConfig) -> ResolvedConfig:
    """Applies the task's preset, then the options given on the command line."""
    preset = PRESETS.get(config.task, GENERIC_PRESET)
    sac_fields = ("utd", "num_critics", "hidden_dims", "batch_size", "n_step", "gamma",
                  "backup_entropy", "demo_ratio", "init_temperature", "bc_weight",
                  "pretrain_steps")  # fmt: skip
    given = {k: getattr(config, k) for k in sac_fields if getattr(config, k) is not None}
    if "num_critics" in given:  # a single critic means a subset of one
        given["critic_subset"] = min(given["num_critics"], SACConfig.critic_subset)
    if config.sac_preset is not None:
        sac = getattr(SACConfig, config.sac_preset)(**given)
    else:
        sac = SACConfig(**{**preset.sac, **given})

    env = dict(preset.env)
    for name in ("episode_steps", "reward", "terminate_on_success"):
        if getattr(config, name) is not None:
            if config.task not in HANDRAIL_TASKS:
                raise ValueError(f"--{name.replace('_', '-')} applies to handrail tasks only, "
                                 f"not to {config.task!r}")  # fmt: skip
            env[name] = getattr(config, name)

    def pick(name: str) -> Any:
        value = getattr(config, name)
        return getattr(preset, name) if value is None else value

    return ResolvedConfig(
        task=config.task, learner=config.learner, steps=pick("steps"), seed=config.seed,
        warmup_steps=pick("warmup_steps"), buffer_capacity=config.buffer_capacity,
        eval_every=pick("eval_every"), eval_episodes=pick("eval_episodes"), video=config.video,
        success_key=config.success_key, stop_at_success=config.stop_at_success,
        demos=config.demos, env_overrides=env, sac=sac,
    )  # fmt: skip


def make_env(task: str, *, render_mode: str | None = None, **overrides: Any) -> gym.Env:
    """Makes a handrail task, a gymnasium id, or a ``module:EnvId`` env.

    Raises:
        ValueError: If the task cannot be resolved (naming the handrail tasks and the forms).
    """
    if task in HANDRAIL_TASKS:
        if render_mode is not None and "DISPLAY" not in os.environ:
            os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering for videos
        import handrail.sim

        return handrail.sim.make(task, render_mode=render_mode, **overrides)
    if overrides:
        raise ValueError(f"env overrides {sorted(overrides)} only apply to handrail tasks")
    env_id = task
    if ":" in task:
        module, env_id = task.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(
                f"--task {task!r}: cannot import module {module!r} ({exc}); the module:EnvId "
                "form imports the module (which registers EnvId) before gymnasium.make"
            ) from exc
    try:
        return gym.make(env_id, render_mode=render_mode)
    except gym.error.Error as exc:
        raise ValueError(
            f"--task {task!r} is not a handrail task {HANDRAIL_TASKS} and gymnasium.make "
            f"failed: {exc}. Use a handrail task, a registered gymnasium id, or module:EnvId"
        ) from exc


def check_spaces(env: gym.Env, task: str) -> tuple[Any, Any]:
    """ObsSpec/ActionSpec of an env, with errors that name the task."""
    from handrail.learners.specs import ActionSpec, ObsSpec

    try:
        return ObsSpec.from_space(env.observation_space), ActionSpec.from_space(env.action_space)
    except TypeError as exc:
        raise TypeError(f"--task {task!r}: {exc}") from exc


def default_run_dir(cfg: ResolvedConfig) -> Path:
    """``runs/<task>-<learner>-s<seed>-<YYYYmmdd-HHMMSS>`` (``:``/``/`` in ids become ``_``)."""
    name = cfg.task.replace(":", "_").replace("/", "_")
    return Path("runs") / f"{name}-{cfg.learner}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"


def train(config: Annotated[TrainConfig, tyro.conf.arg(name="")]) -> int:
    """Train a policy on a task and write a run folder (config, checkpoints, metrics, plot)."""
    from handrail.learners.runlog import RunDir

    if config.resume is not None:
        run_path = Path(config.resume)
        cfg = ResolvedConfig.from_json(RunDir(run_path, tensorboard=False).read_config())
        if config.steps is not None:
            cfg = dataclasses.replace(cfg, steps=config.steps)
    else:
        cfg = resolve(config)
        run_path = Path(config.run_dir) if config.run_dir else default_run_dir(cfg)
    env = make_env(cfg.task, **cfg.env_overrides)
    check_spaces(env, cfg.task)
    eval_env = make_env(cfg.task, render_mode="rgb_array" if cfg.video else None,
                        **cfg.env_overrides)  # fmt: skip
    print(f"handrail train: run folder {run_path.resolve()}", file=sys.stderr)
    with RunDir(run_path) as run:
        run.write_config(cfg.to_json())
        demos = load_demos(cfg, env) if cfg.demos else None
        if cfg.learner == "sb3":
            if config.resume is not None:
                raise ValueError("--resume is supported with --learner jax only")
            last = _train_sb3(cfg, env, eval_env, run, demos, progress=config.progress)
        else:
            last = _train_jax(cfg, env, eval_env, run, demos, resume=config.resume is not None,
                             progress=config.progress)  # fmt: skip
    env.close()
    eval_env.close()
    if last is not None:
        print(f"handrail train: last eval {json.dumps(_short(last))}", file=sys.stderr)
    print(f"handrail train: run folder {run_path.resolve()}", file=sys.stderr)
    return 0


def _short(record: dict[str, Any]) -> dict[str, Any]:
    keep = ("env_steps", "success_rate", "ci_low", "ci_high", "mean_return", "mean_length")
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in record.items() if k in keep}


@contextmanager
def _graceful_interrupt() -> Iterator[list[bool]]:
    """First Ctrl-C sets a flag (the loop saves at the next episode end); a second one aborts."""
    flag = [False]

    def handler(signum: int, frame: Any) -> None:
        if flag[0]:
            raise KeyboardInterrupt
        flag[0] = True
        print("\nCtrl-C: saving a checkpoint at the end of this episode "
              "(Ctrl-C again to abort without saving)", file=sys.stderr)  # fmt: skip

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def _train_jax(cfg: ResolvedConfig, env: gym.Env, eval_env: gym.Env, run: Any, demos: Any, *,
               resume: bool, progress: bool) -> dict[str, Any] | None:  # fmt: skip
    import jax

    from handrail.learners.checkpoint import save_checkpoint
    from handrail.learners.evaluation import evaluate
    from handrail.learners.loop import Trainer
    from handrail.learners.runlog import RunMonitor
    from handrail.learners.sac import SAC

    obs_spec, action_spec = check_spaces(env, cfg.task)
    sac = SAC(obs_spec, action_spec, cfg.sac)
    demo_buffer = None
    if demos is not None:
        from handrail.learners.demo_data import to_replay_buffer

        demo_buffer = to_replay_buffer(demos, obs_spec, action_spec, n_step=cfg.sac.n_step,
                                       gamma=cfg.sac.gamma)  # fmt: skip
    trainer = Trainer(env, sac, seed=cfg.seed, warmup_steps=cfg.warmup_steps,
                      buffer_capacity=cfg.buffer_capacity, demos=demo_buffer,
                      success_key=cfg.success_key)  # fmt: skip
    if resume:
        trainer.load(run.latest_dir)
    key = jax.random.key(cfg.seed)

    def policy(obs: Any) -> np.ndarray:
        flat = obs_spec.flatten(obs)
        return action_spec.to_env(sac.act(trainer.state, flat, key, deterministic=True))

    def run_eval(_: int) -> EvalResult:
        return evaluate(eval_env, policy, cfg.eval_episodes, cfg.seed + 10_000, video=cfg.video,
                        success_key=cfg.success_key)  # fmt: skip

    def save_best() -> None:
        save_checkpoint(run.best_dir, trainer.state, cfg.sac, obs_spec, action_spec,
                        extra={"env_steps": trainer.env_steps, "task": cfg.task})  # fmt: skip

    boundary = [True]  # Trainer.save works only at an episode boundary

    def save_latest() -> None:
        if boundary[0]:  # else the previous boundary's save stays the latest
            trainer.save(run.latest_dir)

    monitor = RunMonitor(run, total_steps=cfg.steps, eval_every=cfg.eval_every,
                         evaluate=run_eval, save_latest=save_latest,
                         save_best=save_best, start_steps=trainer.env_steps, progress=progress,
                         stop_at_success=cfg.stop_at_success)  # fmt: skip
    try:
        with _graceful_interrupt() as interrupted:
            while trainer.env_steps < cfg.steps:
                finished = trainer.step()
                boundary[0] = bool(finished)
                episodes = [(e.return_, e.length, e.success) for e in finished]
                stop = monitor.on_step(trainer.env_steps, trainer.updates, episodes,
                                       lambda: trainer.last_metrics)  # fmt: skip
                if stop or (interrupted[0] and finished):
                    break
            if not interrupted[0] and (
                monitor.last_eval is None or monitor.last_eval["env_steps"] < trainer.env_steps
            ):
                monitor.evaluate_now(trainer.env_steps)  # fmt: skip
            else:
                save_latest()
    finally:
        monitor.close()
    return monitor.last_eval


def _train_sb3(cfg: ResolvedConfig, env: gym.Env, eval_env: gym.Env, run: Any, demos: Any, *,
               progress: bool) -> dict[str, Any] | None:  # fmt: skip
    from handrail.learners.sb3_backend import train_sb3

    obs_spec, action_spec = check_spaces(env, cfg.task)
    transitions = None
    if demos is not None:
        from handrail.learners.demo_data import to_transitions

        transitions = to_transitions(demos, obs_spec, action_spec)
    return train_sb3(env, eval_env, run, sac=cfg.sac, steps=cfg.steps, seed=cfg.seed,
                     warmup_steps=cfg.warmup_steps, buffer_capacity=cfg.buffer_capacity,
                     eval_every=cfg.eval_every, eval_episodes=cfg.eval_episodes,
                     demos=transitions, success_key=cfg.success_key, video=cfg.video,
                     progress=progress, stop_at_success=cfg.stop_at_success)  # fmt: skip


_SCRIPTED = next(k for k, v in INTERVENTION_SOURCES.items() if v == "scripted")


def expert_episodes(task: str, count: int, seed: int, **overrides: Any) -> EpisodeData:
    """Runs the task's scripted expert until ``count`` successful episodes are collected.

    Episode ``i`` is reset with seed ``seed + i`` (failures are skipped; at most ``3 * count``
    attempts). Raises ValueError for a non-handrail task and RuntimeError if too few succeed.
    """
    if task not in HANDRAIL_TASKS:
        raise ValueError(f"--demos expert:N needs a handrail task {HANDRAIL_TASKS}, got {task!r}")
    import handrail.sim

    env = make_env(task, **overrides)
    expert = handrail.sim.make_expert(task, env)
    episodes = []
    for i in range(3 * count):
        if len(episodes) == count:
            break
        steps = _expert_episode(env, expert, seed + i)
        if steps is not None:
            episodes.append(steps)
    env.close()
    if len(episodes) < count:
        raise RuntimeError(f"the {task} expert succeeded in only {len(episodes)} of {3 * count} "
                           f"episodes; wanted {count}")  # fmt: skip
    keys = list(episodes[0][0][0])
    lengths = np.array([len(ep[1]) for ep in episodes], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    action = np.concatenate([ep[1] for ep in episodes]).astype(np.float32)
    # The same in-RAM layout a store loads into, so store and expert demos share one converter.
    return EpisodeData(
        obs={k: np.stack([o[k] for ep in episodes for o in ep[0][:-1]]) for k in keys},
        final_obs={k: np.stack([ep[0][-1][k] for ep in episodes]) for k in keys},
        action=action,
        policy_action=action.copy(),
        intervention=np.full(len(action), _SCRIPTED, dtype=np.int8),
        reward=np.concatenate([ep[2] for ep in episodes]).astype(np.float32),
        terminated=np.concatenate([ep[3] for ep in episodes]),
        truncated=np.concatenate([ep[4] for ep in episodes]),
        timestamp=np.zeros(len(action)),
        episode_starts=starts,
        episode_lengths=lengths,
        records=[
            EpisodeRecord(id=i, task=task, success=True, num_steps=int(n), num_intervened=int(n),
                          start_time=0.0, seed=seed_i, start=int(start))
            for i, (n, start, seed_i) in enumerate(
                zip(lengths, starts, [ep[5] for ep in episodes], strict=True))
        ],
    )  # fmt: skip


def _expert_episode(env: gym.Env, expert: Any, seed: int) -> tuple | None:
    obs, _ = env.reset(seed=seed)
    expert.reset(seed=seed)
    observations, actions, rewards, terms, truncs, success = [obs], [], [], [], [], False
    done = False
    while not done:
        action = np.asarray(expert(obs), np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        success = success or bool(info.get("success", False))
        observations.append(obs)
        actions.append(action)
        rewards.append(reward)
        terms.append(terminated)
        truncs.append(truncated)
        done = terminated or truncated
    if not success:
        return None
    return (observations, np.stack(actions), np.array(rewards), np.array(terms),
            np.array(truncs), seed)  # fmt: skip


def load_demos(cfg: ResolvedConfig, env: gym.Env) -> Any:
    """Loads ``cfg.demos``: successful episodes of a Zarr store, or ``expert:N`` episodes."""
    kind, value = parse_demos(cfg.demos or "")
    if kind == "expert":
        return expert_episodes(cfg.task, int(value), cfg.seed + 1_000_000, **cfg.env_overrides)
    import handrail.demos

    data = handrail.demos.open_store(value).load(successful_only=True)
    if len(data.episode_lengths) == 0:
        raise ValueError(f"--demos {value!r}: the store holds no successful episodes")
    return data


@dataclass(frozen=True)
class EvalConfig:
    """Options of ``handrail eval``."""

    path: tyro.conf.Positional[Path]
    """A run folder (evaluates checkpoints/<checkpoint>) or a checkpoint folder."""
    episodes: int = 20
    """Episodes to run."""
    video: bool = False
    """Record the first episode as an mp4 (into the run's videos/ or next to the checkpoint)."""
    seed: int = 100_000
    """Seed of the first episode (episode i uses seed + i)."""
    checkpoint: Literal["best", "latest"] = "best"
    """Which checkpoint of a run folder to evaluate."""
    task: str | None = None
    """Task to evaluate on; default: the task in the run's config.json."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"EvalConfig.episodes must be >= 1, got {self.episodes}")


def locate_checkpoint(path: Path, which: str = "best") -> tuple[Path, dict[str, Any] | None]:
    """Finds the checkpoint folder and the run config (if any) for a run or checkpoint path."""
    path = Path(path)
    if (path / "checkpoints").is_dir():
        run_root, ckpt = path, path / "checkpoints" / which
    else:
        run_root, ckpt = path.parent.parent, path
    if (ckpt / "learner" / "state.msgpack").is_file():  # a Trainer.save folder
        ckpt = ckpt / "learner"
    if not any((ckpt / name).is_file() for name in ("state.msgpack", "model.zip")):
        raise ValueError(
            f"{path}: no checkpoint at {ckpt} (no state.msgpack or model.zip); pass a run folder "
            "or a checkpoint folder"
        )
    run_config = run_root / "config.json"
    config = json.loads(run_config.read_text()) if run_config.is_file() else None
    if config is not None and "task" not in config:
        config = None
    return ckpt, config


def evaluate(config: Annotated[EvalConfig, tyro.conf.arg(name="")]) -> int:
    """Evaluate a run or checkpoint: success rate with a 95% CI, return and episode length."""
    from handrail.learners.evaluation import evaluate as run_evaluation

    ckpt, run_config = locate_checkpoint(config.path, config.checkpoint)
    task = config.task or (run_config or {}).get("task")
    if task is None:
        raise ValueError(f"{config.path}: no run config.json to read the task from; pass --task")
    overrides = (
        (run_config or {}).get("env_overrides", {})
        if task == (run_config or {}).get("task")
        else {}
    )
    if (ckpt / "model.zip").is_file():
        from handrail.learners.sb3_backend import load_sb3_policy

        policy = load_sb3_policy(ckpt)
    else:
        from handrail.learners.checkpoint import load_policy

        policy = load_policy(ckpt, deterministic=True)
    env = make_env(task, render_mode="rgb_array" if config.video else None, **overrides)
    success_key = (run_config or {}).get("success_key", "success")
    result = run_evaluation(
        env, policy, config.episodes, config.seed, video=config.video, success_key=success_key
    )
    env.close()
    print(f"{ckpt}: {result.summary()}")
    if config.video and result.frames:
        import imageio.v2 as imageio

        fps = 1.0 / getattr(env.unwrapped, "control_dt_s", 0.05)
        video_path = ckpt / f"eval_seed{config.seed}.mp4"
        imageio.mimwrite(video_path, result.frames, fps=fps)
        print(f"video: {video_path}")
    return 0
