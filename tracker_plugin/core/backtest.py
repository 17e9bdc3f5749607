"""How far to trust forecasts: cut finished runs, forecast, compare with what happened.

The protocol, for each finished run, each fit fraction ``f`` and each target quantile ``q``:

1. smooth the full run's loss (the analysis's token-window EMA);
2. the target is the value that smoothed loss had at ``q`` of the run's final tokens;
3. the truth is where the full run's smoothed loss first reached it;
4. cut the run at ``f`` of its final tokens and forecast the target from the cut;
5. score ``ln(predicted / true tokens)``: 0 is perfect, 0.1 is 10% off.

A run with a clock is scored in seconds too: the truth is the full run's clock at the
crossing, the forecast the cut's ``seconds`` and ``seconds_interval`` (both counted from the
run's first row), so the time figures show what the throughput adds to the token error.

The lr plan a forecast may use (``plan``): ``log`` hands it the finished run's logged lr, as
a user hands a planned schedule (``lr_schedule``); ``infer`` gives it only the cut, so
it infers what it can from the lr logged so far.

Pure: histories and settings in, frozen dataclasses out. The command line and the
benchmark share it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tracker_plugin.core import forecast
from tracker_plugin.core.analysis import AnalysisConfig, TargetResult, _crossing, law_timing, run_analysis
from tracker_plugin.core.models import LawFit
from tracker_plugin.core.siblings import (
    NONE,
    SIBLING_CUTS,
    SiblingCase,
    SiblingRecord,
    plan_shape,
    sibling_case,
)
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.core.status import Status
from tracker_plugin.core.throughput import time_target
from tracker_plugin.defaults import PLANS
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import LrSchedule

__all__ = [
    "PLANS", "SIBLING_QUANTILES", "Backtest", "BacktestCase", "BacktestSummary", "Skipped", "backtest_run", "logged_plan",
    "sibling_cases", "sibling_record", "summarize",
]



@dataclass(frozen=True)
class BacktestCase:
    """One forecast of one run, cut at ``fit_fraction``, for the target at ``target_quantile``."""

    run: str
    model: str
    fit_fraction: float
    target_quantile: float
    target: float
    true_tokens: float
    status: Status
    chosen: str | None = None  # the law auto chose
    tokens: float | None = None
    interval: tuple[float, float] | None = None
    note: str | None = None
    p_reach: float | None = None  # p_reach_within_plan
    draws: tuple[float, ...] = field(default=(), repr=False, compare=False)  # the bootstrap's sorted crossings
    score: float | None = None  # the chosen law's mean |ln| forecasting the cut's own later log
    # The law's inner forecasts, (|ln|, share of the peak lr shed at the inner cut): Selection.inner.
    inner: tuple[tuple[float, float], ...] = ()
    rows: int = 0  # logged rows the forecast saw
    plan_source: str | None = None  # where the plan came from: params/given, inferred, assumed
    raw_draws: tuple[float, ...] = field(default=(), repr=False, compare=False)  # before the track record's stretch
    loss_horizons: tuple[float, ...] = field(default=(), repr=False, compare=False)  # each raw draw's (forecast.LOSS_HORIZON_SHARE)
    error_scale: float | None = None  # the selection's (see forecast.Selection)
    error_count: int = 0
    # The track-record prior (scale, weight in forecasts) error_scale was shrunk towards, so
    # a replay can take it back out whatever the defaults are when it runs.
    error_prior: tuple[float, float] = (0.0, 0.0)
    plan_end_tokens: float | None = None  # where the plan ends, in tokens (None: no end)
    # On the run's clock (runs with one): the full run's seconds at the crossing, the forecast's.
    true_seconds: float | None = None
    seconds: float | None = None
    seconds_interval: tuple[float, float] | None = None
    plan_draws: tuple[float, ...] = field(default=(), repr=False, compare=False)  # raw, on the plausible plans
    plan_ends: tuple[float, ...] = field(default=(), repr=False, compare=False)  # their plans' ends, in tokens
    # The central plan's crossing (inf: never) where ``tokens`` is the point over the
    # plausible plans too; None where ``tokens`` is the central plan's own.
    central_tokens: float | None = None

    @property
    def reached_in_run(self) -> bool:
        """Whether the finished run reached the target (a target past its end did not)."""
        return math.isfinite(self.true_tokens)

    def interval_at(self, level: float) -> tuple[float, float] | None:
        """The interval at another coverage, read from the draws as the forecast reads its own."""
        if not self.forecast or not self.draws:
            return None
        top = len(self.draws) - 1
        return float(self.draws[math.floor((1 - level) / 2 * top)]), float(self.draws[math.ceil((1 + level) / 2 * top)])

    def covered_at(self, level: float) -> bool | None:
        interval = self.interval_at(level)
        if interval is None or not self.reached_in_run:
            return None
        return bool(interval[0] <= self.true_tokens <= interval[1])

    @property
    def forecast(self) -> bool:
        """Whether the cut produced a forecast (a crossing or an extrapolation)."""
        # A law's crossing past the plan's end (not_reached, unlikely) is scored too: the law is what is tested.
        return self.tokens is not None and (self.status.located or self.status in (Status.NOT_REACHED, Status.UNLIKELY))

    @property
    def error(self) -> float | None:
        """``ln(predicted / true tokens)``; None without a forecast."""
        if not self.forecast or not 0 < self.true_tokens < math.inf or not self.tokens or self.tokens <= 0:
            return None
        return math.log(self.tokens / self.true_tokens)

    @property
    def covered(self) -> bool | None:
        if self.interval is None or not self.forecast or not self.reached_in_run:
            return None
        low, high = self.interval
        return low <= self.true_tokens <= high

    @property
    def seconds_error(self) -> float | None:
        """``ln(predicted / true seconds)``; None without a clock or a forecast in seconds."""
        if not self.forecast or self.seconds is None or self.true_seconds is None:
            return None
        if not (self.seconds > 0 and 0 < self.true_seconds < math.inf):
            return None
        return math.log(self.seconds / self.true_seconds)

    @property
    def seconds_covered(self) -> bool | None:
        if self.seconds_interval is None or self.true_seconds is None or not self.forecast:
            return None
        low, high = self.seconds_interval
        return low <= self.true_seconds <= high


@dataclass(frozen=True)
class BacktestSummary:
    """One model at one fit fraction and target quantile, over every run."""

    model: str
    fit_fraction: float
    target_quantile: float
    cases: int
    failures: int  # cases without a forecast
    median_abs: float | None  # median |ln(predicted / true)|
    p90_abs: float | None
    bias: float | None  # median ln(predicted / true): > 0 is late
    coverage: float | None  # share of intervals holding the truth
    intervals: int
    median_width: float | None  # median high / low of the intervals
    # The same in seconds, over the cases of runs with a clock (None: no such case).
    median_abs_seconds: float | None = None
    seconds_coverage: float | None = None
    seconds_intervals: int = 0


@dataclass(frozen=True)
class Skipped:
    """A run the backtest could not score, and why (it could not be read)."""

    run: str
    error: str


@dataclass(frozen=True)
class Backtest:
    """A backtest over many runs: its settings, every case, the figures, the runs skipped."""

    plan: str
    config: AnalysisConfig
    cases: tuple[BacktestCase, ...]
    summaries: tuple[BacktestSummary, ...]
    skipped: tuple[Skipped, ...] = ()


def logged_plan(history: History) -> LrSchedule | None:
    """The finished run's logged lr as its plan (None when it logged no lr)."""
    if history.lr is None:
        return None
    ok = np.isfinite(history.lr)
    if ok.sum() < 2 or np.nanmax(history.lr) <= 0:
        return None
    schedule = LrSchedule.from_table(history.step[ok], history.lr[ok], source="log")
    return replace(schedule, description=f"the finished run's logged lr, steps {history.step[0]:,} to {history.last_step:,}")


