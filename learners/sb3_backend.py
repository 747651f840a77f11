"""``handrail train --learner sb3|sbx``: Stable-Baselines3's SAC (torch) or SBX's (JAX) on the
same task and run folder.

So that users can compare handrail's learner with well-known baselines on their own tasks, this
backend trains SB3's or SBX's SAC with the same network sizes, learning rates, discount, batch
size, UTD (``gradient_steps``), n-step horizon, warm-up, critic count and entropy targets
(the late one too, switched from a callback; SBX also gets the LayerNorm critics), preloads the
same demonstrations into its replay buffer, flattens Dict
observations exactly like :class:`ObsSpec`, and writes the same run folder (config, metrics
JSONL, TensorBoard, plot, eval videos). Neither library can drop the entropy term from the
critic's backup. ``library_defaults=True`` keeps the library's own hyper-parameters instead
(SB3: 256x256, batch 256, UTD 1, gamma 0.99) and takes only the warm-up and buffer size.
Checkpoints use the library's own ``save`` (``model.zip``) plus ``specs.json`` so that
:func:`load_sb3_policy` can rebuild the policy.

Stable-Baselines3 (and SBX) are optional dependencies (``pip install handrail[sb3]``), imported
lazily.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np

from handrail.control.step import EpisodeTally, step_success
from handrail.learners.evaluation import EVAL_SEED_OFFSET, EvalResult, env_fps, evaluate, run_seed
from handrail.learners.monitor import RunMonitor
from handrail.learners.runlog import RunDir
from handrail.learners.specs import ActionSpec, ObsSpec

if TYPE_CHECKING:
    from handrail.learners.demo_data import Transitions

MODEL_FILE = "model.zip"
SPECS_FILE = "specs.json"


def require_sb3(library: str = "sb3") -> Any:
    """Imports ``stable_baselines3`` (or ``sbx``) or raises an ImportError saying how to install it."""
    import importlib

    module = {"sb3": "stable_baselines3", "sbx": "sbx"}[library]
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"--learner {library} needs {module} (and torch for sb3); install them with "
            "`pip install handrail[sb3]`"
        ) from exc


class FlattenObs(gym.ObservationWrapper):
    """Flattens (Dict) observations with an :class:`ObsSpec`, in the same key order."""

    def __init__(self, env: gym.Env, obs_spec: ObsSpec) -> None:
        super().__init__(env)
        self.obs_spec = obs_spec
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_spec.dim,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        """Returns the flat float32 observation."""
        return self.obs_spec.flatten(observation)


def sb3_sac_kwargs(
    sac: Any,
    *,
    warmup_steps: int,
    buffer_size: int,
    action_dim: int,
    library: str = "sb3",
    library_defaults: bool = False,
) -> dict:
    """Maps handrail's SACConfig onto ``stable_baselines3.SAC`` / ``sbx.SAC`` keyword arguments
    (only the warm-up and buffer size with ``library_defaults``)."""
    if library_defaults:
        return {"buffer_size": buffer_size, "learning_starts": warmup_steps}
    target = sac.target_entropy if sac.target_entropy is not None else -action_dim / 2
    policy = {"net_arch": list(sac.hidden_dims), "n_critics": sac.num_critics}
    if library == "sbx":
        policy["layer_norm"] = sac.critic_layer_norm
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
        "n_steps": sac.n_step,
        "policy_kwargs": policy,
    }


def peer_differences(
    sac: Any,
    loop: Any,
    *,
    library: str = "sb3",
    library_defaults: bool = False,
    demos: bool = True,
) -> list[str]:
    """What the peer library's SAC runs with instead of handrail's ``sac`` and ``loop``
    settings, one phrase each (empty when it follows all of them), so that a comparison says
    what it compares. With ``library_defaults``, what differs besides the library's own
    hyper-parameters; ``demos``: whether the run has demonstrations."""
    out = []
    if demos and loop.offline_ratio > 0:
        out.append(
            f"the demos preloaded into its replay and sampled with the online rows, not as "
            f"{loop.offline_ratio:g} of every minibatch (--loop.offline-ratio)"
        )
    if loop.pretrain_steps > 0:
        out.append(f"no offline pretraining (--loop.pretrain-steps {loop.pretrain_steps})")
    if library_defaults:
        return out
    if sac.critic_subset < sac.num_critics:
        out.append(
            f"a target that takes the minimum over all {sac.num_critics} critics, not over a "
            f"random {sac.critic_subset} (--sac.critic-subset)"
        )
    if sac.critic_layer_norm and library == "sb3":
        out.append("critics without LayerNorm (--sac.critic-layer-norm; SBX has it)")
    if sac.critic_lr != sac.actor_lr or sac.temperature_lr != sac.actor_lr:
        out.append(
            f"one learning rate, --sac.actor-lr {sac.actor_lr:g}, for the actor, critics and "
            f"temperature (--sac.critic-lr {sac.critic_lr:g}, --sac.temperature-lr "
            f"{sac.temperature_lr:g})"
        )
    if sac.actor_utd != 0:
        out.append(
            f"an actor step after every critic step, not {sac.actor_utd} per {sac.utd} "
            "(--sac.actor-utd)"
        )
    if sac.actor_delay_blocks > 0:
        out.append(f"no critic-only start (--sac.actor-delay-blocks {sac.actor_delay_blocks})")
    if sac.bc_weight > 0:
        out.append(f"no behaviour-cloning term (--sac.bc-weight {sac.bc_weight:g})")
    if sac.entropy_rows != "all":
        out.append("the temperature tuned on every row (--sac.entropy-rows online)")
    if not sac.backup_entropy:
        out.append("the entropy term in the critics' backup (--sac.backup-entropy False)")
    return out


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


def save_sb3_checkpoint(
    model: Any, directory: Path, obs_spec: ObsSpec, action_spec: Any, library: str = "sb3"
) -> Path:
    """Saves ``model.zip`` (the library's format) and ``specs.json`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save(directory / MODEL_FILE)
    specs = {
        "learner": library,
        "obs_spec": obs_spec.to_json(),
        "action_spec": action_spec.to_json(),
    }
    (directory / SPECS_FILE).write_text(json.dumps(specs, indent=2) + "\n")
    return directory


def load_sb3_policy(directory: str | Path) -> Callable[[Any], np.ndarray]:
    """Loads an SB3 or SBX checkpoint folder as a deterministic ``obs -> env action`` function."""
    directory = Path(directory)
    if not (directory / MODEL_FILE).is_file():
        raise ValueError(f"{directory} is not an SB3 checkpoint: no {MODEL_FILE} in it")
    specs = json.loads((directory / SPECS_FILE).read_text())
    library = specs.get("learner", "sb3")
    obs_spec = ObsSpec.from_json(specs["obs_spec"])
    device = {"device": "cpu"} if library == "sb3" else {}
    model = require_sb3(library).SAC.load(directory / MODEL_FILE, **device)

    def policy(obs: Any) -> np.ndarray:
        action, _ = model.predict(obs_spec.flatten(obs), deterministic=True)
        return np.asarray(action, np.float32)

    return policy


@dataclass(frozen=True)
class PeerRun:
    """How to train a peer library's SAC on a handrail task (see the module docstring)."""

    sac: Any
    """handrail ``SACConfig``: sizes, learning rates, UTD, n-step, critics..."""
    steps: int
    """Env steps to train."""
    seed: int
    """Seed of the library, the env and the evaluations."""
    warmup_steps: int
    """Random-action steps before updates start."""
    buffer_capacity: int
    """Replay capacity (demos included)."""
    eval_every: int
    """Env steps between evaluations."""
    eval_episodes: int
    """Episodes per evaluation."""
    library: Literal["sb3", "sbx"] = "sb3"
    """sb3: Stable-Baselines3 (torch); sbx: SBX (JAX)."""
    library_defaults: bool = False
    """Use the library's own hyper-parameters instead of ``sac``'s."""
    success_key: str = "success"
    """Info key with the success flag."""
    video: bool = False
    """Record the first episode of each evaluation."""
    progress: bool = True
    """Show the progress bar."""
    stop_at_success: float | None = None
    """Stop once an evaluation reaches this success rate."""


def train_sb3(
    env: gym.Env,
    eval_env: gym.Env,
    run: RunDir,
    settings: PeerRun,
    obs_spec: ObsSpec,
    demos: Transitions | None = None,
) -> dict[str, Any] | None:
    """Trains SB3's (or SBX's) SAC and fills ``run`` like handrail's own learner does.

    Args:
        env: Training env (Dict or Box observations; flattened with ``obs_spec``).
        eval_env: Separate env for evaluations.
        run: Run folder to write into.
        settings: What to train and how.
        obs_spec: The observation keys the learner reads (as for handrail's learner).
        demos: Demo transitions to preload into the replay buffer.

    Returns:
        The last evaluation record (None if none ran).
    """
    lib = require_sb3(settings.library)
    model, action_spec = _make_model(lib, env, settings, obs_spec)
    if demos is not None:
        preload_demos(model, demos)
    save = partial(save_sb3_checkpoint, model, obs_spec=obs_spec, action_spec=action_spec,
                   library=settings.library)  # fmt: skip
    monitor = RunMonitor(
        run,
        total_steps=settings.steps,
        eval_every=settings.eval_every,
        evaluate=_evaluator(model, obs_spec, eval_env, settings),
        save_latest=lambda: save(run.latest_dir),
        save_best=lambda: save(run.best_dir),
        video_fps=env_fps(eval_env),
        progress=settings.progress,
        stop_at_success=settings.stop_at_success,
    )
    return _learn(model, monitor, settings.steps, settings.success_key, _late_entropy(settings))


def _late_entropy(settings: PeerRun) -> tuple[int, float] | None:
    """(gradient steps, target) of ``sac.late_target_entropy`` in the library's own count: a
    handrail update block is ``utd`` critic steps, and the library takes ``utd`` gradient steps
    per env step (None: one target throughout, or the library's own settings)."""
    late = settings.sac.late_target_entropy
    if late is None or settings.library_defaults:
        return None
    return int(settings.sac.late_entropy_blocks) * int(settings.sac.utd), float(late)


def _make_model(
    lib: Any, env: gym.Env, settings: PeerRun, obs_spec: ObsSpec
) -> tuple[Any, ActionSpec]:
    """The library's SAC on the flattened ``env``, and the env's action spec."""
    if settings.library == "sb3":
        import torch

        torch.set_num_threads(1)  # steadier than 2 threads on a shared 2-core CPU
    action_spec = ActionSpec.from_space(env.action_space)
    kwargs = sb3_sac_kwargs(
        settings.sac, warmup_steps=settings.warmup_steps, buffer_size=settings.buffer_capacity,
        action_dim=action_spec.dim, library=settings.library,
        library_defaults=settings.library_defaults,
    )  # fmt: skip
    device = {"device": "cpu"} if settings.library == "sb3" else {}
    model = lib.SAC("MlpPolicy", FlattenObs(env, obs_spec), seed=settings.seed, **device, **kwargs)
    return model, action_spec


def _evaluator(
    model: Any, obs_spec: ObsSpec, eval_env: gym.Env, settings: PeerRun
) -> Callable[[int], EvalResult]:
    """The monitor's evaluation: the model's deterministic policy on ``eval_env``."""

    def run_eval(_: int) -> EvalResult:
        return evaluate(eval_env, _predictor(model, obs_spec), settings.eval_episodes,
                        run_seed(settings.seed, EVAL_SEED_OFFSET), video=settings.video,
                        success_key=settings.success_key)  # fmt: skip

    return run_eval


def _learn(
    model: Any,
    monitor: RunMonitor,
    steps: int,
    success_key: str,
    late_entropy: tuple[int, float] | None = None,
) -> dict[str, Any] | None:
    """SB3's training loop fed into ``monitor``, then a final evaluation; the last record."""
    try:
        callback = _make_callback(monitor, success_key, late_entropy)
        model.learn(total_timesteps=steps, callback=callback)
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


def _make_callback(
    monitor: RunMonitor, success_key: str, late_entropy: tuple[int, float] | None = None
) -> Any:
    """An SB3 callback that reports steps and finished episodes to ``monitor``, and sets the
    model's target entropy to ``late_entropy[1]`` once it has taken ``late_entropy[0]`` gradient
    steps (SB3 and SBX read ``model.target_entropy`` at every update)."""
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
            if late_entropy is not None and updates >= late_entropy[0]:
                model: Any = self.model  # SAC's attribute; BaseAlgorithm does not declare it
                model.target_entropy = late_entropy[1]
            return not monitor.on_step(self.num_timesteps, updates, finished, metrics)

    return _Callback()
