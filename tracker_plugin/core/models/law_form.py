"""The schedule-aware law's form: ``L(t) = L0 + A * power(t) - G * anneal(t)``.

A :class:`Law` names its nonlinear parameters with their bounds and starts and gives its
two shapes (``power`` over the lr area, ``anneal`` as the lr decays; see
:mod:`.schedule_law` for how it is fitted). :class:`GainPrior` is the weak prior on the
annealing gain ``G``, and :class:`_PlannedEffect` what a response makes of the planned
decay by the plan's end, which the prior is put on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tracker_plugin.core.clock import DropCells, Timeline
from tracker_plugin.defaults import DEFAULTS

__all__ = ["ANNEAL_GAIN", "GainPrior", "Law", "Response"]


# The anneal-gain prior's share of the loss (GainPrior): chosen among 0.025, 0.05 and 0.1 by
# leave-one-family-out cross-validation over four families of public runs
# (benchmarks/bench_calibration.py). Three of the four folds choose 0.1 (OLMo's held out:
# 0.05); all four families together choose 0.05, jointly with auto's comparison of the laws
# (forecast.COMPARED_SHARE), by a hair (mean point loss 0.185 against 0.186), and the
# families none of those rules saw (the held-out speedruns) are forecast far better with it
# (median |ln| 0.053 against 0.088 at half the run, 0.076 against 0.203 at a quarter).
ANNEAL_GAIN: float = DEFAULTS["anneal_gain"]


# A response that realises less than this share of the planned decay by the plan's end is
# taken at this share (the gain it was solved as stays finite; see _PlannedEffect).
_MIN_REALISED = 1e-6


@dataclass(frozen=True)
class GainPrior:
    """Prior on ``G``, the loss a full lr decay removes: ``N(fraction * loss, (sd * mean)^2)``.

    ``fraction`` is the share of the current loss (the loss at the end of the fit window)
    that a decay of the lr from its peak to zero removes by the plan's end (a shorter
    planned drop removes its share of that; see :class:`_PlannedEffect`). The published runs of 25M to
    760M-parameter models show 3-5%, up to 13% in short high-lr runs; the default,
    :data:`ANNEAL_GAIN`, is the choice of leave-one-family-out validation among 2.5%, 5% and
    10%. ``sd`` (relative) is wide enough to cover that range at two standard deviations;
    a spread, it was scored as the interval rules are, by the calibration loss of the same
    validation among 0.25, 0.5 and 1, and four of the five folds (all four families among
    them) keep 0.5 (the point loss alone would take 0.25, and the 80% intervals would then
    cover 74% at half the run, plan given, and 66% at a quarter, plan inferred; see the
    README). The gain of SGD noise scales with the loss, which is why the prior is relative
    to it.
    """

    fraction: float = ANNEAL_GAIN
    sd: float = 0.5


class Response(Protocol):
    """A law's anneal column and its gradient by the law's parameters, on one fit window's
    points and drops (see :attr:`Law.response`)."""

    def value(self, theta: np.ndarray) -> np.ndarray: ...

    def gradient(self, theta: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Law:
    """A schedule-aware law: its nonlinear parameters and its two shape functions.

    ``power(theta, area / area_ref + shift)`` and ``anneal(theta, clock, area, cells)``
    give the columns that ``A`` and ``G`` multiply; ``theta`` here is the law's own
    parameters (``theta_names``), a fit's ``theta`` holds them and then the origin shift.
    The power is taken of the area relative to the area at the end of the fit window, so
    ``A`` is the reducible loss there. ``power_gradient`` and ``anneal_gradient`` (same
    arguments) give their derivatives by ``theta``, one column per parameter, and
    ``power_slope`` the power's by its area (the shift's column), for the solver's
    Jacobian; without them it differences the residuals. ``response(clock, area, cells)``,
    when given, computes the same anneal column and its gradient for one fit window, with
    the work that does not depend on ``theta`` done once (a fit evaluates both at a few
    dozen trial shapes).
    """

    name: str
    reference: str
    theta_names: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    starts: tuple[tuple[float, ...], ...]
    power: Callable[[np.ndarray, np.ndarray], np.ndarray]
    anneal: Callable[[np.ndarray, np.ndarray, np.ndarray, DropCells], np.ndarray]
    grid: np.ndarray | None = field(default=None, compare=False)  # for one-parameter laws
    anneal_fixed: bool = False  # the anneal column does not depend on theta (computed once)
    power_gradient: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    anneal_gradient: Callable[[np.ndarray, np.ndarray, np.ndarray, DropCells], np.ndarray] | None = None
    power_slope: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    response: Callable[[np.ndarray, np.ndarray, DropCells], Response] | None = field(default=None, compare=False)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The names of a fit's ``theta``: the law's own parameters, then the origin shift."""
        return (*self.theta_names, "shift")

    def columns(
        self, theta: np.ndarray, clock: np.ndarray, area: np.ndarray, area_ref: float, cells: DropCells
    ) -> tuple[np.ndarray, np.ndarray]:
        """The power and anneal columns at a fit's ``theta`` (the shift last)."""
        shape, shift = theta[:-1], float(theta[-1])
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            return self.power(shape, area / area_ref + shift), self.anneal(shape, clock, area, cells)