def backtest_run(
    history: History,
    config: AnalysisConfig,
    *,
    fit_fractions: Sequence[float],
    target_quantiles: Sequence[float],
    models: Sequence[str],
    plan: str = "log",
    beyond: bool = False,
) -> list[BacktestCase]:
    """Every case of the protocol for one finished run (see the module's docstring).

    ``beyond`` adds, per cut, a target the run never reached (its final smoothed loss less
    the gap between it and the smoothed loss at the last quantile), labelled
    ``target_quantile`` 1.0 with infinite true tokens: with the others it scores
    ``p_reach_within_plan`` (a Brier score needs outcomes of both kinds).
    """
    if plan not in PLANS:
        raise ValueError(f"plan must be one of {PLANS}, got {plan!r}")
    smoothed = token_window_ema(history.loss, history.step, history.batch, config.ema_token_window, history.loss_spans)
    final = history.last_tokens
    targets = []
    for q in target_quantiles:
        target = float(np.interp(q * final, history.tokens, smoothed))
        truth = _crossing(history, smoothed, target)
        assert truth is not None  # the smoothed loss takes this value at q of the tokens
        targets.append((q, target, truth[1]))
    clock = [_true_seconds(history, truth, config.interval) for _, _, truth in targets]
    if beyond and targets:
        end = float(smoothed[-1])
        targets.append((1.0, end - max(targets[-1][1] - end, 1e-3 * abs(end)), math.inf))
        clock.append(None)
    schedule = logged_plan(history) if plan == "log" else None
    cases = []
    for f in fit_fractions:
        rows = int(np.searchsorted(history.tokens, f * final, side="right"))
        for model in models:
            cut = _cut(history, rows, f, model, targets, config, schedule)
            cases += [replace(c, true_seconds=seconds) for c, seconds in zip(cut, clock)]
    return cases


