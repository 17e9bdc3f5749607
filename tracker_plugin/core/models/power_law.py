"""The power law on tokens of the original script: ``L(T) = L0 + A * (T / 1e9) ** -alpha``.

Fitted to the smoothed loss exactly as ``find_target_loss.py`` does (``--model power-law``):
SciPy's ``curve_fit`` with the script's starting point, bounds and evaluation budget; its
results are pinned by the parity tests.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from tracker_plugin.core.models.base import GIVEN, FitFailure, FitStatus
from tracker_plugin.defaults import POWER_LAW

__all__ = ["TOKEN_UNIT", "PowerLaw", "fit_power_law"]

TOKEN_UNIT = 1e9
"""The power law's token axis is in units of 1e9 tokens, which keeps ``A`` near O(1)."""

# The original script's bounds and budget: 0 <= L0 <= min(loss), A >= 1e-6, 1e-3 <= alpha <= 10.
_A_MIN = 1e-6
_ALPHA_BOUNDS = (1e-3, 10.0)
_ALPHA_START = 0.3
_MAX_EVALUATIONS = 20_000
_LOG_MAX = math.log(1e300)


@dataclass(frozen=True)
class PowerLaw:
    """``L(T) = L0 + A * (T / 1e9) ** -alpha`` on the token axis."""

    l0: float
    a: float
    alpha: float
    name: str = POWER_LAW
    status: FitStatus = field(default=GIVEN, compare=False)

    @property
    def asymptote(self) -> float:
        return self.l0

    @property
    def params(self) -> dict[str, float]:
        return {"L0": self.l0, "A": self.a, "alpha": self.alpha, "token_unit": TOKEN_UNIT}

    def predict(self, tokens: np.ndarray) -> np.ndarray:
        return _law(np.asarray(tokens, float) / TOKEN_UNIT, self.l0, self.a, self.alpha)

    def solve(self, target: float) -> float | None:
        """Tokens at which the law reaches ``target``; None when it never does.

        ``inf`` when it does so only beyond the floating-point range (a tiny exponent).
        """
        if target <= self.l0:
            return None
        log_tokens = (math.log(self.a) - math.log(target - self.l0)) / self.alpha + math.log(TOKEN_UNIT)
        return math.exp(log_tokens) if log_tokens < _LOG_MAX else math.inf


def _law(x: np.ndarray, l0: float, a: float, alpha: float) -> np.ndarray:
    return l0 + a * np.power(x, -alpha)


def fit_power_law(tokens: np.ndarray, loss: np.ndarray) -> PowerLaw | FitFailure:
    """Least-squares fit of :class:`PowerLaw` to ``loss`` over ``tokens``, as the original script fits it.

    ``curve_fit`` (SciPy's trust-region reflective method under bounds) from the script's
    start, ``L0 = 0.9 min(loss)``, ``A = max(loss[0] - min(loss), 1e-3)``, ``alpha = 0.3``,
    within its bounds, ``0 <= L0 <= min(loss)``, ``A >= 1e-6``, ``1e-3 <= alpha <= 10``,
    and with its budget of 20,000 evaluations and its finite-difference Jacobian: the
    same steps on the same points give the script's answer to rounding, which is the
    point of this model. Rows at zero tokens are left out (the law is infinite there; the
    script fails on them).

    Returns a :class:`FitFailure` with the reason when the window cannot carry a fit or the
    solver gives up; never raises on bad data.
    """
    x = np.asarray(tokens, float) / TOKEN_UNIT
    y = np.asarray(loss, float)
    usable = (x > 0) & np.isfinite(x) & np.isfinite(y)
    x, y = x[usable], y[usable]
    if len(x) < 3:
        return FitFailure("power-law", f"needs at least 3 points with tokens > 0, has {len(x)}")
    if x[-1] <= x[0]:
        return FitFailure("power-law", "the fit window spans no tokens")
    floor = float(y.min())
    if not floor > 0:
        return FitFailure("power-law", f"the smoothed loss reaches {floor:g}: the asymptote has no room in [0, min(loss)]")
    # Imported here: a run whose targets are all reached never pays for loading scipy.optimize.
    from scipy.optimize import OptimizeWarning, curve_fit

    start = [floor * 0.9, max(float(y[0]) - floor, 1e-3), _ALPHA_START]
    bounds = ([0.0, _A_MIN, _ALPHA_BOUNDS[0]], [floor, np.inf, _ALPHA_BOUNDS[1]])
    try:
        # The covariance (which is all OptimizeWarning is about) is not used; the overflow
        # of a trial exponent is a rejected step, not news.
        with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            warnings.simplefilter("ignore", OptimizeWarning)
            params, _, info, message, _ = curve_fit(
                _law, x, y, p0=start, bounds=bounds, maxfev=_MAX_EVALUATIONS, full_output=True
            )
    except RuntimeError as exc:  # the budget spent without meeting a tolerance
        return FitFailure("power-law", f"fit failed to converge: {exc}")
    except (ValueError, np.linalg.LinAlgError) as exc:  # residuals not finite at the start, say
        return FitFailure("power-law", f"the least-squares problem has no finite solution: {exc}")
    l0, a, alpha = (float(v) for v in params)
    if not all(map(math.isfinite, (l0, a, alpha))):
        return FitFailure("power-law", "the loss values are too large for a finite fit")
    # curve_fit raises unless the solver met a tolerance, so a fit it returns converged.
    status = FitStatus(True, f"curve_fit (trf): {message}", int(info["nfev"]))
    return PowerLaw(l0=l0, a=a, alpha=alpha, status=status)
