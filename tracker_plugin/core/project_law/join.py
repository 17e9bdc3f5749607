"""A run joins its project's law: from its plan alone, then from its first rows.

Before its first row a run is forecast by the pooled law on its planned schedule, at the
level of the configuration (the law's ``L0``). Once it logs, its own *level* (its mean
residual from the law) is estimated from its binned raw loss and shrunk toward the
configuration's: a few noisy rows say little about where the run sits, many say much. The
shrinkage is the normal model's: the runs' levels scatter about the law by the spread
their residuals show (with a floor, :data:`LEVEL_FLOOR`), a bin of ``n`` rows is as sure
as ``n`` rows of the law's residual noise.

A :class:`RunLog` is a run as far as it has logged, read from a history, from a finished
run's evidence cut at some step (a sibling forecast from the others), or from a plan
alone (a run not started). :func:`law_curve` puts the pooled law on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracker_plugin.core.clock import Timeline, TimelineBuilder
from tracker_plugin.core.models.schedule_law import crossing_tokens, smooth_all
from tracker_plugin.core.project_law.evidence import RunEvidence, warmup_end
from tracker_plugin.core.project_law.pooled import Member, PooledLaw, common_timeline, member
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule

__all__ = ["LEVEL_FLOOR", "LawCurve", "RunLog", "law_curve", "log_of_evidence", "log_of_history", "log_of_plan",
           "run_level"]

# The prior spread of a run's level about its configuration's (loss units) where the
# siblings' own levels scatter less: leave-one-family-out validation chooses it
# (benchmarks/bench_law.py).
LEVEL_FLOOR = 0.0
CONTROL = False
# The law's shifted relative lr area is at least this where its curve starts.
_MIN_RELATIVE = 1e-3


@dataclass(frozen=True, eq=False)
class RunLog:
    """A run as far as it has logged: its timeline on its plan (its own units), its raw
    loss from its fit start (``rows``: how many rows each value averages), the observed
    smoothed loss at the fit start, and where it stands."""

    run: str
    timeline: Timeline
    step: np.ndarray
    loss: np.ndarray
    rows: np.ndarray | None
    start: float
    smoothed_start: float | None
    last_step: float
    last_tokens: float
    ema_window: float
    cadence: float
    peak_lr: float | None
    unit: str = "tokens"

    @property
    def started(self) -> bool:
        """Whether the run has rows the law reads (past its warmup)."""
        return len(self.step) > 0

    @property
    def plan_end(self) -> float | None:
        return self.timeline.plan_end

    @property
    def plan_end_tokens(self) -> float | None:
        end = self.timeline.plan_end
        return None if end is None else float(self.timeline.tokens_at(end))

    @property
    def fraction(self) -> float:
        """The share of the plan's tokens logged (0 before the first row; None-safe: 0
        where the plan has no end)."""
        end = self.plan_end_tokens
        if self.last_tokens <= 0 or end is None or end <= 0:
            return 0.0
        return min(max(self.last_tokens / end, 0.0), 1.0)


def log_of_history(history: History, plan: LrSchedule | None, *, ema_window: float, timeline: Timeline | None = None,
                   smoothed: np.ndarray | None = None, peak_lr: float | None = None) -> RunLog:
    """A running run's log on ``plan`` (its timeline given, or built here)."""
    timeline = timeline if timeline is not None else TimelineBuilder(history)(plan)
    start = warmup_end(timeline, plan)
    # Rows before the lr's peak are not the law's (a warmup): a run still in it has none yet.
    first = int(np.searchsorted(history.step, start))
    if smoothed is None:
        smoothed = token_window_ema(history.loss, history.step, history.batch, ema_window)
    step = history.step[first:].astype(float)
    logged = history.step.astype(float)
    cadence = float(np.median(np.diff(logged))) if len(logged) > 1 else 1.0
    peak = peak_lr
    if peak is None and history.lr is not None and np.isfinite(history.lr).any():
        peak = float(np.nanmax(history.lr))
    at = float(history.step[first]) if len(step) else start
    return RunLog(history.run, timeline, step, history.loss[first:].astype(float), None, at,
                  float(smoothed[first]) if len(step) else None, float(history.step[-1]), float(history.tokens[-1]),
                  ema_window, cadence, peak, history.unit)


