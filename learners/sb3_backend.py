"""``handrail train --learner sb3``: Stable-Baselines3's SAC on the same task and run folder.

So that users can compare handrail's learner with a well-known baseline on their own tasks, this
backend trains SB3's SAC with the same network sizes, learning rates, discount, batch size, UTD
(``gradient_steps``), warm-up and critic count, preloads the same demonstrations into its replay
buffer, flattens Dict observations exactly like :class:`ObsSpec`, and writes the same run folder
(config, metrics JSONL, TensorBoard, plot, eval videos). Checkpoints use SB3's own ``save``
(``model.zip``) plus ``specs.json`` so that :func:`load_sb3_policy` can rebuild the policy.

Stable-Baselines3 is an optional dependency (``pip install handrail[sb3]``), imported lazily.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from handrail.control.step import EpisodeTally, step_success
from handrail.learners.evaluation import EvalResult, env_fps, evaluate
from handrail.learners.runlog import RunDir, RunMonitor
from handrail.learners.specs import ActionSpec, ObsSpec

if TYPE_CHECKING:
    from handrail.learners.demo_data import Transitions

MODEL_FILE = "model.zip"
SPECS_FILE = "specs.json"


def require_sb3() -> Any:
    """Imports ``stable_baselines3`` or raises an ImportError that says how to install it."""
    try:
        import stable_baselines3
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "--learner sb3 needs Stable-Baselines3 and torch; install them with "
            "`pip install handrail[sb3]`"
        ) from exc
    return stable_baselines3


class FlattenObs(gym.ObservationWrapper):
    """Flattens (Dict) observations with an :class:`ObsSpec`, in the same key order."""

    def __init__(self, env: gym.Env, obs_spec: ObsSpec) -> None:
        super().__init__(env)
        self.obs_spec = obs_spec
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_spec.dim,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        """Returns the flat float32 observation."""
        return self.obs_spec.flatten(observation)


def sb3_sac_kwargs(sac: Any, *, warmup_steps: int, buffer_size: int, action_dim: int) -> dict:
    """Maps handrail's SACConfig onto ``stable_baselines3.SAC`` keyword arguments."""
    target = sac.target_entropy if sac.target_entropy is not None else -action_dim / 2
    return {
        "learning_rate": sac.actor_lr,
        "buffer_size": buffer_size,
        "learning_starts": warmup_steps,
        "batch_size": sac.batch_size,
        "tau": sac.tau,
        "gamma": sac.gamma,
        "train_freq": 1,
        "gradient_steps": sac.utd,
        "ent_coef": f"auto_{sac.init_temperature}",
        "target_entropy": float(target),
        "policy_kwargs": {"net_arch": list(sac.hidden_dims), "n_critics": sac.num_critics},
    }


def preload_demos(model: Any, demos: Transitions) -> None:
    """Adds demo transitions (actions already in [-1, 1]) to an SB3 model's replay buffer."""
    buffer = model.replay_buffer
    for i in range(len(demos)):
        terminated, truncated = bool(demos.terminated[i]), bool(demos.truncated[i])
        buffer.add(
            demos.obs[i : i + 1],
            demos.next_obs[i : i + 1],
            demos.action[i : i + 1],
            demos.reward[i : i + 1],
            np.array([terminated or truncated]),
            [{"TimeLimit.truncated": truncated and not terminated}],
        )


