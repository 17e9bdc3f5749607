"""How the nonlinear parameters of a law are searched: SciPy's solvers, one per job.

- One parameter (the lr-annealing law's exponent): the cost on a grid, then
  ``minimize_scalar(method="bounded")`` (Brent's method) in the best grid point's cell. The
  grid keeps the search out of a poor local minimum; Brent refines the cell.
- Several parameters (the multi-power law): ``least_squares(method="trf")`` under the
  law's bounds from each start, the lowest cost kept.

``scipy.optimize`` is imported inside these functions: it takes a fifth of a second, which
an analysis whose targets are all reached (or ``--help``) should not pay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tracker_plugin.core.models.base import FitStatus

__all__ = ["least_squares_from", "minimize_on_grid"]

# least_squares' tolerances (ftol, xtol, gtol). SciPy's default, 1e-8, stops the
# multi-power law part-way along the flat valley of its log C: on olmo-ladder-370M-5xC at
# -7.7153 where the minimum is -7.7142, the stopping point depending on the start and the
# rounding. At 1e-10 every start reaches the same point, for about a third more evaluations.
_TOLERANCE = 1e-10
# The parameters differ in scale and in how well the data pin them (log C spans 16 units,
# beta is often barely identified): scaling each by its Jacobian column's norm lets the
# trust region follow a flat valley in fewer steps (on a run with little decay, a third of
# the evaluations, and half as many searches ending on the evaluation budget).
_X_SCALE = "jac"


def minimize_on_grid(
    f: Callable[[float], float], grid: np.ndarray, *, xtol: float, values: np.ndarray | None = None
) -> tuple[float, float, FitStatus]:
    """Minimise ``f`` over the span of ``grid``: its best grid point, then Brent in that point's cell.

    ``values`` are ``f`` on the grid when the caller computed them at once. Returns
    ``(x, f(x), status)``; ``f(x)`` is inf when no grid point has a finite value. The
    refined point is kept only where it beats the best grid point.
    """
    values = np.array([f(float(g)) for g in grid]) if values is None else np.array(values, float)
    values[~np.isfinite(values)] = np.inf
    k = int(np.argmin(values))
    if not math.isfinite(values[k]):
        return math.nan, math.inf, FitStatus(False, "no grid point gives a finite cost", len(grid))
    from scipy.optimize import minimize_scalar

    def finite(x: float) -> float:
        value = f(x)
        return value if math.isfinite(value) else math.inf

    lo, hi = float(grid[max(k - 1, 0)]), float(grid[min(k + 1, len(grid) - 1)])
    found = minimize_scalar(finite, bounds=(lo, hi), method="bounded", options={"xatol": xtol})
    status = FitStatus(bool(found.success), f"minimize_scalar (bounded): {found.message}", len(grid) + int(found.nfev))
    if found.fun <= values[k]:
        return float(found.x), float(found.fun), status
    return float(grid[k]), float(values[k]), status


def least_squares_from(
    starts: Sequence[np.ndarray],
    residuals: Callable[[np.ndarray], np.ndarray],
    jacobian: Callable[[np.ndarray], np.ndarray] | None,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    max_evaluations: int | None = None,
) -> tuple[np.ndarray | None, float, FitStatus]:
    """Minimise ``|residuals(x)|^2`` within ``[lower, upper]`` from each start; keep the lowest.

    ``least_squares`` with the trust-region reflective method, which respects the bounds
    (a reflected step, not a clipped one) and stops on SciPy's tolerances rather than on
    the first step that gains little, so the answer along a flat valley does not hang on
    the start or on the floating-point rounding of a BLAS. ``jacobian`` (None: finite
    differences) gives ``d residuals / d x``. A start whose residuals are not finite is
    skipped. Returns ``(x, cost, status)``; x None when no start could be used.
    """
    from scipy.optimize import least_squares

    best, best_cost, best_result = None, math.inf, None
    evaluations = 0
    for x0 in starts:
        x0 = np.clip(np.asarray(x0, float), lower, upper)
        try:
            result = least_squares(
                residuals, x0, jac=jacobian if jacobian is not None else "2-point", bounds=(lower, upper),
                method="trf", x_scale=_X_SCALE, ftol=_TOLERANCE, xtol=_TOLERANCE, gtol=_TOLERANCE,
                max_nfev=max_evaluations,
            )
        except ValueError:  # residuals not finite at the start
            continue
        evaluations += int(result.nfev) + int(result.njev or 0)
        cost = 2.0 * float(result.cost)
        if math.isfinite(cost) and cost < best_cost:
            best, best_cost, best_result = result.x, cost, result
    if best_result is None:
        return None, math.inf, FitStatus(False, "no start gives finite residuals", evaluations)
    starts_text = f" (best of {len(starts)} starts)" if len(starts) > 1 else ""
    status = FitStatus(best_result.status > 0, f"least_squares (trf){starts_text}: {best_result.message}", evaluations)
    return np.asarray(best, float), best_cost, status
