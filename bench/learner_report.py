"""What ``handrail bench learner`` prints: the table, the goal verdicts, the replay's size."""

from __future__ import annotations

from typing import Any

SPEEDUP_GOALS = {1: 2.0, 20: 1.4}
"""Goal for handrail's env steps/s over SBX's, by UTD (2 critics, same sizes)."""
RLPD_GOAL_UPDATES_S = 80.0
"""Goal for the RLPD configuration's gradient updates/s on the 2-core CI machine."""
SBX_UTD20_WHEN_SET = 14.0
"""SBX's env steps/s at UTD 20 on that machine when the RLPD goal was set: the speed reference."""
FLOOR_GOAL_UTD20 = 1.25
"""Goal for handrail's ms per update over the matmul floor at UTD 20."""
PIXEL_GOAL_SB3 = 3.0
"""Goal for handrail's pixel update over SB3's (``pick_cube:pixels``, same images and batch)."""
NOT_SLOWER = {1: 1.22, 20: 2.10}
"""handrail/SBX on HalfCheetah before the actor/learner core was reshaped (README, then):
the reshaped core must not fall below them."""

_DEVICE = {"cpu": "CPU", "cuda": "GPU"}
"""What the floor's rate was measured on, by platform."""


def _ms(ms: float) -> str:
    """Milliseconds to two decimals, or three significant digits below 1 ms (a floor of 0.03 ms
    printed as 0.03 would be 15% off the ratio in the next column)."""
    return f"{ms:.2f}" if ms >= 1 else f"{ms:.3g}"


