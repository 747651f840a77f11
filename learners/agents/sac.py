"""SAC in the RLPD / SERL style: critic ensemble, subsampled min target, UTD inside one jit.

``SAC.update(state, batch)`` runs ``utd`` critic steps in a ``lax.scan`` (each followed by a
Polyak target update), then one actor and one temperature step on the last minibatch, as
RLPD does. The actor does not change during the critic steps, so the next actions of all
their targets are sampled in one batched call before the scan (same values, fewer and larger
matmuls). A non-finite loss anywhere in the block leaves the state unchanged.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from handrail.control.base_policy import BASE_ACTION_KEY
from handrail.learners import obs_norm
from handrail.learners.agents import losses
from handrail.learners.agents.losses import Batch
from handrail.learners.agents.networks import (
    IMAGE_NEEDS,
    IMAGE_TUPLES,
    Actor,
    CameraEncoders,
    CriticEnsemble,
    image_checks,
    tanh_gaussian_sample,
)
from handrail.learners.images import random_shift
from handrail.learners.specs import ActionSpec, ObsSpec

_TUPLE_FIELDS = ("hidden_dims", *IMAGE_TUPLES)
"""SACConfig's tuple fields: tuples of ints in the config, lists in its JSON."""


@dataclass(frozen=True)
class SACConfig:
    """Hyper-parameters of the SAC learner (defaults: RLPD, Ball et al. 2023)."""

    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and of each critic."""
    num_critics: int = 10
    """Critics in the ensemble."""
    critic_subset: int = 2
    """Critics drawn at random for the min in the target (REDQ/RLPD)."""
    critic_layer_norm: bool = True
    """LayerNorm after each hidden layer of the critic."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics."""
    temperature_lr: float = 3e-4
    """Adam learning rate of the log-temperature."""
    gamma: float = 0.99
    """Discount per env step."""
    tau: float = 0.005
    """Polyak rate of the target critics per critic step."""
    init_temperature: float = 1.0
    """Initial entropy temperature alpha."""
    target_entropy: float | None = None
    """Target policy entropy; None means -|A|/2."""
    late_target_entropy: float | None = None
    """Target entropy from update block ``late_entropy_blocks`` on (None: ``target_entropy``
    throughout): the policy explores as usual while it learns, then settles to a less random
    one, whose deterministic action (the one evaluated and deployed) is what the critics rank."""
    late_entropy_blocks: int = 0
    """Update blocks before ``late_target_entropy`` applies."""
    backup_entropy: bool = True
    """Keep the entropy term in the critic backup (False suits sparse rewards)."""
    utd: int = 20
    """Update-to-data ratio: critic steps per env step (``actor_utd`` actor steps per block)."""
    actor_utd: int = 1
    """Actor (and temperature) steps per update block, on the block's last ``actor_utd``
    minibatches after its critic steps: 1 is RLPD's one per block; 0 means one per critic step
    (``utd`` of them, whatever ``utd`` is), as classic SAC and Stable-Baselines3 do."""
    batch_size: int = 256
    """Rows per minibatch (online + offline)."""
    n_step: int = 1
    """n-step return horizon (never crosses episode ends)."""
    bc_weight: float = 0.0
    """Behaviour-cloning weight on the offline rows in the actor loss, TD3+BC-scaled (0 = off)."""
    intervention_bc_weight: float = 0.0
    """Behaviour-cloning weight on a person's corrections only (the intervention buffer), as
    in HG-DAgger; 0 keeps HIL-SERL's rule (corrections are RL data sampled like demos)."""
    entropy_rows: Literal["all", "online"] = "all"
    """Rows whose policy entropy the temperature is tuned on: all rows, or the online rows only
    (the states the policy visits itself; demo states are nearly deterministic)."""
    algorithm: Literal["sac", "td3"] = "sac"
    """sac: the stochastic tanh-Gaussian actor with a tuned temperature; td3: a deterministic
    actor with Gaussian exploration noise and target policy smoothing (Fujimoto et al. 2018),
    on the same critics (no target actor: the target uses the current actor, as RLPD's SAC)."""
    td3_noise: float = 0.1
    """td3: std of the exploration noise of the training policy (normalised action units)."""
    td3_target_noise: float = 0.2
    """td3: std of the target policy smoothing noise (clipped at 2.5 times itself)."""
    residual_scale: float = 0.0
    """Residual RL when > 0: the actor sees the observation with its ``base_action`` key and
    outputs a correction; the executed action is clip(base + residual_scale * tanh(u), -1, 1)
    in normalised units, and the critics see the observation without the base action and the
    executed action. The actor's mean layer starts at zero, so the untrained policy's
    deterministic action is the base action, bit for bit."""
    residual_penalty: float = 0.0
    """Residual RL: weight of a penalty on the size of the correction, over every row,
    TD3+BC-scaled like ``bc_weight`` (0 = off): the correction stays near zero where the critics
    give no consistent reason to move it, so the residual does not drift the base off course
    while its critics are still learning."""
    residual_q_filter: Literal["off", "deploy", "always"] = "off"
    """Residual RL: a Q-filter on the executed action. Where not every critic of the ensemble
    rates base + correction above the base's own action, the base's action runs instead, so a
    correction the critics are unsure of never reaches the arm. ``deploy``: the deterministic
    policy (evaluation, ``handrail eval``, ``actor_node``); ``always``: the training policy too
    (its exploration then stays where the critics see a gain). Without a residual
    (``residual_scale`` 0) there is no base to fall back on, and no filter."""
    residual_q_margin: float = 0.0
    """Residual RL with a Q-filter: how much every critic must rate the correction above the
    base's action (in Q, returns of the task's reward) for it to run."""
    deployed: Literal["mode", "training"] = "mode"
    """The policy that is evaluated and deployed (evaluation during training, ``handrail
    eval``, a residual base ``run:RUN``, ``actor_node``): ``mode``, the deterministic action
    tanh(mean); ``training``, once the actor learns (after ``actor_delay_blocks``), the
    training policy itself (SAC's sample, TD3's action with its exploration noise, through a
    residual's Q-filter): what the arm ran, and the critics ranked, while it learned. Before
    the actor learns it is the mode (a residual's: the base's action)."""
    actor_delay_blocks: int = 0
    """Update blocks with critic steps only before the actor (and temperature) start learning
    (a residual's critic learns the base policy's values first)."""
    image_features: int = 64
    """Camera observations: features per camera of the image encoder (a ConvEncoder per
    camera, shared by the critics and trained through their loss; the actor reads its features
    with the gradient stopped, as DrQ-v2 and RLPD do)."""
    image_channels: tuple[int, ...] = (32, 32, 32, 32)
    """Camera observations: channels of each convolution of the image encoder."""
    image_strides: tuple[int, ...] = (2, 2, 2, 1)
    """Camera observations: the stride of each convolution (as many as ``image_channels``)."""
    image_kernels: tuple[int, ...] = ()
    """Camera observations: the kernel size of each convolution (as many as
    ``image_channels``; none: 3 everywhere). A kernel equal to its stride is a patch embedding,
    run as a matmul: ``--sac.image-kernels 4 3 3 --sac.image-strides 4 2 1`` is the fast
    encoder on a CPU (docs/cameras.md)."""
    image_shift: int = 4
    """Camera observations: each update shifts every sampled frame by its own random offset of
    up to this many pixels (DrQ's augmentation; 0 = off); acting never does."""
    image_encode_once: bool = False
    """Camera observations: encode each sampled frame once per critic step, as DrQ-v2 does.
    The next observations go through the online encoder (no gradient) for both the target
    policy and the target critics, whose heads stay Polyak averages (no target encoder is
    read); the actor steps on the features its critic step computed, before that step's
    update. Off (RLPD's and SERL's accounting): the target critics read the target encoder,
    and the actor encodes its minibatch again after the critics' update. Two of an update's
    four encoder passes fewer (docs/cameras.md)."""

    def __post_init__(self) -> None:
        for name in _TUPLE_FIELDS:
            object.__setattr__(self, name, tuple(int(h) for h in getattr(self, name)))
        checks = {
            "hidden_dims": bool(self.hidden_dims) and min(self.hidden_dims) >= 1,
            "num_critics": self.num_critics >= 1,
            "critic_subset": 1 <= self.critic_subset <= self.num_critics,
            "actor_lr": self.actor_lr > 0,
            "critic_lr": self.critic_lr > 0,
            "temperature_lr": self.temperature_lr > 0,
            "gamma": 0.0 <= self.gamma <= 1.0,
            "tau": 0.0 < self.tau <= 1.0,
            "init_temperature": self.init_temperature > 0,
            "utd": self.utd >= 1,
            "actor_utd": 0 <= self.actor_utd <= self.utd,
            "batch_size": self.batch_size >= 1,
            "n_step": self.n_step >= 1,
            "bc_weight": self.bc_weight >= 0.0,
            "intervention_bc_weight": self.intervention_bc_weight >= 0.0,
            "entropy_rows": self.entropy_rows in ("all", "online"),
            "algorithm": self.algorithm in ("sac", "td3"),
            "td3_noise": self.td3_noise >= 0.0,
            "td3_target_noise": self.td3_target_noise >= 0.0,
            "residual_scale": 0.0 <= self.residual_scale <= 2.0,
            "residual_penalty": self.residual_penalty >= 0.0
            and (self.residual_penalty == 0.0 or self.residual_scale > 0.0),
            "residual_q_filter": self.residual_q_filter in ("off", "deploy", "always"),
            "residual_q_margin": self.residual_q_margin >= 0.0,
            "deployed": self.deployed in ("mode", "training"),
            "actor_delay_blocks": self.actor_delay_blocks >= 0,
            "late_entropy_blocks": self.late_entropy_blocks >= 0,
            **image_checks(self.image_channels, self.image_strides, self.image_features,
                           self.image_shift, self.image_kernels),
        }  # fmt: skip
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{n}={getattr(self, n)!r}" for n in bad)
            raise ValueError(
                f"SACConfig: invalid {values} (need: widths >= 1, 1 <= critic_subset <= "
                "num_critics, positive rates, gamma in [0, 1], tau in (0, 1], utd/batch_size/"
                "n_step >= 1, 0 <= actor_utd <= utd, bc weights >= 0, entropy_rows all or online, "
                "algorithm sac or td3, noises >= 0, residual_scale in [0, 2], "
                "residual_penalty >= 0 and only with residual_scale > 0, residual_q_filter off, "
                "deploy or always, residual_q_margin >= 0, deployed mode or training, "
                f"actor_delay_blocks and late_entropy_blocks >= 0, {IMAGE_NEEDS})"
            )

    @classmethod
    def rlpd(cls, **overrides: Any) -> SACConfig:
        """RLPD: 10 LayerNorm critics, subset 2, UTD 20, batch 256, half demos."""
        return cls(**overrides)

    @classmethod
    def cpu(cls, **overrides: Any) -> SACConfig:
        """A laptop-CPU preset: 2 critics, 128x128 nets, UTD 4, batch 128."""
        base = {"hidden_dims": (128, 128), "num_critics": 2, "utd": 4, "batch_size": 128}
        return cls(**{**base, **overrides})

    @classmethod
    def hil_serl(cls, **overrides: Any) -> SACConfig:
        """HIL-SERL: 2 critics, gamma 0.97, alpha0 0.01, no entropy backup, critic-heavy UTD."""
        base = {
            "num_critics": 2,
            "gamma": 0.97,
            "init_temperature": 0.01,
            "backup_entropy": False,
            "utd": 2,
        }
        return cls(**{**base, **overrides})

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible dict of every field."""
        out = dataclasses.asdict(self)
        for name in _TUPLE_FIELDS:
            out[name] = list(out[name])
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SACConfig:
        """Inverse of :meth:`to_json`; unknown fields -> ValueError."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"SACConfig: unknown fields {sorted(unknown)}; valid: {sorted(names)}")
        return cls(**data)  # __post_init__ makes the JSON lists tuples


