"""The interval over the lr plans an inferred or assumed plan cannot rule out.

A forecast on a plan inferred from the logged lr (or on a constant lr assumed because
nothing says otherwise) rests on a future the log has not shown: early in a cosine a short
decay to a high final lr and a long one to a low final lr fit the log alike, and an lr still
at its peak may stay there or end in a cooldown at any time. The residual bootstrap cannot
show that. Here the chosen law is fitted once more on each of the plans the log cannot
rule out (:func:`~tracker_plugin.plan.schedule.plausible_schedules`), each fit bootstrapped
with a few replicates of its own (seeded, so a run gives the same interval every time), and
their crossings join the bootstrap's: the interval covers the decays the forecast cannot
know. The point forecast is the median crossing over the central and the plausible plans
(:func:`point_share` of it from the plausible plans; the central plan's own is kept beside
it for backtests).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from tracker_plugin.core.clock import Timeline
from tracker_plugin.core.forecast import (
    TargetForecast,
    _inflated,
    _seed,
    error_dof_of,
    interval_of,
    replicate_crossings,
    stretched,
)
from tracker_plugin.core.models import FitFailure, GainPrior, LawFit
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import PLAN_DRAWS, LrSchedule, plausible_schedules

__all__ = [
    "INFERRED_POINT_SHARE", "PLAN_REPLICATES", "PLAN_SHARE", "UNKNOWN_SHAPE_POINT_SHARE", "central_unused", "over_plans",
    "point_share", "pooled",
    "pooled_median",
]

# Bootstrap replicates per plausible plan: with PLAN_DRAWS plans, as many draws as the
# central plan's bootstrap (forecast.REPLICATES) has.
PLAN_REPLICATES = 10
# The share of the interval's draws taken from the plausible plans (the rest from the
# central plan): chosen by leave-one-family-out cross-validation
# (benchmarks/bench_calibration.py) from 0 (the central plan alone), 0.5 and 1.
PLAN_SHARE = 1.0
# The share of the point forecast's crossings from the plausible plans (0: the central
# plan's own point; 0.5: the central and the plausible plans alike; 1: the plausible plans
# alone), apart for a plan inferred from a logged decay (its central plan is the decay
# that fits the log best, one of the plausible ones) and for a plan whose shape nothing
# shows (the lr assumed constant, or a planned total alone: its central plan holds the lr
# to the end, which the cooldowns of the prior do not). Chosen by the same validation
# (an inferred decay's point was its central plan's, 0, while the point loss read the
# median alone; held to the p90 too, all four families choose half from each).
INFERRED_POINT_SHARE = 0.5
UNKNOWN_SHAPE_POINT_SHARE = 1.0


def point_share(source: str | None, inferred: float = INFERRED_POINT_SHARE, unknown: float = UNKNOWN_SHAPE_POINT_SHARE) -> float:
    """The point forecast's share from the plausible plans for a plan of ``source``: the
    ``inferred`` share after an inferred decay, the ``unknown`` one otherwise (the defaults
    are the forecast's; a backtest replays others)."""
    return inferred if source == "inferred" else unknown


def over_plans(
    fit: LawFit,
    central_plan: Callable[[bool], Sequence[TargetForecast]],
    targets: Sequence[float],
    history: History,
    first: int,
    *,
    timeline_for: Callable[[LrSchedule], Timeline],
    prior: GainPrior | None,
    level: float,
    error_scale: float | None,
    error_dof: int,
    inflation: float,
    source: str,
    known_total: float | None = None,
    replays: bool = False,
) -> list[TargetForecast]:
    """The central plan's forecasts (``central_plan(True)``, or ``central_plan(False)``
    without its bootstrap's refits) with intervals drawn over the plausible plans too.

    ``timeline_for`` builds the run's timeline on another plan (the analysis's clock and
    batch settings); ``known_total`` is the planned last step when the params give only
    that (every plausible plan then ends there); ``source`` is the central plan's
    (:attr:`~tracker_plugin.plan.schedule.Plan.source`), which sets :func:`point_share`. A plan
    whose fit fails adds no draws. Where the plausible plans' draws make both the interval
    and the point (:func:`central_unused`), the central plan's refits are left out, unless
    ``replays`` (a backtest replays other shares with them) or no plan could be drawn.
    """
    seed = _seed(history)
    per_plan: list[tuple[list[tuple[float, ...]], float]] = []
    like: LawFit | None = None
    for k, schedule in enumerate(plausible_schedules(history.step, history.lr, PLAN_DRAWS, known_total)):
        # Started from the central fit: the logged part of the timeline is the same. Plans
        # that differ only past the log share one fit (``like``).
        alternative = fit.on_timeline(timeline_for(schedule), prior, like=like)
        if isinstance(alternative, FitFailure):
            continue
        like = alternative
        raws = replicate_crossings(alternative, targets, history, first, replicates=PLAN_REPLICATES,
                                   seed=seed + 7919 * (k + 1))
        per_plan.append((raws, _end_tokens(alternative.timeline)))
    drawn = any(raws and raws[0] for raws, _ in per_plan)
    refitted = replays or not drawn or not central_unused(source)
    found = central_plan(refitted)
    observed = float(history.tokens[-1])
    beyond = float(fit.timeline.tokens[-1])
    end = _end_tokens(fit.timeline)
    rng = np.random.default_rng(seed + 2)
    share = point_share(source)
    out = []
    for i, central in enumerate(found):
        plan_raw = tuple(v for raws, _ in per_plan for v in raws[i])
        plan_ends = tuple(e for raws, e in per_plan for _ in raws[i])
        if refitted and central.interval is None and central.tokens is not None or not plan_raw:
            out.append(replace(central, plan_raw=plan_raw, plan_ends=plan_ends))
            continue
        own = math.inf if central.tokens is None else central.tokens
        raw = pooled(np.array(central.raw, float), np.array(plan_raw, float), PLAN_SHARE)
        ends = pooled(np.full(len(central.raw), end), np.array(plan_ends, float), PLAN_SHARE)
        # The plausible plans' draws keep their horizon alone (a loss horizon of 0).
        horizons = pooled(np.array(central.loss_horizons, float), np.zeros(len(plan_raw)), PLAN_SHARE)
        shifts = rng.standard_t(error_dof_of(error_dof), len(raw))
        tokens = _point(central, plan_raw, share)
        values = _inflated(stretched(raw, shifts, error_scale, observed, beyond, horizons), tokens, observed, inflation)
        # Within the plan each draw was made on: an inferred plan's end is as unknown as its
        # decay. A plan assumed (no end) has none to reach within.
        p_reach = None if fit.timeline.plan_end is None else float(np.mean(values <= ends))
        values = np.sort(values)
        reached = math.isfinite(tokens)
        note = central.note if reached or not math.isfinite(own) else _ends_first(own, fit.timeline.plan_end is None, history.unit)
        out.append(replace(central, tokens=tokens if reached else None, interval=_around(values, level, tokens) if reached else None,
                           p_reach_within_plan=p_reach, note=note,
                           draws=tuple(float(v) for v in values), plan_raw=plan_raw, plan_ends=plan_ends,
                           central=own if share > 0 else None))
    return out


def central_unused(source: str) -> bool:
    """Whether on a plan of ``source`` the central plan's bootstrap feeds neither the
    interval (:data:`PLAN_SHARE` of it from the plausible plans) nor the point
    (:func:`point_share`)."""
    return PLAN_SHARE >= 1 and point_share(source) >= 1


def _ends_first(own: float, assumed: bool, unit: str) -> str:
    """Why a target the central plan reaches is not forecast: most plausible plans end first."""
    central = "the lr held as logged" if assumed else "the inferred plan"
    return (f"not reached on most of the lr plans the log cannot rule out (a decay that ends the run first); "
            f"on {central} it would be at {own:,.0f} {unit}")


def _around(values: np.ndarray, level: float, tokens: float) -> tuple[float, float]:
    """The ``level`` interval of the sorted draws, widened to hold the point forecast: when
    most plausible plans never reach a target (a cooldown that ends the run first), the
    draws' interval can lie wholly past the central plan's crossing."""
    low, high = interval_of(values, level)
    return min(low, tokens), max(high, tokens)


def _point(central: TargetForecast, plan_raw: tuple[float, ...], share: float) -> float:
    """The point forecast: the central plan's (``share`` 0), else the median raw crossing
    with ``share`` of the crossings from the plausible plans (inf: not reached)."""
    if share > 0:
        return pooled_median(np.array(central.raw, float), np.array(plan_raw, float), share)
    return math.inf if central.tokens is None else central.tokens


def _end_tokens(timeline: Timeline) -> float:
    """Tokens at the timeline's planned end (inf: the plan has none)."""
    return math.inf if timeline.plan_end is None else float(timeline.tokens_at(timeline.plan_end))


def pooled(central: np.ndarray, plans: np.ndarray, share: float) -> np.ndarray:
    """The raw crossings an interval is read from: ``share`` of them from the plausible
    plans, the rest from the central plan (each pool taken whole when it serves alone, and
    both whole when they hold the same count and ``share`` is a half)."""
    if share <= 0 or not len(plans):
        return central
    if share >= 1 or not len(central):
        return plans
    # As many draws as the smaller pool allows at this share, each pool thinned evenly.
    total = min(len(central) / (1 - share), len(plans) / share)
    n_plans = int(round(share * total))
    n_central = int(round(total)) - n_plans
    pick = np.linspace(0, len(central) - 1, n_central).round().astype(np.int64)
    take = np.linspace(0, len(plans) - 1, n_plans).round().astype(np.int64)
    return np.r_[central[pick], plans[take]]


def pooled_median(central: np.ndarray, plans: np.ndarray, share: float) -> float:
    """The median of the crossings :func:`pooled` gives (inf: past every plan's reach)."""
    return float(np.median(pooled(central, plans, share)))