def _true_seconds(history: History, tokens: float, level: float) -> float | None:
    """The run's clock where it reached ``tokens``, as the analysis reads a reached target."""
    if history.time is None:
        return None
    return time_target(history, None, tokens=tokens, tokens_interval=None, reached=True, level=level,
                       deadline=None).seconds


def _cut(
    history: History,
    rows: int,
    fraction: float,
    model: str,
    targets: list[tuple[float, float, float]],
    config: AnalysisConfig,
    schedule: LrSchedule | None,
) -> list[BacktestCase]:
    if rows < 2 or any(t <= 0 for _, t, _ in targets):
        note = (f"the cut at {fraction:g} of the tokens keeps {rows} logged row(s)" if rows < 2
                else "a target from the smoothed loss is not above 0: the loss is not a loss")
        return [BacktestCase(history.run, model, fraction, q, t, truth, Status.NOT_ENOUGH_DATA, note=note) for q, t, truth in targets]
    settings = replace(
        config,
        model=model,
        targets=tuple(t for _, t, _ in targets),
        lr_schedule=schedule if schedule is not None else config.lr_schedule,
        stability_sweep=False,
    )
    analysis = run_analysis(history.head(rows), settings, replays=True)
    chosen = analysis.selection.chosen if analysis.selection is not None else None
    score = dict(analysis.selection.scores).get(chosen) if analysis.selection is not None and chosen else None
    if model == "power-law":
        chosen = model
    source = None if analysis.plan is None else analysis.plan.source
    selection = analysis.selection
    plan_end = None
    if isinstance(analysis.fit, LawFit) and analysis.fit.timeline.plan_end is not None:
        plan_end = float(analysis.fit.timeline.tokens_at(analysis.fit.timeline.plan_end))
    cases = [
        replace(
            _scored(history.run, model, fraction, q, target, truth, result, chosen),
            score=score, inner=() if selection is None else selection.inner, rows=rows, plan_source=source, raw_draws=result.tokens_raw_draws,
            loss_horizons=result.tokens_loss_horizons,
            plan_draws=result.tokens_plan_draws, plan_ends=result.tokens_plan_ends, central_tokens=result.tokens_central,
            error_scale=None if selection is None else selection.error_scale,
            error_count=0 if selection is None else selection.error_count, plan_end_tokens=plan_end,
            error_prior=(forecast.ERROR_PRIOR_SCALE, forecast.ERROR_PRIOR_WEIGHT),
        )
        for (q, target, truth), result in zip(targets, analysis.targets)
    ]
    if any(t.law_tokens is not None for t in analysis.targets):
        analysis = replace(analysis, timing=law_timing(analysis))
    timing = analysis.timing.targets if history.time is not None and analysis.timing is not None else ()
    return [replace(c, seconds=t.seconds, seconds_interval=t.seconds_interval) for c, t in zip(cases, timing)] or cases


def _scored(
    run: str, model: str, fraction: float, q: float, target: float, truth: float, result: TargetResult, chosen: str | None
) -> BacktestCase:
    return BacktestCase(
        run, model, fraction, q, target, truth, result.status,
        chosen=chosen, note=result.note,
        # Past the plan's end the report says not_reached or unlikely; the backtest scores the law's crossing.
        tokens=result.tokens if result.law_tokens is None else result.law_tokens,
        interval=result.tokens_interval if result.law_tokens is None else result.law_interval,
        p_reach=result.p_reach_within_plan, draws=result.tokens_draws,
    )


