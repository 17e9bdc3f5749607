"""Loss-curve models: fit one to a stretch of a run, then solve it for a target loss.

A fit either succeeds, giving an object with ``predict`` and ``solve``, or returns a
:class:`FitFailure` that says why; fitting never raises on bad data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .optimize import grid_then_brent

__all__ = ["FitFailure", "PowerLaw", "TOKEN_UNIT", "fit_power_law"]

TOKEN_UNIT = 1e9
"""The power law's token axis is in units of 1e9 tokens, which keeps ``A`` near O(1)."""

_ALPHA_BOUNDS = (1e-3, 10.0)
_A_MIN = 1e-6
_ALPHA_GRID = np.geomspace(*_ALPHA_BOUNDS, 25)


@dataclass(frozen=True)
class FitFailure:
    """A fit that could not be made, and why."""

    model: str
    reason: str


@dataclass(frozen=True)
class PowerLaw:
    """``L(T) = L0 + A * (T / 1e9) ** -alpha`` on the token axis."""

    l0: float
    a: float
    alpha: float
    name: str = "power-law"

    @property
    def asymptote(self) -> float:
        return self.l0

    @property
    def params(self) -> dict[str, float]:
        return {"L0": self.l0, "A": self.a, "alpha": self.alpha, "token_unit": TOKEN_UNIT}

    def predict(self, tokens: np.ndarray) -> np.ndarray:
        return self.l0 + self.a * np.power(np.asarray(tokens, float) / TOKEN_UNIT, -self.alpha)

    def solve(self, target: float) -> float | None:
        """Tokens at which the law reaches ``target``; None when it never does."""
        if target <= self.l0:
            return None
        return (self.a / (target - self.l0)) ** (1.0 / self.alpha) * TOKEN_UNIT


def fit_power_law(tokens: np.ndarray, loss: np.ndarray) -> PowerLaw | FitFailure:
    """Least-squares fit of :class:`PowerLaw` to ``loss`` over ``tokens``.

    Bounds as in the original script: ``0 <= L0 <= min(loss)``, ``A >= 1e-6``,
    ``1e-3 <= alpha <= 10``. For a given ``alpha`` the best ``L0`` and ``A`` follow in
    closed form (variable projection), so only ``alpha`` is searched: on a grid first,
    then by Brent's method, which makes the answer independent of any starting guess.
    Rows at zero tokens are left out: the law is infinite there.
    """
    x = np.asarray(tokens, float) / TOKEN_UNIT
    y = np.asarray(loss, float)
    usable = (x > 0) & np.isfinite(x) & np.isfinite(y)
    x, y = x[usable], y[usable]
    if len(x) < 3:
        return FitFailure("power-law", f"needs at least 3 points with tokens > 0, has {len(x)}")
    if x[-1] <= x[0]:
        return FitFailure("power-law", "the fit window spans no tokens")
    log_x = np.log(x)
    y_min = float(y.min())

    def profile(alpha: float) -> float:
        return _best_linear(np.exp(-alpha * log_x), y, y_min)[2]

    alpha, sse = grid_then_brent(profile, _ALPHA_GRID)
    if not np.isfinite(sse):
        return FitFailure("power-law", "the least-squares problem has no finite solution")
    l0, a, _ = _best_linear(np.exp(-alpha * log_x), y, y_min)
    return PowerLaw(l0=float(l0), a=float(a), alpha=float(alpha))


def _best_linear(z: np.ndarray, y: np.ndarray, l0_max: float) -> tuple[float, float, float]:
    """Minimise ``|y - l0 - a z|^2`` over ``0 <= l0 <= l0_max``, ``a >= 1e-6``.

    Returns ``(l0, a, sse)``. A convex problem in two variables: the unconstrained optimum
    if it is feasible, otherwise the best of the optima along the box's edges.
    """
    zc = z - z.mean()
    szz = zc @ zc
    if szz > 0:
        a = (zc @ y) / szz
        l0 = y.mean() - a * z.mean()
        if 0.0 <= l0 <= l0_max and a >= _A_MIN:
            r = y - l0 - a * z
            return l0, a, r @ r
    zz = z @ z
    best = (np.nan, np.nan, np.inf)
    candidates = [(c, max(_A_MIN, (z @ (y - c)) / zz)) for c in (0.0, l0_max)]
    candidates.append((min(max((y - _A_MIN * z).mean(), 0.0), l0_max), _A_MIN))
    for l0, a in candidates:
        r = y - l0 - a * z
        sse = r @ r
        if sse < best[2]:
            best = (float(l0), float(a), float(sse))
    return best
