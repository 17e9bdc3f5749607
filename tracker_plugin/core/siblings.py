"""A calibration learned from a project's finished runs (the run's siblings).

One run's log does not say how far the run is from its law, nor how the law answers a
decay the log has not shown yet. The finished runs of the same project do: each one,
backtested at the cut where the forecast run stands, gives the error its forecast made
there. From those errors this module fits two numbers:

- a **bias**: the siblings' mean signed ``ln(predicted / true tokens)``, taken off the
  point (a family whose forecasts run late by 10% is moved 10% earlier);
- a **width**: the factor by which the siblings' intervals, about their bias-corrected
  points, had to stretch (or could shrink) to hold the truth at 50, 80 and 95%: the
  factor multiplies each draw's ``ln(draw / point)``, so it scales the interval's error
  per unit of log horizon.

Both are shrunk toward "no calibration" (bias 0, width 1) by the evidence, as an empirical
Bayes estimate is: a share ``n / (n + weight)`` of the siblings' value, ``n`` the number of
sibling *runs* (a run's cuts are not independent evidence). With no siblings, or fewer than
``min_runs``, the calibration is :data:`NONE` and the forecast is exactly today's.

The weights and the minimum count are rules, chosen by leave-one-family-out validation
(``benchmarks/bench_siblings.py``).

Pure: arrays and frozen dataclasses in, frozen dataclasses out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tracker_plugin.core.forecast import TargetForecast, resolve_plan
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import LrSchedule

__all__ = [
    "BIAS_WEIGHT",
    "CENTER",
    "CENTERS",
    "LEVELS",
    "MIN_RUNS",
    "NONE",
    "SIBLING_CUTS",
    "SPREAD",
    "PlanShape",
    "WIDTH_WEIGHT",
    "Calibration",
    "SiblingCase",
    "SiblingRecord",
    "calibrate",
    "calibrate_records",
    "plan_shape",
    "schedule_kind",
    "sibling_case",
    "snap",
]

# The interval levels the width is fitted to (each miss squared, summed).
LEVELS = (0.5, 0.8, 0.95)
# Prior weights in sibling runs: with this many siblings, half the siblings' value is taken
# (the bias's only where SPREAD is None). These, MIN_RUNS, CENTER and SPREAD are the rule
# all the visible families choose (benchmarks/bench_siblings.py, the siblings dated before
# each run where runs are dated).
BIAS_WEIGHT = 1.0
WIDTH_WEIGHT = 2.0
# Fewer sibling runs than this: no calibration.
MIN_RUNS = 1
# How the sibling runs' errors are summed up into the bias: a median keeps one odd sibling
# from moving every forecast.
CENTERS: dict[str, Callable[[Sequence[float]], Any]] = {"median": np.median, "mean": np.mean}
CENTER = "mean"
# The prior spread of a project's bias (ln) for the scatter-weighted shrinkage (None: the
# fixed BIAS_WEIGHT): siblings that disagree, as early in a run, move the point less.
SPREAD: float | None = 0.1
# Where a finished run is backtested once for all (its record): the forecast run's share of
# its plan is taken to the nearest of these. Within the range the validation scored.
SIBLING_CUTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# The widths searched (a grid in log space: coverage is a step function of the width).
_WIDTHS = np.exp(np.linspace(math.log(0.25), math.log(4.0), 97))


@dataclass(frozen=True)
class SiblingCase:
    """One backtest case of a finished sibling: its error and its interval's bounds.

    ``error`` is ``ln(predicted / true tokens)`` (finite); ``lows`` and ``highs`` are, per
    level of :data:`LEVELS`, ``ln(point / lower bound)`` and ``ln(upper bound / point)``,
    each ``>= 0`` (``inf`` for an open-ended side).
    """

    run: str
    error: float
    lows: tuple[float, ...]
    highs: tuple[float, ...]


def sibling_case(run: str, point: float, true_tokens: float, draws: np.ndarray) -> SiblingCase | None:
    """The case of one sibling's forecast from its point, the truth and its interval draws
    (sorted or not; ``inf`` for a draw that never crossed); None where there is no finite
    point or truth."""
    if not (point > 0 and true_tokens > 0 and math.isfinite(point) and math.isfinite(true_tokens)) or not len(draws):
        return None
    lows, highs = [], []
    for level in LEVELS:
        low, high = np.quantile(np.asarray(draws, float), [(1 - level) / 2, (1 + level) / 2], method="nearest")
        # A bound on the far side of the point leaves that side no room (0).
        lows.append(math.inf if low <= 0 else 0.0 if low >= point else math.log(point / low))
        highs.append(math.inf if not math.isfinite(high) else 0.0 if high <= point else math.log(high / point))
    return SiblingCase(run, math.log(point / true_tokens), tuple(lows), tuple(highs))


@dataclass(frozen=True)
class Calibration:
    """What the siblings set, and from what.

    ``bias`` and ``width`` are the values the forecast uses; ``raw_bias`` and ``raw_width``
    the siblings' own (None with no siblings), ``runs`` the siblings counted, ``cases``
    their backtest cases, and the weights the shrinkage they went through.
    """

    bias: float = 0.0
    width: float = 1.0
    runs: tuple[str, ...] = ()
    cases: int = 0
    raw_bias: float | None = None
    raw_width: float | None = None
    bias_weight: float = BIAS_WEIGHT
    width_weight: float = WIDTH_WEIGHT
    # The prior spread the bias weight was read from (None: the weight is fixed).
    spread: float | None = None
    # The runs asked for that are not siblings, each with the reason (the report says so).
    left_out: tuple[tuple[str, str], ...] = ()
    # The cut the siblings were backtested at (their share of their plan); None: not said.
    cut: float | None = None

    @property
    def active(self) -> bool:
        return bool(self.runs)

    @property
    def asked(self) -> bool:
        """Whether any run was offered as a sibling."""
        return bool(self.runs or self.left_out)

    def point(self, tokens: float) -> float:
        """The bias-corrected point."""
        return tokens * math.exp(-self.bias)

    def draws(self, draws: np.ndarray, tokens: float) -> np.ndarray:
        """Interval draws about ``tokens`` moved with the point and stretched by the width
        (``inf`` stays ``inf``)."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            moved = self.point(tokens) * np.exp(self.width * np.log(np.asarray(draws, float) / tokens))
        return np.where(np.isfinite(draws), moved, draws)

    def forecast(self, found: TargetForecast) -> TargetForecast:
        """A target's forecast calibrated: its point, interval and draws (the chance
        within the plan is the forecast's own: the siblings say nothing of this run's plan)."""
        if not self.active or found.tokens is None:
            return found
        tokens = found.tokens
        interval = found.interval
        if interval is not None:
            low, high = self.draws(np.array(interval, float), tokens)
            interval = (float(low), float(high))
        draws = tuple(float(x) for x in np.sort(self.draws(np.array(found.draws, float), tokens))) if found.draws else ()
        return replace(found, tokens=self.point(tokens), interval=interval, draws=draws)

    def describe(self) -> str:
        """One line: what the siblings set and from what."""
        left = _left_out(self.left_out)
        if not self.active:
            return "no calibration: no finished sibling run gave a backtest case" + (f" ({left})" if left else "")
        n = len(self.runs)
        at = "" if self.cut is None else f" at {self.cut:.0%} of their plans"
        return (f"calibrated on {n} finished run(s) ({self.cases} backtest cases{at}): the point moved "
                f"{math.exp(-self.bias) - 1:+.1%} in tokens (the siblings' error {_ln(self.raw_bias)}, {_share(n, self.bias_weight)}"
                f"{'' if self.spread is None else f', the weight their scatter over {self.spread:g} gives'}), "
                f"the interval x{self.width:.2f} (the siblings' x{_ln(self.raw_width, 'x')}, {_share(n, self.width_weight)})"
                + (f"; {left}" if left else ""))


