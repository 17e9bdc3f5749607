"""The analysis: smooth a run's loss, find each target's crossing, forecast the rest.

``analyze(history, config)`` is pure: a validated :class:`History` and an
:class:`AnalysisConfig` in, a frozen :class:`Analysis` out. It neither prints nor reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.core.clock import Timeline, TimelineBuilder, tokens_to_step
from tracker_plugin.core.forecast import (
    MIN_SEEN_DECAY,
    UNKNOWN_PLAN_SOURCES,
    Selection,
    TargetForecast,
    choose_law,
    fit_window,
    forecast_targets,
    plan_inflation,
    resolve_plan,
)
from tracker_plugin.core.models import (
    FitFailure,
    GainPrior,
    LawFit,
    Model,
    PowerLaw,
    fit_power_law,
)
from tracker_plugin.core.models.power_sweep import fit_power_law_windows
from tracker_plugin.core.models.prefixes import fit_prefixes
from tracker_plugin.core.models.schedule_law import MIN_POINTS_NO_DECAY, smooth_all
from tracker_plugin.core.plan_spread import over_plans
from tracker_plugin.core.project_law.forecast import PlanEnd, ProjectForecast, TargetLaw, forecast_run
from tracker_plugin.core.project_law.join import log_of_history
from tracker_plugin.core.project_law.plan_end import own_plan_end
from tracker_plugin.core.project_law.project import ProjectLaw
from tracker_plugin.core.siblings import NONE, Calibration
from tracker_plugin.core.smoothing import fine_ema
from tracker_plugin.core.status import Status, Verdict
from tracker_plugin.core.throughput import Timing, timing
from tracker_plugin.defaults import CLOCKS, DEFAULTS, MODELS
from tracker_plugin.errors import ConfigError
from tracker_plugin.frame.history import BatchStage, Columns, History, batch_stages, build_history
from tracker_plugin.frame.resume import late_start
from tracker_plugin.plan.schedule import STEPS_ONLY, BatchSchedule, LrSchedule, Plan

__all__ = [
    "Analysis",
    "AnalysisConfig",
    "Status",
    "Sweep",
    "SweepRow",
    "TargetResult",
    "Verdict",
    "analyze",
    "law_timing",
    "run_analysis",
]

# Fits one window of a sweep, rows ``first:end``, from the fit of the window before.
Fitter = Callable[[int, int, Model | None], Model | FitFailure]

# Fewer rows than this after the fit start and no extrapolation is attempted: the power
# law's limit is the original script's; a schedule-aware law needs two more rows than the
# parameters its window identifies (three when it has seen no lr decay; the law itself
# asks for one more when it has).
MIN_FIT_ROWS = 10
MIN_LAW_ROWS = MIN_POINTS_NO_DECAY
# Without an lr history the warmup is taken to be this share of the logged tokens.
NO_LR_WARMUP_SHARE = 0.1


@dataclass(frozen=True)
class AnalysisConfig:
    """Every setting that changes an analysis's result.

    The defaults (:data:`tracker_plugin.defaults.DEFAULTS`, which the command line shows
    too) are those of the original ``find_target_loss.py``, except the model:
    ``auto`` chooses a schedule-aware law on the run's own evidence; ``power-law`` is the
    original's. ``lr_schedule``, ``clock``, ``interval`` and ``anneal_gain`` matter to
    the schedule-aware models only. ``max_fit_points`` caps the rows the power law is
    fitted on (evenly spaced, for speed on huge logs); None, the default, fits every row,
    as the original does, which is what its parity needs: on an ill-conditioned window a
    thinned fit lands far from the full one.
    """

    targets: tuple[float, ...]
    ema_token_window: float = DEFAULTS["ema_token_window"]
    # The EMA window when the run has no tokens to be had (History.on_steps): in steps.
    ema_steps: float = DEFAULTS["ema_steps"]
    model: str = DEFAULTS["model"]
    lr_schedule: LrSchedule | None = None
    clock: str = DEFAULTS["clock"]
    interval: float = DEFAULTS["interval"]
    anneal_gain: float = DEFAULTS["anneal_gain"]
    fit_start_step: int | None = DEFAULTS["fit_start_step"]
    fit_last_stage: bool = DEFAULTS["fit_last_stage"]
    batch_schedule: BatchSchedule | None = None
    extrapolation_warn_factor: float = DEFAULTS["extrapolation_warn_factor"]
    stability_sweep: bool = DEFAULTS["stability_sweep"]
    sweep_step: int = DEFAULTS["sweep_step"]
    sweep_min_window: int = DEFAULTS["sweep_min_window"]
    convergence_tol: float = DEFAULTS["convergence_tol"]
    max_fit_points: int | None = None
    # Wall-clock time: a rate when the log has no clock, pauses in the rate, a deadline
    # (``+HOURS`` after the last row, or an ISO date); see ``core.throughput``.
    step_time: float | None = DEFAULTS["step_time"]
    throughput: float | None = DEFAULTS["throughput"]
    count_pauses: bool = DEFAULTS["count_pauses"]
    deadline: str | None = DEFAULTS["deadline"]
    # What the finished runs of the project say (core.siblings): the schedule-aware laws'
    # forecasts are calibrated with it; NONE, the default, leaves them as they are.
    calibration: Calibration = NONE
    # The project's law (core.project_law): the finished runs of the run's configuration,
    # fitted together; its forecast joins the run's own. None, the default: the run alone.
    project_law: ProjectLaw | None = None

    def __post_init__(self) -> None:
        targets = tuple(self.targets)
        if not targets:
            raise ConfigError("give at least one target loss")
        for target in targets:
            if isinstance(target, bool) or not isinstance(target, (int, float)) or not math.isfinite(target):
                raise ConfigError(f"targets must be finite numbers, got {target!r}")
            if target <= 0:
                raise ConfigError(f"targets are losses above 0, got {target!r}")
        object.__setattr__(self, "targets", tuple(float(t) for t in targets))
        _positive("ema_token_window", self.ema_token_window)
        _positive("ema_steps", self.ema_steps)
        _positive("extrapolation_warn_factor", self.extrapolation_warn_factor)
        _positive("sweep_step", self.sweep_step)
        _positive("convergence_tol", self.convergence_tol)
        if self.sweep_min_window < 0:
            raise ConfigError(f"sweep_min_window must be >= 0, got {self.sweep_min_window}")
        if self.fit_start_step is not None and self.fit_start_step < 0:
            raise ConfigError(f"fit_start_step must be >= 0, got {self.fit_start_step}")
        if self.max_fit_points is not None and self.max_fit_points < 16:
            raise ConfigError(f"max_fit_points must be at least 16 (or None for every row), got {self.max_fit_points}")
        for name in ("step_time", "throughput"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; choose from {', '.join(MODELS)}")
        if self.clock not in CLOCKS:
            raise ConfigError(f"unknown clock {self.clock!r}; choose from {', '.join(CLOCKS)}")
        if not (isinstance(self.interval, (int, float)) and 0 < self.interval < 1):
            raise ConfigError(f"interval is a coverage between 0 and 1 (0.8 for 80%), got {self.interval!r}")
        if not (isinstance(self.anneal_gain, (int, float)) and 0 <= self.anneal_gain < 1):
            raise ConfigError(f"anneal_gain is a share of the loss in [0, 1), got {self.anneal_gain!r}")
        if not isinstance(self.calibration, Calibration):
            raise ConfigError(f"calibration must be a Calibration (tracker_plugin.core.siblings), got {self.calibration!r}")
        if self.project_law is not None and not isinstance(self.project_law, ProjectLaw):
            raise ConfigError(f"project_law must be a ProjectLaw (tracker_plugin.core.project_law), got {self.project_law!r}")


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class SweepRow:
    """One window of the stability sweep: the fit on the run up to ``max_step``."""

    max_step: int
    max_tokens: float
    tokens: float | None
    step: float | None
    fit: Model | None
    note: str | None = None


@dataclass(frozen=True)
class Sweep:
    """Refits on growing windows, and whether the forecast has settled."""

    rows: tuple[SweepRow, ...]
    verdict: Verdict
    changes: tuple[float, float] | None
    tolerance: float


@dataclass(frozen=True)
class TargetResult:
    """What the analysis says about one target loss."""

    target: float
    status: Status
    tokens: float | None = None
    step: float | None = None
    tokens_interval: tuple[float, float] | None = None
    step_interval: tuple[float, float] | None = None
    fit: Model | None = None
    extrapolation_factor: float | None = None
    note: str | None = None
    beyond_warn_factor: bool = False
    sweep: Sweep | None = None
    p_reach_within_plan: float | None = None
    # The bootstrap's sorted crossings in tokens (inf: never), for backtests' calibration.
    tokens_draws: tuple[float, ...] = field(default=(), repr=False, compare=False)
    tokens_raw_draws: tuple[float, ...] = field(default=(), repr=False, compare=False)  # before the stretch
    tokens_loss_horizons: tuple[float, ...] = field(default=(), repr=False, compare=False)  # each raw draw's
    tokens_plan_draws: tuple[float, ...] = field(default=(), repr=False, compare=False)  # on the plausible plans
    tokens_plan_ends: tuple[float, ...] = field(default=(), repr=False, compare=False)  # their plans' ends
    # The central plan's crossing where the point is over the plausible plans (TargetForecast.central).
    tokens_central: float | None = field(default=None, repr=False, compare=False)
    # ``not_reached``: the best smoothed loss of the log and its step, and where the run
    # ended (the log's last row, when it reached the plan's end) or ends (the plan's end).
    best_loss: float | None = None
    best_step: float | None = None
    end_step: float | None = None
    end_tokens: float | None = None
    run_finished: bool = False
    # The law's crossing and interval past the plan's end (``not_reached``): never reported
    # (a run does not train past its plan), kept so a backtest scores the law as before.
    law_tokens: float | None = field(default=None, repr=False, compare=False)
    law_interval: tuple[float, float] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Analysis:
    """The full result for one run.

    ``history`` and ``smoothed`` are the analysed rows and their smoothed loss, which the
    plots draw; they are left out of comparisons and the repr.
    """

    run: str
    loss_key: str
    config: AnalysisConfig
    fit_start_step: int
    fit_start_reason: str
    observed_step: int
    observed_tokens: float
    stages: tuple[BatchStage, ...]
    batch_source: str
    targets: tuple[TargetResult, ...]
    history: History = field(repr=False, compare=False)
    smoothed: np.ndarray = field(repr=False, compare=False)
    notes: tuple[str, ...] = ()
    fit: Model | FitFailure | None = None
    selection: Selection | None = None
    plan: Plan | None = None
    # The wall-clock side: throughput, and each target's seconds (in ``targets`` order).
    timing: Timing | None = None
    # The smoothed loss forecast at the planned end (None: no planned end, or the power law),
    # and the project's law's forecast of the run where one was given and shared.
    plan_end: PlanEnd | None = None
    project: ProjectForecast | None = field(default=None, repr=False, compare=False)

    @property
    def dynamic_batch(self) -> bool:
        return len(self.stages) > 1

    @property
    def on_steps(self) -> bool:
        """No tokens to be had: the analysis ran on steps (a batch of one per step), so its
        token counts are step counts."""
        return self.history.on_steps

    def in_tokens(self, value: float | None) -> float | None:
        """A count on the analysis's axis as tokens: None on the step axis, where it counts
        steps (what reports, keys and tables write in a field that says tokens)."""
        return None if self.on_steps else value


def run_analysis(history: History, config: AnalysisConfig, *, replays: bool = False) -> Analysis:
    """Analyse a validated history; see :func:`tracker_plugin.analyze` for the public entry.

    ``replays`` keeps every draw a backtest replays other rules with
    (:attr:`TargetResult.tokens_raw_draws` even where the forecast does not read them): on an
    lr plan whose shape is unknown the interval and the point come from the plausible plans
    alone, and an analysis then skips the central plan's bootstrap refits. The answer is the
    same either way.
    """
    # Absurd values (a loss of 1e158) overflow inside fits; those end as failed fits with
    # a reason, so the floating-point warnings on the way say nothing new.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        return _run_analysis(history, config, replays)


def _run_analysis(history: History, config: AnalysisConfig, replays: bool = False) -> Analysis:
    ignored = False
    if history.on_steps:  # a batch of one "token" per step: the window is in steps
        if config.throughput is not None:
            # A rate in tokens per second says nothing of steps when the run has no tokens.
            raise ConfigError(
                f"throughput is in tokens per second, but run {history.run} has no tokens (the analysis is on "
                "steps): give step_time (seconds per step) instead, or the run's tokens per step (batch_size)"
            )
        ignored = config.ema_token_window != AnalysisConfig.ema_token_window
        config = replace(config, ema_token_window=config.ema_steps)
    notes = list(history.notes)
    if history.on_steps and ignored:
        notes.append(
            f"ema_token_window is in tokens and run {history.run} has none (the analysis is on steps): "
            f"the EMA window is ema_steps, {config.ema_steps:g} steps"
        )
    config, window_note = _window_within_run(history, config)
    if window_note:
        notes.append(window_note)
    stages = batch_stages(history)
    fine = fine_ema(history.loss, history.step, history.batch, config.ema_token_window, history.loss_spans)
    # The rows are among the fine points (they are the fine points when no row has a gap).
    smoothed = fine[1] if len(fine[0]) == len(history.step) else fine[1][np.searchsorted(fine[0], history.step)]
    fit_start, reason = _fit_start(history, stages, config)
    # The rows at or after the fit start (the steps are sorted): a range, not a copy of a long log's indices.
    window = range(int(np.searchsorted(history.step, fit_start)), len(history.step))
    if float(np.min(config.ema_token_window / history.batch)) < 1:
        notes.append(
            f"the EMA window ({config.ema_token_window:,.0f} {history.unit}) is smaller than the batch "
            "on some steps: no smoothing there"
        )
    power_law = config.model == "power-law"
    min_rows = MIN_FIT_ROWS if power_law else MIN_LAW_ROWS
    # The project's law forecasts a run from its plan alone: no row is too few for it.
    shared = not power_law and config.project_law is not None and config.project_law.shared
    results: dict[float, TargetResult] = {}
    open_targets = []
    for target in config.targets:
        crossing = _crossing(history, smoothed, target, fine)
        if crossing is not None:
            reached = None if power_law else 1.0
            first = None
            if smoothed[0] <= target:
                first = f"the first logged loss ({history.loss[0]:.6g}) is already at or below the target: reached at the first row"
            results[target] = TargetResult(
                target, Status.REACHED, tokens=crossing[1], step=crossing[0], p_reach_within_plan=reached, note=first
            )
        elif len(window) < min_rows and not shared:
            note = f"only {len(window)} logged rows at or after the fit start step {fit_start}; need {min_rows}"
            results[target] = TargetResult(target, Status.NOT_ENOUGH_DATA, note=note)
        else:
            open_targets.append(target)
    forecasts = _Forecasts()
    if open_targets or (not power_law and (len(window) >= min_rows or shared) and _short_of_plan(history, config)):
        # With every target reached a run short of its planned end is still forecast: its plan's end.
        prepared = _Prepared(history, config, stages, smoothed, fit_start, window, replays)
        if not power_law:
            prepared = replace(prepared, plan=resolve_plan(history, config.lr_schedule))
        forecast = _power_law_forecasts if power_law else _schedule_forecasts if len(window) >= min_rows else _project_forecasts
        forecasts = _run_ended(prepared, open_targets) or forecast(prepared, open_targets)
        results.update(forecasts.results)
    end = _PlanEnd.of(history, config, forecasts)
    ordered = tuple(_within_plan(results[t], history, smoothed, end) for t in config.targets)
    ordered = tuple(_before_the_log(r, history, smoothed) for r in ordered)
    return Analysis(
        run=history.run,
        loss_key=history.loss_key,
        config=config,
        fit_start_step=fit_start,
        fit_start_reason=reason,
        observed_step=history.last_step,
        observed_tokens=history.last_tokens,
        stages=stages,
        batch_source=history.batch_source,
        targets=ordered,
        history=history,
        smoothed=smoothed,
        notes=(*notes, *forecasts.notes),
        fit=forecasts.fit,
        selection=forecasts.selection,
        plan=forecasts.plan,
        timing=_timing(history, ordered, config),
        plan_end=_plan_end(end, forecasts, smoothed),
        project=forecasts.project,
    )


def _short_of_plan(history: History, config: AnalysisConfig) -> bool:
    """Whether a plan given (or read from the run's params) ends past the log by more than
    the finished run's slack."""
    given = config.lr_schedule if config.lr_schedule is not None else history.lr_plan
    total = None if given is None else given.total_steps
    return total is not None and float(history.step[-1]) < (1.0 - _FINISHED_SHARE) * float(total)


def _plan_end(end: _PlanEnd | None, forecasts: _Forecasts, smoothed: np.ndarray) -> PlanEnd | None:
    """The smoothed loss at the plan's end: logged where the run reached it, else forecast."""
    if end is None:
        return None
    if end.finished:
        return PlanEnd(end.step, end.tokens, float(smoothed[-1]), None, "logged")
    return forecasts.plan_end


def _timing(history: History, results: Sequence[TargetResult], config: AnalysisConfig, law: bool = False) -> Timing:
    located = [
        (r.tokens if r.status.located else None, r.tokens_interval, r.status == Status.REACHED) for r in results
    ]
    if law:  # the law's crossings past the plan's end too (see law_timing)
        located = [(r.law_tokens, r.law_interval, False) if r.law_tokens is not None else x
                   for r, x in zip(results, located)]
    return timing(
        history, located, step_time=config.step_time, tokens_per_second=config.throughput,
        count_pauses=config.count_pauses, deadline=config.deadline, level=config.interval,
    )


# The log has reached the plan's end (the run finished) when fewer planned steps remain
# than this share of the plan, or than this many logging intervals: an end inferred from
# the logged lr, or a last row logged just short of the last step, lands within either.
_FINISHED_SHARE = 0.01
_FINISHED_INTERVALS = 2.0


@dataclass(frozen=True)
class _PlanEnd:
    """The planned last step and its tokens, and whether the log has reached it."""

    step: float
    tokens: float
    finished: bool

    @staticmethod
    def of(history: History, config: AnalysisConfig, forecasts: _Forecasts) -> _PlanEnd | None:
        """The plan's end, when a plan with one is known (the power law reads no plan)."""
        if config.model == "power-law":
            return None
        last = float(history.step[-1])
        tail = np.diff(history.step[-17:].astype(float))
        slack = max(_FINISHED_SHARE * last, _FINISHED_INTERVALS * float(np.median(tail)) if len(tail) else 0.0)
        given = config.lr_schedule if config.lr_schedule is not None else history.lr_plan
        total = forecasts.plan.total_steps if forecasts.plan is not None else None
        if total is None and given is not None and given.total_steps is not None:
            # A planned total the resolved plan set aside because the log reached it: the
            # run's end, unless the log went well past it (then it was not the run's end).
            total = given.total_steps if given.total_steps + slack >= last else None
        if total is None or not math.isfinite(total):
            return None
        fit = forecasts.fit
        if isinstance(fit, LawFit) and fit.timeline.plan_end is not None:
            tokens = float(fit.timeline.tokens_at(float(total)))
        else:  # counted on at the last batch, as a forecast's step is
            tokens = float(history.tokens[-1] + max(total - last, 0.0) * history.batch[-1])
        return _PlanEnd(float(total), tokens, last >= total - slack)


def _count(value: float) -> str:
    """``5315937711 -> '5.32B'``: a count in a note, as the tables write tokens."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


def _within_plan(result: TargetResult, history: History, smoothed: np.ndarray, end: _PlanEnd | None) -> TargetResult:
    """The result told against the plan's end: a forecast within it stays a ``forecast``; in a
    run short of its end, one the plan ends before (or the law never gets to) is
    ``unlikely``, a chance; a target the run finished short of is ``not_reached``; a
    forecast with no planned end stays ``forecast_beyond_plan``."""
    if result.status == Status.REACHED or end is None:
        return result
    if result.status == Status.FORECAST_BEYOND_PLAN and result.step is not None and result.step <= end.step:
        return replace(result, status=Status.FORECAST)
    if not end.finished and result.status not in (Status.FORECAST_BEYOND_PLAN, Status.UNREACHABLE):
        return result  # no forecast, in a run still going: that is the news
    best = int(np.nanargmin(smoothed))
    if end.finished:
        why = f"the run ended its plan at step {history.step[-1]:,.0f} of {end.step:,.0f}"
        p_reach: float | None = 0.0
    else:
        # Before its end a run is told a chance, never a verdict: an early "no" stops good runs.
        where = f"step {end.step:,.0f}" + ("" if history.on_steps else f" ({_count(end.tokens)} {history.unit})")
        why = f"the plan ends at {where}, before the forecast gets there"
        p_reach = result.p_reach_within_plan
    if result.status != Status.FORECAST_BEYOND_PLAN and result.note:
        why += f"; {result.note}"  # and the law would not get there, or could not be fitted
    return replace(
        result, status=Status.NOT_REACHED if end.finished else Status.UNLIKELY, tokens=None, step=None, tokens_interval=None, step_interval=None,
        extrapolation_factor=None, beyond_warn_factor=False, p_reach_within_plan=p_reach, note=why,
        best_loss=float(smoothed[best]), best_step=float(history.step[best]),
        end_step=float(history.step[-1]) if end.finished else end.step,
        end_tokens=float(history.tokens[-1]) if end.finished else end.tokens,
        run_finished=end.finished, law_tokens=result.tokens, law_interval=result.tokens_interval,
    )


def law_timing(analysis: Analysis) -> Timing:
    """The analysis's timing with the fitted law's crossings past the plan's end as well: a
    backtest scores the law in hours too, where the report says ``not_reached``."""
    return _timing(analysis.history, analysis.targets, analysis.config, law=True)


@dataclass(frozen=True)
class _Prepared:
    """What every model's forecast starts from: the run, its smoothed loss, the fit window."""

    history: History
    config: AnalysisConfig
    stages: tuple[BatchStage, ...]
    smoothed: np.ndarray
    fit_start: int
    window: range
    replays: bool = False  # keep the draws a backtest replays (see run_analysis)
    plan: Plan | None = None  # the lr plan, resolved once (the schedule-aware laws')


def _run_ended(run: _Prepared, targets: list[float]) -> _Forecasts | None:
    """The open targets of a run whose log has reached its plan's end: each not reached,
    with no law fitted, since the answer reads none (:func:`_within_plan` says where the
    run ended and its best loss). None where the run goes on, and where a forecast is
    asked for all the same: a stability sweep, or a backtest (``replays``), which scores
    the law's crossing past the plan's end."""
    if run.plan is None or run.config.stability_sweep or run.replays:
        return None
    end = _PlanEnd.of(run.history, run.config, _Forecasts(plan=run.plan))
    if end is None or not end.finished:
        return None
    return _Forecasts({t: TargetResult(t, Status.NOT_REACHED) for t in targets}, plan=run.plan, notes=(run.plan.note,))


@dataclass(frozen=True)
class _Forecasts:
    """What a model's forecast adds to the analysis: the open targets' results, the fit,
    how the law was chosen, the lr plan, and the notes the forecast has to say."""

    results: Mapping[float, TargetResult] = field(default_factory=dict)
    fit: Model | FitFailure | None = None
    selection: Selection | None = None
    plan: Plan | None = None
    notes: tuple[str, ...] = ()
    plan_end: PlanEnd | None = None
    project: ProjectForecast | None = None


def _power_law_forecasts(run: _Prepared, targets: list[float]) -> _Forecasts:
    """The original script's forecast: a power law in tokens fitted to the smoothed loss."""
    history, config, smoothed = run.history, run.config, run.smoothed
    fit = _fit(history, smoothed, run.window, config)
    sweep_rows = None
    if config.stability_sweep:
        fitter = None if config.max_fit_points is not None else _power_law_windows(history, smoothed, run, fit)
        sweep_rows = _sweep_fits(history, smoothed, run.fit_start, config, fitter=fitter)
    results = {}
    for target in targets:
        sweep = None
        if sweep_rows is not None:
            sweep = _judge(_solve_rows(sweep_rows, target, history, config), config.convergence_tol)
        results[target] = _forecast(fit, target, history, run.stages, config, sweep)
    return _Forecasts(results, fit)


def _power_law_windows(history: History, smoothed: np.ndarray, run: _Prepared, fit: PowerLaw | FitFailure) -> Fitter:
    """The sweep's power-law fits of every window at once (:func:`fit_power_law_windows`,
    the least-squares optimum of each, as ``curve_fit`` finds it to its tolerance), served
    to :func:`_sweep_fits` one window at a time. The window that is the whole fit window
    takes the headline fit itself, so the sweep's last row is the forecast printed above it."""
    first = int(run.window[0])
    ends = [
        int(np.searchsorted(history.step, max_step, side="right"))
        for max_step in sweep_checkpoints(run.fit_start, history.last_step, run.config.sweep_step, run.config.sweep_min_window)
    ]
    ends = [end for end in ends if end - first >= MIN_FIT_ROWS and end < len(history)]
    fits = dict(zip(ends, fit_power_law_windows(history.tokens[first:], smoothed[first:], [e - first for e in ends])))

    def window(start: int, end: int, hint: Model | None) -> Model | FitFailure:
        return fits[end] if end in fits else fit

    return window


def _schedule_forecasts(run: _Prepared, targets: list[float]) -> _Forecasts:
    """A schedule-aware law (``auto``, ``lr-annealing``, ``multi-power``) on the planned lr."""
    history, config, smoothed = run.history, run.config, run.smoothed
    prior = GainPrior(config.anneal_gain) if config.anneal_gain > 0 else None
    first = int(run.window[0])
    plan = run.plan if run.plan is not None else resolve_plan(history, config.lr_schedule)
    # The plausible plans' timelines too, when the plan is inferred or assumed.
    timelines = TimelineBuilder(history, clock=config.clock, batch_schedule=config.batch_schedule)
    timeline = timelines(plan.schedule)
    fit, selection = choose_law(config.model, history, smoothed, first, timeline, config.ema_token_window, prior)
    sweeps: dict[float, Sweep | None] = dict.fromkeys(targets)
    if config.stability_sweep:
        rows, crossings = _law_sweep(history, smoothed, run.fit_start, config, fit, selection.chosen, timeline, prior, targets)
        sweeps = {
            t: _judge(_solve_rows(rows, t, history, config, [c if c is None else c[t] for c in crossings]),
                      config.convergence_tol)
            for t in targets
        }
    spread = None
    if isinstance(fit, LawFit) and plan.source in UNKNOWN_PLAN_SOURCES:
        spread = partial(
            over_plans, fit, targets=targets, history=history, first=first, prior=prior,
            level=config.interval, error_scale=selection.error_scale, error_dof=selection.error_count,
            inflation=plan_inflation(plan), timeline_for=timelines, source=plan.source, replays=run.replays,
            known_total=plan.schedule.total_steps if plan.source == STEPS_ONLY and plan.schedule is not None else None,
        )
    results = _law_forecasts(
        fit, selection, targets, history, first, run.stages, config, sweeps, plan_inflation(plan), spread
    ) if targets else {}
    gain = _prior_gain_note(fit, config.anneal_gain)
    calibrated = config.calibration.describe() if config.calibration.asked else None
    unsettled = selection.note()
    notes = (plan.note, *([gain] if gain else []), *([calibrated] if calibrated else []), *([unsettled] if unsettled else []))
    results, project, plan_end, said = _joined(run, plan, timeline, results, targets)
    if plan_end is None and isinstance(fit, LawFit):
        plan_end = own_plan_end(fit, selection, history.last_tokens, config.interval)
    return _Forecasts(results, fit, selection, plan, notes=(*notes, *said), plan_end=plan_end, project=project)


def _project_forecasts(run: _Prepared, targets: list[float]) -> _Forecasts:
    """A run too short for a law of its own, forecast by its project's law alone."""
    plan = run.plan if run.plan is not None else resolve_plan(run.history, run.config.lr_schedule)
    timeline = TimelineBuilder(run.history, clock=run.config.clock, batch_schedule=run.config.batch_schedule)(plan.schedule)
    note = f"only {len(run.window)} logged rows at or after the fit start step {run.fit_start}: too few for a law of its own"
    alone = {t: TargetResult(t, Status.NOT_ENOUGH_DATA, note=note) for t in targets}
    results, project, plan_end, said = _joined(run, plan, timeline, alone, targets)
    return _Forecasts(results, None, None, plan, notes=(plan.note, *said), plan_end=plan_end, project=project)


def _joined(
    run: _Prepared, plan: Plan, timeline: Timeline, results: dict[float, TargetResult], targets: list[float]
) -> tuple[dict[float, TargetResult], ProjectForecast | None, PlanEnd | None, tuple[str, ...]]:
    """The targets as the project's law forecasts them, where one is given and shared (the
    run's own forecasts weighed beside it); its forecast, the plan's end, and what it says."""
    config, history = run.config, run.history
    if config.project_law is None:
        return results, None, None, ()
    said = (config.project_law.describe(),)
    if not config.project_law.shared:
        return results, None, None, said
    log = log_of_history(history, plan.schedule, ema_window=config.ema_token_window, timeline=timeline,
                         smoothed=run.smoothed)
    project = forecast_run(config.project_law, log, targets, {t: r.tokens for t, r in results.items()},
                           level=config.interval)
    joined = {t: _by_project(results[t], found, history, config) for t, found in zip(targets, project.targets)}
    return joined, project, project.plan_end, said


def _by_project(result: TargetResult, found: TargetLaw, history: History, config: AnalysisConfig) -> TargetResult:
    """A target as the project's law forecasts it (beside the run's own law, by the evidence)."""
    if found.own_share >= 1.0:
        why = "the run's own law: its own log forecast the project's runs better at this stage than their law did"
        return replace(result, note="; ".join(n for n in (result.note, why) if n))
    if found.tokens is None:
        return replace(result, status=Status.UNREACHABLE, tokens=None, step=None, tokens_interval=None,
                       step_interval=None, extrapolation_factor=None, p_reach_within_plan=found.p_within_plan,
                       note="the project's law does not reach it within 20x the plan", tokens_draws=())
    interval = found.interval
    step_interval = None if interval is None else (_step_at(interval[0], history, config), _step_at(interval[1], history, config))
    share = f"; the run's own law weighs {found.own_share:.0%}" if found.own_share > 0 else ""
    return replace(result, status=Status.FORECAST_BEYOND_PLAN, tokens=found.tokens,
                   step=tokens_to_step(found.tokens, history, config.batch_schedule), tokens_interval=interval,
                   step_interval=step_interval, extrapolation_factor=found.tokens / history.last_tokens,
                   beyond_warn_factor=False, p_reach_within_plan=found.p_within_plan,
                   note=f"the project's law{share}", tokens_draws=found.draws, tokens_raw_draws=(),
                   tokens_plan_draws=(), tokens_plan_ends=(), tokens_central=None)


def _prior_gain_note(fit: LawFit | FitFailure, share: float) -> str | None:
    """Say so when the planned decay lies past the log: the loss it removes is then the
    anneal-gain prior's (the log holds nothing to measure it by), and so is every target
    forecast past it, which a user reading ``G`` among the fitted parameters would not know."""
    if not isinstance(fit, LawFit) or fit.prior is None:
        return None
    seen = fit.cells.before(float(fit.observations.clock[-1])).total
    planned = fit.cells.total
    if seen >= MIN_SEEN_DECAY or planned - seen < MIN_SEEN_DECAY:
        return None
    gain = fit.planned_gain
    removed = "" if gain is None else f", {gain:.4g},"
    return (f"the planned lr decay is not in the log yet (the lr has shed {seen:.0%} of its peak by the last row, "
            f"the plan {planned:.0%}): the loss it removes by the plan's end{removed} rests on the anneal-gain prior "
            f"({share * 100:g}% of the loss for a full decay, anneal_gain), and a target past the decay is forecast on it")


def _law_forecasts(
    fit: LawFit | FitFailure,
    selection: Selection,
    targets: list[float],
    history: History,
    first: int,
    stages: Sequence[BatchStage],
    config: AnalysisConfig,
    sweeps: dict[float, Sweep | None],
    inflation: float,
    spread: Callable[[Callable[[bool], list[TargetForecast]]], list[TargetForecast]] | None = None,
) -> dict[float, TargetResult]:
    if isinstance(fit, FitFailure):
        note = f"fit failed: {fit.reason}"
        return {t: TargetResult(t, Status.NOT_ENOUGH_DATA, note=note, sweep=sweeps[t]) for t in targets}

    def central(refit: bool) -> list[TargetForecast]:
        """The forecasts on the central plan, with its bootstrap's refits or (False) without."""
        return forecast_targets(
            fit, targets, history, first, level=config.interval,
            error_scale=selection.error_scale, error_dof=selection.error_count, inflation=inflation, refit=refit,
        )

    # With the plan inferred or assumed, draw over the plans it cannot rule out.
    found = central(True) if spread is None else spread(central)
    found = [config.calibration.forecast(f) for f in found]
    results = {}
    for target, forecast in zip(targets, found):
        results[target] = _law_result(fit, target, forecast, history, stages, config, sweeps[target])
    return results


def _law_result(
    fit: LawFit,
    target: float,
    found: TargetForecast,
    history: History,
    stages: Sequence[BatchStage],
    config: AnalysisConfig,
    sweep: Sweep | None,
) -> TargetResult:
    if found.tokens is None:
        note = found.note or (
            f"the smoothed loss levels off near {fit.asymptote:.4f}, above the target: a run "
            f"{fit.timeline.horizon / max(history.last_step, 1):,.0f} times as long on this plan would not reach it"
        )
        return TargetResult(
            target, Status.UNREACHABLE, fit=fit, note=note, sweep=sweep, p_reach_within_plan=found.p_reach_within_plan,
            tokens_draws=found.draws, tokens_raw_draws=found.raw, tokens_loss_horizons=found.loss_horizons, tokens_plan_draws=found.plan_raw,
            tokens_plan_ends=found.plan_ends, tokens_central=found.central,
        )
    factor = found.tokens / history.last_tokens
    notes = [n for n in (found.note, _batch_note(stages, config)) if n]
    step_interval = None
    if found.interval is not None:
        low, high = (_step_at(t, history, config) for t in found.interval)
        step_interval = (low, high)
    return TargetResult(
        target,
        Status.FORECAST_BEYOND_PLAN,
        tokens=found.tokens,
        step=tokens_to_step(found.tokens, history, config.batch_schedule),
        tokens_interval=found.interval,
        step_interval=step_interval,
        fit=fit,
        extrapolation_factor=factor,
        note="; ".join(notes) or None,
        beyond_warn_factor=factor > config.extrapolation_warn_factor,
        sweep=sweep,
        p_reach_within_plan=found.p_reach_within_plan,
        tokens_draws=found.draws,
        tokens_raw_draws=found.raw,
        tokens_loss_horizons=found.loss_horizons,
        tokens_plan_draws=found.plan_raw,
        tokens_plan_ends=found.plan_ends,
        tokens_central=found.central,
    )


# An EMA window longer than this share of the logged tokens is shortened to it: a window
# as long as the run would smooth it into its first values.
_MAX_WINDOW_SHARE = 0.25


def _window_within_run(history: History, config: AnalysisConfig) -> tuple[AnalysisConfig, str | None]:
    """The config with an EMA window that fits in the run, and a note when it was shortened."""
    logged = float(history.tokens[-1] - history.tokens[0])
    if config.ema_token_window <= logged:
        return config, None
    shorter = max(_MAX_WINDOW_SHARE * logged, float(np.max(history.batch)))
    unit, setting = ("steps", "ema_steps") if history.on_steps else ("tokens", "ema_token_window")
    note = (
        f"the EMA window ({config.ema_token_window:,.0f} {unit}) is longer than the run's logged "
        f"{logged:,.0f} {unit}: smoothed over {shorter:,.0f} {unit} instead (set {setting})"
    )
    return replace(config, ema_token_window=shorter), note


def _fit_start(history: History, stages: Sequence[BatchStage], config: AnalysisConfig) -> tuple[int, str]:
    if config.fit_start_step is not None:
        start, reason = config.fit_start_step, "fit_start_step"
    else:
        start, reason = _warmup_end(history, stages[0])
    if config.fit_last_stage and stages[-1].first_step > start:
        start, reason = stages[-1].first_step, "start of the last batch stage (fit_last_stage)"
    return int(start), reason


def _warmup_end(history: History, first: BatchStage) -> tuple[int, str]:
    """First step where the lr reaches 99% of its peak, searched in the first batch stage.

    Only the first stage: a run that scales the lr with the batch reaches its overall
    peak in its last stage, long after warmup.
    """
    in_stage = history.step <= first.last_step
    lr = None if history.lr is None else history.lr[in_stage]
    if lr is None or not np.isfinite(lr).any():
        cutoff = NO_LR_WARMUP_SHARE * history.last_tokens
        start = int(history.step[np.searchsorted(history.tokens, cutoff)])
        unit = "steps" if history.on_steps else "tokens"
        return start, f"no lr logged: skipping the first {NO_LR_WARMUP_SHARE:.0%} of logged {unit} as warmup"
    peak = np.nanmax(lr)
    return int(history.step[in_stage][np.argmax(lr >= 0.99 * peak)]), "end of lr warmup"


def _before_the_log(result: TargetResult, history: History, smoothed: np.ndarray) -> TargetResult:
    """A target "reached" at the first row of a log that starts far from step 0 (a resumed
    attempt's own log, a piece of a run) is no answer: the crossing lies at or before that
    row, among steps the log does not hold."""
    if result.status != Status.REACHED or smoothed[0] > result.target:
        return result
    late = late_start(history.step)
    if late is None:
        return result
    note = (
        f"the smoothed loss is at or below the target from the first row read (step {history.step[0]:,}), and the "
        f"log starts {late:.0f} logging intervals after step 0 (a resumed attempt, or part of a run): the crossing "
        "lies at or before that row, among steps the log does not hold, so it is not known; read the run's earlier "
        "rows too (a resumed run: every attempt)"
    )
    return replace(result, status=Status.NOT_ENOUGH_DATA, tokens=None, step=None, p_reach_within_plan=None, note=note)


def _crossing(
    history: History, smoothed: np.ndarray, target: float, fine: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[float, float] | None:
    """(step, tokens) where the smoothed loss first reaches ``target``, interpolated.

    ``fine`` is the EMA inside the logging gaps too (:func:`fine_ema`): a sparse log's
    crossing is then placed where the EMA passes the target inside the gap, not on the
    chord between the two rows (the EMA bends between them).
    """
    steps, tokens = history.step, history.tokens
    if fine is not None and len(fine[0]) != len(steps):
        steps, smoothed = fine
        tokens = np.interp(steps, history.step, history.tokens)  # a gap's steps have one batch
    below = np.flatnonzero(smoothed <= target)
    if not len(below):
        return None
    i = int(below[0])
    if i == 0:
        return float(steps[0]), float(tokens[0])
    before, after = smoothed[i - 1], smoothed[i]
    frac = 1.0 if before == after else (before - target) / (before - after)
    step = steps[i - 1] + frac * (steps[i] - steps[i - 1])
    at = tokens[i - 1] + frac * (tokens[i] - tokens[i - 1])
    return float(step), float(at)


def _sample(rows: np.ndarray, max_points: int) -> np.ndarray:
    """At most ``max_points`` of ``rows``, evenly spaced, first and last included.

    The smoothed curve varies slowly, so a long log says no more to a fit than a few
    thousand evenly spread points, and fitting those keeps a sweep over a long run fast.
    """
    if len(rows) <= max_points:
        return rows
    # With more rows than points the rounded positions are strictly increasing: no repeats.
    return rows[np.linspace(0, len(rows) - 1, max_points).round().astype(np.int64)]


def _fit(history: History, smoothed: np.ndarray, rows: range, config: AnalysisConfig) -> PowerLaw | FitFailure:
    if config.max_fit_points is not None:
        picked = _sample(np.arange(rows.start, rows.stop), config.max_fit_points)
        return fit_power_law(history.tokens[picked], smoothed[picked])
    return fit_power_law(history.tokens[rows.start : rows.stop], smoothed[rows.start : rows.stop])


def _forecast(
    fit: PowerLaw | FitFailure,
    target: float,
    history: History,
    stages: Sequence[BatchStage],
    config: AnalysisConfig,
    sweep: Sweep | None,
) -> TargetResult:
    if isinstance(fit, FitFailure):
        return TargetResult(target, Status.NOT_ENOUGH_DATA, note=f"fit failed: {fit.reason}", sweep=sweep)
    tokens = fit.solve(target)
    if tokens is None:
        note = f"the fitted power law levels off near {fit.asymptote:.4f}, above the target"
        return TargetResult(target, Status.UNREACHABLE, fit=fit, note=note, sweep=sweep)
    if not math.isfinite(tokens):
        note = f"the fitted power law reaches the target only beyond 1e300 {history.unit}"
        return TargetResult(target, Status.UNREACHABLE, fit=fit, note=note, sweep=sweep)
    factor = tokens / history.last_tokens
    return TargetResult(
        target,
        Status.FORECAST_BEYOND_PLAN,
        tokens=tokens,
        step=tokens_to_step(tokens, history, config.batch_schedule),
        fit=fit,
        extrapolation_factor=factor,
        note=_batch_note(stages, config),
        beyond_warn_factor=factor > config.extrapolation_warn_factor,
        sweep=sweep,
    )


def _step_at(tokens: float, history: History, config: AnalysisConfig) -> float:
    """The step where ``tokens`` are reached; an unbounded interval end stays unbounded."""
    return tokens_to_step(tokens, history, config.batch_schedule) if math.isfinite(tokens) else math.inf


def _batch_note(stages: Sequence[BatchStage], config: AnalysisConfig) -> str | None:
    """What a forecast step assumes of a dynamic batch when no batch schedule says more."""
    if len(stages) > 1 and config.batch_schedule is None:
        return f"step assumes the batch stays {stages[-1].batch:,.0f}; pass batch_schedule"
    return None


def sweep_checkpoints(fit_start: int, last_step: int, every: int, min_window: int) -> list[int]:
    """Window ends for the sweep: every ``every`` steps, ending with the last step.

    The last step replaces the final regular window when it falls less than half a
    sweep step after it, so the last two windows always differ by real data.
    """
    checkpoints = list(range(fit_start + min_window, last_step, every))
    if checkpoints and last_step - checkpoints[-1] < every / 2:
        checkpoints.pop()
    checkpoints.append(last_step)
    return checkpoints


def _law_sweep(
    history: History,
    smoothed: np.ndarray,
    fit_start: int,
    config: AnalysisConfig,
    fit: LawFit | FitFailure,
    chosen: str,
    timeline: Timeline,
    prior: GainPrior | None,
    targets: Sequence[float],
) -> tuple[tuple[SweepRow, ...], list[dict[float, float | None] | None]]:
    """The stability sweep with a schedule-aware law: its rows, and where each row's
    smoothed law reaches each target (None for a row without a fit).

    Every window is fitted with one weighted pass: for the lr-annealing law with the whole
    window's robust weights and prior strength (:func:`fit_prefixes`), else one by one.
    The windows' EMAs are computed together, a block at a time, and serve every target.
    """

    def one_by_one(start: int, end: int, hint: Model | None) -> LawFit | FitFailure:
        like = None if isinstance(fit, FitFailure) else fit
        # The windows before are fitted with this law too: a hint is always one of its fits.
        return fit_window(
            chosen, history, start, end, timeline, config.ema_token_window, prior,
            hint if isinstance(hint, LawFit) else None, smoothed, rounds=1, like=like,
        )

    if isinstance(fit, FitFailure):
        alone = _sweep_fits(history, smoothed, fit_start, config, fitter=one_by_one)
        return alone, _row_crossings(alone, [], targets)
    first = int(np.searchsorted(history.step, fit_start))
    windows = []
    for max_step in sweep_checkpoints(fit_start, history.last_step, config.sweep_step, config.sweep_min_window):
        end = int(np.searchsorted(history.step, max_step, side="right"))
        if end - first >= MIN_FIT_ROWS:
            windows.append((max_step, end))
    batch = fit_prefixes(fit, history.step[first:].astype(float), history.loss[first:], [end - first for _, end in windows])
    rows = []
    for (max_step, end), found in zip(windows, batch):
        window_fit = found if found is not None else one_by_one(first, end, None)
        note = window_fit.reason if isinstance(window_fit, FitFailure) else None
        rows.append(SweepRow(max_step, float(history.tokens[end - 1]), None, None,
                             None if isinstance(window_fit, FitFailure) else window_fit, note))
    return tuple(rows), _row_crossings(rows, [f for f in batch if isinstance(f, LawFit)], targets)


# The windows' smoothed laws are made this many at a time and solved at once: a sweep over
# a long log holds a few blocks of EMAs rather than one per window (1M rows: 3,300 windows
# of 42,000 points, over a gigabyte).
_SMOOTH_BLOCK = 32


def _row_crossings(
    rows: Sequence[SweepRow], together: list[LawFit], targets: Sequence[float]
) -> list[dict[float, float | None] | None]:
    """Where each row's smoothed law first reaches each target: the fits of ``together``
    (one run's windows from one start, cadence and law) smoothed a block at a time, any
    other alone. Each block is smoothed with the longest of ``together`` beside it, so every
    block lies on the grid the whole set would have (:func:`smooth_all` takes its grid from
    the fits' latest timeline) and its answers are those of one pass over all of them."""
    found: dict[int, dict[float, float | None]] = {}
    longest = max(together, key=lambda f: f.timeline.last_step) if together else None
    for lo in range(0, len(together), _SMOOTH_BLOCK):
        block = together[lo:lo + _SMOOTH_BLOCK]
        assert longest is not None
        for curve in smooth_all(block if any(f is longest for f in block) else [*block, longest]):
            found[id(curve.fit)] = {t: curve.solve(t) for t in targets}
    out: list[dict[float, float | None] | None] = []
    for row in rows:
        if row.fit is None:
            out.append(None)
        elif id(row.fit) in found:
            out.append(found[id(row.fit)])
        else:
            assert isinstance(row.fit, LawFit)
            alone = smooth_all([row.fit])[0]
            out.append({t: alone.solve(t) for t in targets})
    return out


def _sweep_fits(
    history: History,
    smoothed: np.ndarray,
    fit_start: int,
    config: AnalysisConfig,
    fitter: Fitter | None = None,
) -> tuple[SweepRow, ...]:
    """Fits on windows ending every sweep step; ``fitter(first, end, hint)`` makes each fit
    (default: the power law on the smoothed loss)."""
    if fitter is None:

        def power_law(start: int, end: int, hint: Model | None) -> Model | FitFailure:
            # No hint: the original script fits every window from its own start.
            return _fit(history, smoothed, range(start, end), config)

        fitter = power_law

    rows = []
    first = int(np.searchsorted(history.step, fit_start))
    previous = None
    for max_step in sweep_checkpoints(fit_start, history.last_step, config.sweep_step, config.sweep_min_window):
        end = int(np.searchsorted(history.step, max_step, side="right"))
        if end - first < MIN_FIT_ROWS:
            continue
        fit = fitter(first, end, previous)
        previous = None if isinstance(fit, FitFailure) else fit
        note = fit.reason if isinstance(fit, FitFailure) else None
        rows.append(
            SweepRow(
                max_step=max_step,
                max_tokens=float(history.tokens[end - 1]),
                tokens=None,
                step=None,
                fit=None if isinstance(fit, FitFailure) else fit,
                note=note,
            )
        )
    return tuple(rows)


def _solve_rows(
    rows: Sequence[SweepRow],
    target: float,
    history: History,
    config: AnalysisConfig,
    crossings: Sequence[float | None] | None = None,
) -> tuple[SweepRow, ...]:
    """Each row solved for ``target``: by its fit, or as ``crossings`` (each row's smoothed
    law's crossing of the target) says."""
    solved = []
    for i, row in enumerate(rows):
        if crossings is not None:
            tokens = crossings[i]
        else:
            tokens = row.fit.solve(target) if row.fit is not None else None
        note = row.note
        if row.fit is not None and tokens is None:
            note = f"the law fitted up to here levels off near {row.fit.asymptote:.4f}, above the target"
        elif tokens is not None and not math.isfinite(tokens):
            tokens, note = None, f"the law fitted up to here reaches the target only beyond 1e300 {history.unit}"
        step = tokens_to_step(tokens, history, config.batch_schedule) if tokens is not None else None
        solved.append(SweepRow(row.max_step, row.max_tokens, tokens, step, row.fit, note))
    return tuple(solved)


def _judge(rows: tuple[SweepRow, ...], tolerance: float) -> Sweep:
    """Converged when the last two window-to-window changes in predicted tokens are within tolerance."""
    valid = [row.tokens for row in rows if row.tokens is not None]
    if len(valid) < 3:
        return Sweep(rows, Verdict.NOT_ENOUGH_DATA, None, tolerance)
    t2, t1, t0 = valid[-3:]
    changes = (abs(t1 - t2) / t2, abs(t0 - t1) / t1)
    verdict = Verdict.CONVERGED if all(c <= tolerance for c in changes) else Verdict.NOT_CONVERGED
    return Sweep(rows, verdict, changes, tolerance)


def analyze(
    data: History | pd.DataFrame,
    targets: Sequence[float] | float,
    *,
    run: str | None = None,
    columns: Columns | None = None,
    batch_size: float | None = None,
    **options: Any,
) -> Analysis:
    """Analyse a run: where its smoothed loss reaches each target, or when it will.

    Parameters
    ----------
    data:
        A :class:`History` (from a source), or a dataframe with one row per logged step;
        its columns are found by ``columns`` (default: ``step``, ``train_loss``,
        ``tokens``, ``global_batch``, ``lr`` and their common tracker spellings).
    targets:
        One target loss or several.
    run:
        The name used in messages and reports (default ``"dataframe"``).
    columns, batch_size:
        How to read a dataframe; see :func:`build_history`. Ignored for a History.
    **options:
        Any field of :class:`AnalysisConfig`, e.g. ``ema_token_window=5e7``.

    Returns
    -------
    Analysis
        The same result ``tracker-plugin analyze`` prints.

    Raises
    ------
    ConfigError
        An option is unknown or invalid.
    DataError
        The dataframe cannot be analysed; the message names the run and column.
    """
    # One number is one target (a bool too, which the config then refuses by name).
    wanted = (targets,) if isinstance(targets, (int, float)) else tuple(targets)
    unknown = set(options) - {f.name for f in fields(AnalysisConfig)}
    if unknown:
        raise ConfigError(f"unknown analysis option(s): {', '.join(sorted(unknown))}")
    if isinstance(options.get("batch_schedule"), (str, list, tuple)):
        options["batch_schedule"] = BatchSchedule.parse(options["batch_schedule"])
    if isinstance(options.get("lr_schedule"), str):
        options["lr_schedule"] = LrSchedule.parse_spec(options["lr_schedule"])
    config = AnalysisConfig(targets=wanted, **options)
    if isinstance(data, History):
        history = data
    elif isinstance(data, pd.DataFrame):
        history = build_history(data, run=run or "dataframe", columns=columns, batch_size=batch_size)
    else:
        raise ConfigError(f"analyze() takes a pandas DataFrame or a History, not {type(data).__name__}")
    return run_analysis(history, config)
