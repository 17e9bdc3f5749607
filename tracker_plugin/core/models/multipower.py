"""The multi-power law of Luo et al. (2025), "A Multi-Power Law for Loss Curve Prediction
Across Learning Rate Schedules".

    L(t) = L0 + A * (S1(t) + S_W) ** -alpha - LD(t)
    LD(t) = B * sum over steps k of (lr_(k-1) - lr_k) * G(lr_k ** -gamma * S_k(t))
    G(x) = 1 - (C x + 1) ** -beta,   S_k(t) = lr summed from step k to t

``S1 + S_W`` is the lr area from step 0 (warmup included), plus the fitted origin shift
that every schedule-aware law has (see :mod:`.schedule_law`). The lr is normalised to its peak
and the area to its value at the end of the fit window, so ``A`` is the reducible loss there
and ``B`` (reported as ``G``) the loss a full decay removes once saturated. Nonlinear
parameters: ``alpha``, ``log C``, ``beta``, ``gamma``; ``C`` is per unit of lr area in
peak-lr steps of the reference batch.
"""

from __future__ import annotations

import numpy as np

from tracker_plugin import defaults
from tracker_plugin.core.clock import DropCells
from tracker_plugin.core.models.schedule_law import Law

__all__ = ["MULTI_POWER"]


def _power(theta: np.ndarray, area: np.ndarray) -> np.ndarray:
    return np.power(area, -theta[0])


def _power_gradient(theta: np.ndarray, area: np.ndarray) -> np.ndarray:
    """``d power / d theta``: only ``alpha`` moves it."""
    out = np.zeros((len(area), len(theta)))
    out[:, 0] = -np.log(area) * np.power(area, -theta[0])
    return out


def _power_slope(theta: np.ndarray, area: np.ndarray) -> np.ndarray:
    """``d power / d area``, which is how the origin shift moves it."""
    return -theta[0] * np.power(area, -theta[0] - 1.0)


def _drive(theta: np.ndarray, area: np.ndarray, cells: DropCells) -> tuple[np.ndarray, np.ndarray]:
    """``C x`` for every point and drop, and the log of the lr after each drop."""
    _, log_c, _, gamma = theta
    log_lr = np.log(np.maximum(cells.lr_after, 1e-6))
    since = np.maximum(area[:, None] - cells.area[None, :], 0.0)
    return since * np.exp(log_c - gamma * log_lr)[None, :], log_lr


def _anneal(theta: np.ndarray, clock: np.ndarray, area: np.ndarray, cells: DropCells) -> np.ndarray:
    """``LD / B``."""
    if not len(cells):
        return np.zeros(len(area))
    cx, _ = _drive(theta, area, cells)
    response = -np.expm1(-theta[2] * np.log1p(cx))
    return response @ cells.size


def _anneal_gradient(theta: np.ndarray, clock: np.ndarray, area: np.ndarray, cells: DropCells) -> np.ndarray:
    """``d (LD / B) / d theta``: with ``u = 1 + C x`` the response ``1 - u^-beta`` moves by
    ``beta u^-beta C x / u`` per unit of ``log C``, by ``u^-beta ln u`` per unit of ``beta``,
    and by ``-ln(lr after)`` times the first per unit of ``gamma`` (``x`` scales as
    ``lr_after^-gamma``)."""
    out = np.zeros((len(area), len(theta)))
    if not len(cells):
        return out
    cx, log_lr = _drive(theta, area, cells)
    log_u = np.log1p(cx)
    remaining = np.exp(-theta[2] * log_u)  # u ** -beta
    per_log_c = theta[2] * remaining * (cx / (1.0 + cx))
    out[:, 1] = per_log_c @ cells.size
    out[:, 2] = (remaining * log_u) @ cells.size
    out[:, 3] = per_log_c @ (cells.size * -log_lr)
    return out


class _Response:
    """``LD / B`` and its gradient on one fit window's points, for many trial ``theta``.

    A fit evaluates the response at a few dozen trial shapes on the same points and drops:
    what does not depend on the shape (each point's lr area since each drop, the log of
    the lr after each drop) is computed once here, and the residuals' evaluation at a
    shape lends its intermediate terms to the Jacobian's at the same shape, which the
    solver asks for next. The arithmetic is :func:`_anneal`'s and
    :func:`_anneal_gradient`'s, operation for operation, so a fit's answer is the same to
    the last bit.
    """

    def __init__(self, clock: np.ndarray, area: np.ndarray, cells: DropCells) -> None:
        self.n, self.size = len(area), cells.size
        self.empty = not len(cells)
        if not self.empty:
            self.log_lr = np.log(np.maximum(cells.lr_after, 1e-6))
            self.since = np.maximum(area[:, None] - cells.area[None, :], 0.0)
            self.gamma_size = cells.size * -self.log_lr
        self._key: bytes | None = None
        self._terms: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))

    def _cx_and_log_u(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = theta.tobytes()
        if key != self._key:
            _, log_c, _, gamma = theta
            cx = self.since * np.exp(log_c - gamma * self.log_lr)[None, :]
            self._key, self._terms = key, (cx, np.log1p(cx))
        return self._terms

    def value(self, theta: np.ndarray) -> np.ndarray:
        if self.empty:
            return np.zeros(self.n)
        _, log_u = self._cx_and_log_u(theta)
        return -np.expm1(-theta[2] * log_u) @ self.size

    def gradient(self, theta: np.ndarray) -> np.ndarray:
        out = np.zeros((self.n, len(theta)))
        if self.empty:
            return out
        cx, log_u = self._cx_and_log_u(theta)
        remaining = np.exp(-theta[2] * log_u)  # u ** -beta
        per_log_c = theta[2] * remaining * (cx / (1.0 + cx))
        out[:, 1] = per_log_c @ self.size
        out[:, 2] = (remaining * log_u) @ self.size
        out[:, 3] = per_log_c @ self.gamma_size
        return out


MULTI_POWER = Law(
    name=defaults.MULTI_POWER,
    reference="Luo et al. 2025, A Multi-Power Law for Loss Curve Prediction Across Learning Rate Schedules",
    theta_names=("alpha", "log_C", "beta", "gamma"),
    lower=(0.02, -9.0, 0.05, 0.0),
    upper=(3.0, 7.0, 5.0, 2.0),
    starts=((0.5, -3.0, 0.5, 0.5), (0.3, -6.0, 0.3, 1.0), (0.8, 0.0, 1.0, 0.3)),
    power=_power,
    anneal=_anneal,
    power_gradient=_power_gradient,
    power_slope=_power_slope,
    anneal_gradient=_anneal_gradient,
    response=_Response,
)
