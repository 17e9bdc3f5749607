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

from tracker_plugin.core.forecast import TargetForecast

__all__ = [
    "BIAS_WEIGHT",
    "CENTER",
    "CENTERS",
    "LEVELS",
    "MIN_RUNS",
    "NONE",
    "WIDTH_WEIGHT",
    "Calibration",
    "SiblingCase",
    "calibrate",
    "sibling_case",
]

# The interval levels the width is fitted to (each miss squared, summed).
LEVELS = (0.5, 0.8, 0.95)
# Prior weights in sibling runs: with this many siblings, half the siblings' value is taken.
# These, MIN_RUNS and CENTER are the rule all the visible families choose
# (benchmarks/bench_siblings.py, the siblings dated before each run where runs are dated).
BIAS_WEIGHT = 1.0
WIDTH_WEIGHT = 2.0
# Fewer sibling runs than this: no calibration.
MIN_RUNS = 1
# How the sibling runs' errors are summed up into the bias: a median keeps one odd sibling
# from moving every forecast.
CENTERS: dict[str, Callable[[Sequence[float]], Any]] = {"median": np.median, "mean": np.mean}
CENTER = "median"
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
    # The runs asked for that are not siblings, each with the reason (the report says so).
    left_out: tuple[tuple[str, str], ...] = ()

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
        left = "; ".join(f"{run} left out: {why}" for run, why in self.left_out)
        if not self.active:
            return "no calibration: no finished sibling run gave a backtest case" + (f" ({left})" if left else "")
        n = len(self.runs)
        return (f"calibrated on {n} finished run(s) ({self.cases} backtest cases): the point moved "
                f"{math.exp(-self.bias) - 1:+.1%} in tokens (the siblings' error {_ln(self.raw_bias)}, {_share(n, self.bias_weight)}), "
                f"the interval x{self.width:.2f} (the siblings' x{_ln(self.raw_width, 'x')}, {_share(n, self.width_weight)})"
                + (f"; {left}" if left else ""))


def _share(n: int, weight: float) -> str:
    if math.isinf(weight):
        return "not used"
    return "taken whole" if weight == 0 else f"taken {n}/({n}+{weight:g})"


def _ln(value: float | None, kind: str = "ln") -> str:
    if value is None:
        return "unknown"
    return f"{value:.2f}" if kind == "x" else f"{value:+.3f} ln"


NONE = Calibration()


def calibrate(cases: Sequence[SiblingCase], *, bias_weight: float = BIAS_WEIGHT, width_weight: float = WIDTH_WEIGHT,
              min_runs: int = MIN_RUNS, center: str = CENTER) -> Calibration:
    """The calibration ``cases`` give (a weight of ``inf``: that part off). The bias is the
    ``center`` (``median`` or ``mean``) over the sibling runs of each run's mean error.

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
    raw_bias = float(CENTERS[center]([float(np.mean([c.error for c in cases if c.run == r])) for r in runs]))
    bias = _shrunk(raw_bias, n, bias_weight)
    raw_width = _width(cases, bias)
    width = math.exp(_shrunk(math.log(raw_width), n, width_weight))
    return Calibration(bias, width, runs, len(cases), raw_bias, raw_width, bias_weight, width_weight)


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
