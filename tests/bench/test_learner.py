"""`handrail bench learner` runs side by side and prints a table with ratios (tiny config)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handrail.bench import learner as bench_learner_cmd
from handrail.bench import learner_report as bench_learner_report


def test_bench_learner_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = bench_learner_cmd.bench_learner(
        steps=10, warmup=40, envs=("Pendulum-v1",), utds=(1,), learners=("handrail", "sbx"),
        rlpd=False, hidden=(32,), batch=32, out=out,
    )  # fmt: skip
    table = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert code == 0, rows
    assert [r["learner"] for r in rows] == ["handrail", "sbx", "handrail-async"]
    rows, async_row = rows[:2], rows[2]
    # the async actor never waits: its learner ran some blocks, counted, not assumed utd per step
    assert async_row["updates_per_s"] > 0 and async_row["label"] == "handrail async"
    assert async_row["ms_per_update"] == pytest.approx(1e3 / async_row["updates_per_s"])
    for r in rows:
        assert r["updates_per_s"] == pytest.approx(r["env_steps_per_s"] * r["utd"])
        assert r["ms_per_update"] == pytest.approx(1e3 / r["updates_per_s"])
        assert r["gflop_per_update"] == bench_learner_cmd.update_gflop(r, 3, 1)  # 3 obs, 1 action
    hr, sbx = rows
    assert hr["gflop_per_update"] == sbx["gflop_per_update"]  # the same matmuls at UTD 1
    # handrail also times its jitted update alone (no timing comparison: the VM is noisy).
    assert isinstance(hr["update_only_ms"], float) and "update_only_ms" not in sbx
    lines = table.splitlines()
    cells = {
        r["learner"]: next(
            x for x in lines if x.startswith(f"| Pendulum-v1 | 1 | {r['learner']} |")
        )
        .strip(" |")
        .split(" | ")[3:]
        for r in rows
    }
    # env steps/s | ms / update | vs SBX | vs SB3 | floor: the ratio is the quotient of the rows.
    ratio = f"{hr['env_steps_per_s'] / sbx['env_steps_per_s']:.2f}x"
    steps_s, ms = f"{hr['env_steps_per_s']:.1f}", f"{hr['ms_per_update']:.2f}"
    assert cells["handrail"][:4] == [steps_s, ms, ratio, ""]  # no SB3 row to compare with
    assert cells["sbx"][2:4] == ["", ""]  # no ratio against itself
    assert cells["handrail"][4] == cells["sbx"][4]  # the same FLOPs at the same rate
    assert float(cells["handrail"][5]) == pytest.approx(float(ms) / float(cells["handrail"][4]),
                                                        rel=0.02)  # fmt: skip
    assert any(x.startswith("matmul floor:") and "GFLOP/s" in x for x in lines)
    bytes_lines = [x for x in lines if x.startswith("replay bytes per transition")]
    assert len(bytes_lines) == 2 and "frames' worth per camera frame" in bytes_lines[1]


def test_update_gflop_counts_forward_and_backward_matmuls() -> None:
    # critic 4->4->1 on batch 2: 2*2*(16+4) = 80 flop; actor 3->4->2: 2*2*(12+8) = 80 flop.
    # critic step: 3 passes x 2 critics x 80 + target actor 80 + 2 target critics x 80 = 720;
    # actor step: 3 x 80 + 2 critics x 2 passes x 80 = 560.
    spec = {"hidden": [4], "batch": 2, "num_critics": 2, "utd": 2}
    gflop = bench_learner_cmd.update_gflop
    assert gflop({**spec, "learner": "handrail"}, 3, 1) == pytest.approx(1e-9 * (720 + 560 / 2))
    assert gflop({**spec, "learner": "sbx"}, 3, 1) == pytest.approx(1e-9 * (720 + 560))


def test_unknown_learner_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="--learners"):
        bench_learner_cmd.bench_learner(learners=("dqn",))


def _row(learner: str, utd: int, steps_per_s: float, critics: int = 2) -> dict:
    return {"env": "E", "utd": utd, "learner": learner, "num_critics": critics,
            "env_steps_per_s": steps_per_s, "ms_per_update": 1e3 / (steps_per_s * utd),
            "updates_per_s": steps_per_s * utd, "gflop_per_update": 0.2}  # fmt: skip


def test_goal_lines_give_verdicts_bounds_and_the_speed_reference() -> None:
    rows = [{**_row("handrail", 1, 300.0), "update_only_ms": 2.5}, _row("sbx", 1, 100.0),  # 3x
            _row("handrail", 20, 12.0), _row("sbx", 20, 10.0),  # 1.2x: not met
            _row("handrail", 20, 3.5, critics=10)]  # 70 updates/s: not met  # fmt: skip
    lines = bench_learner_report.goal_lines(rows, gflop_s=100.0)
    assert lines[0] == "goals:"
    utd1, utd20, floor20, rlpd = lines[1:]
    # UTD 20: 1000 / (12 * 20) = 4.17 ms per update over the 2 ms floor
    assert floor20 == "  E UTD 20: 2.08x the matmul floor, goal 1.25x: not met"
    # floor = 0.2 GFLOP at 100 GFLOP/s = 2 ms; SBX at UTD 1 takes 10 ms -> bound 5x.
    assert "E UTD 1: 3.00x SBX, goal 2.0x: met (floor bound: 5.00x" in utd1
    # The update alone takes 2.5 ms of SBX's 10 ms step: at most 4x by cutting overhead.
    assert "update alone takes 2.50 ms, so no per-step saving gets past 4.00x)" in utd1
    assert "1.20x SBX, goal 1.4x: not met (floor bound" in utd20 and "alone" not in utd20
    # SBX at UTD 20 ran 10/14 of the reference speed, so 70/s scales to 98/s.
    assert "70.0 gradient updates/s, goal 80: not met" in rlpd
    assert "0.71x its speed" in rlpd and "at that speed: 98/s" in rlpd


def test_table_ratios_and_floor_come_from_the_rows(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{**_row("handrail", 1, 300.0), "label": "handrail"},
            {**_row("sbx", 1, 100.0), "label": "sbx"}, {**_row("sb3", 1, 60.0), "label": "sb3"},
            {"env": "E", "utd": 20, "learner": "sbx", "num_critics": 2, "label": "sbx",
             "error": "boom"}, {**_row("handrail-async", 1, 900.0), "label": "handrail async"}]  # fmt: skip
    bench_learner_report.print_table(rows, {"gflop_s": 100.0, "batch": 256, "hidden": [256, 256]})
    lines = capsys.readouterr().out.splitlines()
    # the async actor does not wait for its learner: no ratio to a peer that does
    assert "| E | 1 | handrail async | 900.0 | 1.11 |  |  | 2.00 | 0.56 |" in lines
    # 0.2 GFLOP at 100 GFLOP/s = 2 ms; 300 / 100 = 3x SBX, 300 / 60 = 5x SB3.
    assert "| E | 1 | handrail | 300.0 | 3.33 | 3.00x | 5.00x | 2.00 | 1.67 |" in lines
    assert "| E | 1 | sbx | 100.0 | 10.00 |  | 1.67x | 2.00 | 5.00 |" in lines
    assert "| E | 1 | sb3 | 60.0 | 16.67 | 0.60x |  | 2.00 | 8.33 |" in lines
    assert "| E | 20 | sbx | error: boom | | | | | |" in lines
    assert "matmul floor: the update's matmul FLOPs at this CPU's jitted 256x256 matmul rate, " \
           "100 GFLOP/s (best of 20 rounds)" in lines  # fmt: skip


def test_the_pixel_rows_are_judged_against_sb3s_goal() -> None:
    env = "pick_cube:pixels"
    rows = [{**_row("handrail", 1, 12.5), "env": env, "label": "handrail"},
            {**_row("sb3", 1, 4.0), "env": env, "label": "sb3"},
            {**_row("handrail-twice", 1, 10.0), "env": env,
             "label": "handrail, target encoder read (RLPD)"}]  # fmt: skip
    assert bench_learner_report.goal_lines(rows, gflop_s=100.0)[1:] == [
        "  pick_cube:pixels UTD 1, handrail: 3.12x SB3 per gradient update, goal 3.0x: met",
        "  pick_cube:pixels UTD 1, handrail, target encoder read (RLPD): 2.50x SB3 per gradient "
        "update, goal 3.0x: not met",
    ]


def test_goal_lines_skip_rows_without_a_peer_and_failed_rows() -> None:
    rows = [_row("handrail", 1, 300.0), {"env": "E", "utd": 1, "learner": "sbx",
                                         "num_critics": 2, "error": "boom"}]  # fmt: skip
    assert bench_learner_report.goal_lines(rows, gflop_s=100.0) == []


def test_halfcheetah_rows_say_whether_the_core_got_slower() -> None:
    rows = [{**_row("handrail", 1, 120.0), "env": "HalfCheetah-v5"},
            {**_row("sbx", 1, 100.0), "env": "HalfCheetah-v5"}]  # fmt: skip
    (line,) = bench_learner_report.goal_lines(rows, gflop_s=100.0)[1:]
    assert line.endswith("; before the core was reshaped: 1.22x, slower")
    rows[0] = {**_row("handrail", 1, 130.0), "env": "HalfCheetah-v5"}
    assert bench_learner_report.goal_lines(rows, 100.0)[1].endswith("1.22x, not slower")


def test_gpu_tables_name_the_platform_and_judge_no_cpu_goal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [{**_row("handrail", 1, 300.0), "label": "handrail"},
            {**_row("sbx", 1, 100.0), "label": "sbx"}]  # fmt: skip
    rate = {"gflop_s": 100.0, "batch": 256, "hidden": [256, 256], "platform": "cuda"}
    bench_learner_report.print_table(rows, rate)
    lines = capsys.readouterr().out.splitlines()
    assert "| E | 1 | handrail | 300.0 | 3.33 | 3.00x |  | 2.00 | 1.67 |" in lines
    assert lines[-2].startswith("matmul floor: the update's matmul FLOPs at this GPU's jitted")
    assert lines[-1] == "goals: set for the 2-core CPU machine, not judged on another platform"


def test_an_unknown_platform_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match=r"--platform 'tpu': choose cpu or cuda"):
        bench_learner_cmd.bench_learner(envs=("Pendulum-v1",), platform="tpu")


def test_the_pixel_env_adds_two_cameras_and_runs_without_sbx() -> None:
    env = bench_learner_cmd._make_env("pick_cube:pixels", flatten=True)  # SB3 reads the Dict
    spaces = env.observation_space.spaces
    assert spaces["front"].shape == (64, 64, 3) and spaces["wrist"].dtype.name == "uint8"
    spec = bench_learner_cmd._obs_spec(env)
    assert spec.images == ("front", "wrist") and "proprio" in spec.keys
    env.close()
    jobs = bench_learner_cmd._jobs((1,), ("handrail", "sbx", "sb3"), rlpd=True, pixels=True)
    # no image policy in SBX; handrail with each accounting of its encoder passes
    assert [job[1] for job in jobs] == ["handrail", "sb3", "handrail-twice"]
    # the handrail row is what a --pixels run gets; the other re-reads the target encoder
    assert bench_learner_cmd._pixel_encoder()["image_encode_once"] is True
    assert bench_learner_cmd._pixel_encoder(twice=True)["image_encode_once"] is False
