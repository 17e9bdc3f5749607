"""The linear part of a schedule-aware law: for fixed shape columns, the best ``L0``, ``A``, ``G``.

Variable projection solves the linear coefficients exactly for every trial shape, so the
nonlinear search runs over the shape alone. The problems are 3x3 at most, solved in closed
form from their normal equations in plain floats (numpy's per-call overhead would dominate,
and no iterative solver is needed for an exact answer), with the sign constraints
``L0, A, G >= 0`` met by trying each combination of active ones. :meth:`Projection.jacobian`
gives the derivative of the projected residuals for SciPy's ``least_squares``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Projection", "normal_equations", "solve_many"]


# Which of (L0, A, G) are free, the rest held at 0: the free problem first, then every
# combination of active sign constraints.
_SUBSETS = ((0, 1, 2), (1, 2), (0, 2), (0, 1), (2,), (1,), (0,))
_NO_GAIN = ((0, 1), (1,), (0,))


def _solve_small(g: list[list[float]], rhs: list[float], free: tuple[int, ...]) -> list[float] | None:
    """Solve the normal equations restricted to ``free`` (others 0) by Cramer's rule.

    None when the restricted system is singular: a column without information (no lr
    drop seen and no prior, say) is then left out by a smaller subset.
    """
    coef = [0.0, 0.0, 0.0]
    if len(free) == 1:
        (i,) = free
        if g[i][i] <= 1e-300:
            return None
        coef[i] = rhs[i] / g[i][i]
        return coef
    if len(free) == 2:
        i, j = free
        det = g[i][i] * g[j][j] - g[i][j] * g[j][i]
        if abs(det) <= 1e-12 * abs(g[i][i] * g[j][j]) or det == 0:
            return None
        coef[i] = (rhs[i] * g[j][j] - g[i][j] * rhs[j]) / det
        coef[j] = (g[i][i] * rhs[j] - g[j][i] * rhs[i]) / det
        return coef
    a = g
    det = (
        a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
        - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
        + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
    )
    scale = abs(a[0][0] * a[1][1] * a[2][2])
    if det == 0 or abs(det) <= 1e-12 * scale:
        return None
    for k in range(3):
        m = [row[:] for row in a]
        for r in range(3):
            m[r][k] = rhs[r]
        coef[k] = (
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        ) / det
    return coef


def normal_equations(
    sum_w: float | np.ndarray,
    sum_wp: float | np.ndarray,
    pp: float | np.ndarray,
    py: float | np.ndarray,
    pa: float | np.ndarray,
    sum_wa: float | np.ndarray,
    aa: float | np.ndarray,
    ay: float | np.ndarray,
    sum_wy: float | np.ndarray,
    *,
    extra: float = 0.0,
    mean: np.ndarray | float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """``(g, rhs)`` of weighted least squares for ``L0 + A * p - G * a``, for many problems.

    The arguments are weighted sums (``pp`` is sum w p p, ``py`` sum w p y, ...), each a
    number or an array; they broadcast to the problems' shape. A prior pseudo-observation
    ``sqrt(extra) * (G - mean)`` adds ``extra`` to ``g[2, 2]`` and ``extra * mean`` to ``rhs[2]``.
    """
    shape = np.broadcast_shapes(*(np.shape(v) for v in (sum_w, sum_wp, pp, py, pa, sum_wa, aa, ay, sum_wy, mean)))
    g = np.empty(shape + (3, 3))
    g[..., 0, 0] = sum_w
    g[..., 0, 1] = g[..., 1, 0] = sum_wp
    g[..., 1, 1] = pp
    g[..., 0, 2] = g[..., 2, 0] = -sum_wa
    g[..., 1, 2] = g[..., 2, 1] = -pa
    g[..., 2, 2] = aa + extra
    rhs = np.empty(shape + (3,))
    rhs[..., 0] = sum_wy
    rhs[..., 1] = py
    rhs[..., 2] = extra * np.asarray(mean) - ay
    return g, rhs


def solve_many(g: np.ndarray, rhs: np.ndarray, yy: float | np.ndarray, use_gain: bool) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`Projection.cost` and its coefficients for many problems at once.

    ``g`` (``(..., 3, 3)``) and ``rhs`` (``(..., 3)``) are the normal equations, ``yy`` the
    weighted sum of squares of each problem's loss. Every combination of active sign
    constraints is solved for all problems together; each keeps its cheapest feasible one,
    as :meth:`Projection.cost` does. Returns ``(coef, cost)``, the cost inf where no
    combination is feasible and regular.
    """
    shape = np.broadcast_shapes(g.shape[:-2], rhs.shape[:-1], np.shape(yy))
    g, rhs = np.broadcast_to(g, shape + (3, 3)), np.broadcast_to(rhs, shape + (3,))
    best, best_cost = np.zeros(shape + (3,)), np.full(shape, np.inf)
    finite = np.isfinite(g).all(axis=(-2, -1)) & np.isfinite(rhs).all(axis=-1)
    subsets = _SUBSETS if use_gain else _NO_GAIN
    for free in subsets:
        idx = list(free)
        sub, right = g[..., idx, :][..., idx], rhs[..., idx]
        if len(idx) == 1:
            regular = sub[..., 0, 0] > 1e-300
        else:
            det = np.linalg.det(np.where(finite[..., None, None], sub, np.eye(len(idx))))
            scale = np.abs(np.prod(np.diagonal(sub, axis1=-2, axis2=-1), axis=-1))
            regular = (det != 0) & (np.abs(det) > 1e-12 * scale)
        regular &= finite
        safe = np.where(regular[..., None, None], sub, np.eye(len(idx)))
        solved = np.linalg.solve(safe, np.where(regular[..., None], right, 0.0)[..., None])[..., 0]
        coef = np.zeros(shape + (3,))
        coef[..., idx] = solved
        # cost = y'Wy - 2 c'r + c'Gc, from the normal equations
        with np.errstate(over="ignore", invalid="ignore"):
            cost = yy - 2 * np.einsum("...i,...i->...", coef, rhs) + np.einsum("...i,...ij,...j->...", coef, g, coef)
        better = regular & (solved.min(axis=-1) >= 0) & (cost < best_cost)
        best = np.where(better[..., None], coef, best)
        best_cost = np.where(better, cost, best_cost)
        if free is subsets[0] and better.all():
            break  # every free optimum is feasible, hence the constrained one (a convex problem)
    return best, np.maximum(best_cost, 0.0)