def _left_out(left_out: Sequence[tuple[str, str]], shown: int = 5) -> str:
    """The runs left out with their reasons; past ``shown``, how many more (a project holds
    thousands)."""
    text = "; ".join(f"{run} left out: {why}" for run, why in left_out[:shown])
    more = len(left_out) - shown
    return text + (f"; {more} more run(s) left out (the JSON report lists them)" if more > 0 else "")


def _share(n: int, weight: float) -> str:
    if math.isinf(weight):
        return "not used"
    return "taken whole" if weight == 0 else f"taken {n}/({n}+{weight:.3g})"


def _ln(value: float | None, kind: str = "ln") -> str:
    if value is None:
        return "unknown"
    return f"{value:.2f}" if kind == "x" else f"{value:+.3f} ln"


NONE = Calibration()


def calibrate(cases: Sequence[SiblingCase], *, bias_weight: float = BIAS_WEIGHT, width_weight: float = WIDTH_WEIGHT,
              min_runs: int = MIN_RUNS, center: str = CENTER, spread: float | None = SPREAD) -> Calibration:
    """The calibration ``cases`` give (a weight of ``inf``: that part off). The bias is the
    ``center`` (``median`` or ``mean``) over the sibling runs of each run's mean error.

    With ``spread`` (the prior spread of a project's bias, in ln), the bias weight is the
    one a normal model gives instead of ``bias_weight``: the sibling runs' own scatter over
    that spread squared, so siblings that disagree (early in a run) move the point less than
    siblings that agree.

    Raises:
        ValueError: a weight below 0, an unknown center or a case with a non-finite error.
    """
    if bias_weight < 0 or width_weight < 0:
        raise ValueError(f"the shrinkage weights are counts of runs >= 0, got {bias_weight!r} and {width_weight!r}")
    if center not in CENTERS:
        raise ValueError(f"center is one of {', '.join(CENTERS)}, got {center!r}")
    if any(not math.isfinite(c.error) for c in cases):
        raise ValueError("a sibling case's error must be finite (a forecast of never is no error to calibrate on)")
    runs = tuple(sorted({c.run for c in cases}))
    if not runs or len(runs) < min_runs:
        return Calibration(bias_weight=bias_weight, width_weight=width_weight)
    n = len(runs)
    errors = [float(np.mean([c.error for c in cases if c.run == r])) for r in runs]
    raw_bias = float(CENTERS[center](errors))
    scattered = spread is not None and bias_weight != math.inf
    if spread is not None and scattered:
        bias_weight = _scatter_weight(errors, spread)
    bias = _shrunk(raw_bias, n, bias_weight)
    raw_width = _width(cases, bias)
    width = math.exp(_shrunk(math.log(raw_width), n, width_weight))
    return Calibration(bias, width, runs, len(cases), raw_bias, raw_width, bias_weight, width_weight,
                       spread if scattered else None)


