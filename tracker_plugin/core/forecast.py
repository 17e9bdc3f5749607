"""Forecasts with the schedule-aware laws: which law, when, and how sure.

- :func:`resolve_plan`: the lr plan a forecast rests on (given, or inferred from the log, or
  an assumption said out loud).
- :func:`choose_law`: with ``auto``, each law forecasts the run's own later history from an
  earlier cut of its log; the law that did best forecasts the rest.
- :func:`forecast_targets`: when the smoothed law reaches each target, an interval for it,
  and the chance of reaching it within the planned run.

The interval is a moving-block bootstrap. The residuals of the binned raw loss are
resampled in blocks as long as their autocorrelation (so a wandering stretch stays a
wandering stretch), added to the fitted curve and refitted; the prior on the annealing gain
is redrawn from its own spread each time (a decay the log has not shown is uncertain by that
much). Each replicate's crossing is then found on its smoothed curve plus a path of the
smoothed loss's own fluctuations, resampled the same way: the observed loss crosses a target
the first time a fluctuation carries it there, which on a flat stretch is well before the
mean curve does. The point forecast is the fitted law's median first crossing over such
paths. Last, each replicate moves by the law's own track record on this run (its errors
forecasting the log's later part from earlier cuts), which the residuals cannot show: how
wrong the law's shape is for this run. With a plan inferred or assumed, the future lr is
unknown too: :mod:`tracker_plugin.core.plan_spread` draws the interval over the plans the
log cannot rule out.

The law's choice and the fit of a window are in :mod:`.law_selection`, the bootstrap's
draws in :mod:`.forecast_draws`; their public names are importable here.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tracker_plugin.core.forecast_draws import _draw
from tracker_plugin.core.law_selection import (
    CANDIDATES,
    COMPARED_SHARE,
    ERROR_PRIOR_SCALE,
    ERROR_PRIOR_WEIGHT,
    FAILED_SCORE,
    INNER_CUTS,
    MIN_SEEN_DECAY,
    SELECTION_MARGIN,
    Selection,
    choose_law,
    fit_window,
    selection_score,
)
from tracker_plugin.core.models import LawFit
from tracker_plugin.core.models.schedule_law import crossing_tokens
from tracker_plugin.defaults import AUTO
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import STEPS_ONLY, LrSchedule, Plan, infer_lr_schedule

__all__ = [
    "AUTO",
    "CANDIDATES",
    "COMPARED_SHARE",
    "ERROR_PRIOR_SCALE",
    "ERROR_PRIOR_WEIGHT",
    "FAILED_SCORE",
    "INNER_CUTS",
    "MIN_SEEN_DECAY",
    "SELECTION_MARGIN",
    "Selection",
    "TargetForecast",
    "choose_law",
    "fit_window",
    "forecast_targets",
    "plan_inflation",
    "replicate_crossings",
    "resolve_plan",
    "selection_score",
]

# The degrees of freedom of the Student-t that draws the track record's stretch: 0 counts
# the forecasts the scale rests on (ERROR_PRIOR_WEIGHT + the inner forecasts); a small
# fixed number gives the interval heavier tails for its centre. Chosen by the same
# validation.
ERROR_DOF = 5
# The bootstrap's spread around the point forecast, in log tokens (the track record's
# stretch included), is multiplied by the first when the lr plan is given (the lr_schedule
# setting, the run's params, a file), by the second when it is inferred from the log or
# assumed (whose unknown future the draws over plausible plans carry, see plan_spread).
# Chosen by leave-one-family-out cross-validation, as ERROR_PRIOR_SCALE is (0.8 and 1.0
# before those draws, then 1.0 and 1.0, then 0.8 and 0.8).
INTERVAL_INFLATION = 0.8
UNKNOWN_PLAN_INFLATION = 0.8
# Where the forecast curve is flat at the target, a small error in the loss's level is a
# large one in tokens. Each replicate's horizon in the track record's stretch is moved this
# share of the way up to its *loss horizon*, the fall still to come over the curve's slope
# per unit of ln tokens at its crossing, where that is longer (on a curve straight in
# ln tokens the two are equal). 0 keeps the horizon alone. Chosen by leave-one-family-out
# cross-validation among 0, 0.5 and 1 (benchmarks/bench_calibration.py): three folds of four
# choose 0.
LOSS_HORIZON_SHARE = 0.0
# Plans whose source says they are not the run's own plan (see Plan.source).
UNKNOWN_PLAN_SOURCES = ("inferred", "assumed", STEPS_ONLY)
# Replicates of the bootstrap.
REPLICATES = 40


@dataclass(frozen=True)
class TargetForecast:
    """One target's forecast: tokens (None when never reached), interval, chance within plan."""

    tokens: float | None
    interval: tuple[float, float] | None
    p_reach_within_plan: float | None
    note: str | None = None
    # The bootstrap's crossings, sorted (inf: not reached within the timeline): what the
    # interval is read from, kept so a backtest can score every coverage level at once.
    draws: tuple[float, ...] = ()
    # The replicates' crossings before the track record's stretch, in replicate order (inf:
    # never): with the selection's error scale they let a backtest replay other priors.
    raw: tuple[float, ...] = ()
    # Each replicate's loss horizon (see LOSS_HORIZON_SHARE), in the order of ``raw``
    # (0: none, as where it does not cross), so a backtest can replay other shares.
    loss_horizons: tuple[float, ...] = ()
    # With an inferred or assumed plan, the crossings of replicates on the plans the log
    # cannot rule out, before the stretch (see tracker_plugin.core.plan_spread).
    plan_raw: tuple[float, ...] = ()
    plan_ends: tuple[float, ...] = ()  # each plan_raw draw's plan end, in tokens (inf: none)
    # The central plan's crossing (inf: never) where the point is taken over the plausible
    # plans too (plan_spread.point_share), so a backtest can replay either point; None where
    # the point is the central plan's own.
    central: float | None = None