def log_of_evidence(evidence: RunEvidence, fraction: float) -> RunLog:
    """A finished run's log as it stood at ``fraction`` of its tokens (0: before its first
    row), on the lr it trained on."""
    final = float(evidence.tokens_at(evidence.last_step)[0])
    steps = np.array([p[0] for p in evidence.curve], float)
    tokens = evidence.tokens_at(steps)
    seen = steps[tokens <= fraction * final] if fraction > 0 else np.zeros(0)
    last = float(seen[-1]) if len(seen) else 0.0
    timeline = evidence.timeline(last_step=last if len(seen) else None)
    if not len(seen):
        timeline = _not_started(timeline)
    step, loss, rows = evidence.observations_until(last if len(seen) else -1.0)
    bins = np.array(evidence.bins, float)
    cadence = float(np.median(np.diff(steps))) if len(steps) > 1 else 1.0
    start = evidence.fit_start if len(step) else warmup_end(timeline)
    return RunLog(evidence.run, timeline, step, loss, rows, start,
                  float(evidence.smoothed_at(start)) if len(step) else None, last,
                  float(evidence.tokens_at(last)[0]) if len(seen) else 0.0, evidence.ema_window,
                  cadence if len(bins) else 1.0, evidence.peak_lr, evidence.unit)


def log_of_plan(run: str, plan: LrSchedule, *, batch: float, ema_window: float, peak_lr: float | None = None,
                cadence: float = 1.0, unit: str = "tokens", batch_schedule: BatchSchedule | None = None) -> RunLog:
    """A run not started: its plan and its batch (tokens per step; 1 on steps), and its
    later batch stages where the batch is planned to change."""
    history = History(run, "loss", np.array([0], np.int64), np.zeros(1), np.array([float(batch)]), np.array([math.nan]),
                      on_steps=unit == "steps")
    timeline = _not_started(TimelineBuilder(history, batch_schedule=batch_schedule)(plan))
    start = warmup_end(timeline, plan)
    return RunLog(run, timeline, np.zeros(0), np.zeros(0), None, start, None, 0.0, 0.0, ema_window, cadence, peak_lr,
                  unit)


def _not_started(timeline: Timeline) -> Timeline:
    """A timeline of a run with no row yet: every step lies ahead (a crossing may come at once)."""
    from dataclasses import replace

    return replace(timeline, last_step=-1.0, first_loss=math.inf)


def _member(log: RunLog, law: PooledLaw) -> Member:
    timeline = common_timeline(log.timeline, law.units, log.peak_lr)
    return member(log.run, timeline, log.step, log.loss, log.rows, log.start)


def run_level(law: PooledLaw, log: RunLog, floor: float = LEVEL_FLOOR, control: bool = CONTROL) -> float:
    """The run's level from its rows so far, shrunk toward the configuration's (0).

    Its residuals are read against the other runs' at the same lr area (``control``: where
    the law misses every run alike is no sign of this run's level), and count for as many
    independent points as their autocorrelation leaves (a misfit that wanders with the
    curve is one point, not many). A ``floor`` of 0 keeps the configuration's level.
    """
    if not log.started or floor <= 0:
        return 0.0
    m = _member(log, law)
    if not len(m.obs):
        return 0.0
    residual = m.obs.loss - law.predict(m)
    if control:
        residual = residual - law.control_at(m.obs.area)
    ok = np.isfinite(residual)
    if not ok.any():
        return 0.0
    r1 = law.correlation
    effective = ok.sum() * (1.0 - r1) / (1.0 + r1)
    spread = max(law.level_spread, floor)
    mean = float(np.average(residual[ok], weights=m.obs.weight[ok]))
    return mean * effective / (effective + law.sigma**2 / spread**2)


@dataclass(frozen=True, eq=False)
class LawCurve:
    """The pooled law on one run, at its level: its smoothed loss from the fit start on."""

    log: RunLog
    level: float
    steps: np.ndarray
    curve: np.ndarray
    timeline: Timeline

    def crossing(self, target: float) -> float | None:
        """Tokens where the smoothed law first reaches ``target`` after the log (None: not
        within the timeline's horizon)."""
        return crossing_tokens(self.timeline, self.steps, self.curve, target)

    def loss_at(self, step: float) -> float:
        return float(np.interp(step, self.steps, self.curve))

    def tokens_at(self, step: float) -> float:
        return float(self.timeline.tokens_at(step))


def law_curve(law: PooledLaw, log: RunLog, *, floor: float = LEVEL_FLOOR, control: bool = CONTROL,
              level: float | None = None) -> LawCurve:
    """The pooled law on ``log``'s plan at the run's level (:func:`run_level`, or ``level``)."""
    level = run_level(law, log, floor, control) if level is None else level
    timeline = common_timeline(log.timeline, law.units, log.peak_lr)
    start, smoothed_start = log.start, log.smoothed_start
    # The law with a negative origin shift is defined from an lr area on: a run whose warmup
    # ends short of it starts its curve there.
    defined = (_MIN_RELATIVE - law.theta[-1]) * law.area_ref
    if float(timeline.area_at(start)) < defined:
        start = float(np.interp(defined, timeline.area, timeline.step))
        smoothed_start = None
    fit = law.on(timeline, level=level, start_step=start, ema_window=log.ema_window,
                 smoothed_start=smoothed_start, cadence=log.cadence)
    (smoothed,) = smooth_all([fit])
    return LawCurve(log, level, smoothed.steps, smoothed.curve, timeline)
