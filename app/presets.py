"""Every preset of ``handrail train`` and ``handrail bc``, as data; why each value: docs/presets.md.

A preset is a layer of settings: TrainConfig fields by name, with ``sac``, ``loop`` and ``env``
dicts of SACConfig, LoopConfig and task-config fields and ``person`` of the simulated person's
(``hil.simulated``). :func:`handrail.app.config.resolve` stacks the layers in one order and
records which one set each field (``handrail train --print-config`` shows it). A task's preset
may also hold ``with_person`` (a layer for runs with ``--human``), ``residual`` (a layer for runs
with ``--residual-on``, over :data:`RESIDUAL_SAC`) and ``bc`` (``handrail bc``'s BCConfig fields).
The measurements behind the values, and their history, are in docs/presets.md, section by
section; a comment here names the section and says in one line why.
"""

from __future__ import annotations

from typing import Any

Layer = dict[str, Any]
"""One layer of settings (see the module docstring for its keys)."""

_SPARSE_SAC: dict[str, Any] = {
    "hidden_dims": (128, 128),  # docs/presets.md#the-arm-tasks: small nets at a high UTD, on CPU
    "utd": 8,  # #the-arm-tasks: 8 critic steps per env step
    "gamma": 0.95,  # #the-arm-tasks: a short horizon, the tasks take 10-30 steps
    "init_temperature": 0.05,  # #the-arm-tasks: little exploration noise next to the demos
    "n_step": 3,  # #the-arm-tasks: the sparse reward reaches back 3 steps per backup
    "backup_entropy": False,  # #the-arm-tasks: no entropy bonus in a sparse-reward backup
    "entropy_rows": "online",  # #the-arm-tasks: temperature tuned on the policy's own states
    "intervention_bc_weight": 2.0,  # #the-arm-tasks: a person's corrections are also imitated
}
"""The arm tasks' shared SAC settings (sparse reward, 20 scripted demos)."""

_RAW_INPUTS: dict[str, Any] = {
    "normalize_obs": False,  # docs/presets.md#the-arm-tasks: their offsets are scaled by hand
}
"""The arm tasks' observations as their presets were measured on (LoopConfig fields)."""

TASK_PRESETS: dict[str, Layer] = {
    "reach": {
        "steps": 15_000,  # docs/presets.md#reach: SAC reaches 100% from 2k env steps
        "env": {"reward": "dense"},  # #reach: the shaped distance reward, no demos
        "sac": {**_SPARSE_SAC,
                "n_step": 1,  # #reach: a dense reward needs no n-step backup
                "backup_entropy": True},  # #reach: a dense reward keeps SAC's entropy backup
        "loop": {**_RAW_INPUTS, "warmup_steps": 500},  # #the-arm-tasks: updates start after 500 env steps
        "ignore_obs_keys": ("proprio", "goal"),  # #reach: the goal from the gripper is enough
    },
    "pick_cube": {
        "steps": 20_000,  # docs/presets.md#pick_cube: 90% sustained from 4-5k env steps
        "expert_demos": 20,  # #the-arm-tasks: 20 scripted demos, half of every minibatch
        "sac": {**_SPARSE_SAC,
                "actor_utd": 0},  # #pick_cube: the actor steps after every critic step
        "loop": {**_RAW_INPUTS, "warmup_steps": 250},  # #pick_cube: corrections and demos learned sooner
        "env": {"episode_steps": 50},  # #pick_cube: 50-step episodes since its first tuning
        "residual": {
            "sac": {"residual_scale": 0.5,  # #residual-rl: the BC base is off by up to 0.8
                    "bc_weight": 4.0},  # #residual-rl: imitating the demos harder, no dip at the actor's start
            "loop": {"warmup_steps": 500},  # #residual-rl: critics see the base's returns first
        },
        "ignore_obs_keys": ("object",),  # #pick_cube: the cube from the gripper is enough
        "bc": {"horizon": 8,  # #bc: 8-action chunks read 85%, single actions 10%
               "temporal_ensemble": True,  # #bc: overlapping chunks averaged
               "val_fraction": 0.0,  # #bc: every one of 10 demos is for training
               "steps": 2000},  # #bc: enough for the chunked policy on 10 demos
    },
    "peg_insert": {
        "steps": 20_000,  # docs/presets.md#peg_insert: 90% sustained from 6k env steps
        "expert_demos": 20,  # #the-arm-tasks: 20 scripted demos, half of every minibatch
        "sac": {**_SPARSE_SAC,
                "actor_utd": 0,  # #peg_insert: the actor steps after every critic step
                "intervention_bc_weight": 8.0,  # #peg_insert: corrections imitated 4x harder
                "late_target_entropy": -8.0,  # #peg_insert: a less random policy once learned
                "late_entropy_blocks": 1500},  # #peg_insert: after about 2k env steps
        "loop": {**_RAW_INPUTS, "warmup_steps": 500,  # #the-arm-tasks: updates start after 500 env steps
                 "takeover_penalty": 1.0},  # #peg_insert: a takeover marks the step before it
        "person": {"stall_from": "first-gain",  # #peg_insert: the patient person
                   "judge_direction_below": 0.75},  # #peg_insert: no mid-insertion takeovers
        "with_person": {"sac": {"actor_utd": 1}},  # #peg_insert: faster with the person
        "residual": {"sac": {"bc_weight": 1.0,  # #residual-rl: imitates the demos too
                             "residual_penalty": 10.0}},  # #residual-rl: a small bias fails it
        "ignore_obs_keys": ("proprio", "peg", "hole"),  # #peg_insert: where to go next only
    },
    "push": {
        "steps": 50_000,  # docs/presets.md#push: 90% sustained from 29-31k env steps
        "expert_demos": 20,  # #the-arm-tasks: 20 scripted demos, half of every minibatch
        "eval_every": 2_500,  # #push: a longer run, evaluated less often
        "sac": _SPARSE_SAC,  # #the-arm-tasks
        "loop": {**_RAW_INPUTS, "warmup_steps": 500,  # #the-arm-tasks: updates after 500 steps
                 "relative_inputs": False},  # #push: its every-key inputs, as measured
    },
}  # fmt: skip
"""Each handrail task's preset, by task name."""