def save_sb3_checkpoint(model: Any, directory: Path, obs_spec: ObsSpec, action_spec: Any) -> Path:
    """Saves ``model.zip`` (SB3's format) and ``specs.json`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save(directory / MODEL_FILE)
    specs = {"learner": "sb3", "obs_spec": obs_spec.to_json(), "action_spec": action_spec.to_json()}
    (directory / SPECS_FILE).write_text(json.dumps(specs, indent=2) + "\n")
    return directory


def load_sb3_policy(directory: str | Path) -> Callable[[Any], np.ndarray]:
    """Loads an SB3 checkpoint folder as a deterministic ``obs -> env action`` function."""
    sb3 = require_sb3()
    directory = Path(directory)
    if not (directory / MODEL_FILE).is_file():
        raise ValueError(f"{directory} is not an SB3 checkpoint: no {MODEL_FILE} in it")
    specs = json.loads((directory / SPECS_FILE).read_text())
    obs_spec = ObsSpec.from_json(specs["obs_spec"])
    model = sb3.SAC.load(directory / MODEL_FILE, device="cpu")

    def policy(obs: Any) -> np.ndarray:
        action, _ = model.predict(obs_spec.flatten(obs), deterministic=True)
        return np.asarray(action, np.float32)

    return policy


def train_sb3(
    env: gym.Env,
    eval_env: gym.Env,
    run: RunDir,
    *,
    sac: Any,
    steps: int,
    seed: int,
    warmup_steps: int,
    buffer_capacity: int,
    eval_every: int,
    eval_episodes: int,
    demos: Transitions | None = None,
    success_key: str = "success",
    video: bool = False,
    progress: bool = True,
    stop_at_success: float | None = None,
) -> dict[str, Any] | None:
    """Trains SB3's SAC and fills ``run`` like handrail's own learner does.

    Args:
        env: Training env (Dict or Box observations; flattened here).
        eval_env: Separate env for evaluations.
        run: Run folder to write into.
        sac: handrail ``SACConfig`` (sizes, learning rates, UTD, critics...).
        steps: Env steps to train.
        seed: Seed of SB3, the env and evaluations.
        warmup_steps: Random-action steps before updates start.
        buffer_capacity: Replay capacity (demos included).
        eval_every: Env steps between evaluations.
        eval_episodes: Episodes per evaluation.
        demos: Demo transitions to preload into the replay buffer.
        success_key: Info key with the success flag.
        video: Record the first episode of each evaluation.
        progress: Show the progress bar.
        stop_at_success: Stop once an evaluation reaches this success rate.

    Returns:
        The last evaluation record (None if none ran).
    """
    sb3 = require_sb3()
    model, obs_spec, action_spec = _make_model(sb3, env, sac, seed, warmup_steps, buffer_capacity)
    if demos is not None:
        preload_demos(model, demos)
    save = partial(save_sb3_checkpoint, model, obs_spec=obs_spec, action_spec=action_spec)
    monitor = RunMonitor(
        run,
        total_steps=steps,
        eval_every=eval_every,
        evaluate=_evaluator(model, obs_spec, eval_env, eval_episodes, seed, video, success_key),
        save_latest=lambda: save(run.latest_dir),
        save_best=lambda: save(run.best_dir),
        video_fps=env_fps(eval_env),
        progress=progress,
        stop_at_success=stop_at_success,
    )
    return _learn(model, monitor, steps, success_key)


def _make_model(
    sb3: Any, env: gym.Env, sac: Any, seed: int, warmup_steps: int, buffer_capacity: int
) -> tuple[Any, ObsSpec, ActionSpec]:
    """SB3's SAC on the flattened ``env`` with handrail's settings, and the env's specs."""
    import torch

    torch.set_num_threads(1)  # steadier than 2 threads on a shared 2-core CPU
    obs_spec = ObsSpec.from_space(env.observation_space)
    action_spec = ActionSpec.from_space(env.action_space)
    kwargs = sb3_sac_kwargs(
        sac, warmup_steps=warmup_steps, buffer_size=buffer_capacity, action_dim=action_spec.dim
    )
    model = sb3.SAC("MlpPolicy", FlattenObs(env, obs_spec), seed=seed, device="cpu", **kwargs)
    return model, obs_spec, action_spec


def _evaluator(
    model: Any,
    obs_spec: ObsSpec,
    eval_env: gym.Env,
    episodes: int,
    seed: int,
    video: bool,
    success_key: str,
) -> Callable[[int], EvalResult]:
    """The monitor's evaluation: the model's deterministic policy on ``eval_env``."""

    def run_eval(_: int) -> EvalResult:
        policy = _predictor(model, obs_spec)
        return evaluate(
            eval_env, policy, episodes, seed + 10_000, video=video, success_key=success_key
        )

    return run_eval


def _learn(model: Any, monitor: RunMonitor, steps: int, success_key: str) -> dict[str, Any] | None:
    """SB3's training loop fed into ``monitor``, then a final evaluation; the last record."""
    try:
        model.learn(total_timesteps=steps, callback=_make_callback(monitor, success_key))
        if monitor.last_eval is None or monitor.last_eval["env_steps"] < model.num_timesteps:
            monitor.evaluate_now(model.num_timesteps)
    finally:
        monitor.close()
    return monitor.last_eval


def _predictor(model: Any, obs_spec: ObsSpec) -> Callable[[Any], np.ndarray]:
    """The model's deterministic policy on raw (Dict or Box) observations."""

    def policy(obs: Any) -> np.ndarray:
        return np.asarray(model.predict(obs_spec.flatten(obs), deterministic=True)[0])

    return policy


def _make_callback(monitor: RunMonitor, success_key: str) -> Any:
    """An SB3 callback that reports steps and finished episodes to ``monitor``."""
    from stable_baselines3.common.callbacks import BaseCallback

    class _Callback(BaseCallback):
        """Feeds SB3's steps into the shared RunMonitor; returns False to stop early."""

        def _on_training_start(self) -> None:
            self.tally = EpisodeTally()

        def _on_step(self) -> bool:
            info: Mapping[str, Any] = self.locals["infos"][0]
            self.tally.add(float(self.locals["rewards"][0]), step_success(info, success_key))
            finished = []
            if self.locals["dones"][0]:
                t = self.tally
                finished = [(t.return_, t.length, t.success)]
                t.reset()
            metrics = {
                k: v for k, v in self.model.logger.name_to_value.items() if k.startswith("train/")
            }
            updates = int(getattr(self.model, "_n_updates", 0))
            return not monitor.on_step(self.num_timesteps, updates, finished, metrics)

    return _Callback()
