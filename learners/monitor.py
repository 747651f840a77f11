"""The training loop's bookkeeping: episode log, progress bar, periodic evaluation and saves.

Both handrail's learner and the Stable-Baselines3/SBX backend drive a :class:`RunMonitor`, so
their run folders and progress bars look the same.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from handrail.learners.runlog import RunDir

HARM_POINTS = 0.10
"""An evaluation this far below the baseline (10 points of success rate) is reported: the
margin `handrail bench residual` holds a residual to against its base."""


class RunMonitor:
    """Shared bookkeeping of a training loop: episode log, progress bar, periodic eval, saves.

    Both learners (handrail's JAX SAC and the SB3 backend) drive one of these, so their run
    folders and progress bars look the same.

    Args:
        run: The run folder.
        total_steps: Env steps the run ends at (for the progress bar's ETA).
        eval_every: Evaluate (and save ``latest``) every this many env steps, at the next
            episode boundary.
        evaluate: ``env_steps -> EvalResult``; runs an evaluation.
        save_latest: Saves the ``latest`` checkpoint (called at an episode boundary).
        save_best: Saves the ``best`` checkpoint.
        start_steps: Env steps already taken (when resuming).
        progress: Show a tqdm progress bar.
        stop_at_success: Stop once an evaluation's success rate reaches this (None: never).
        train_log_every: Log the learner's metrics every this many env steps.
        video_fps: Frame rate of the evaluation videos: the eval env's step rate, so that they
            play at real speed (:func:`handrail.learners.evaluation.env_fps`).
        status: Extra fields for the progress bar (who is in control, the intervention rate).
        baseline: What the policy starts as and must not fall below (a residual's "the base
            alone": its untrained correction is exactly zero). Named, :meth:`start` evaluates
            the starting policy once on the evaluation episodes (a ``baseline`` record), and
            saves it as the ``best`` checkpoint: an evaluation replaces it only by matching or
            beating it, so the run never hands back a policy that did worse than its baseline
            on those episodes. Each evaluation more than :data:`HARM_POINTS` below it is
            reported on stderr.
        tag: What the lines it prints start with (the command, ``handrail train``).
    """

    def __init__(
        self,
        run: RunDir,
        *,
        total_steps: int,
        eval_every: int,
        evaluate: Any,
        save_latest: Any,
        save_best: Any,
        video_fps: float,
        start_steps: int = 0,
        progress: bool = True,
        stop_at_success: float | None = None,
        train_log_every: int = 1000,
        status: Callable[[], Mapping[str, str]] | None = None,
        baseline: str | None = None,
        tag: str = "handrail",
    ) -> None:
        self.run, self.total_steps = run, total_steps
        self.eval_every, self.train_log_every = eval_every, train_log_every
        self._evaluate, self._save_latest, self._save_best = evaluate, save_latest, save_best
        self.stop_at_success, self.video_fps = stop_at_success, video_fps
        evals = run.read_metrics("eval")
        self.baseline_name = baseline
        kept = run.read_metrics("baseline") if baseline else []
        self.baseline: dict[str, Any] | None = kept[-1] if kept else None
        ranked = [*kept[-1:], *evals]  # a later evaluation replaces an equal best
        self.best_record: dict[str, Any] | None = max(reversed(ranked), key=_eval_score,
                                                      default=None)  # fmt: skip
        self.tag = tag
        self.next_eval = (start_steps // eval_every + 1) * eval_every
        self.next_train_log = start_steps + train_log_every
        self.recent_success: list[float] = []
        self.eval_seconds = sum(float(r.get("eval_s") or 0.0) for r in [*kept, *evals])
        self.last_eval: dict[str, Any] | None = evals[-1] if evals else None
        self.should_stop = False
        self.status = status
        self._bar = None
        self._rate_t = time.monotonic()
        self._rate_updates: int | None = None
        if progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, initial=start_steps, unit="step", smoothing=0.05)

    def on_step(
        self,
        env_steps: int,
        updates: int,
        episodes: Sequence[
            tuple[float, int, bool | None] | tuple[float, int, bool | None, int]
        ] = (),
        train_metrics: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    ) -> bool:
        """Records one training step; returns True when the run should stop early.

        Args:
            env_steps: Env steps so far.
            updates: Gradient updates so far.
            episodes: Episodes that finished at this step as (return, length, success), with
                the steps a person acted as a fourth item when there is a human in the loop.
            train_metrics: The learner's latest metrics, or a function returning them (called
                only when due: every ``train_log_every`` env steps).
        """
        for ret, length, success, *human in episodes:
            record = {"return": ret, "length": length, "updates": updates}
            if human:
                record["human_steps"] = human[0]
            if success is not None:
                record["success"] = float(success)
                self.recent_success = [*self.recent_success[-19:], float(success)]
            self.run.log("episode", env_steps, record)
        if train_metrics is not None and env_steps >= self.next_train_log:
            metrics = train_metrics() if callable(train_metrics) else train_metrics
            if metrics:
                self.next_train_log = env_steps + self.train_log_every
                self.run.log("train", env_steps, {"updates": updates, **metrics})
        if episodes and env_steps >= self.next_eval:
            self.next_eval = (env_steps // self.eval_every + 1) * self.eval_every
            self.evaluate_now(env_steps)
        self._update_bar(env_steps, updates)
        return self.should_stop

    def start(self, env_steps: int) -> dict[str, Any] | None:
        """The baseline's record: the policy evaluated (and saved as ``best``) once per run,
        before its first step (``env_steps`` 0); a resumed run keeps the one it has (a run
        resumed later without one has none: its policy is no longer the baseline). None
        without a baseline."""
        if self.baseline_name is None or self.baseline is not None or env_steps > 0:
            return self.baseline
        seconds, result = self._timed_evaluate(env_steps)
        self.baseline = self.run.log("baseline", env_steps, {
            **result.as_record(), "policy": self.baseline_name, "eval_s": seconds})  # fmt: skip
        if getattr(result, "frames", None):
            self.run.write_video(result.frames, "baseline", self.video_fps)
        self.best_record = self.baseline
        self._save_best()
        return self.baseline

    @property
    def best(self) -> tuple[float, float] | None:
        """The score of :attr:`best_record` (the ``best`` checkpoint's evaluation)."""
        return None if self.best_record is None else _eval_score(self.best_record)

    def _timed_evaluate(self, env_steps: int) -> tuple[float, Any]:
        start = time.monotonic()
        result = self._evaluate(env_steps)
        seconds = time.monotonic() - start
        self.eval_seconds += seconds
        return seconds, result

    def below_baseline(self, record: Mapping[str, Any]) -> float | None:
        """How far an evaluation's success rate is below the baseline's (negative: above);
        None without a baseline or a success flag."""
        base = None if self.baseline is None else self.baseline.get("success_rate")
        rate = record.get("success_rate")
        return None if base is None or rate is None else float(base) - float(rate)

    def evaluate_now(self, env_steps: int) -> dict[str, Any]:
        """Evaluates, logs, saves latest (and best if improved), redraws the plot.

        The record's ``eval_s`` is the evaluation's own wall time, so that training time can be
        told apart from evaluation time (``train_time_s``).
        """
        seconds, result = self._timed_evaluate(env_steps)
        record = self.run.log("eval", env_steps, {**result.as_record(), "eval_s": seconds,
                              "train_time_s": self.run.wall_time_s() - self.eval_seconds})  # fmt: skip
        if getattr(result, "frames", None):
            self.run.write_video(result.frames, f"eval_{env_steps:08d}", self.video_fps)
        self._save_latest()
        if self.best is None or _eval_score(record) >= self.best:
            self.best_record = record
            self._save_best()
        self.run.write_plot()
        self.last_eval = record
        below = self.below_baseline(record)
        if below is not None and below > HARM_POINTS:
            self.report(
                f"evaluation at {env_steps:,} env steps: {record['success_rate']:.0%}, "
                f"{below * 100:.0f} points below {self.baseline_name}'s "
                f"{record['success_rate'] + below:.0%} on the same episodes (checkpoints/best keeps "
                f"the best so far: {_percent(self.best)})"
            )
        rate = record.get("success_rate")
        if self.stop_at_success is not None and rate is not None and rate >= self.stop_at_success:
            self.should_stop = True
        return record

    def _update_bar(self, env_steps: int, updates: int) -> None:
        if self._bar is None:
            return
        self._bar.update(env_steps - self._bar.n)
        now = time.monotonic()
        if now - self._rate_t < 1.0 and self._rate_updates is not None:
            return
        post = {}
        if self._rate_updates is not None:
            post["upd/s"] = f"{(updates - self._rate_updates) / (now - self._rate_t):.0f}"
        if self.recent_success:
            post["success"] = f"{np.mean(self.recent_success):.0%}"
        if self.last_eval and self.last_eval.get("success_rate") is not None:
            post["eval"] = f"{self.last_eval['success_rate']:.0%}"
        if self.baseline and self.baseline.get("success_rate") is not None:
            post["base"] = f"{self.baseline['success_rate']:.0%}"
        if self.status is not None:
            post.update(self.status())
        self._bar.set_postfix(post, refresh=False)
        self._rate_t, self._rate_updates = now, updates

    def report(self, text: str) -> None:
        """Prints ``tag: text`` to stderr without breaking the progress bar."""
        text = f"{self.tag}: {text}"
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def close(self) -> None:
        """Closes the progress bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _percent(score: tuple[float, float] | None) -> str:
    return "none" if score is None or score[0] < 0 else f"{score[0]:.0%}"


def _eval_score(record: Mapping[str, Any]) -> tuple[float, float]:
    """Ranks evaluations: success rate first (if reported), then mean return."""
    rate = record.get("success_rate")
    return (-1.0 if rate is None else float(rate), float(record.get("mean_return") or 0.0))


def intervention_summary(episodes: Sequence[Mapping[str, Any]]) -> dict[str, float | int | None]:
    """What the person did over a run's episode records (those with ``human_steps``).

    Returns:
        ``human_share`` (of all env steps), ``human_steps``, ``episodes_intervened``,
        ``human_steps_per_success``, ``success_with_intervention`` and
        ``success_without_intervention`` (None where no episode of that kind ended), and
        ``human_share_last_100``: the share over the last 100 episodes (does the person still
        act at the end?).
    """
    logged = [e for e in episodes if "human_steps" in e]
    human = sum(int(e["human_steps"]) for e in logged)
    successes = sum(float(e.get("success") or 0.0) for e in logged)

    def rate(group: list[Mapping[str, Any]]) -> float | None:
        return float(np.mean([e.get("success") or 0.0 for e in group])) if group else None

    def share(group: list[Mapping[str, Any]]) -> float | None:
        steps = sum(int(e["length"]) for e in group)
        return sum(int(e["human_steps"]) for e in group) / steps if steps else None

    helped = [e for e in logged if e["human_steps"] > 0]
    alone = [e for e in logged if e["human_steps"] == 0]
    return {
        "human_share": share(logged),
        "human_share_last_100": share(logged[-100:]),
        "human_steps": human,
        "episodes_intervened": len(helped),
        "human_steps_per_success": human / successes if successes else None,
        "success_with_intervention": rate(helped),
        "success_without_intervention": rate(alone),
    }