GENERIC: Layer = {
    "steps": 50_000,  # docs/presets.md#generic: HalfCheetah-v5 beat SB3's SAC at this budget
    "eval_every": 5_000,  # #generic: a long run, evaluated ten times
    "eval_episodes": 10,  # #generic: a return, not a success rate, per evaluation
    "sac": {"hidden_dims": (256, 256),  # #generic: SB3's network size
            "utd": 1},  # #generic: SB3's one gradient step per env step
    "loop": {"normalize_obs": False},  # #generic: statistics of a random warm-up cost locomotion
}  # fmt: skip
"""The preset of a task without its own (any other Gymnasium id)."""

MANIPULATION: Layer = {
    "steps": 20_000,  # docs/presets.md#manipulation: the arm tasks' budget
    "sac": {**_SPARSE_SAC,
            "actor_utd": 0},  # #pick_cube: the actor steps after every critic step
    "loop": {"warmup_steps": 500},  # #the-arm-tasks: updates start after 500 env steps
}  # fmt: skip
"""The preset of a task without its own that is trained from demonstrations or judged by a
success flag (``--demos``, ``--success-key``): the arm tasks' sparse-reward settings."""

PIXELS: Layer = {
    "sac": {"utd": 2,  # docs/presets.md#pixels: 2 critic steps per env step fit a CPU
            "batch_size": 64,  # #pixels: half the arm tasks' batch, at twice the updates
            "num_critics": 2,  # #pixels: each critic reads the shared encoder's features
            "image_channels": (16, 16, 16),  # #pixels: a CPU-sized encoder
            "image_kernels": (4, 3, 3),  # #pixels: a 4x4 patch embedding first, a matmul
            "image_strides": (4, 2, 1),  # #pixels: 64x64 -> 16x16 -> 8x8 -> 8x8
            "image_features": 32,  # #pixels: features per camera
            "image_encode_once": True},  # #pixels: DrQ-v2's 2 encoder passes a step, not 4
    "loop": {"buffer_capacity": 100_000,  # #pixels: 100k rows of two 64x64 cameras, 2.5 GB
             "intervention_capacity": 20_000},  # #pixels: a person's rows, 0.5 GB, not 2.5
}  # fmt: skip
"""The learner of a run on cameras (``--pixels``), over the task's preset."""

RESIDUAL_SAC: dict[str, Any] = {
    "algorithm": "td3",  # docs/presets.md#residual-rl: SAC's entropy bonus drowned the residual
    "residual_scale": 0.1,  # #residual-rl: a correction of at most 0.1 (normalised)
    "actor_lr": 1e-4,  # #residual-rl: the actor learns slowly (ResFiT)
    "n_step": 3,  # #residual-rl: n-step returns
    "actor_delay_blocks": 500,  # #residual-rl: the critics learn the base's returns first
    "actor_utd": 1,  # #residual-rl: 8 actor steps per block knocked an 85% base to 6-10%
    "residual_q_filter": "always",  # #residual-rl: a correction runs only where the critics see a gain
    "residual_q_margin": 0.03,  # #residual-rl: at 0 the critics agreed on harm (88% to 36%)
    "deployed": "training",  # #residual-rl: the policy the arm ran (peg_insert: 97% final, not 90%)
}  # fmt: skip
"""SACConfig fields of every residual run (``--residual-on``), under the task's ``residual``."""

SAC_PRESETS: tuple[str, ...] = ("cpu", "rlpd", "hil_serl")
"""The named SAC presets of ``--sac-preset``: SACConfig's constructors of these names. As a
layer, one sets each field where its config differs from SACConfig's defaults or from the
``cpu`` preset a run starts from (docs/presets.md#named-sac-presets)."""