def _scatter_weight(errors: Sequence[float], spread: float) -> float:
    """``s² / spread²``: the shrinkage weight of a normal model whose runs scatter by ``s``
    about the project's bias, which scatters by ``spread`` about none. ``s²`` is the runs'
    own variance with one more run at ``spread`` (one sibling alone gives no scatter)."""
    scatter = (float(np.sum(np.square(np.asarray(errors) - np.mean(errors)))) + spread**2) / len(errors)
    return scatter / spread**2


def _shrunk(value: float, n: int, weight: float) -> float:
    return 0.0 if math.isinf(weight) else value * n / (n + weight)


def _width(cases: Sequence[SiblingCase], bias: float) -> float:
    """The width whose intervals hold the cases (about their corrected points) nearest
    each level, the misses squared and summed over :data:`LEVELS`."""
    # The factor each case's interval needs at each level to hold the truth: the truth's
    # ln distance from the corrected point over the half-width on its side.
    needed = np.array([[_needed(c.error - bias, low, high) for low, high in zip(c.lows, c.highs)] for c in cases])
    held = needed[None, :, :] <= _WIDTHS[:, None, None]  # width x case x level
    misses = np.square(held.mean(axis=1) - np.array(LEVELS)[None, :]).sum(axis=1)
    return float(_WIDTHS[int(np.argmin(np.round(misses, 12) + 1e-9 * np.abs(np.log(_WIDTHS))))])


def _needed(error: float, low: float, high: float) -> float:
    """``error`` is ln(point / true): above 0, the truth is below the point."""
    side = low if error > 0 else high
    if error == 0:
        return 0.0
    return 0.0 if math.isinf(side) else (abs(error) / side if side > 0 else math.inf)