class Projection:
    """For fixed columns, the best ``L0 >= 0``, ``A >= 0``, ``G >= 0`` by weighted least squares.

    With a prior, one pseudo-observation ``strength * (G - mean) = 0`` joins the rows. The
    sign constraints (a loss and its parts are not negative; without them a short window
    trades a tiny exponent against a negative asymptote) are met by trying the free
    problem, then each combination of active constraints: a few 3x3 (or smaller) solves.
    """

    def __init__(self, y: np.ndarray, weight: np.ndarray, prior_mean: float | None, strength: float) -> None:
        self.y = y
        self.w = weight
        self.prior = None if prior_mean is None or strength <= 0 else (prior_mean, strength)
        self.sw = np.sqrt(weight)
        self.wy = weight * y
        self.sum_w = float(weight.sum())
        self.sum_wy = float(self.wy.sum())
        self.yy = float(self.wy @ y) + (0.0 if self.prior is None else (self.prior[1] * self.prior[0]) ** 2)
        self._anneal: tuple[np.ndarray, tuple[float, float, float, bool]] | None = None
        # The last columns solved and their answer: the solver asks for the Jacobian at the
        # point whose residuals it has just computed (the same column arrays).
        self._last: tuple[np.ndarray, np.ndarray, tuple[list[float] | None, float, tuple[int, ...]]] | None = None

    def _anneal_terms(self, anneal: np.ndarray) -> tuple[float, float, float, bool]:
        """Sums that involve only the anneal column: computed once when it does not change."""
        if self._anneal is not None and self._anneal[0] is anneal:
            return self._anneal[1]
        wa = self.w * anneal
        terms = (float(wa.sum()), float(wa @ anneal), float(wa @ self.y), bool(anneal.any()))
        self._anneal = (anneal, terms)
        return terms

    def _best(self, power: np.ndarray, anneal: np.ndarray) -> tuple[list[float] | None, float, tuple[int, ...]]:
        """The best coefficients, their cost and which of them are free (the rest held at 0)."""
        last = self._last
        if last is not None and last[0] is power and last[1] is anneal:
            return last[2]
        found = self._solve_best(power, anneal)
        self._last = (power, anneal, found)
        return found

    def _solve_best(self, power: np.ndarray, anneal: np.ndarray) -> tuple[list[float] | None, float, tuple[int, ...]]:
        wp = self.w * power
        sum_wp = float(wp.sum())
        if not math.isfinite(sum_wp):
            return None, math.inf, ()
        sum_wa, aa, ay, any_anneal = self._anneal_terms(anneal)
        pa = float(wp @ anneal)
        g = [
            [self.sum_w, sum_wp, -sum_wa],
            [sum_wp, float(wp @ power), -pa],
            [-sum_wa, -pa, aa],
        ]
        rhs = [self.sum_wy, float(wp @ self.y), -ay]
        if self.prior is not None:
            mean, strength = self.prior
            g[2][2] += strength**2
            rhs[2] += strength**2 * mean
        best, best_cost = None, math.inf
        best_free: tuple[int, ...] = ()
        # Without a drop to see and without a prior, G is not in the problem at all.
        subsets = _SUBSETS if self.prior is not None or any_anneal else _NO_GAIN
        for free in subsets:
            coef = _solve_small(g, rhs, free)
            if coef is None or min(coef) < 0:
                continue
            # cost = y'Wy - 2 c'r + c'Gc, from the normal equations
            cost = self.yy - 2 * (coef[0] * rhs[0] + coef[1] * rhs[1] + coef[2] * rhs[2])
            for i in range(3):
                for j in range(3):
                    cost += coef[i] * g[i][j] * coef[j]
            if cost < best_cost:
                best, best_cost, best_free = coef, cost, free
            if free is subsets[0]:
                break
        return best, best_cost, best_free

    def costs(self, powers: np.ndarray, anneal: np.ndarray) -> np.ndarray:
        """:meth:`cost` for each row of ``powers`` (one anneal column): a grid at once."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            wp = powers * self.w
            sum_wp, pp, py, pa = wp.sum(axis=1), np.einsum("kn,kn->k", wp, powers), wp @ self.y, wp @ anneal
        sum_wa, aa, ay, any_anneal = self._anneal_terms(anneal)
        mean, strength = self.prior if self.prior is not None else (0.0, 0.0)
        g, rhs = normal_equations(self.sum_w, sum_wp, pp, py, pa, sum_wa, aa, ay, self.sum_wy, extra=strength**2, mean=mean)
        return solve_many(g, rhs, self.yy, self.prior is not None or any_anneal)[1]

    def solve(self, power: np.ndarray, anneal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(coef, fitted)``; NaN when the columns are not finite."""
        best, _, _ = self._best(power, anneal)
        if best is None or not np.isfinite(anneal).all():
            return np.full(3, np.nan), np.full(len(self.y), np.nan)
        return np.array(best), best[0] + best[1] * power - best[2] * anneal

    def residuals(self, power: np.ndarray, anneal: np.ndarray) -> np.ndarray:
        """The weighted residuals at the best coefficients, and the prior's pseudo-residual
        (0 without a prior); inf when the columns are not finite."""
        coef, fitted = self.solve(power, anneal)
        if not np.isfinite(coef).all():
            return np.full(len(self.y) + 1, np.inf)
        extra = 0.0 if self.prior is None else self.prior[1] * (self.prior[0] - coef[2])
        return np.append(self.sw * (self.y - fitted), extra)

    def jacobian(self, power: np.ndarray, anneal: np.ndarray, d_power: np.ndarray, d_anneal: np.ndarray) -> np.ndarray:
        """``d residuals / d theta`` (rows as :meth:`residuals`), given the columns' derivatives.

        ``d_power`` and ``d_anneal`` hold ``d column / d theta_k`` in column ``k``. The
        residuals are ``r = d - B c`` with ``c`` the best coefficients for the design ``B``
        (the free columns, weighted, and the prior's row), so by Golub and Pereyra (1973)
        ``dr/dtheta_k = -(P (dB_k c) + B (B'B)^-1 dB_k' r)``, ``P`` the projection onto the
        complement of ``B``'s columns. Exact wherever the active sign constraints stay put.
        """
        best, _, free = self._best(power, anneal)
        n, k = len(self.y), d_power.shape[1]
        if best is None or not free:
            return np.zeros((n + 1, k))
        c = best
        columns = (np.ones(n), power, -anneal)
        derivatives = (None, d_power, -d_anneal)
        design = np.zeros((n + 1, len(free)))
        d_design_r = np.zeros((len(free), k))
        residual = self.sw * (self.y - (c[0] + c[1] * power - c[2] * anneal))
        for j, index in enumerate(free):
            design[:n, j] = self.sw * columns[index]
            if derivatives[index] is not None:
                d_design_r[j] = (self.sw * residual) @ derivatives[index]
        if self.prior is not None and 2 in free:
            design[n, free.index(2)] = self.prior[1]
        d_design_c = np.zeros((n + 1, k))
        d_design_c[:n] = self.sw[:, None] * (c[1] * d_power - c[2] * d_anneal)
        gram = design.T @ design
        try:
            projected = d_design_c - design @ np.linalg.solve(gram, design.T @ d_design_c)
            second = design @ np.linalg.solve(gram, d_design_r)
        except np.linalg.LinAlgError:
            return np.zeros((n + 1, k))
        jacobian = -(projected + second)
        return np.where(np.isfinite(jacobian), jacobian, 0.0)

    def cost(self, power: np.ndarray, anneal: np.ndarray) -> float:
        """The weighted sum of squares (prior included) at the best linear parameters."""
        best, cost, _ = self._best(power, anneal)
        return max(cost, 0.0) if best is not None else math.inf
