"""``handrail bench vision``: what it runs for each row and how it tabulates (no training)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from handrail.bench.vision import (
    BenchVisionConfig,
    bench_vision,
    fire_timing,
    plan,
    plot,
    table,
)

PIXELS = {"demos": "d", "encoder": "e", "ignored": ["object", "cube_from_tcp_dm"],
          "probe": {"features": [0.9, 0.9, 0.5], "features_proprio": [0.9, 0.9, 0.8],
                    "proprio": [0.3, 0.9, 0.7]}}  # fmt: skip


def _row(learner: str, seed: int, final: float) -> dict:
    return {"learner": learner, "seed": seed, "steps_to_goal": None, "min_after": None,
            "final": {"success_rate": final}, "minutes": 9.6,
            "curve": [(1000, 60.0, 0.0), (2000, 120.0, final)]}  # fmt: skip


def test_the_pixel_rows_read_the_cameras_and_proprio_only(tmp_path: Path) -> None:
    cfg = BenchVisionConfig(rows=("pixels",), seeds=(0, 1), pixel_steps=15_000, out=tmp_path)
    runs = plan(cfg, {"pixels": PIXELS})
    assert [(r.learner, r.seed, r.steps) for r in runs] == [("pixels", 0, 15_000),
                                                             ("pixels", 1, 15_000)]  # fmt: skip
    argv = runs[0].argv
    assert argv[argv.index("--encoder") + 1] == "e" and argv[argv.index("--demos") + 1] == "d"
    at = argv.index("--ignore-obs-keys")
    assert argv[at + 1 : at + 3] == ("object", "cube_from_tcp_dm")
    assert "--reward" not in argv


def test_the_e2e_rows_learn_from_the_cameras_and_proprio_with_their_own_encoder(
    tmp_path: Path,
) -> None:
    cfg = BenchVisionConfig(task="reach", rows=("e2e",), seeds=(0, 2), pixel_steps=8_000,
                            image_size=32, e2e_args="--sac.image-features 32", out=tmp_path)  # fmt: skip
    runs = plan(cfg, {})
    assert [(r.learner, r.seed, r.steps) for r in runs] == [("e2e", 0, 8_000), ("e2e", 2, 8_000)]
    argv = runs[1].argv
    assert "--pixels" in argv and "--encoder" not in argv and "--demos" not in argv
    at = argv.index("--env-kwargs")
    assert argv[at + 1 : at + 3] == ("cameras=('front', 'wrist')", "image_size=32")
    at = argv.index("--ignore-obs-keys")
    assert argv[at + 1 : at + 3] == ("goal", "goal_from_tcp_dm")
    assert argv[-2:] == ("--sac.image-features", "32")
    lines = table([_row("e2e", 0, 0.98), _row("e2e", 2, 0.91)], {})
    assert (
        "| 0, 2 | cameras (encoder trained end to end, --pixels) + proprio | -, - | -, - | 98%, 91% | 9.6, 9.6 |"
        in lines
    )


CLASSIFIER = {"classifier": "c", "demos": "held", "threshold": 0.34,
              "validation": {"precision": 1.0, "recall": 0.997},
              "heldout": {"frames": {"precision": 0.991, "recall": 0.995},
                          "episodes": {"episodes": 30, "false_positives": 2,
                                       "false_negatives": 0}}}  # fmt: skip


def test_the_e2e_classifier_rows_see_the_cameras_and_learn_the_classifiers_reward(
    tmp_path: Path,
) -> None:
    # What a robot gives on both counts: cameras and proprio in, a learned reward; nothing of
    # the simulator's reaches the learner (its success only judges).
    cfg = BenchVisionConfig(rows=("e2e", "e2e_classifier"), seeds=(1,), pixel_steps=15_000,
                            out=tmp_path)  # fmt: skip
    runs = plan(cfg, {"classifier": CLASSIFIER})
    assert [(r.learner, r.seed, r.steps) for r in runs] == [("e2e", 1, 15_000),
                                                             ("e2e_classifier", 1, 15_000)]  # fmt: skip
    e2e, both = runs[0].argv, runs[1].argv
    assert "--reward" not in e2e and "--demos" not in e2e
    assert both[both.index("--reward") + 1] == "classifier:c"
    assert both[both.index("--demos") + 1] == "held" and "--pixels" in both
    at = both.index("--ignore-obs-keys")
    assert set(both[at + 1 : at + 3]) == {"object", "cube_from_tcp_dm"}
    assert runs[1].folder == tmp_path / "e2e_classifier-s1"
    rows = [{**_row("e2e_classifier", s, 0.96), "steps_to_goal": 9000 + s, "min_after": 0.94,
             "classifier": {"ended": 200, "episodes": 250, "false_positives": 10 + s,
                            "false_negatives": 2},
             "timing": {"gap_steps": {"-1": 3, "0": 5 + s}, "fired_untouched": 4 * s,
                        "episodes": 30}} for s in (0, 1)]  # fmt: skip
    lines = table(rows, {"classifier": CLASSIFIER})
    assert (
        "| 0, 1 | cameras (end to end) + proprio | 9,000, 9,001 | 94%, 94% | 96%, 96% | 9.6, 9.6 "
        "| 200/250 ended, 10 FP, 2 FN, 200/250 ended, 11 FP, 2 FN |" in lines
    )
    assert "| held-out episodes (30) | 0.991 | 0.995 | 2 | 0 |" in lines
    assert lines[-3].endswith("-1: 6, +0: 11")
    assert lines[-1].endswith(": seed 0 (cameras (end to end) + proprio): 0 of 30, "
                              "seed 1 (cameras (end to end) + proprio): 4 of 30")  # fmt: skip
    plot(rows, tmp_path / "vision.png")
    assert (tmp_path / "vision.png").stat().st_size > 0


def test_the_table_and_plot_of_the_pixel_rows(tmp_path: Path) -> None:
    rows = [_row("pixels", 0, 0.37), _row("pixels", 1, 0.14), _row("e2e", 0, 0.9)]
    lines = table(rows, {"pixels": PIXELS})
    assert (
        "| 0, 1 | cameras (frozen encoder) + proprio | -, - | -, - | 37%, 14% | 9.6, 9.6 |" in lines
    )
    assert any("features [0.9, 0.9, 0.5]" in line for line in lines)
    plot(rows, tmp_path / "vision.png")
    assert (tmp_path / "vision.png").stat().st_size > 0


def test_an_unknown_row_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="--rows pixel: give classifier, pixels, e2e, e2e_classifier or several"
    ):
        bench_vision(BenchVisionConfig(rows=("pixel",), out=tmp_path / "b"))
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("fires_when", "untouched"), [("early", 2), ("lifted", 0)])
def test_fire_timing_tells_fires_with_the_cube_untouched_from_fires_on_a_rising_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fires_when: str, untouched: int
) -> None:
    from types import SimpleNamespace

    import handrail.learners.agents.classifier as classifier_module
    import handrail.learners.policies as policies
    from handrail import sim

    expert_env = sim.make("pick_cube")
    expert = sim.make_expert("pick_cube", expert_env)

    class Classifier:  # fires on the 3rd step (the expert is still above the cube), or lifted
        cameras = ()

        def __init__(self, path: Path) -> None:
            self.steps = 0

        def detect(self, obs: dict) -> bool:
            self.steps += 1
            return self.steps >= 3 if fires_when == "early" else obs["object"][2] > 0.06

    last_xy = [np.full(2, np.inf)]

    def policy(obs: dict) -> object:  # the expert, started afresh where the cube jumped (reset)
        if np.linalg.norm(obs["object"][:2] - last_xy[0]) > 0.05:
            expert.reset()
        last_xy[0] = obs["object"][:2]
        return expert(obs)

    monkeypatch.setattr(classifier_module, "SuccessClassifier", Classifier)
    monkeypatch.setattr(policies, "load_run_policy",
                        lambda folder, which: SimpleNamespace(policy=policy, env_kwargs=[]))  # fmt: skip
    timing = fire_timing(BenchVisionConfig(out=tmp_path), tmp_path, episodes=2)
    assert timing["fired_untouched"] == untouched
    assert timing["never"] == {"classifier": 0, "task": 0}


def test_fire_timing_counts_no_untouched_fire_on_a_task_without_movable_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    import handrail.learners.agents.classifier as classifier_module
    import handrail.learners.policies as policies

    class Classifier:  # fires at once: on reach there is no object to have moved
        cameras = ()

        def __init__(self, path: Path) -> None:
            pass

        def detect(self, obs: dict) -> bool:
            return True

    monkeypatch.setattr(classifier_module, "SuccessClassifier", Classifier)
    monkeypatch.setattr(policies, "load_run_policy", lambda folder, which: SimpleNamespace(
        policy=lambda obs: np.zeros(4, np.float32), env_kwargs=["episode_steps=5"]))  # fmt: skip
    timing = fire_timing(BenchVisionConfig(task="reach", out=tmp_path), tmp_path, episodes=1)
    assert timing["fired_untouched"] == 0 and timing["never"]["classifier"] == 0


def test_the_classifier_rows_pass_the_corrections_and_the_table_says_when_they_came(
    tmp_path: Path,
) -> None:
    cfg = BenchVisionConfig(rows=("e2e_classifier", "classifier"), seeds=(0,), corrections=6,
                            correct_every=500, out=tmp_path)  # fmt: skip
    for run in plan(cfg, {"classifier": CLASSIFIER}):
        at = run.argv.index("--corrections.episodes")
        assert run.argv[at : at + 4] == ("--corrections.episodes", "6", "--corrections.every",
                                         "500")  # fmt: skip
    plain = plan(BenchVisionConfig(rows=("e2e_classifier",), seeds=(0,), out=tmp_path),
                 {"classifier": CLASSIFIER})  # fmt: skip
    assert "--corrections.episodes" not in plain[0].argv
    made = [{"env_steps": 2, "corrections": 1}, {"env_steps": 1500, "corrections": 2}]
    row = {**_row("e2e_classifier", 0, 0.96), "steps_to_goal": None, "min_after": None,
           "classifier": {"ended": 5, "episodes": 9, "false_positives": 1,
                          "false_negatives": 0, "corrections": made},
           "timing": {"gap_steps": {}, "episodes": 30}}  # fmt: skip
    assert any(line.endswith("5/9 ended, 1 FP, 0 FN, 2 corrected at 2/1500 |")
               for line in table([row], {"classifier": CLASSIFIER}))  # fmt: skip