def snap(fraction: float) -> float:
    """The cut of :data:`SIBLING_CUTS` nearest ``fraction`` (the forecast run's progress)."""
    return min(SIBLING_CUTS, key=lambda cut: (abs(cut - fraction), cut))


def schedule_kind(steps: Sequence[float] | np.ndarray, lr: Sequence[float] | np.ndarray, total: float | None) -> str | None:
    """A plan's kind, from its lr over its planned steps: ``constant`` (ends above 90% of
    its peak), ``wsd`` (holds its peak past half the run, then decays) or ``decay`` (decays
    from the warmup on: cosine, linear); None when the plan says nothing of its end.

    Siblings are narrowed by it: the annealing gain a decay brings, which is most of what a
    sibling's error carries, differs between these.
    """
    at, rate = np.asarray(steps, float), np.asarray(lr, float)
    if total is None or not total > 0 or len(rate) < 2 or not np.all(np.isfinite(rate)) or not rate.max() > 0:
        return None
    grid = np.linspace(0.0, float(total), 201)
    shape = np.interp(grid, at, rate) / rate.max()
    if shape[-1] > 0.9:
        return "constant"
    top = int(np.argmax(shape))
    below = np.flatnonzero(shape[top:] < 0.95)
    start = grid[top + int(below[0])] / float(total) if len(below) else 1.0
    return "wsd" if start >= 0.5 else "decay"


@dataclass(frozen=True)
class PlanShape:
    """What siblings are matched on in a run's plan: its planned length, its kind
    (:func:`schedule_kind`) and its peak lr; None where the plan does not say."""

    total: float | None
    kind: str | None
    peak: float | None

    def share(self, step: float) -> float | None:
        """The share of the plan done at ``step`` (None: the length is unknown)."""
        return None if self.total is None or not self.total > 0 else float(step) / float(self.total)


def plan_shape(history: History, given: LrSchedule | None) -> PlanShape:
    """The run's plan (``given``, else its own, as the forecast resolves it), in short."""
    plan = resolve_plan(history, given).schedule
    if plan is None:
        return PlanShape(None, None, None)
    return PlanShape(plan.total_steps, schedule_kind(plan.steps, plan.lr, plan.total_steps), float(plan.peak))


@dataclass(frozen=True)
class SiblingRecord:
    """A finished run's backtest, made once for all: its cases at each cut of
    :data:`SIBLING_CUTS` where it gave any, its plan's kind and peak lr (how siblings are
    narrowed), or why it is no sibling (``left_out``: it stopped short of its plan)."""

    run: str
    kind: str | None = None
    peak_lr: float | None = None
    cuts: tuple[tuple[float, tuple[SiblingCase, ...]], ...] = ()
    left_out: str | None = None

    def at(self, cut: float) -> tuple[SiblingCase, ...]:
        return next((cases for at, cases in self.cuts if math.isclose(at, cut)), ())


def calibrate_records(records: Sequence[SiblingRecord], fraction: float, kind: str | None,
                      exclude: str | None = None) -> Calibration:
    """The calibration of a run ``fraction`` of the way through a plan of ``kind`` from the
    finished runs' ``records``: their cases at the nearest cut, from the runs of the same
    kind (all where the run's kind is not known); every other run is left out with why.
    ``exclude`` names the forecast run, never its own sibling."""
    cut = snap(fraction)
    cases: list[SiblingCase] = []
    left_out: list[tuple[str, str]] = []
    for record in records:
        why = _why_not(record, kind, exclude)
        found = () if why else record.at(cut)
        if not why and not found:
            why = f"its backtest at {cut:.0%} of its plan forecast none of the targets it reached"
        if why:
            left_out.append((record.run, why))
        cases += found
    return replace(calibrate(cases), left_out=tuple(left_out), cut=cut)


def _why_not(record: SiblingRecord, kind: str | None, exclude: str | None) -> str | None:
    if record.run == exclude:
        return "the forecast run itself"
    if record.left_out:
        return record.left_out
    if kind is not None and record.kind is not None and record.kind != kind:
        return f"its lr schedule is of another kind ({record.kind}; this run's: {kind})"
    return None
