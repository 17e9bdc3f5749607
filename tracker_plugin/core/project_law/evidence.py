"""What a finished run gives the project's law: its evidence, compact and serialisable.

A project's law is fitted on its finished runs. Reading each one's history again for every
fit would cost a project a history read per run per night, so a run's evidence is taken
once, when it has finished, and kept (in the run's own tag, by the jobs): the raw loss
averaged in bins of consecutive rows (what the law is fitted to: the smoothed loss lags),
the smoothed loss thinned to a few hundred points (where the run reached each loss), its
lr as it ran (knots in peak units, and the absolute peak where the lr was logged or
planned in absolute units), its batch stages (steps to tokens), the clock where it logged
one, what it logged of its configuration, and how well the run alone forecast itself from
its own early log (:mod:`.own_log`). A few kilobytes of JSON; a project is then refitted
with no history read.

Pure: a validated :class:`History` in, a frozen :class:`RunEvidence` out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracker_plugin.core.clock import Timeline, TimelineBuilder
from tracker_plugin.core.models.schedule_law import observations
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.errors import ConfigError
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import LrSchedule

__all__ = [
    "CURVE_POINTS",
    "EVIDENCE_VERSION",
    "PLAN_POINTS",
    "RunEvidence",
    "plan_knots",
    "run_evidence",
    "warmup_end",
]

# The version of the stored form: a stored evidence of another version is taken again.
EVIDENCE_VERSION = 1
# The smoothed loss is kept at this many points (where the run reached a loss, to a
# fraction of a logging interval on the runs measured), the lr plan at most this many
# knots: it is simplified to within _PLAN_TOLERANCE of its peak (a step drop keeps its two
# knots, a cosine a few dozen).
CURVE_POINTS = 256
PLAN_POINTS = 256
_PLAN_TOLERANCE = 2e-3
# The lr is at its peak from this share of it: the fit starts there (the analysis's rule).
_AT_PEAK = 0.99
# Numbers are stored to this many significant digits (a loss to 1e-7 of itself).
_DIGITS = 8


@dataclass(frozen=True)
class RunEvidence:
    """A finished run, as the project's law reads it (see the module's docstring).

    ``bins``: ``(mean step, mean raw loss, rows)`` of consecutive rows from the fit start
    (the lr's peak); ``curve``: ``(step, smoothed loss)``; ``plan``: ``(step, lr / peak)``
    knots of the lr the run trained on, from its first knot (a linear warmup from 0 before
    it, as every timeline assumes); ``batch``: ``(first step, tokens before it, tokens per
    step)`` per stage; ``seconds``: ``(step, seconds since the first row)`` where the run
    logged a clock; ``descriptors``: what the run logged of its configuration (see
    :mod:`.configuration`); ``own``: ``(cut, target quantile, ln(predicted / true tokens))``
    of the run alone forecasting itself from its own log cut at that share of its tokens.
    ``unit`` is ``tokens``, or ``steps`` for a run with no tokens to be had (each step one).
    """

    run: str
    unit: str
    ema_window: float
    fit_start: float
    last_step: float
    plan_end: float | None
    finished: bool
    plan: tuple[tuple[float, float], ...]
    batch: tuple[tuple[float, float, float], ...]
    bins: tuple[tuple[float, float, float], ...]
    curve: tuple[tuple[float, float], ...]
    peak_lr: float | None = None
    seconds: tuple[tuple[float, float], ...] = ()
    descriptors: tuple[tuple[str, str | float], ...] = ()
    own: tuple[tuple[float, float, float], ...] = ()
    lr_assumed: bool = False

    # ---- what the fits read -------------------------------------------------------

    @property
    def on_steps(self) -> bool:
        return self.unit == "steps"

    @property
    def described(self) -> dict[str, str | float]:
        return dict(self.descriptors)

    def schedule(self) -> LrSchedule:
        """The lr the run trained on, as a plan (its planned end where known)."""
        steps, lr = (np.array(x, float) for x in zip(*self.plan))
        total = self.plan_end if self.plan_end is not None else float(steps[-1])
        return LrSchedule(tuple(steps.tolist()), tuple(lr.tolist()), total, "log",
                          f"the lr run {self.run} trained on ({len(steps)} knots)")

    def tokens_at(self, steps: np.ndarray | float) -> np.ndarray:
        """Tokens consumed before ``steps``, from the batch stages (the last goes on)."""
        at = np.atleast_1d(np.asarray(steps, float))
        stages = np.array(self.batch, float)
        k = np.clip(np.searchsorted(stages[:, 0], at, side="right") - 1, 0, len(stages) - 1)
        out = stages[k, 1] + (at - stages[k, 0]) * stages[k, 2]
        return out if np.ndim(steps) else out[:1]

    def history(self, last_step: float | None = None) -> History:
        """A history of the smoothed curve's points (up to ``last_step``): what a timeline
        of the run is built from (its steps, tokens and batch; the lr is the plan's)."""
        step = np.array([p[0] for p in self.curve], float)
        if last_step is not None:
            step = step[step <= last_step]
            if not len(step):
                step = np.array([0.0])
        loss = np.interp(step, [p[0] for p in self.curve], [p[1] for p in self.curve])
        stages = np.array(self.batch, float)
        k = np.clip(np.searchsorted(stages[:, 0], step, side="right") - 1, 0, len(stages) - 1)
        return History(self.run, "loss", step.round().astype(np.int64), self.tokens_at(step), stages[k, 2], loss,
                       on_steps=self.on_steps)

    def timeline(self, plan: LrSchedule | None = None, last_step: float | None = None) -> Timeline:
        """The run's timeline on ``plan`` (default: the lr it trained on), as logged up to
        ``last_step`` (default: its last row)."""
        history = self.history(last_step)
        return TimelineBuilder(history)(plan if plan is not None else self.schedule())

    def observations_until(self, last_step: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The bins at or before ``last_step``: ``(step, loss, rows)``."""
        bins = np.array(self.bins, float).reshape(-1, 3)
        keep = bins[:, 0] <= last_step
        return bins[keep, 0], bins[keep, 1], bins[keep, 2]

    def smoothed_at(self, steps: np.ndarray | float) -> np.ndarray:
        return np.interp(np.asarray(steps, float), [p[0] for p in self.curve], [p[1] for p in self.curve])

    def crossing(self, target: float) -> float | None:
        """Tokens where the smoothed curve first reaches ``target`` (None: never)."""
        step = np.array([p[0] for p in self.curve], float)
        loss = np.array([p[1] for p in self.curve], float)
        below = np.flatnonzero(loss <= target)
        if not len(below):
            return None
        i = int(below[0])
        if i == 0:
            return float(self.tokens_at(step[0])[0])
        frac = (loss[i - 1] - target) / (loss[i - 1] - loss[i]) if loss[i - 1] != loss[i] else 1.0
        return float(self.tokens_at(step[i - 1] + frac * (step[i] - step[i - 1]))[0])

    def seconds_per_token(self) -> float | None:
        """The run's mean pace over its logged clock (None: no clock logged)."""
        if len(self.seconds) < 2:
            return None
        (s0, t0), (s1, t1) = self.seconds[0], self.seconds[-1]
        tokens = float(self.tokens_at(s1)[0] - self.tokens_at(s0)[0])
        return (t1 - t0) / tokens if tokens > 0 and t1 > t0 else None

    # ---- the stored form ----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form (numbers rounded to 8 significant digits)."""
        return {
            "version": EVIDENCE_VERSION, "run": self.run, "unit": self.unit, "ema_window": self.ema_window,
            "fit_start": self.fit_start, "last_step": self.last_step, "plan_end": self.plan_end,
            "finished": self.finished, "peak_lr": self.peak_lr, "lr_assumed": self.lr_assumed,
            "plan": _rounded(self.plan), "batch": _rounded(self.batch), "bins": _rounded(self.bins),
            "curve": _rounded(self.curve), "seconds": _rounded(self.seconds),
            "descriptors": {k: v for k, v in self.descriptors}, "own": _rounded(self.own),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunEvidence:
        """The evidence :meth:`to_dict` wrote.

        Raises:
            ConfigError: another version, or a field missing or malformed (named).
        """
        if data.get("version") != EVIDENCE_VERSION:
            raise ConfigError(f"run evidence of version {data.get('version')!r}, not {EVIDENCE_VERSION}: take it again")
        try:
            evidence = cls(
                run=str(data["run"]), unit=str(data["unit"]), ema_window=float(data["ema_window"]),
                fit_start=float(data["fit_start"]), last_step=float(data["last_step"]),
                plan_end=None if data["plan_end"] is None else float(data["plan_end"]),
                finished=bool(data["finished"]), plan=_rows(data["plan"], 2), batch=_rows(data["batch"], 3),
                bins=_rows(data["bins"], 3), curve=_rows(data["curve"], 2),
                peak_lr=None if data.get("peak_lr") is None else float(data["peak_lr"]),
                seconds=_rows(data.get("seconds", ()), 2),
                descriptors=tuple(sorted((str(k), v if isinstance(v, str) else float(v))
                                         for k, v in dict(data.get("descriptors", {})).items())),
                own=_rows(data.get("own", ()), 3), lr_assumed=bool(data.get("lr_assumed", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"run evidence of {data.get('run', '?')!r} is malformed: {exc}") from None
        if len(evidence.plan) < 2 or not evidence.batch or not evidence.curve:
            raise ConfigError(f"run evidence of {evidence.run!r} holds no plan, batch or curve")
        return evidence


def _rounded(rows: Sequence[Sequence[float]]) -> list[list[float]]:
    return [[float(f"{v:.{_DIGITS}g}") for v in row] for row in rows]


def _rows(values: Any, width: int) -> Any:
    """Rows of ``width`` finite numbers, as tuples (typed by the field they fill)."""
    out = tuple(tuple(float(v) for v in row) for row in values)
    if any(len(row) != width or not all(math.isfinite(v) for v in row) for row in out):
        raise ValueError(f"rows of {width} finite numbers expected")
    return out


def warmup_end(timeline: Timeline, plan: LrSchedule | None = None) -> float:
    """The first step at which the lr is at its peak (the fit's start): ``plan``'s where one
    is given (a log still in its warmup has its own last lr for a peak), else on ``timeline``."""
    if plan is not None:
        steps = np.unique(np.r_[np.asarray(plan.steps, float), np.linspace(0.0, float(plan.steps[-1]), 2048)])
        lr = np.asarray(plan.at(steps), float)
        at = np.flatnonzero(lr >= _AT_PEAK * plan.peak)
        return float(steps[at[0]]) if len(at) else 0.0
    at = np.flatnonzero(timeline.lr >= _AT_PEAK * float(np.max(timeline.lr)))
    return float(timeline.step[at[0]]) if len(at) else 0.0


def plan_knots(schedule: LrSchedule, end: float | None = None) -> tuple[tuple[float, float], ...]:
    """``schedule``'s lr over its peak to ``end`` (its last knot or planned end), simplified
    to at most :data:`PLAN_POINTS` knots within :data:`_PLAN_TOLERANCE` of the peak."""
    last = max(float(schedule.steps[-1]), float(end or 0.0), float(schedule.total_steps or 0.0))
    dense = np.unique(np.r_[np.asarray(schedule.steps, float), np.linspace(float(schedule.steps[0]), last, 4096)])
    dense = dense[dense <= last]
    lr = np.asarray(schedule.at(dense), float) / schedule.peak
    keep = _simplify(dense, lr, _PLAN_TOLERANCE, PLAN_POINTS)
    return tuple((float(dense[i]), float(lr[i])) for i in keep)


def _simplify(x: np.ndarray, y: np.ndarray, tolerance: float, at_most: int) -> list[int]:
    """Ramer-Douglas-Peucker: the indices of a polyline within ``tolerance`` of ``y``
    (vertically), the widest miss split first, at most ``at_most`` of them."""
    keep = {0, len(x) - 1}
    spans = [(0, len(x) - 1)]
    while spans and len(keep) < at_most:
        worst, split, at = -1.0, None, 0
        for k, (a, b) in enumerate(spans):
            if b - a < 2:
                continue
            line = y[a] + (y[b] - y[a]) * (x[a + 1:b] - x[a]) / (x[b] - x[a])
            miss = np.abs(y[a + 1:b] - line)
            i = int(np.argmax(miss))
            if miss[i] > worst:
                worst, split, at = float(miss[i]), k, a + 1 + i
        if split is None or worst <= tolerance:
            break
        a, b = spans.pop(split)
        keep.add(at)
        spans += [(a, at), (at, b)]
    return sorted(keep)


def run_evidence(
    history: History,
    plan: LrSchedule | None,
    *,
    ema_window: float,
    finished: bool = True,
    plan_end: float | None = None,
    descriptors: Mapping[str, str | float] | None = None,
    own: Sequence[tuple[float, float, float]] = (),
    peak_lr: float | None = None,
) -> RunEvidence:
    """The evidence of a run: ``plan`` is the lr it trained on where it logged none (its
    logged lr is taken where it did; with neither, a constant lr is assumed and said in
    ``lr_assumed``). ``plan_end`` is the planned last step (default: the plan's); ``peak_lr``
    the absolute peak lr (default: the logged lr's peak, or the plan's where it is not a
    multiplier); ``own`` the run alone's errors (:func:`.own_log.own_errors`)."""
    trained = _trained_on(history, plan)
    builder = TimelineBuilder(history)
    timeline = builder(trained)
    start = warmup_end(timeline)
    first = int(np.searchsorted(history.step, start))
    first = min(first, len(history) - 1)
    obs = observations(history.step[first:].astype(float), history.loss[first:], timeline)
    counts = obs.weight
    smoothed = token_window_ema(history.loss, history.step, history.batch, ema_window)
    pick = np.unique(np.linspace(0, len(history) - 1, min(CURVE_POINTS, len(history))).round().astype(np.int64))
    end = plan_end if plan_end is not None else (None if trained is None else trained.total_steps)
    return RunEvidence(
        run=history.run, unit=history.unit, ema_window=float(ema_window), fit_start=float(history.step[first]),
        last_step=float(history.step[-1]), plan_end=None if end is None else float(end), finished=finished,
        plan=plan_knots(trained, end) if trained is not None else ((0.0, 1.0), (float(history.step[-1]) + 1.0, 1.0)),
        batch=_stages(history), bins=tuple(zip(obs.step.tolist(), obs.loss.tolist(), counts.tolist())),
        curve=tuple(zip(history.step[pick].astype(float).tolist(), smoothed[pick].tolist())),
        peak_lr=peak_lr if peak_lr is not None else _peak(history, plan),
        seconds=_seconds(history, pick), descriptors=tuple(sorted((descriptors or {}).items())), own=tuple(own),
        lr_assumed=trained is None,
    )


def _trained_on(history: History, plan: LrSchedule | None) -> LrSchedule | None:
    """The lr the run trained on: its logged lr, else ``plan``, else its params' plan."""
    if history.lr is not None:
        ok = np.isfinite(history.lr) & (history.lr >= 0)
        if ok.sum() >= 2 and np.max(history.lr[ok]) > 0:
            steps, lr = history.step[ok].astype(float), history.lr[ok]
            total = plan.total_steps if plan is not None and plan.total_steps else float(steps[-1])
            return LrSchedule(tuple(steps.tolist()), tuple(lr.tolist()), total, "log", "the logged lr")
    return plan if plan is not None else history.lr_plan


def _peak(history: History, plan: LrSchedule | None) -> float | None:
    if history.lr is not None and np.isfinite(history.lr).any():
        return float(np.nanmax(history.lr))
    if plan is not None and plan.source in ("params", "file") and plan.peak < 1.0:
        return float(plan.peak)
    return None


def _stages(history: History) -> tuple[tuple[float, float, float], ...]:
    change = np.r_[0, np.flatnonzero(history.batch[1:] != history.batch[:-1]) + 1]
    out = []
    for i in change:
        step, batch = float(history.step[i]), float(history.batch[i])
        # Tokens before the stage's first step, counted back to its start where it is the first.
        out.append((0.0 if i == 0 else step, float(history.tokens[i]) - (step * batch if i == 0 else 0.0), batch))
    return tuple(out)


def _seconds(history: History, pick: np.ndarray) -> tuple[tuple[float, float], ...]:
    if history.time is None:
        return ()
    time = np.asarray(history.time, float)[pick]
    ok = np.isfinite(time)
    if ok.sum() < 2:
        return ()
    return tuple(zip(history.step[pick][ok].astype(float).tolist(), (time[ok] - time[ok][0]).tolist()))
