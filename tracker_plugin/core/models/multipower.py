"""The multi-power law of Luo et al. (2025), "A Multi-Power Law for Loss Curve Prediction
Across Learning Rate Schedules".

    L(t) = L0 + A * (S1(t) + S_W) ** -alpha - LD(t)
    LD(t) = B * sum over steps k of (lr_(k-1) - lr_k) * G(lr_k ** -gamma * S_k(t))
    G(x) = 1 - (C x + 1) ** -beta,   S_k(t) = lr summed from step k to t

``S1 + S_W`` is the lr area from step 0 (warmup included). The lr is normalised to its peak
and the area to its value at the end of the fit window, so ``A`` is the reducible loss there
and ``B`` (reported as ``G``) the loss a full decay removes once saturated. Nonlinear
parameters: ``alpha``, ``log C``, ``beta``, ``gamma``; ``C`` is per unit of lr area in
peak-lr steps of the reference batch.
"""

from __future__ import annotations

import numpy as np

from tracker_plugin.core.clock import DropCells
from tracker_plugin.core.models.schedule_law import Law

__all__ = ["MULTI_POWER"]


def _power(theta: np.ndarray, area: np.ndarray) -> np.ndarray:
    return np.power(area, -theta[0])


def _anneal(theta: np.ndarray, clock: np.ndarray, area: np.ndarray, cells: DropCells) -> np.ndarray:
    """``LD / B``."""
    if not len(cells):
        return np.zeros(len(area))
    _, log_c, beta, gamma = theta
    since = np.maximum(area[:, None] - cells.area[None, :], 0.0)
    x = since * np.power(np.maximum(cells.lr_after, 1e-6), -gamma)[None, :]
    response = -np.expm1(-beta * np.log1p(np.exp(log_c) * x))
    return response @ cells.size


MULTI_POWER = Law(
    name="multi-power",
    reference="Luo et al. 2025, A Multi-Power Law for Loss Curve Prediction Across Learning Rate Schedules",
    theta_names=("alpha", "log_C", "beta", "gamma"),
    lower=(0.02, -9.0, 0.05, 0.0),
    upper=(3.0, 7.0, 5.0, 2.0),
    starts=((0.5, -3.0, 0.5, 0.5), (0.3, -6.0, 0.3, 1.0), (0.8, 0.0, 1.0, 0.3)),
    power=_power,
    anneal=_anneal,
)
