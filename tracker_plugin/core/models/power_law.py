"""The power law on tokens of the original script: ``L(T) = L0 + A * (T / 1e9) ** -alpha``.

Fitted to the smoothed loss, exactly as ``find_target_loss.py`` does (``--model power-law``);
its results are pinned by the parity tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracker_plugin.core.models.base import FitFailure
from tracker_plugin.core.optimize import brent_bounded, grid_then_brent

__all__ = ["PowerLaw", "TOKEN_UNIT", "fit_power_law"]

TOKEN_UNIT = 1e9
"""The power law's token axis is in units of 1e9 tokens, which keeps ``A`` near O(1)."""

_ALPHA_BOUNDS = (1e-3, 10.0)
_A_MIN = 1e-6
_ALPHA_GRID = np.geomspace(*_ALPHA_BOUNDS, 25)
_HINT_SPAN = 1.5
_LOG_MAX = math.log(1e300)
_XTOL = 1e-10


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
        """Tokens at which the law reaches ``target``; None when it never does.

        ``inf`` when it does so only beyond the floating-point range (a tiny exponent).
        """
        if target <= self.l0:
            return None
        log_tokens = (math.log(self.a) - math.log(target - self.l0)) / self.alpha + math.log(TOKEN_UNIT)
        return math.exp(log_tokens) if log_tokens < _LOG_MAX else math.inf


def fit_power_law(tokens: np.ndarray, loss: np.ndarray, *, alpha_hint: float | None = None) -> PowerLaw | FitFailure:
    """Least-squares fit of :class:`PowerLaw` to ``loss`` over ``tokens``.

    Bounds as in the original script: ``0 <= L0 <= min(loss)``, ``A >= 1e-6``,
    ``1e-3 <= alpha <= 10``. For a given ``alpha`` the best ``L0`` and ``A`` follow in
    closed form (variable projection), so only ``alpha`` is searched: on a grid first,
    then by Brent's method, which makes the answer independent of any starting guess.
    Rows at zero tokens are left out: the law is infinite there.

    ``alpha_hint`` (the exponent of a fit to an overlapping window, as in a sweep) narrows
    the search to a bracket around it; when the best exponent lands on the bracket's edge
    the full search runs instead, so the hint changes the speed, not the answer.
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
    problem = _LinearPart(y)

    def profile(alpha: float) -> float:
        return problem.solve(np.exp(-alpha * log_x))[2]

    alpha, sse = np.nan, np.inf
    if alpha_hint is not None and np.isfinite(alpha_hint):
        lo, hi = max(alpha_hint / _HINT_SPAN, _ALPHA_BOUNDS[0]), min(alpha_hint * _HINT_SPAN, _ALPHA_BOUNDS[1])
        alpha, sse = brent_bounded(profile, lo, hi, xtol=_XTOL)
        edge = 1e-3 * (hi - lo)
        if (alpha - lo < edge and lo > _ALPHA_BOUNDS[0]) or (hi - alpha < edge and hi < _ALPHA_BOUNDS[1]):
            sse = np.inf
    if not np.isfinite(sse):
        alpha, sse = grid_then_brent(profile, _ALPHA_GRID, xtol=_XTOL)
    if not np.isfinite(sse):
        return FitFailure("power-law", "the least-squares problem has no finite solution")
    l0, a, _ = problem.solve(np.exp(-alpha * log_x))
    if not all(map(math.isfinite, (l0, a, alpha))):
        return FitFailure("power-law", "the loss values are too large for a finite fit")
    return PowerLaw(l0=float(l0), a=float(a), alpha=float(alpha))


class _LinearPart:
    """For a fixed exponent, the best ``L0`` and ``A``: minimise ``|y - L0 - A z|^2``.

    Subject to ``0 <= L0 <= min(y)`` and ``A >= 1e-6``. A convex problem in two
    variables: the unconstrained optimum if it is feasible, else the best of the optima
    along the box's edges. What depends on ``y`` alone is computed once.
    """

    def __init__(self, y: np.ndarray) -> None:
        self.y = y
        self.n = len(y)
        self.y_mean = float(y.sum()) / self.n
        self.y_centered = y - self.y_mean
        self.l0_max = float(y.min())

    def solve(self, z: np.ndarray) -> tuple[float, float, float]:
        """``(L0, A, sum of squared residuals)`` for the regressor ``z``."""
        z_mean = float(z.sum()) / self.n
        zc = z - z_mean
        szz = float(zc @ zc)
        if szz > 0:
            a = float(zc @ self.y_centered) / szz
            l0 = self.y_mean - a * z_mean
            if 0.0 <= l0 <= self.l0_max and a >= _A_MIN:
                r = self.y_centered - a * zc
                return l0, a, float(r @ r)
        return self._on_edges(z)

    def _on_edges(self, z: np.ndarray) -> tuple[float, float, float]:
        y, zz = self.y, float(z @ z)
        candidates = [(c, max(_A_MIN, float(z @ (y - c)) / zz)) for c in (0.0, self.l0_max)]
        candidates.append((min(max(float((y - _A_MIN * z).mean()), 0.0), self.l0_max), _A_MIN))
        best = (np.nan, np.nan, np.inf)
        for l0, a in candidates:
            r = y - l0 - a * z
            sse = float(r @ r)
            if sse < best[2]:
                best = (l0, a, sse)
        return best