def print_table(rows: list[dict[str, Any]], rate: dict[str, Any]) -> None:
    """The Markdown table of every row, the floor and the goal lines."""
    print("| env | UTD | learner | env steps/s | ms / grad update | vs SBX | vs SB3 | "
          "matmul floor ms | x floor |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    by_key = {(r["env"], r["utd"], r["learner"], r["num_critics"]): r for r in rows}
    for r in rows:
        if "error" in r:
            print(f"| {r['env']} | {r['utd']} | {r['label']} | error: {r['error']} | | | | | |")
            continue
        ratios = []
        for peer in ("sbx", "sb3"):
            other = by_key.get((r["env"], r["utd"], peer, 2), {})
            # an async actor never waits for updates: its env steps/s compares with no peer's
            ok = "env_steps_per_s" in other and r["learner"] not in (peer, "handrail-async")
            ratios.append(f"{r['env_steps_per_s'] / other['env_steps_per_s']:.2f}x" if ok else "")
        floor = 1e3 * r["gflop_per_update"] / rate["gflop_s"]
        print(
            f"| {r['env']} | {r['utd']} | {r['label']} | {r['env_steps_per_s']:.1f} | "
            f"{r['ms_per_update']:.2f} | {ratios[0]} | {ratios[1]} | {_ms(floor)} | "
            f"{r['ms_per_update'] / floor:.2f} |"
        )
    platform = rate.get("platform", "cpu")
    print(
        f"matmul floor: the update's matmul FLOPs at this {_DEVICE[platform]}'s jitted "
        f"{rate['batch']}x{max(rate['hidden'])} matmul rate, {rate['gflop_s']:.0f} GFLOP/s "
        "(best of 20 rounds)"
    )
    if platform != "cpu":
        print("goals: set for the 2-core CPU machine, not judged on another platform")
        return
    for line in goal_lines(rows, rate["gflop_s"]):
        print(line)


def goal_lines(rows: list[dict[str, Any]], gflop_s: float) -> list[str]:
    """Each goal's verdict for this run, with the bounds the update's cost puts on it.

    The floor bound is SBX's ms per update over the floor of handrail's update: what an
    implementation with no overhead at all would reach. The second bound is SBX's ms per
    update over handrail's measured jitted update alone: what removing every other per-step
    cost (env, replay, acting, Python) would reach. The RLPD line also scales its rate
    by SBX's UTD-20 speed in this run against its speed when the goal was set, because this
    shared VM's speed drifts by up to 40% within an hour.
    """
    by_key = {(r["env"], r["utd"], r["learner"], r["num_critics"]): r for r in rows}
    lines = ["goals:"]
    for r in rows:
        if r["env"].endswith(":pixels") and r["learner"] in ("handrail", "handrail-twice"):
            sb3 = by_key.get((r["env"], r["utd"], "sb3", 2), {})
            if "error" in r or "ms_per_update" not in sb3:
                continue
            ratio = sb3["ms_per_update"] / r["ms_per_update"]
            lines.append(f"  {r['env']} UTD {r['utd']}, {r.get('label', r['learner'])}: "
                         f"{ratio:.2f}x SB3 per gradient update, goal {PIXEL_GOAL_SB3:.1f}x: "
                         f"{'met' if ratio >= PIXEL_GOAL_SB3 else 'not met'}")  # fmt: skip
            continue
        if "error" in r or r["learner"] != "handrail":
            continue
        sbx = by_key.get((r["env"], r["utd"], "sbx", 2), {})
        if r["num_critics"] > 2:
            verdict = "met" if r["updates_per_s"] >= RLPD_GOAL_UPDATES_S else "not met"
            line = (f"  RLPD on {r['env']}: {r['updates_per_s']:.1f} gradient updates/s, goal "
                    f"{RLPD_GOAL_UPDATES_S:.0f}: {verdict}")  # fmt: skip
            if "env_steps_per_s" in sbx:
                speed = sbx["env_steps_per_s"] / SBX_UTD20_WHEN_SET
                line += (f" (SBX at UTD 20 ran at {speed:.2f}x its speed when the goal was "
                         f"set; at that speed: {r['updates_per_s'] / speed:.0f}/s)")  # fmt: skip
            lines.append(line)
        elif r["utd"] in SPEEDUP_GOALS and "env_steps_per_s" in sbx:
            goal, ratio = SPEEDUP_GOALS[r["utd"]], r["env_steps_per_s"] / sbx["env_steps_per_s"]
            bound = sbx["ms_per_update"] / (1e3 * r["gflop_per_update"] / gflop_s)
            line = (f"  {r['env']} UTD {r['utd']}: {ratio:.2f}x SBX, goal {goal:.1f}x: "
                    f"{'met' if ratio >= goal else 'not met'} (floor bound: {bound:.2f}x")  # fmt: skip
            if "update_only_ms" in r:
                line += (f"; handrail's jitted update alone takes {r['update_only_ms']:.2f} ms, "
                         f"so no per-step saving gets past "
                         f"{sbx['ms_per_update'] / r['update_only_ms']:.2f}x")  # fmt: skip
            line += ")"
            if r["env"] == "HalfCheetah-v5":
                before = NOT_SLOWER[r["utd"]]
                line += (f"; before the core was reshaped: {before:.2f}x, "
                         f"{'not slower' if ratio >= before else 'slower'}")  # fmt: skip
            lines.append(line)
            if r["utd"] == 20:
                floor = r["ms_per_update"] / (1e3 * r["gflop_per_update"] / gflop_s)
                lines.append(f"  {r['env']} UTD 20: {floor:.2f}x the matmul floor, goal "
                             f"{FLOOR_GOAL_UTD20:.2f}x: "
                             f"{'met' if floor <= FLOOR_GOAL_UTD20 else 'not met'}")  # fmt: skip
    return lines if len(lines) > 1 else []


def replay_bytes_lines(episode_steps: int = 50) -> list[str]:
    """Bytes per transition of the replay: pick_cube's state, then with two 64x64 cameras.

    Each observation is stored once, so a transition costs one row plus an episode's final row
    shared by its ``episode_steps`` transitions.
    """
    from handrail.learners.replay import ReplayField, ReplayLayout

    state = (ReplayField("obs", (31,), "float32"), ReplayField("action", (5,), "float32", "step"))
    cams = tuple(ReplayField(c, (64, 64, 3), "uint8") for c in ("front", "wrist"))
    lines = []
    for name, fields in (("state (pick_cube, 31 floats)", state),
                         ("state + 2 cameras 64x64", state + cams)):  # fmt: skip
        row = ReplayLayout(fields, (("online", 2),)).row_bytes
        per = row * (episode_steps + 1) / episode_steps
        frames = sum(f.row_bytes for f in fields if f.dtype == "uint8")
        note = f" ({per / frames:.3f} frames' worth per camera frame)" if frames else ""
        lines.append(f"replay bytes per transition, {name}, {episode_steps}-step episodes: "
                     f"{per:.0f}{note}")  # fmt: skip
    return lines
