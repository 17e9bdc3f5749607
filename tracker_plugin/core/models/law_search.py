"""The search over a law's nonlinear parameters, its linear ones solved exactly for each.

:class:`_Shapes` evaluates a law's columns on the observations and solves ``L0``, ``A``
and ``G`` (variable projection, with the gain's prior); :func:`_search` runs SciPy's
``least_squares`` from several starts for laws with more than one nonlinear parameter,
and a grid plus Brent's method for those with one (see :mod:`.search`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tracker_plugin.core.clock import DropCells
from tracker_plugin.core.models.base import FitStatus
from tracker_plugin.core.models.law_form import Law, _PlannedEffect
from tracker_plugin.core.models.law_observations import Observations
from tracker_plugin.core.models.projection import Projection
from tracker_plugin.core.models.search import least_squares_from, minimize_on_grid

__all__ = ["robust_sigma"]


# A one-exponent law with a free shift is searched on its exponent grid times these shifts
# (shares of the bound on each side of 0), then by least squares from the best point.
_SHIFT_GRID = (1.0, 0.9, 0.6, 0.3, 0.0, 0.03, 0.1, 0.3, 1.0)


# The exponent to this precision (absolute) is far finer than its uncertainty.
_XTOL = 1e-5
# A search near a previous answer (a refit, a later reweighting round) first looks within
# this factor of it, on this many points.
_BRACKET = 1.5
_BRACKET_POINTS = 7


def _status(search: FitStatus, evaluations: int, done: int, settled: bool, given_weight: bool, cap: int) -> FitStatus:
    """The last round's solver verdict, the evaluations of every round, and how the reweighting ended.

    ``converged`` is the solver's: the reweighting is a fixed number of rounds by design (an
    estimator in its own right), so one that was still moving at the cap is said in the
    reason rather than counted as a failure to converge.
    """
    if given_weight:
        ending = "one pass with given weights"
    elif cap == 1:
        ending = "one pass, no reweighting"
    elif settled:
        ending = f"the robust weights settled in {done} rounds"
    else:
        ending = f"the robust weights still moved after {done} rounds (the cap)"
    return FitStatus(search.converged, f"{search.reason}; {ending}", evaluations)


def robust_sigma(residuals: np.ndarray, weight: np.ndarray) -> float:
    """The robust standard deviation (scaled MAD) of residuals of unit weight; never 0."""
    scaled = residuals * np.sqrt(weight)
    return 1.4826 * float(np.median(np.abs(scaled))) or float(np.std(scaled)) or 1e-12


def _prior_strength(scaled: np.ndarray, sigma: float, prior_sd: float) -> float:
    """Weight of the prior's pseudo-observation: residual noise over the prior's spread.

    Residuals of neighbouring bins are correlated (the curve and the log wander together),
    so they carry less information than their number says; the noise is inflated by the
    usual AR(1) factor ``(1 + r1) / (1 - r1)`` before it is weighed against the prior.
    """
    if len(scaled) > 3 and np.std(scaled) > 0:
        r1 = float(np.corrcoef(scaled[:-1], scaled[1:])[0, 1])
        r1 = min(max(r1 if np.isfinite(r1) else 0.0, 0.0), 0.95)
    else:
        r1 = 0.0
    return sigma * math.sqrt((1.0 + r1) / (1.0 - r1)) / max(prior_sd, 1e-12)


def _search(
    law: Law, problem: Projection, shapes: _Shapes, start: np.ndarray | None, shift: tuple[float, float] | None
) -> tuple[np.ndarray | None, FitStatus]:
    """A fit's ``theta`` (the law's parameters, then the shift) that minimises ``problem``'s
    cost, and how the solver ended.

    ``shift`` holds the shift's bounds, or None to hold it at 0. ``start`` (a previous
    answer) narrows a one-parameter search to a bracket around it and is the only start of
    a several-parameter one; else the law's grid or its starts.
    """
    if len(law.theta_names) == 1 and law.grid is not None:
        if shift is None:
            found, status = _search_exponent(law, problem, shapes, start)
            return (None if found is None else np.r_[found, 0.0]), status
        return _search_exponent_and_shift(law, problem, shapes, start, shift)
    lower, upper = np.array(law.lower, float), np.array(law.upper, float)
    if shift is not None:
        lower, upper = np.r_[lower, shift[0]], np.r_[upper, shift[1]]

    def full(x: np.ndarray) -> np.ndarray:
        return x if shift is not None else np.append(x, 0.0)

    def residuals(x: np.ndarray) -> np.ndarray:
        return problem.residuals(*shapes(full(x)))

    jacobian = None
    if law.power_gradient is not None and law.anneal_gradient is not None and law.power_slope is not None:

        def jacobian(x: np.ndarray) -> np.ndarray:
            return problem.jacobian(*shapes(full(x)), *shapes.gradients(full(x), shift is not None))

    if start is not None:
        starts = [start if shift is not None else start[:-1]]
    else:
        starts = [np.array(s + ((0.0,) if shift is not None else ()), float) for s in law.starts]
    x, _, status = least_squares_from(starts, residuals, jacobian, lower, upper)
    return (None if x is None else full(x)), status


def _search_exponent_and_shift(
    law: Law, problem: Projection, shapes: _Shapes, start: np.ndarray | None, shift: tuple[float, float]
) -> tuple[np.ndarray | None, FitStatus]:
    """A one-exponent law with its shift free: least squares (exact Jacobian) from ``start``,
    or from the best point of the exponent grid times :data:`_SHIFT_GRID`."""
    assert law.grid is not None
    lower, upper = np.array([law.lower[0], shift[0]]), np.array([law.upper[0], shift[1]])
    evaluations = 0
    if start is None:
        shifts = np.unique([shift[0] * v for v in _SHIFT_GRID[:4]] + [shift[1] * v for v in _SHIFT_GRID[4:]])
        grid = np.array([(a, s) for s in shifts for a in law.grid])
        values = problem.costs(*shapes(grid))
        values[~np.isfinite(values)] = np.inf
        evaluations = len(grid)
        if not np.isfinite(values).any():
            return None, FitStatus(False, "no grid point gives a finite cost", evaluations)
        start = grid[int(np.argmin(values))]

    def residuals(x: np.ndarray) -> np.ndarray:
        return problem.residuals(*shapes(x))

    def jacobian(x: np.ndarray) -> np.ndarray:
        return problem.jacobian(*shapes(x), *shapes.gradients(x, True))

    x, _, status = least_squares_from([start], residuals, jacobian, lower, upper)
    return x, replace(status, evaluations=status.evaluations + evaluations)


def _search_exponent(
    law: Law, problem: Projection, shapes: _Shapes, start: np.ndarray | None
) -> tuple[np.ndarray | None, FitStatus]:
    """A one-parameter law, its shift held at 0: its grid (or a bracket around ``start``),
    then Brent in the best cell. Returns the exponent alone.

    Near a previous answer (a refit, a later reweighting round) a bracket around it; the
    law's grid when the best point lands on the bracket's edge, so a start changes the
    speed, not the answer.
    """
    assert law.grid is not None
    lower, upper = law.lower[0], law.upper[0]

    def profile(x: float) -> float:
        return problem.cost(*shapes(np.array([x, 0.0])))

    def search(grid: np.ndarray) -> tuple[float, float, FitStatus]:
        values = problem.costs(*shapes(np.c_[grid, np.zeros(len(grid))])) if law.anneal_fixed else None
        return minimize_on_grid(profile, grid, xtol=_XTOL, values=values)

    evaluations = 0
    if start is not None:
        lo, hi = max(start[0] / _BRACKET, lower), min(start[0] * _BRACKET, upper)
        x, cost, status = search(np.linspace(lo, hi, _BRACKET_POINTS))
        evaluations = status.evaluations
        edge = (x <= lo * 1.001 and lo > lower) or (x >= hi * 0.999 and hi < upper)
        if math.isfinite(cost) and not edge:
            return np.array([x]), status
    x, cost, status = search(law.grid)
    status = replace(status, evaluations=status.evaluations + evaluations)
    return (np.array([x]) if math.isfinite(cost) else None), status


class _Shapes:
    """A law's columns (and their derivatives) on a fit window's points at a fit's trial
    ``theta`` (the law's parameters, then the shift).

    The last evaluation is kept: ``least_squares`` asks for the Jacobian at the point whose
    residuals it has just computed, and the anneal column is the costly part of both.
    """

    def __init__(
        self, law: Law, obs: Observations, seen: DropCells, area_ref: float, effect: _PlannedEffect | None = None
    ) -> None:
        self.law = law
        self.effect = effect
        self.obs = obs
        self.seen = seen
        self.relative = obs.area / area_ref
        self.fixed = None
        if law.anneal_fixed:
            with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
                self.fixed = law.anneal(np.zeros(len(law.lower)), obs.clock, obs.area, seen)
        self.response = None if law.response is None or law.anneal_fixed else law.response(obs.clock, obs.area, seen)
        self._last: tuple[bytes, tuple[np.ndarray, np.ndarray]] | None = None

    def __call__(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(power, anneal)``; ``theta`` may be rows of trial values (a grid, one row each),
        for a law whose anneal column is fixed."""
        key = theta.tobytes() if theta.ndim == 1 else None
        if key is not None and self._last is not None and self._last[0] == key:
            return self._last[1]
        if theta.ndim == 1:
            shape, relative = theta[:-1], self.relative + theta[-1]
        else:
            shape, relative = theta[:, :-1], self.relative[None, :] + theta[:, -1:]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            power = self.law.power(shape, relative)
            if self.fixed is not None:
                anneal = self.fixed
            elif self.response is not None and theta.ndim == 1:
                anneal = self.response.value(shape)
            else:
                anneal = self.law.anneal(shape, self.obs.clock, self.obs.area, self.seen)
            if self.effect is not None:
                # a fixed response is the same for every row of a grid
                anneal = anneal / self.effect.value(shape if theta.ndim == 1 else shape[0])
        if key is not None:
            self._last = (key, (power, anneal))
        return power, anneal

    def gradients(self, theta: np.ndarray, shift: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(d power / d x, d anneal / d x)``, a column per searched parameter ``x``: the
        law's, then the shift's when it is searched (the anneal column does not move with it)."""
        assert self.law.power_gradient is not None and self.law.power_slope is not None
        shape, relative = theta[:-1], self.relative + theta[-1]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            d_power = self.law.power_gradient(shape, relative)
            if self.response is not None:
                d_anneal = self.response.gradient(shape)
            elif self.law.anneal_gradient is not None:
                d_anneal = self.law.anneal_gradient(shape, self.obs.clock, self.obs.area, self.seen)
            else:  # a fixed anneal column
                d_anneal = np.zeros((len(relative), len(shape)))
            if self.effect is not None:
                # d (a / k) = da / k - a dk / k^2, k the planned effect's share
                realised = self.effect.value(shape)
                raw = self(theta)[1] * realised
                d_anneal = d_anneal / realised - np.outer(raw, self.effect.gradient(shape)) / realised**2
            if shift:
                d_power = np.column_stack((d_power, self.law.power_slope(shape, relative)))
                d_anneal = np.column_stack((d_anneal, np.zeros(len(relative))))
        return d_power, d_anneal

    def law_coef(self, theta: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """The law's ``L0, A, G`` from the solved ones: the gain back from the planned effect
        it was solved as (see :class:`_PlannedEffect`) to the law's own."""
        if self.effect is None:
            return coef
        return np.array([coef[0], coef[1], coef[2] / self.effect.value(theta[:-1])])
