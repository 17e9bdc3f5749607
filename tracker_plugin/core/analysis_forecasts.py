"""The forecasts of a run's open targets: by the power law, by a schedule-aware law (with
the project's law beside it where one is given), or by the project's law alone."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from tracker_plugin.core.analysis_config import MIN_FIT_ROWS, AnalysisConfig
from tracker_plugin.core.analysis_result import Sweep, TargetResult
from tracker_plugin.core.analysis_sweep import (
    Fitter,
    _fit,
    _judge,
    _law_sweep,
    _solve_rows,
    _sweep_fits,
    sweep_checkpoints,
)
from tracker_plugin.core.clock import Timeline, TimelineBuilder, tokens_to_step
from tracker_plugin.core.forecast import (
    MIN_SEEN_DECAY,
    UNKNOWN_PLAN_SOURCES,
    Selection,
    TargetForecast,
    choose_law,
    forecast_targets,
    plan_inflation,
    resolve_plan,
)
from tracker_plugin.core.models import FitFailure, GainPrior, LawFit, Model, PowerLaw
from tracker_plugin.core.models.power_sweep import fit_power_law_windows
from tracker_plugin.core.plan_spread import over_plans
from tracker_plugin.core.project_law.forecast import PlanEnd, ProjectForecast, TargetLaw, forecast_run
from tracker_plugin.core.project_law.join import log_of_history
from tracker_plugin.core.project_law.plan_end import own_plan_end
from tracker_plugin.core.status import Status
from tracker_plugin.frame.history import BatchStage, History
from tracker_plugin.plan.schedule import STEPS_ONLY, Plan


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
