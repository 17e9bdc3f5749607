"""A run forecast by its project's law: each target and the plan's end.

:func:`forecast_run` forecasts a run from its log (or from its plan alone,
:func:`forecast_plan`): the pooled law, fitted again with the run joining at a weight that
grows with its share of its plan (:attr:`~.project.LawRules.join_weight`), at the run's
level; beside it the run's own law where it has one, as the siblings' evidence at the same
stage says (:attr:`~.project.LawRules.own`); the interval and the chance within the plan
from the siblings' leave-one-out errors there (a Student-t over their spread, shrunk toward
a prior spread worth :attr:`~.project.LawRules.error_weight` cases); and the smoothed loss
at the plan's end with its interval, from the siblings' errors in their final loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tracker_plugin.core.models import FitFailure
from tracker_plugin.core.project_law.join import LawCurve, RunLog, law_curve, log_of_plan
from tracker_plugin.core.project_law.loso import SiblingError, evidence_member
from tracker_plugin.core.project_law.pooled import PooledLaw, common_timeline, fit_pooled, member
from tracker_plugin.core.project_law.project import LawRules, ProjectLaw
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule

__all__ = ["PlanEnd", "ProjectForecast", "TargetLaw", "forecast_on", "forecast_plan", "forecast_run", "run_curve"]


@dataclass(frozen=True)
class TargetLaw:
    """One target by the project's law: tokens (None: not within the law's horizon), the
    interval, the chance within the plan, the pooled law's own tokens and the share the
    run's own law had in the point (1: the run's own forecast stands, interval and chance
    included, where its own log forecast the siblings better at this stage)."""

    target: float
    tokens: float | None
    interval: tuple[float, float] | None
    p_within_plan: float | None
    pooled_tokens: float | None = None
    own_share: float = 0.0
    spread: float | None = None  # the ln error's scale (a Student-t's)
    dof: float | None = None
    draws: tuple[float, ...] = field(default=(), repr=False)
    # Seconds from the run's first step at the siblings' pace (None: none logged a clock).
    seconds: float | None = None
    seconds_interval: tuple[float, float] | None = None


@dataclass(frozen=True)
class PlanEnd:
    """The run's planned end: its step and tokens, the smoothed loss forecast there and its
    interval, and what forecast it (``project law`` or ``this run's law``)."""

    step: float
    tokens: float
    loss: float
    loss_interval: tuple[float, float] | None
    source: str


@dataclass(frozen=True)
class ProjectForecast:
    """What the project's law says of one run (see :func:`forecast_run`)."""

    targets: tuple[TargetLaw, ...]
    plan_end: PlanEnd | None
    fraction: float
    cut: float
    level: float
    steps: np.ndarray = field(repr=False, compare=False)
    tokens: np.ndarray = field(repr=False, compare=False)
    loss: np.ndarray = field(repr=False, compare=False)
    seconds_per_token: float | None = None


def _spread(errors: Sequence[float], prior: float, weight: float) -> tuple[float, float]:
    """The spread of ``errors`` shrunk toward ``prior`` (worth ``weight`` cases), and the
    Student-t's degrees of freedom."""
    squares = float(np.sum(np.square(errors)))
    return math.sqrt((weight * prior**2 + squares) / (weight + len(errors))), weight + len(errors)


def forecast_run(
    project: ProjectLaw,
    log: RunLog,
    targets: Sequence[float],
    own: Mapping[float, float | None] | None = None,
    *,
    level: float = 0.8,
) -> ProjectForecast:
    """The run of ``log`` forecast by the project's law (which must be shared): each target
    and the plan's end. ``own`` maps a target to the run's own law's tokens (None: it
    forecast none), weighed beside the pooled law by the siblings' evidence at this stage."""
    return forecast_on(project, log, run_curve(project, log), targets, own, level=level)


def run_curve(project: ProjectLaw, log: RunLog) -> LawCurve:
    """The pooled law on the run (fitted again with the run joining, at its level)."""
    assert project.pooled is not None, "no shared law to forecast with"
    return law_curve(_joined(project, log), log, floor=project.rules.level_floor, control=project.rules.control)


def forecast_on(
    project: ProjectLaw,
    log: RunLog,
    curve: LawCurve,
    targets: Sequence[float],
    own: Mapping[float, float | None] | None = None,
    *,
    level: float = 0.8,
    rules: LawRules | None = None,
) -> ProjectForecast:
    """:func:`forecast_run` on a curve :func:`run_curve` made (``rules``: the project's,
    or others for the interval and the weights)."""
    from scipy.stats import t as student_t

    rules = rules if rules is not None else project.rules
    fraction = log.fraction
    cut, errors = project.errors_at(fraction)
    own_errors = project.own_errors(fraction) if log.started and rules.own != "off" else {}
    end_tokens = log.plan_end_tokens
    found = []
    for target in targets:
        pooled_tokens = curve.crossing(target)
        mine = None if own is None else own.get(target)
        share, spread, dof = _combined(errors, own_errors, rules, mine is not None and pooled_tokens is not None)
        if share >= 1.0:  # the run's own forecast stands (its interval and chance are its own)
            found.append(TargetLaw(target, mine, None, None, pooled_tokens, 1.0))
            continue
        point = pooled_tokens
        if pooled_tokens is not None and mine is not None and share > 0:
            point = math.exp((1 - share) * math.log(pooled_tokens) + share * math.log(mine))
        found.append(_target(target, point, pooled_tokens, share, spread, dof, end_tokens, curve, log, student_t,
                             level, rules, _end_errors(errors)))
    pace = project.seconds_per_token()
    if pace is not None:
        found = [replace(t, seconds=None if t.tokens is None else pace * t.tokens,
                         seconds_interval=None if t.interval is None else (pace * t.interval[0], pace * t.interval[1]))
                 for t in found]
    steps = curve.steps
    return ProjectForecast(tuple(found), _plan_end(curve, log, errors, rules, level, student_t), fraction, cut,
                           curve.level, steps, curve.timeline.tokens_at(steps), curve.curve, pace)


def forecast_plan(
    project: ProjectLaw,
    run: str,
    plan: LrSchedule,
    targets: Sequence[float],
    *,
    batch: float,
    ema_window: float,
    peak_lr: float | None = None,
    unit: str = "tokens",
    level: float = 0.8,
    batch_schedule: BatchSchedule | None = None,
) -> ProjectForecast:
    """A run that has not started, forecast from its plan and batch (and its later batch
    stages) by the project's law."""
    log = log_of_plan(run, plan, batch=batch, ema_window=ema_window, peak_lr=peak_lr, unit=unit,
                      batch_schedule=batch_schedule)
    return forecast_run(project, log, targets, level=level)


def _joined(project: ProjectLaw, log: RunLog) -> PooledLaw:
    """The pooled law fitted again with the run's log joining at its weight (the law as it
    is where the run has too few points or no weight)."""
    assert project.pooled is not None
    weight = project.rules.join_weight * log.fraction
    if weight <= 0 or len(log.step) < 3:
        return project.pooled
    units = project.pooled.units
    members = [evidence_member(e, units) for e in project.evidence]
    mine = member(log.run, common_timeline(log.timeline, units, log.peak_lr), log.step, log.loss, log.rows, log.start)
    refit = fit_pooled([*members, mine], project.pooled.law, units, area_ref=project.pooled.area_ref,
                       shift=project.shift, start=project.pooled.theta, weights=[1.0] * len(members) + [weight])
    if isinstance(refit, FitFailure):
        return project.pooled
    # The level spread and noise are the siblings' (the run's own residuals are not evidence of them).
    return replace(refit, levels=project.pooled.levels, sigma=project.pooled.sigma,
                   correlation=project.pooled.correlation, control=project.pooled.control)


def _combined(errors: Sequence[SiblingError], own: Mapping[tuple[str, float], float], rules: LawRules,
              both: bool) -> tuple[float, float, float]:
    """The own law's share in the point, and the spread and degrees of freedom of the
    point's ln error, from the siblings' errors at this stage."""
    law = [e.error for e in errors]
    if not both or not own:
        spread, dof = _spread(law, rules.error_prior, rules.error_weight)
        return 0.0, spread, dof
    paired = [(e.error, own[(e.run, e.quantile)]) for e in errors if (e.run, e.quantile) in own]
    if not paired:
        spread, dof = _spread(law, rules.error_prior, rules.error_weight)
        return 0.0, spread, dof
    if rules.own == "switch":
        if np.mean([abs(o) for _, o in paired]) < np.mean([abs(p) for p, _ in paired]):
            return 1.0, math.nan, math.nan  # the run's own forecast, as it is
        spread, dof = _spread(law, rules.error_prior, rules.error_weight)
        return 0.0, spread, dof
    law_spread, _ = _spread([p for p, _ in paired], rules.error_prior, rules.error_weight)
    own_spread, _ = _spread([o for _, o in paired], rules.error_prior, rules.error_weight)
    share = law_spread**2 / (law_spread**2 + own_spread**2)
    spread, dof = _spread([(1 - share) * p + share * o for p, o in paired], rules.error_prior, rules.error_weight)
    return share, spread, dof


def _target(target: float, point: float | None, pooled_tokens: float | None, share: float, spread: float, dof: float,
            end_tokens: float | None, curve: LawCurve, log: RunLog, student_t: object, level: float, rules: LawRules,
            end_errors: Sequence[float]) -> TargetLaw:
    dist = student_t(dof)  # type: ignore[operator]
    if point is None:
        # Not within the law's horizon: the chance within the plan from the loss at its end.
        p = None
        if end_tokens is not None:
            loss_spread, loss_dof = _spread(end_errors, rules.loss_prior, rules.error_weight)
            end = curve.loss_at(float(log.plan_end))  # type: ignore[arg-type]
            p = float(student_t(loss_dof).cdf((target - end) / loss_spread))  # type: ignore[operator]
        return TargetLaw(target, None, None, p, pooled_tokens, share)
    z = float(dist.ppf(0.5 + level / 2))
    low = max(point * math.exp(-z * spread), log.last_tokens)
    interval = (low, point * math.exp(z * spread))
    p = None if end_tokens is None else float(dist.cdf(math.log(end_tokens / point) / spread))
    draws = tuple(float(point * math.exp(spread * q)) for q in dist.ppf(np.linspace(0.005, 0.995, 199)))
    return TargetLaw(target, point, interval, p, pooled_tokens, share, spread, dof, draws)


def _end_errors(errors: Sequence[SiblingError]) -> list[float]:
    """Each sibling's error in its smoothed loss at its end (once per sibling)."""
    return list({e.run: e.end_error for e in errors}.values())


def _plan_end(curve: LawCurve, log: RunLog, errors: Sequence[SiblingError], rules: LawRules, level: float,
              student_t: object) -> PlanEnd | None:
    end = log.plan_end
    if end is None:
        return None
    loss = curve.loss_at(end)
    spread, dof = _spread(_end_errors(errors), rules.loss_prior, rules.error_weight)
    z = float(student_t(dof).ppf(0.5 + level / 2))  # type: ignore[operator]
    return PlanEnd(float(end), curve.tokens_at(end), loss, (loss - z * spread, loss + z * spread), "project law")