def summarize(cases: Sequence[BacktestCase]) -> list[BacktestSummary]:
    """Per model, fit fraction and target quantile (in first-seen order): the figures."""
    groups: dict[tuple[str, float, float], list[BacktestCase]] = {}
    for c in cases:
        groups.setdefault((c.model, c.fit_fraction, c.target_quantile), []).append(c)
    return [_summary(key, group) for key, group in groups.items()]


def _summary(key: tuple[str, float, float], group: list[BacktestCase]) -> BacktestSummary:
    errors = np.array([c.error for c in group if c.error is not None])
    covered = [c.covered for c in group if c.covered is not None]
    seconds = np.array([c.seconds_error for c in group if c.seconds_error is not None])
    seconds_covered = [c.seconds_covered for c in group if c.seconds_covered is not None]
    widths = [
        c.interval[1] / c.interval[0]
        for c in group
        if c.interval is not None and c.covered is not None and c.interval[0] > 0
    ]

    def stat(values: np.ndarray, fn: Callable[[np.ndarray], Any]) -> float | None:
        return float(fn(values)) if len(values) else None

    return BacktestSummary(
        model=key[0],
        fit_fraction=key[1],
        target_quantile=key[2],
        cases=len(group),
        failures=len(group) - len(errors),
        median_abs=stat(np.abs(errors), np.median),
        p90_abs=stat(np.abs(errors), lambda v: np.percentile(v, 90)),
        bias=stat(errors, np.median),
        coverage=float(np.mean(covered)) if covered else None,
        intervals=len(covered),
        median_width=float(np.median(widths)) if widths else None,
        median_abs_seconds=stat(np.abs(seconds), np.median),
        seconds_coverage=float(np.mean(seconds_covered)) if seconds_covered else None,
        seconds_intervals=len(seconds_covered),
    )


# The targets a sibling is backtested on: where its smoothed loss stood at these shares of
# its tokens (the validation's, benchmarks/bench_siblings.py).
SIBLING_QUANTILES = (0.6, 0.8)


# A finished run that stopped short of this share of its planned steps is no sibling: its
# log does not hold what its plan's end did.
RAN_ITS_PLAN = 0.95


def sibling_record(history: History, config: AnalysisConfig) -> SiblingRecord:
    """A finished run's backtest at every cut of :data:`~tracker_plugin.core.siblings.SIBLING_CUTS`,
    made once for all (the forecasts calibrated on it read it, not its history); or why it
    is no sibling (it stopped short of its plan)."""
    plan = plan_shape(history, config.lr_schedule)
    share = plan.share(history.last_step)
    if share is not None and share < RAN_ITS_PLAN:
        return SiblingRecord(history.run, plan.kind, plan.peak, left_out=f"it stopped at {share:.0%} of its planned steps")
    cases = _cases(history, config, SIBLING_CUTS)
    cuts = tuple((cut, tuple(c for at, c in cases if math.isclose(at, cut))) for cut in SIBLING_CUTS)
    return SiblingRecord(history.run, plan.kind, plan.peak, tuple((cut, found) for cut, found in cuts if found))


def sibling_cases(history: History, config: AnalysisConfig, fraction: float) -> list[SiblingCase]:
    """A finished sibling's backtest cases at ``fraction`` of its tokens (the forecast
    run's progress): each target of :data:`SIBLING_QUANTILES` it reached, forecast with
    ``config``'s law from the cut (its own plan, as it logs or gives it), its error and
    interval. Cases with no finite forecast give none (a sibling says nothing there)."""
    return [case for _, case in _cases(history, config, (fraction,))]


def _cases(history: History, config: AnalysisConfig, fractions: Sequence[float]) -> list[tuple[float, SiblingCase]]:
    """The sibling cases at each of ``fractions`` (one backtest), with their cut."""
    settings = replace(config, targets=(1.0,), calibration=NONE, stability_sweep=False)
    cases = backtest_run(history, settings, fit_fractions=tuple(fractions), target_quantiles=SIBLING_QUANTILES,
                         models=(config.model,))
    out = []
    for case in cases:
        if case.reached_in_run and case.tokens is not None and case.draws:
            found = sibling_case(history.run, case.tokens, case.true_tokens, np.array(case.draws, float))
            if found is not None:
                out.append((case.fit_fraction, found))
    return out