class Encoded(NamedTuple):
    """Network-input observations whose camera frames are encoded already: the encoder's
    ``features`` (..., F) beside the flat rows ``obs`` they came from, whose other columns the
    networks still read. Anything that takes network-input observations takes these too."""

    features: jax.Array
    obs: jax.Array


def _flat(obs: jax.Array | Encoded) -> jax.Array:
    """The flat network-input rows of ``obs`` (encoded or not)."""
    return obs.obs if isinstance(obs, Encoded) else obs


@flax.struct.dataclass
class SACState:
    """Everything the learner updates: params, targets, optimizer states, RNG and counters."""

    actor_params: Any
    critic_params: Any
    target_critic_params: Any
    log_temperature: jax.Array
    actor_opt_state: Any
    critic_opt_state: Any
    temperature_opt_state: Any
    rng: jax.Array
    step: jax.Array
    """Update blocks applied (each = utd critic steps + 1 actor step)."""
    obs_norm: Any
    """How flat observations are normalised before the networks see them (frozen once fitted;
    :mod:`handrail.learners.obs_norm`): the identity until the learner fits it."""


def _zeros(mean: jax.Array) -> jax.Array:
    """A zero log-probability per row (deterministic actors)."""
    return jnp.zeros(mean.shape[:-1], mean.dtype)


