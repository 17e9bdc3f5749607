"""Many refits of one fit at once: the replicates of a bootstrap.

A replicate is the fitted law refitted to resampled loss values at the same points, with
the same robust weights and prior strength (:meth:`LawFit.refit`). For a law with one
exponent and a fixed anneal column (the lr-annealing law), every replicate's normal
equations at an exponent share their matrix, so a grid of exponents is searched for all
replicates in a few batched solves, and a parabola through each replicate's best three
points of a finer grid gives its exponent. Other laws, and any replicate the batch cannot
settle, are refitted one by one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tracker_plugin.core.models.base import FitFailure
from tracker_plugin.core.models.projection import normal_equations, solve_many
from tracker_plugin.core.models.schedule_law import LawFit, robust_sigma

__all__ = ["refit_many"]

# Exponents tried at once: across the bracket a refit searches (the fit's exponent / 1.5
# to * 1.5), then within each replicate's best cell of it.
_COARSE_POINTS = 25
_FINE_POINTS = 9


def refit_many(fit: LawFit, losses: np.ndarray, prior_means: list[float | None]) -> list[LawFit | FitFailure]:
    """``[fit.refit(loss, mean) for loss, mean in zip(losses, prior_means)]``, batched.

    ``losses`` holds one row of binned loss values per replicate (see
    :attr:`LawFit.observations`). The exponents agree with one-by-one refits to about
    1e-5 of their value, far inside a bootstrap's spread.
    """
    if not len(losses):
        return []
    law = fit.law
    if len(law.theta_names) != 1 or not law.anneal_fixed:
        return [fit.refit(loss, mean) for loss, mean in zip(losses, prior_means)]
    means = np.array([fit.prior_mean if m is None else m for m in prior_means], dtype=float)
    problem = _Batch(fit, np.asarray(losses, float), means)
    lo = max(fit.theta[0] / 1.5, law.lower[0])
    hi = min(fit.theta[0] * 1.5, law.upper[0])
    grid = np.linspace(lo, hi, _COARSE_POINTS)
    _, costs = problem.solve(grid[:, None])  # (exponent, replicate)
    best = np.argmin(costs, axis=0)
    # A best point on the bracket's edge (inside the law's bounds) wants the wider search
    # of a one-by-one refit, as does a replicate without any finite cost.
    edge = ((best == 0) & (lo > law.lower[0])) | ((best == len(grid) - 1) & (hi < law.upper[0]))
    alone = edge | ~np.isfinite(costs.min(axis=0))
    cells = np.linspace(grid[np.maximum(best - 1, 0)], grid[np.minimum(best + 1, len(grid) - 1)], _FINE_POINTS).T
    _, fine_costs = problem.solve(cells, per_replicate=True)  # (replicate, exponent)
    exponent = _parabola_minimum(cells, fine_costs)
    coef, cost = problem.solve(exponent[:, None], per_replicate=True)
    # The parabola's vertex stands only where it beats the best grid point.
    worse = ~(cost[:, 0] <= fine_costs.min(axis=1))
    if worse.any():
        k = np.argmin(fine_costs[worse], axis=1)
        exponent[worse] = cells[worse, k]
        coef[worse], cost[worse] = problem.solve(exponent[worse, None], per_replicate=True, rows=worse)
    out: list[LawFit | FitFailure] = []
    for r, (loss, mean) in enumerate(zip(losses, prior_means)):
        if alone[r] or not np.isfinite(cost[r, 0]):
            out.append(fit.refit(loss, mean))
        else:
            out.append(problem.law_fit(r, float(exponent[r]), coef[r, 0], None if mean is None else float(mean)))
    return out


def _parabola_minimum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row, the vertex of the parabola through the lowest point and its neighbours."""
    rows = np.arange(len(x))
    k = np.clip(np.argmin(y, axis=1), 1, x.shape[1] - 2)
    x0, x1, x2 = x[rows, k - 1], x[rows, k], x[rows, k + 1]
    y0, y1, y2 = y[rows, k - 1], y[rows, k], y[rows, k + 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        num = (x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)
        den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
        vertex = x1 - 0.5 * num / den
    ok = np.isfinite(vertex) & (den != 0)
    return np.where(ok, np.clip(vertex, x0, x2), x[rows, np.argmin(y, axis=1)])


class _Batch:
    """The weighted least-squares problems of every replicate, for exponents given per cell."""

    def __init__(self, fit: LawFit, losses: np.ndarray, means: np.ndarray) -> None:
        self.fit = fit
        obs = fit.observations
        self.losses = losses
        self.means = means
        self.w = fit.weight if fit.weight is not None else obs.weight
        self.relative = obs.area / fit.area_ref
        seen = fit.cells.before(float(obs.clock[-1]))
        law = fit.law
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            self.anneal = law.anneal(np.zeros(len(law.lower)), obs.clock, obs.area, seen)
        prior = fit.strength > 0 and np.isfinite(means).all()
        self.extra = fit.strength**2 if prior else 0.0
        self.use_gain = prior or bool(self.anneal.any())
        wa = self.w * self.anneal
        self.sum_w, self.sum_wa, self.aa = float(self.w.sum()), float(wa.sum()), float(wa @ self.anneal)
        self.sum_wy = losses @ self.w
        self.ay = losses @ wa
        self.yy = np.einsum("rn,rn,n->r", losses, losses, self.w) + (self.extra * means**2 if prior else 0.0)
        self.prior_means = means if prior else np.zeros(len(losses))

    def solve(
        self, exponents: np.ndarray, *, per_replicate: bool = False, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(coef, cost)`` at ``exponents``: one column shared by every replicate (shape
        ``(k, 1)``; results per exponent and replicate), or with ``per_replicate`` a row per
        replicate (``(replicates, k)``; results alike). ``rows`` picks the replicates."""
        pick = slice(None) if rows is None else rows
        losses = self.losses[pick]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            if per_replicate:
                power = self.fit.law.power(exponents[..., None], self.relative)  # (replicate, k, n)
                wp = power * self.w
                py = np.einsum("rkn,rn->rk", wp, losses)
            else:
                power = self.fit.law.power(exponents, self.relative)  # (k, n)
                wp = power * self.w
                py = wp @ losses.T  # (k, replicate)
            sum_wp, pp, pa = wp.sum(-1), np.einsum("...n,...n->...", wp, power), wp @ self.anneal
        if per_replicate:
            def along(v: np.ndarray) -> np.ndarray:  # a value per replicate, against (replicate, k)
                return v[pick][:, None]
        else:
            sum_wp, pp, pa = sum_wp[:, None], pp[:, None], pa[:, None]

            def along(v: np.ndarray) -> np.ndarray:  # against (k, replicate)
                return v[pick][None, :]
        g, rhs = normal_equations(
            self.sum_w, sum_wp, pp, py, pa, self.sum_wa, self.aa, along(self.ay), along(self.sum_wy),
            extra=self.extra, mean=along(self.prior_means),
        )
        return solve_many(g, rhs, along(self.yy), self.use_gain)

    def law_fit(self, r: int, exponent: float, coef: np.ndarray, mean: float | None) -> LawFit:
        """Replicate ``r`` as a :class:`LawFit`, as :meth:`LawFit.refit` would build it."""
        fit = self.fit
        obs = fit.observations
        loss = self.losses[r]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            power = fit.law.power(np.array([exponent]), self.relative)
        fitted = coef[0] + coef[1] * power - coef[2] * self.anneal
        residuals = loss - fitted
        return replace(
            fit, theta=np.array([exponent]), coef=np.array(coef, float), sigma=robust_sigma(residuals, obs.weight), residuals=residuals,
            fitted=fitted, observations=replace(obs, loss=loss),
            prior_mean=mean if mean is not None else fit.prior_mean, _cache={},
        )
