"""The training loop's bookkeeping: episode log, progress bar, periodic evaluation and saves.

Both handrail's learner and the Stable-Baselines3/SBX backend drive a :class:`RunMonitor`, so
their run folders and progress bars look the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from handrail.learners.runlog import RunDir


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
    ) -> None:
        self.run, self.total_steps = run, total_steps
        self.eval_every, self.train_log_every = eval_every, train_log_every
        self._evaluate, self._save_latest, self._save_best = evaluate, save_latest, save_best
        self.stop_at_success, self.video_fps = stop_at_success, video_fps
        evals = run.read_metrics("eval")
        self.best = max((_eval_score(r) for r in evals), default=None)
        self.next_eval = (start_steps // eval_every + 1) * eval_every
        self.next_train_log = start_steps + train_log_every
        self.recent_success: list[float] = []
        self.eval_seconds = sum(float(r.get("eval_s") or 0.0) for r in evals)
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

    def evaluate_now(self, env_steps: int) -> dict[str, Any]:
        """Evaluates, logs, saves latest (and best if improved), redraws the plot.

        The record's ``eval_s`` is the evaluation's own wall time, so that training time can be
        told apart from evaluation time (``train_time_s``).
        """
        start = time.monotonic()
        result = self._evaluate(env_steps)
        seconds = time.monotonic() - start
        self.eval_seconds += seconds
        record = self.run.log("eval", env_steps, {**result.as_dict(), "eval_s": seconds,
                              "train_time_s": self.run.wall_time_s() - self.eval_seconds})  # fmt: skip
        if getattr(result, "frames", None):
            self.run.write_video(result.frames, f"eval_{env_steps:08d}", self.video_fps)
        self._save_latest()
        if self.best is None or _eval_score(record) >= self.best:
            self.best = _eval_score(record)
            self._save_best()
        self.run.write_plot()
        self.last_eval = record
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
        if self.status is not None:
            post.update(self.status())
        self._bar.set_postfix(post, refresh=False)
        self._rate_t, self._rate_updates = now, updates

    def close(self) -> None:
        """Closes the progress bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


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