def _residual_columns(
    obs_spec: ObsSpec, action_spec: ActionSpec, config: SACConfig
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Flat-observation columns of the base action and of what the critics see (residual)."""
    if config.residual_scale <= 0.0:
        return None, None
    if BASE_ACTION_KEY not in obs_spec.keys:
        raise ValueError(
            f"SAC: residual_scale={config.residual_scale} needs the base policy's action as "
            f"observation key {BASE_ACTION_KEY!r}, but the observation has {list(obs_spec.keys)}; "
            "wrap the env with handrail.learners.agents.residual.ResidualObservation (handrail train "
            "--residual-on does)"
        )
    shape = obs_spec.shapes[obs_spec.keys.index(BASE_ACTION_KEY)]
    if shape != (action_spec.dim,):
        raise ValueError(
            f"SAC: observation key {BASE_ACTION_KEY!r} has shape {shape}; it must be "
            f"the base action, shape ({action_spec.dim},)"
        )
    columns = dict(obs_spec.slices())[BASE_ACTION_KEY]
    base = np.arange(columns.start, columns.stop)
    return base, np.setdiff1d(np.arange(obs_spec.dim), base)


def _all_finite(tree: Any) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


_TWINS: collections.OrderedDict[Any, SAC] = collections.OrderedDict()
"""The last few agents built, by what defines them: a new one equal to one of them shares its
compiled functions (XLA:CPU takes seconds per compile; a process may build the same agent
again: a resume, an evaluation, the next run of a bench or a test)."""


def _twin(sac: SAC) -> SAC | None:
    """An agent built before from the same specs, config and pairs (None: remember this one)."""
    twin = _TWINS.get(sac)
    if twin is None:
        _TWINS[sac] = sac
        while len(_TWINS) > 8:
            _TWINS.popitem(last=False)
    else:
        _TWINS.move_to_end(sac)
    return twin


class SAC:
    """The learner: built from specs and a config; all methods are pure in ``SACState``."""

    def __init__(
        self, obs_spec: ObsSpec, action_spec: ActionSpec, config: SACConfig,
        pairs: obs_norm.Pairs = (),
    ) -> None:  # fmt: skip
        """``pairs``: columns of the flat observation whose differences the networks also read
        (:func:`~handrail.learners.obs_norm.meeting_pairs`; none by default)."""
        self.obs_spec, self.action_spec, self.config = obs_spec, action_spec, config
        self.pairs: obs_norm.Pairs = tuple((int(i), int(j)) for i, j in pairs)
        self.input_spec = obs_norm.input_spec(obs_spec, self.pairs)
        self.residual = config.residual_scale > 0.0
        self.q_filtered = config.residual_q_filter if self.residual else "off"
        self.base_columns, self.critic_columns = _residual_columns(obs_spec, action_spec, config)
        extra = np.arange(obs_spec.dim, self.input_spec.dim)  # the differences of ``pairs``
        if self.critic_columns is not None and self.pairs:  # the differences come after
            self.critic_columns = np.concatenate([self.critic_columns, extra])
        self.cameras = obs_spec.images
        self.encode_once = bool(self.cameras) and config.image_encode_once
        if self.cameras:  # the encoder reads the frames; the networks its features and the rest
            self.state_columns = np.concatenate([obs_spec.state_columns(), extra])
            # A residual's critics read neither the frames' columns nor the base's action.
            self.critic_state_columns = (
                self.state_columns
                if self.base_columns is None
                else np.setdiff1d(self.state_columns, self.base_columns)
            )
            self.encoder = CameraEncoders(
                self.cameras,
                config.image_channels,
                config.image_strides,
                config.image_features,
                config.image_kernels,
            )
        self.actor = Actor(config.hidden_dims, action_spec.dim, zero_mean=self.residual)
        self.critic = CriticEnsemble(
            config.hidden_dims, config.num_critics, config.critic_layer_norm
        )
        # The target evaluates only the drawn subset (same params layout, fewer members).
        self.subset_critic = CriticEnsemble(
            config.hidden_dims, config.critic_subset, config.critic_layer_norm
        )
        self.target_entropy = (
            -action_spec.dim / 2.0 if config.target_entropy is None else config.target_entropy
        )
        self.actor_tx = optax.adam(config.actor_lr)
        self.critic_tx = optax.adam(config.critic_lr)
        self.temperature_tx = optax.adam(config.temperature_lr)
        self._key = (obs_spec, action_spec, config, self.pairs)  # frozen: hashable
        twin = _twin(self)
        if twin is None:
            self.update: Callable[..., Any] = jax.jit(self.update_fn)
            # One compiled call: flax's eager init compiles each of its ~100 ops on its own,
            # seconds at every start-up; the jitted one gives bit-identical params.
            self._init: Callable[..., Any] = jax.jit(self._init_fn)
            self._act: Callable[..., Any] = jax.jit(self.act_fn, static_argnames="deterministic")
        else:  # compiled already: a resume, an evaluation, a run after a run
            self.update, self._init, self._act = twin.update, twin._init, twin._act

    def __eq__(self, other: object) -> bool:
        """Agents from the same specs, config and pairs compute the same functions: jitted code
        that takes an agent as a static argument compiles once for all of them."""
        return isinstance(other, SAC) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    # -- networks as functions of explicit params -------------------------------------------
    def policy_fn(self, actor_params: Any, obs: jax.Array, key: jax.Array) -> tuple[Any, Any]:
        """The training policy: a ~ pi(.|obs) in [-1, 1] and its log-probability.

        SAC samples the tanh-Gaussian; TD3 adds Gaussian exploration noise to its deterministic
        action (log-probability 0). A residual actor's sample is its correction, composed with
        the observation's base action (:meth:`compose`).
        """
        mean, log_std = self._actor_out(actor_params, obs)
        if self.config.algorithm == "td3":
            noise = self.config.td3_noise * jax.random.normal(key, mean.shape, mean.dtype)
            return self.compose(obs, jnp.clip(jnp.tanh(mean) + noise, -1.0, 1.0)), _zeros(mean)
        action, log_prob = tanh_gaussian_sample(mean, log_std, key)
        return self.compose(obs, action), log_prob

    def target_policy_fn(
        self, actor_params: Any, obs: jax.Array, key: jax.Array
    ) -> tuple[Any, Any]:
        """Next actions of the critic target: SAC's sample, or TD3's smoothed action."""
        if self.config.algorithm != "td3":
            return self.policy_fn(actor_params, obs, key)
        mean = self._actor_out(actor_params, obs)[0]
        sigma = self.config.td3_target_noise
        noise = jnp.clip(sigma * jax.random.normal(key, mean.shape, mean.dtype), -2.5 * sigma,
                         2.5 * sigma)  # fmt: skip
        return self.compose(obs, jnp.clip(jnp.tanh(mean) + noise, -1.0, 1.0)), _zeros(mean)

    def loss_policy_fn(self, actor_params: Any, obs: jax.Array, key: jax.Array) -> tuple[Any, Any]:
        """The action the actor loss differentiates: SAC's sample, TD3's deterministic action."""
        if self.config.algorithm != "td3":
            return self.policy_fn(actor_params, obs, key)
        mean = self._actor_out(actor_params, obs)[0]
        return self.mode_fn(actor_params, obs), _zeros(mean)

    def mode_fn(self, actor_params: Any, obs: jax.Array) -> jax.Array:
        """The deterministic action tanh(mean) in [-1, 1] (composed with the base if residual)."""
        return self.compose(obs, jnp.tanh(self._actor_out(actor_params, obs)[0]))

    def compose(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """The executed action: ``action`` itself, or clip(base + scale * action) if residual."""
        if not self.residual:
            return action
        return jnp.clip(self.base_action(obs) + self.config.residual_scale * action, -1.0, 1.0)

    def base_action(self, obs: jax.Array | Encoded) -> jax.Array:
        """A residual's base action, read from a flat observation."""
        return _flat(obs)[..., self.base_columns]

    def critic_obs(self, obs: jax.Array) -> jax.Array:
        """What the critics see of a flat observation (a residual's critics: not the base)."""
        return obs if self.critic_columns is None else obs[..., self.critic_columns]

    def encode(self, encoder_params: Any, obs: jax.Array) -> jax.Array:
        """The image encoder's features (..., F) of the camera frames in flat ``obs``."""
        frames = [
            obs[..., cols].reshape((*obs.shape[:-1], *shape))
            for _, cols, shape in self.obs_spec.image_slices()
        ]
        encoded: jax.Array = self.encoder.apply({"params": encoder_params}, frames)  # type: ignore[assignment]
        return encoded

    def features(
        self, encoder_params: Any, obs: jax.Array | Encoded, columns: np.ndarray | None = None
    ) -> jax.Array:
        """What the actor's layers read of network-input ``obs`` with cameras: the image
        encoder's features (:class:`Encoded` ones as they are), then the other columns
        (``columns``: these instead, as the critics' :attr:`critic_state_columns`)."""
        if isinstance(obs, Encoded):
            encoded, obs = obs.features, obs.obs
        else:
            encoded = self.encode(encoder_params, obs)
        columns = self.state_columns if columns is None else columns
        return jnp.concatenate([encoded, obs[..., columns]], axis=-1)

    def critic_fn(self, critic_params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        """Q-values of all critics, shape (num_critics, ...); with cameras, the critics'
        encoder (``critic_params["encoder"]``) is trained through this."""
        if self.cameras:
            inputs = self.features(critic_params["encoder"], obs, self.critic_state_columns)
            critic_params = critic_params["q"]
        else:
            inputs = self.critic_obs(obs)
        q: jax.Array = self.critic.apply({"params": critic_params}, inputs, action)  # type: ignore[assignment]
        return q

    def subset_critic_fn(self, params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        """Q-values of ``critic_subset`` critics whose params were gathered from the ensemble."""
        q: jax.Array = self.subset_critic.apply({"params": params}, self.critic_obs(obs), action)  # type: ignore[assignment]
        return q

    def _actor_out(self, actor_params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(mean, log_std) of the Gaussian before the tanh. With cameras the actor reads the
        critics' encoder (its copy, :meth:`share_encoder`) with the gradient stopped: the actor
        loss never moves it."""
        if self.cameras:
            encoder = jax.lax.stop_gradient(actor_params["encoder"])
            obs, actor_params = self.features(encoder, obs), actor_params["pi"]
        out: tuple[jax.Array, jax.Array] = self.actor.apply({"params": actor_params}, obs)  # type: ignore[assignment]
        return out

    def temperature(self, state: SACState) -> jax.Array:
        """The entropy temperature alpha (0 for TD3, whose actor has no entropy term)."""
        if self.config.algorithm == "td3":
            return jnp.zeros((), jnp.float32)
        return jnp.exp(state.log_temperature)

    # -- state --------------------------------------------------------------------------------
    def init(self, key: jax.Array) -> SACState:
        """Fresh learner state from a PRNG key."""
        return self._init(key)

    def _init_fn(self, key: jax.Array) -> SACState:
        key_actor, key_critic, rng = jax.random.split(key, 3)
        obs = jnp.zeros((1, self.input_spec.dim), jnp.float32)
        action = jnp.zeros((1, self.action_spec.dim), jnp.float32)
        if self.cameras:
            # rng is split again only here: agents without cameras keep their streams.
            rng, key_encoder = jax.random.split(rng)
            frames = [
                jnp.zeros((1, *shape), jnp.uint8) for *_, shape in self.obs_spec.image_slices()
            ]
            encoder = self.encoder.init(key_encoder, frames)["params"]
            inputs = self.features(encoder, obs)
            actor_params = {"encoder": encoder, "pi": self.actor.init(key_actor, inputs)["params"]}
            seen = self.features(encoder, obs, self.critic_state_columns)
            critic_params = {
                "encoder": encoder,
                "q": self.critic.init(key_critic, seen, action)["params"],
            }
        else:
            actor_params = self.actor.init(key_actor, obs)["params"]
            critic_params = self.critic.init(key_critic, self.critic_obs(obs), action)["params"]
        log_temperature = jnp.asarray(np.log(self.config.init_temperature), jnp.float32)
        return SACState(
            actor_params=actor_params,
            critic_params=critic_params,
            target_critic_params=jax.tree_util.tree_map(jnp.array, critic_params),
            log_temperature=log_temperature,
            actor_opt_state=self.actor_tx.init(actor_params),
            critic_opt_state=self.critic_tx.init(critic_params),
            temperature_opt_state=self.temperature_tx.init(log_temperature),
            rng=rng,
            step=jnp.zeros((), jnp.int32),
            obs_norm=jax.tree_util.tree_map(jnp.asarray, obs_norm.identity(self.input_spec.dim)),
        )

    # -- update -------------------------------------------------------------------------------
    def critic_step(
        self, state: SACState, inputs: tuple[Batch, jax.Array, jax.Array, jax.Array]
    ) -> tuple[SACState, tuple[dict[str, jax.Array], jax.Array | None]]:
        """One critic gradient step, then the Polyak update.

        ``inputs`` is (minibatch, next actions, their log-probabilities, key of the subset draw).
        Returns the new state, the metrics and, with ``image_encode_once``, the encoder's
        features of the minibatch's observations (before this step's update; no gradient).
        """
        batch, next_action, next_log_prob, key = inputs

        def loss(params: Any, batch: Batch) -> tuple[jax.Array, dict[str, jax.Array]]:
            return losses.critic_loss(
                params,
                state.target_critic_params,
                self.temperature(state),
                batch,
                next_action,
                next_log_prob,
                key,
                critic_fn=self.critic_fn,
                critic_subset=self.config.critic_subset,
                backup_entropy=self.config.backup_entropy,
                subset_critic_fn=(
                    self.subset_critic_fn
                    # with cameras the encoder's leaves have no ensemble axis to gather along
                    # (and it costs more than the heads a subset saves)
                    if self.config.critic_subset < self.config.num_critics and not self.cameras
                    else None
                ),
            )

        features = None
        if self.encode_once:
            # The encoder's gradient through its features (the chain rule by hand), so the
            # features themselves come out for the actor.
            encoder = state.critic_params["encoder"]
            features, pullback = jax.vjp(lambda e: self.encode(e, batch.obs), encoder)

            def heads_loss(heads: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
                params = {"encoder": encoder, "q": heads["q"]}
                return loss(params, batch._replace(obs=Encoded(heads["features"], batch.obs)))

            heads = {"q": state.critic_params["q"], "features": features}
            head_grads, metrics = jax.grad(heads_loss, has_aux=True)(heads)
            grads = {"encoder": pullback(head_grads["features"])[0], "q": head_grads["q"]}
            features = jax.lax.stop_gradient(features)
        else:
            grads, metrics = jax.grad(loss, has_aux=True)(state.critic_params, batch)
        updates, opt_state = self.critic_tx.update(grads, state.critic_opt_state)
        params = optax.apply_updates(state.critic_params, updates)
        target = losses.polyak(params, state.target_critic_params, self.config.tau)
        new = dataclasses.replace(
            state, critic_params=params, target_critic_params=target, critic_opt_state=opt_state
        )
        return new, (metrics, features)

    def actor_step(
        self, state: SACState, batch: Batch, key: jax.Array
    ) -> tuple[SACState, dict[str, jax.Array]]:
        """One actor step and one temperature step on a minibatch; increments ``step``.

        The behaviour-cloning terms apply to the offline rows (``config.bc_weight``) and to the
        person's corrections (``config.intervention_bc_weight``); the temperature follows the
        entropy of ``config.entropy_rows``.
        """
        grads, metrics = jax.grad(losses.actor_loss, has_aux=True)(
            state.actor_params,
            state.critic_params,
            self.temperature(state),
            batch,
            key,
            policy_fn=self.loss_policy_fn,
            critic_fn=self.critic_fn,
            bc_weight=self.config.bc_weight,
            intervention_bc_weight=self.config.intervention_bc_weight,
            mode_fn=self.mode_fn,
            anchor_weight=self.config.residual_penalty,
            anchor_fn=self.base_action if self.residual else None,
        )
        updates, actor_opt = self.actor_tx.update(grads, state.actor_opt_state)
        actor_params = optax.apply_updates(state.actor_params, updates)
        entropy = metrics[
            "actor/entropy_online" if self.config.entropy_rows == "online" else "actor/entropy"
        ]
        t_grad, t_metrics = jax.grad(losses.temperature_loss, has_aux=True)(
            state.log_temperature, entropy, self.entropy_target(state.step)
        )
        t_updates, t_opt = self.temperature_tx.update(t_grad, state.temperature_opt_state)
        new = dataclasses.replace(
            state,
            actor_params=actor_params,
            actor_opt_state=actor_opt,
            log_temperature=optax.apply_updates(state.log_temperature, t_updates),
            temperature_opt_state=t_opt,
            step=state.step + 1,
        )
        metrics = {**metrics, **t_metrics}
        if self.q_filtered != "off":  # the share of rows the filter would pass
            mode = self.mode_fn(state.actor_params, batch.obs)
            keep = self.q_filter(state.critic_params, batch.obs, mode)[1]
            metrics["actor/q_filter_keep"] = jnp.mean(keep.astype(jnp.float32))
        return new, metrics

    def _scan(self, step: Callable[..., Any], state: SACState, xs: Any) -> tuple[SACState, Any]:
        """``lax.scan(step, state, xs)``; with cameras, the same steps written out one after
        the other: XLA:CPU ran the convolutions of a critic step on two 64x64 cameras (batch
        128) 15x slower inside the loop (7.0 s against 0.48 s)."""
        if not self.cameras:
            return jax.lax.scan(step, state, xs)
        outs = []
        for i in range(jax.tree_util.tree_leaves(xs)[0].shape[0]):
            state, out = step(state, jax.tree_util.tree_map(lambda x, i=i: x[i], xs))
            outs.append(out)
        return state, jax.tree_util.tree_map(lambda *x: jnp.stack(x), *outs)

    def _critic_block(
        self, state: SACState, batch: Batch, key: jax.Array
    ) -> tuple[SACState, tuple[dict[str, jax.Array], jax.Array | None]]:
        """``len(batch)`` critic steps in a scan; next actions sampled for all of them at once.
        Returns the state, the steps' stacked metrics and (``image_encode_once``) features."""
        key_next, key_subset = jax.random.split(key)
        if self.encode_once:  # the next frames encoded once, by the encoder the actor reads
            encoder = jax.lax.stop_gradient(state.actor_params["encoder"])
            batch = batch._replace(
                next_obs=Encoded(self.encode(encoder, batch.next_obs), batch.next_obs)
            )
        next_action, next_log_prob = self.target_policy_fn(
            state.actor_params, batch.next_obs, key_next
        )
        subset_keys = jax.random.split(key_subset, batch.reward.shape[0])
        return self._scan(self.critic_step, state, (batch, next_action, next_log_prob, subset_keys))

    def _actor_block(
        self, state: SACState, batch: Batch, key: jax.Array, features: jax.Array | None = None
    ) -> tuple[SACState, dict[str, jax.Array]]:
        """``config.actor_utd`` actor and temperature steps on the block's last minibatches
        (``step`` still counts the block once); metrics of the last step. ``features``: the
        critic steps' features of the minibatches' observations, read in their place."""
        if features is not None:
            batch = batch._replace(obs=Encoded(features, batch.obs))
        k = self.config.actor_utd or self.config.utd
        if k == 1:
            return self.actor_step(state, jax.tree_util.tree_map(lambda x: x[-1], batch), key)
        tail = jax.tree_util.tree_map(lambda x: x[-k:], batch)
        new, metrics = self._scan(
            lambda s, inputs: self.actor_step(s, *inputs), state, (tail, jax.random.split(key, k))
        )
        new = dataclasses.replace(new, step=state.step + 1)
        return new, {name: value[-1] for name, value in metrics.items()}

    def pretrain_step(self, state: SACState, batch: Batch) -> tuple[SACState, dict[str, jax.Array]]:
        """One step on an offline-only minibatch: a critic step, then a pure BC actor step."""
        batch = self.normalize_batch(state, batch)
        rng, key = jax.random.split(state.rng)
        state, (metrics, _) = self._critic_block(
            dataclasses.replace(state, rng=rng),
            jax.tree_util.tree_map(lambda x: x[None], batch),
            key,
        )
        state = self.share_encoder(state)
        grad_fn = jax.value_and_grad(losses.bc_mse)
        bc, grads = grad_fn(state.actor_params, batch.obs, batch.action, mode_fn=self.mode_fn)
        updates, actor_opt = self.actor_tx.update(grads, state.actor_opt_state)
        new = dataclasses.replace(
            state,
            actor_params=optax.apply_updates(state.actor_params, updates),
            actor_opt_state=actor_opt,
        )
        return new, {**{k: v[0] for k, v in metrics.items()}, "actor/bc_mse": bc}

    def entropy_target(self, step: jax.Array) -> jax.Array | float:
        """The temperature's target entropy at update block ``step``."""
        late = self.config.late_target_entropy
        if late is None:
            return self.target_entropy
        return jnp.where(step < self.config.late_entropy_blocks, self.target_entropy, late)

    def update_fn(self, state: SACState, batch: Batch) -> tuple[SACState, dict[str, jax.Array]]:
        """Un-jitted body of :meth:`update` (for fusing into larger jitted functions).

        ``batch`` leaves have leading dims (utd, batch_size): one minibatch per critic step; the
        actor and temperature step on the last one. Its observations are raw: they are
        normalised here with ``state.obs_norm``.
        """
        batch = self.normalize_batch(state, batch)
        rng, key_critic, key_actor = jax.random.split(state.rng, 3)
        if self.cameras:
            key_critic, key_shift = jax.random.split(key_critic)
            batch = self.augment(batch, key_shift)
        new, (critic_metrics, features) = self._critic_block(
            dataclasses.replace(state, rng=rng), batch, key_critic
        )
        new = self.share_encoder(new)
        critic_only = dataclasses.replace(new, step=new.step + 1)
        new, actor_metrics = self._actor_block(new, batch, key_actor, features)
        if self.config.actor_delay_blocks > 0:  # critic-only blocks first: keep the actor
            start = self.actor_learns(critic_only.step)
            new = jax.tree_util.tree_map(lambda a, b: jnp.where(start, a, b), new, critic_only)
        metrics = {k: jnp.mean(v) for k, v in critic_metrics.items()}
        metrics.update(actor_metrics)
        finite = _all_finite(
            (
                critic_metrics["critic/loss"],
                actor_metrics["actor/loss"],
                metrics["temperature/loss"],
            )
        )
        new = jax.tree_util.tree_map(lambda n, o: jnp.where(finite, n, o), new, state)
        new = dataclasses.replace(new, rng=rng)  # a skipped block still moves the RNG on
        metrics["update/nonfinite"] = 1.0 - finite.astype(jnp.float32)
        return new, metrics

    def share_encoder(self, state: SACState) -> SACState:
        """With cameras: the actor's copy of the encoder set to the critics' (after their
        steps), so the actor and every policy published read what the critics learned."""
        if not self.cameras:
            return state
        actor = {**state.actor_params, "encoder": state.critic_params["encoder"]}
        return dataclasses.replace(state, actor_params=actor)

    def augment(self, batch: Batch, key: jax.Array) -> Batch:
        """``batch`` with every camera frame of ``obs`` and ``next_obs`` shifted by its own
        random offset of up to ``config.image_shift`` pixels (DrQ); updates only."""
        pad = self.config.image_shift
        if not self.cameras or pad <= 0:
            return batch

        def shift(obs: jax.Array, key: jax.Array) -> jax.Array:
            # The row is put back together in column order (a scatter into it per camera
            # copied the whole batch each time: a fifth of an update on two 64x64 cameras).
            keys = jax.random.split(key, len(self.cameras))
            lead, pieces, start = obs.shape[:-1], [], 0
            slices = sorted(self.obs_spec.image_slices(), key=lambda item: item[1].start)
            for k, (_, cols, shape) in zip(keys, slices, strict=True):
                frames = obs[..., cols].reshape((-1, *shape))
                moved = random_shift(frames, k, pad).reshape((*lead, cols.stop - cols.start))
                pieces += [obs[..., start : cols.start], moved]
                start = cols.stop
            return jnp.concatenate([*pieces, obs[..., start:]], axis=-1)

        key_obs, key_next = jax.random.split(key)
        return batch._replace(
            obs=shift(batch.obs, key_obs), next_obs=shift(batch.next_obs, key_next)
        )

    # -- acting -------------------------------------------------------------------------------
    def inputs(self, norm: obs_norm.ObsNorm, obs: Any) -> Any:
        """What the networks read of raw flat observations: the differences of ``pairs``
        appended, every column normalised by ``norm``."""
        return obs_norm.apply(norm, obs_norm.extend(obs, self.pairs))

    def normalize_batch(self, state: SACState, batch: Batch) -> Batch:
        """``batch`` with its observations turned into network inputs (:meth:`inputs`)."""
        return batch._replace(obs=self.inputs(state.obs_norm, batch.obs),
                              next_obs=self.inputs(state.obs_norm, batch.next_obs))  # fmt: skip

    def policy_params(self, state: SACState) -> dict[str, Any]:
        """What a policy needs of the state: the actor's params and the normalisation, and the
        critics' when a Q-filter ranks the actions (the params a learner publishes, a
        checkpoint's policy runs on, :meth:`make_policy` takes)."""
        params = {"actor": state.actor_params, "obs_norm": state.obs_norm}
        if self.q_filtered != "off":
            params["critic"] = state.critic_params
        if self.config.deployed == "training":
            params["actor_on"] = jnp.asarray(self.actor_learns(state.step))
        return params

    def actor_learns(self, step: jax.Array) -> jax.Array:
        """Whether the actor has had its updates once ``step`` update blocks are applied: not
        in the first ``actor_delay_blocks`` (critic-only) blocks."""
        return step > self.config.actor_delay_blocks

    def act_fn(
        self, params: dict[str, Any], obs: jax.Array, key: jax.Array, deterministic: bool
    ) -> jax.Array:
        """Un-jitted action of :meth:`policy_params` on raw flat observations: the deployed
        policy (``deterministic``: :attr:`SACConfig.deployed`) or the training policy."""
        obs = self.inputs(params["obs_norm"], obs)
        if not deterministic:
            action = self.policy_fn(params["actor"], obs, key)[0]
        elif self.config.deployed == "training":
            action = jnp.where(params["actor_on"], self.policy_fn(params["actor"], obs, key)[0],
                               self.mode_fn(params["actor"], obs))  # fmt: skip
        else:
            action = self.mode_fn(params["actor"], obs)
        if self.q_filtered == "always" or (self.q_filtered == "deploy" and deterministic):
            action = self.q_filter(params["critic"], obs, action)[0]
        return action

    def q_filter(
        self, critic_params: Any, obs: jax.Array, action: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """A residual's ``action`` where every critic rates it above the base's own action on
        the (network-input) ``obs``, else the base's action; and where ``action`` was kept."""
        base = self.base_action(obs)
        gain = self.critic_fn(critic_params, obs, action) - self.critic_fn(critic_params, obs, base)
        keep = jnp.min(gain, axis=0) > self.config.residual_q_margin
        return jnp.where(keep[..., None], action, base), keep

    def act(
        self, state: SACState, obs_flat: np.ndarray, key: jax.Array, deterministic: bool = False
    ) -> np.ndarray:
        """Actions in [-1, 1] for one flat observation (D,) or a batch (N, D)."""
        obs = jnp.asarray(obs_flat, jnp.float32)
        params = self.policy_params(state)
        return np.asarray(self._act(params, obs, key, deterministic=deterministic))

    def make_policy(
        self, params: dict[str, Any], deterministic: bool
    ) -> Callable[[ArrayLike, jax.Array], jax.Array]:
        """The one inference function ``policy(obs_flat, key) -> action in [-1, 1]`` (jitted)
        over :meth:`policy_params`."""
        act = self._act

        def policy(obs_flat: ArrayLike, key: jax.Array) -> jax.Array:
            return act(params, jnp.asarray(obs_flat, jnp.float32), key, deterministic=deterministic)

        return policy
