"""Small numerical routines the fits share, in NumPy only.

SciPy's optimizers would do, but importing ``scipy.optimize`` costs about half a second,
which is most of a one-shot analysis; the fits here need only a bounded scalar minimizer
and a small bounded least-squares solver.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["brent_bounded", "grid_then_brent", "levenberg_marquardt"]

_GOLDEN = 0.5 * (3.0 - math.sqrt(5.0))


def brent_bounded(
    f: Callable[[float], float], lo: float, hi: float, *, xtol: float = 1e-10, maxiter: int = 200
) -> tuple[float, float]:
    """Minimise ``f`` on ``[lo, hi]`` by Brent's method (golden section with parabolic steps).

    Returns ``(x, f(x))``. The same algorithm as ``scipy.optimize.fminbound``.
    """
    a, b = lo, hi
    x = w = v = a + _GOLDEN * (b - a)
    fx = fw = fv = f(x)
    d = e = 0.0
    for _ in range(maxiter):
        mid = 0.5 * (a + b)
        tol1 = 1.5e-8 * abs(x) + xtol / 3.0
        tol2 = 2.0 * tol1
        if abs(x - mid) <= tol2 - 0.5 * (b - a):
            break
        golden = True
        if abs(e) > tol1:
            r = (x - w) * (fx - fv)
            q = (x - v) * (fx - fw)
            p = (x - v) * q - (x - w) * r
            q = 2.0 * (q - r)
            if q > 0.0:
                p = -p
            q = abs(q)
            if abs(p) < abs(0.5 * q * e) and q * (a - x) < p < q * (b - x):
                e, d = d, p / q
                u = x + d
                if (u - a) < tol2 or (b - u) < tol2:
                    d = math.copysign(tol1, mid - x)
                golden = False
        if golden:
            e = (b - x) if x < mid else (a - x)
            d = _GOLDEN * e
        u = x + (d if abs(d) >= tol1 else math.copysign(tol1, d))
        fu = f(u)
        if fu <= fx:
            if u < x:
                b = x
            else:
                a = x
            v, w, x = w, x, u
            fv, fw, fx = fw, fx, fu
        else:
            if u < x:
                a = u
            else:
                b = u
            if fu <= fw or w == x:
                v, w, fv, fw = w, u, fw, fu
            elif fu <= fv or v == x or v == w:
                v, fv = u, fu
    return x, fx


def grid_then_brent(
    f: Callable[[float], float], grid: np.ndarray, *, xtol: float = 1e-10, values: np.ndarray | None = None
) -> tuple[float, float]:
    """Minimise ``f`` over the span of ``grid``: best grid point, then Brent in its bracket.

    The grid guards against settling in a poor local minimum; Brent refines the best cell.
    ``values`` are ``f`` on the grid when the caller computed them at once.
    """
    values = np.array([f(float(g)) for g in grid]) if values is None else np.array(values, float)
    values[~np.isfinite(values)] = np.inf
    k = int(np.argmin(values))
    lo = float(grid[max(k - 1, 0)])
    hi = float(grid[min(k + 1, len(grid) - 1)])
    x, fx = brent_bounded(f, lo, hi, xtol=xtol)
    if fx > values[k]:
        return float(grid[k]), float(values[k])
    return x, fx


def levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    max_iter: int = 60,
    rtol: float = 1e-9,
) -> tuple[np.ndarray, float]:
    """Minimise ``|residuals(x)|^2`` over the box ``[lo, hi]``; returns ``(x, cost)``.

    Levenberg-Marquardt with a forward-difference Jacobian; a trial point outside the box is
    projected onto it. Few parameters (here at most four) keep each step cheap. A residual
    vector that is not finite counts as an infinite cost, so the search backs off from it.
    """
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    x = np.clip(np.asarray(x0, float), lo, hi)

    def cost_of(r: np.ndarray) -> float:
        value = float(r @ r)
        return value if np.isfinite(value) else math.inf

    r = residuals(x)
    cost = cost_of(r)
    if not math.isfinite(cost):
        return x, math.inf
    damping = 1e-3
    for _ in range(max_iter):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            h = 1e-6 * max(1.0, abs(x[j]))
            if x[j] + h > hi[j]:
                h = -h
            step = x.copy()
            step[j] += h
            jac[:, j] = (residuals(step) - r) / h
        if not np.isfinite(jac).all():
            break
        gradient = jac.T @ r
        normal = jac.T @ jac
        improved = False
        for _ in range(12):
            lhs = normal + damping * np.diag(np.maximum(np.diag(normal), 1e-12))
            try:
                delta = np.linalg.solve(lhs, -gradient)
            except np.linalg.LinAlgError:
                damping *= 10.0
                continue
            trial = np.clip(x + delta, lo, hi)
            r_trial = residuals(trial)
            cost_trial = cost_of(r_trial)
            if cost_trial < cost:
                improved = True
                converged = cost - cost_trial <= rtol * cost
                x, r, cost = trial, r_trial, cost_trial
                damping = max(damping / 3.0, 1e-9)
                break
            damping *= 4.0
        if not improved or converged:
            break
    return x, cost