def resolve_plan(history: History, given: LrSchedule | None) -> Plan:
    """The plan given (the ``lr_schedule`` setting), else the run's own (its params, as a
    source put it in ``history.lr_plan``), else what the logged lr shows. A plan from the
    params that knows only the planned total (``steps-only``) takes its shape from the log."""
    given = given if given is not None else history.lr_plan
    if given is not None and given.source == STEPS_ONLY:
        # The params know the planned total, not the shape: the log shows the shape.
        return infer_lr_schedule(history.step, history.lr, planned=given)
    if given is not None:
        return Plan(given, f"planned lr: {given.description}")
    return infer_lr_schedule(history.step, history.lr)


def forecast_targets(
    fit: LawFit,
    targets: Sequence[float],
    history: History,
    first: int,
    *,
    level: float,
    error_scale: float | None = None,
    error_dof: int = 1,
    replicates: int = REPLICATES,
    inflation: float = INTERVAL_INFLATION,
    seed: int | None = None,
    refit: bool = True,
) -> list[TargetForecast]:
    """When the smoothed loss reaches each target, with an interval and the chance within plan.

    ``level`` is the interval's coverage (0.8 for an 80% interval). ``error_scale`` (see
    :class:`Selection`) adds the law's own track record: each replicate's log horizon
    ``ln(tokens / observed tokens)`` is multiplied by ``exp(error_scale * t)``, ``t`` a
    Student-t draw whose degrees of freedom count the forecasts the scale rests on (a scale
    from three errors is itself uncertain, which the t's heavier tails carry). The
    replicates are fitted once and serve every target. ``seed`` replaces the one drawn from
    the run's data (the plans of :mod:`~tracker_plugin.core.plan_spread` each take their own).
    ``refit`` False leaves out the bootstrap's replicates: the point forecast alone, for a
    caller that draws the interval elsewhere (the point is the same either way).
    """
    seed = _seed(history) if seed is None else seed
    rng = np.random.default_rng(seed)
    spread = np.random.default_rng(seed + 1)
    drawn = _draw(fit, history, first, replicates, rng, point=True, refit=refit)
    shifts = spread.standard_t(error_dof_of(error_dof), len(drawn.curves))
    observed = float(history.tokens[-1])
    # Past the end of the timeline (20x the run) a forecast means "not in sight".
    beyond = float(fit.timeline.tokens[-1])
    plan_end = fit.timeline.plan_end
    out = []
    for target in targets:
        crossings = [crossing_tokens(fit.timeline, drawn.steps, path, target) for path in drawn.central]
        # The point forecast: the fitted law's median first crossing over the fluctuation
        # paths alone (its plain crossing when the smoothed loss hardly fluctuates).
        tokens = float(np.median([math.inf if t is None else t for t in crossings]))
        if not refit:
            out.append(TargetForecast(tokens if math.isfinite(tokens) else None, None, None))
            continue
        if not drawn.curves:
            out.append(TargetForecast(tokens if math.isfinite(tokens) else None, None, None,
                                      "the bootstrap could not refit the law: no interval"))
            continue
        raw = drawn.raw(target, beyond)
        horizons = drawn.loss_horizons(fit.timeline, target, raw)
        found = stretched(np.array(raw), shifts, error_scale, observed, beyond, np.array(horizons))
        values = np.sort(_inflated(found, tokens, observed, inflation))
        low, high = interval_of(values, level)
        p_reach = None if plan_end is None else float(np.mean(values <= float(fit.timeline.tokens_at(plan_end))))
        draws = tuple(float(v) for v in values)
        note = None
        if not math.isfinite(tokens) and math.isfinite(median := float(values[len(values) // 2])):
            # The law levels off just above the target, by less than its own uncertainty:
            # most refits reach it, so "unreachable" would be the point's word, not the evidence's.
            tokens, note = median, _near_miss_note(fit, values)
        if not math.isfinite(tokens):
            out.append(TargetForecast(None, None, p_reach, draws=draws, raw=tuple(raw), loss_horizons=horizons))
        else:
            out.append(TargetForecast(tokens, (low, high), p_reach, note, draws=draws, raw=tuple(raw),
                                      loss_horizons=horizons))
    return out


def _near_miss_note(fit: LawFit, values: np.ndarray) -> str:
    share = float(np.mean(np.isfinite(values)))
    return (f"the fitted law levels off near {fit.asymptote:.4f}, just above the target, but {share:.0%} of the "
            f"laws fitted to resampled data reach it: the forecast is their median, and the interval is open-ended "
            f"where they do not")


def replicate_crossings(
    fit: LawFit, targets: Sequence[float], history: History, first: int, *, replicates: int, seed: int
) -> list[tuple[float, ...]]:
    """Each target's :attr:`TargetForecast.raw` of :func:`forecast_targets` with the same
    arguments, and nothing else: the replicates' crossings (inf: never; none when no
    replicate could be refitted) without the point forecast, its fluctuation paths or the
    interval, which a plausible plan of :mod:`~tracker_plugin.core.plan_spread` does not use."""
    drawn = _draw(fit, history, first, replicates, np.random.default_rng(seed), point=False)
    beyond = float(fit.timeline.tokens[-1])
    return [tuple(drawn.raw(target, beyond)) if drawn.curves else () for target in targets]


def error_dof_of(count: int) -> float:
    """The t's degrees of freedom for a scale from ``count`` forecasts (see :data:`ERROR_DOF`)."""
    return float(ERROR_DOF) if ERROR_DOF > 0 else float(max(count, 1))


def stretched(raw: np.ndarray, shifts: np.ndarray, error_scale: float | None, observed: float, beyond: float,
              loss_horizons: np.ndarray | None = None, share: float | None = None) -> np.ndarray:
    """Raw crossings (inf: never) moved by the law's track record: each log horizon
    ``h = ln(tokens / observed)`` becomes ``h + H * (exp(error_scale * shift) - 1)``,
    ``shift`` a Student-t draw per crossing (see :func:`forecast_targets`) and ``H`` the
    horizon moved ``share`` (default :data:`LOSS_HORIZON_SHARE`) of the way up to the
    crossing's loss horizon where that is longer (``H = h`` without them); past ``beyond``,
    never."""
    if not error_scale or observed <= 0:
        return np.where(raw > beyond, math.inf, raw)
    share = LOSS_HORIZON_SHARE if share is None else share
    # For small errors ln(tokens) moves by about scale * H * t, and a forecast never lands
    # before the tokens already logged.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        horizon = np.log(np.maximum(raw / observed, 1.0))
        spread = horizon
        if share > 0 and loss_horizons is not None and len(loss_horizons) == len(raw):
            spread = horizon + share * np.maximum(loss_horizons - horizon, 0.0)
        stretch = np.exp(np.clip(error_scale * shifts, -20.0, 5.0))
        moved = observed * np.exp(np.clip(horizon + spread * (stretch - 1.0), 0.0, 600.0))
    return np.where(np.isfinite(raw) & (moved <= beyond), moved, math.inf)


def interval_of(values: np.ndarray, level: float) -> tuple[float, float]:
    """The ``level`` interval of sorted draws: order statistics rather than interpolated
    quantiles, so draws that never reach the target count as infinitely late."""
    top = len(values) - 1
    return float(values[math.floor((1 - level) / 2 * top)]), float(values[math.ceil((1 + level) / 2 * top)])


def plan_inflation(plan: Plan) -> float:
    """The interval's inflation for a forecast on ``plan`` (see :data:`UNKNOWN_PLAN_INFLATION`)."""
    return UNKNOWN_PLAN_INFLATION if plan.source in UNKNOWN_PLAN_SOURCES else INTERVAL_INFLATION


def _inflated(draws: np.ndarray, tokens: float, observed: float, inflation: float) -> np.ndarray:
    """The draws' log horizons from the point forecast, scaled by ``inflation`` (never
    before the tokens already logged; a draw that never reaches stays never)."""
    if inflation == 1.0 or not math.isfinite(tokens) or tokens <= 0:
        return draws
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        moved = tokens * np.exp(inflation * np.log(draws / tokens))
    return np.where(np.isfinite(draws), np.maximum(moved, observed), draws)


def _seed(history: History) -> int:
    """A seed from the run's data: the same run gives the same forecast and interval."""
    # crc32(b, crc32(a)) == crc32(a + b), without copying a long log's arrays.
    return zlib.crc32(np.ascontiguousarray(history.step).data, zlib.crc32(np.ascontiguousarray(history.loss).data))
