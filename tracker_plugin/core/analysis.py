"""The analysis: smooth a run's loss, find each target's crossing, forecast the rest.

``analyze(history, config)`` is pure: a validated :class:`History` and an
:class:`AnalysisConfig` in, a frozen :class:`Analysis` out. It neither prints nor reads.

The settings are in :mod:`.analysis_config`, the results in :mod:`.analysis_result`, the
forecasts of the open targets in :mod:`.analysis_forecasts` and the stability sweep in
:mod:`.analysis_sweep`; their public names are importable here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.core.analysis_config import MIN_FIT_ROWS, MIN_LAW_ROWS, AnalysisConfig
from tracker_plugin.core.analysis_forecasts import (
    _Forecasts,
    _power_law_forecasts,
    _Prepared,
    _project_forecasts,
    _schedule_forecasts,
)
from tracker_plugin.core.analysis_result import Analysis, Sweep, SweepRow, TargetResult
from tracker_plugin.core.analysis_sweep import sweep_checkpoints
from tracker_plugin.core.forecast import resolve_plan
from tracker_plugin.core.models import LawFit
from tracker_plugin.core.project_law.forecast import PlanEnd
from tracker_plugin.core.smoothing import fine_ema
from tracker_plugin.core.status import Status, Verdict
from tracker_plugin.core.throughput import Timing, timing
from tracker_plugin.errors import ConfigError
from tracker_plugin.frame.history import BatchStage, Columns, History, batch_stages, build_history
from tracker_plugin.frame.resume import late_start
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule

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
    "sweep_checkpoints",
]

# Without an lr history the warmup is taken to be this share of the logged tokens.
NO_LR_WARMUP_SHARE = 0.1


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