class _PlannedEffect:
    """The share of the planned lr decay's full effect that a law has realised by the
    plan's end: ``anneal(theta)`` there over the planned drop.

    A law whose response to a drop is fitted (the multi-power law's ``C``, ``beta``,
    ``gamma``) can meet the gain prior with a full ``G`` and a response so slow that the
    decay never acts within the plan: a log that has seen a decay barely begun (the lr at
    0.85 of its peak) leaves the response's speed free, and the fit then sends it to its
    bounds and forecasts no gain at all. Scaling the anneal column by this share makes the
    gain the fit solves for, and so the prior's, the loss the planned decay removes by the
    plan's end, which is what the forecast reads; it moves only the prior's meaning (a fit
    without a prior finds the same curve). A law of fixed response (lr-annealing) gets a
    constant share: its prior, too, is on the loss removed by the plan's end, which
    leave-one-family-out validation prefers to the full decay's (plan given, a quarter of
    the way in, q=0.8: median |ln| 0.108 against 0.187 with the share applied to the
    multi-power law alone; benchmarks/bench_calibration.py).
    """

    def __init__(self, law: Law, clock: np.ndarray, area: np.ndarray, cells: DropCells) -> None:
        self.law, self.clock, self.area, self.cells = law, clock, area, cells
        self.total = cells.total
        self._key: bytes | None = None
        self._value = 1.0

    def value(self, shape: np.ndarray) -> float:
        key = b"" if self.law.anneal_fixed else shape.tobytes()  # a fixed response: one share
        if key != self._key:
            with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
                realised = float(self.law.anneal(shape, self.clock, self.area, self.cells)[0]) / self.total
            self._key, self._value = key, max(realised, _MIN_REALISED) if math.isfinite(realised) else 1.0
        return self._value

    def gradient(self, shape: np.ndarray) -> np.ndarray:
        """``d value / d shape`` (0 where the share is held at its floor)."""
        if self.law.anneal_gradient is None or self.value(shape) <= _MIN_REALISED:
            return np.zeros(len(shape))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            d = self.law.anneal_gradient(shape, self.clock, self.area, self.cells)[0] / self.total
        return np.where(np.isfinite(d), d, 0.0)


def _planned_effect(law: Law, timeline: Timeline, cells: DropCells) -> _PlannedEffect | None:
    """The plan-end share of :class:`_PlannedEffect` (None for a timeline without a decay by
    its end: the plan's, or the timeline's when no plan is known)."""
    end = timeline.plan_end if timeline.plan_end is not None else timeline.horizon
    clock = timeline.clock_at(np.array([end]))
    planned = cells.before(float(clock[0]) + 0.5)
    if planned.total <= 0:
        return None
    return _PlannedEffect(law, clock, timeline.area_at(np.array([end])), planned)
