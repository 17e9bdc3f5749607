"""The learning-rate annealing law of Tissue et al. (2024), "Scaling Law with Learning Rate Annealing".

    L(s) = L0 + A * S1(s) ** -alpha - C * S2(s)

``S1`` is the summed lr (the "forward area"). ``S2`` is the summed annealing momentum:
``m_i = lambda * m_(i-1) + (lr_(i-1) - lr_i)``, ``S2 = sum m_i``, with the paper's decay
``lambda = 0.999`` per step (per reference-batch step on the tokens clock). Here ``S2`` is
scaled by ``1 - lambda`` so that its coefficient ``G = C / (1 - lambda)`` is the loss a full
decay removes once it has taken effect, which is what the gain prior speaks about:

    S2(s) (1 - lambda) = sum over drops k before s of  drop_k * (1 - lambda ** (s - k))

The lr is normalised to its peak and ``S1`` to its value at the end of the fit window, so
``A`` is the reducible loss there. Nonlinear parameters: ``alpha``, and the origin shift of
``S1`` that every schedule-aware law has (see :mod:`.schedule_law`).
"""

from __future__ import annotations

import math

import numpy as np

from tracker_plugin import defaults
from tracker_plugin.core.clock import DropCells
from tracker_plugin.core.models.schedule_law import Law

__all__ = ["LR_ANNEALING", "MOMENTUM_DECAY"]

MOMENTUM_DECAY = 0.999


def _power(theta: np.ndarray, area: np.ndarray) -> np.ndarray:
    """``area ** -alpha``; ``theta`` may be a column of exponents (one row each)."""
    return np.power(area, -theta[0] if theta.ndim == 1 else -theta)


def _power_gradient(theta: np.ndarray, area: np.ndarray) -> np.ndarray:
    """``d power / d alpha``, one column."""
    return (-np.log(area) * np.power(area, -theta[0]))[:, None]


def _power_slope(theta: np.ndarray, area: np.ndarray) -> np.ndarray:
    """``d power / d area``, which is how the origin shift moves it."""
    return -theta[0] * np.power(area, -theta[0] - 1.0)


def _anneal(theta: np.ndarray, clock: np.ndarray, area: np.ndarray, cells: DropCells) -> np.ndarray:
    """``sum_j size_j * (1 - d ** (clock - clock_j))`` over the drops before each clock.

    The momentum ``sum_j size_j * d ** (clock - clock_j)`` is carried from drop to drop
    (a recurrence over the drops) and then decayed to each clock, which costs one pass
    over the rows and the drops instead of a rows x drops matrix, with no negative
    exponents to overflow.
    """
    if not len(cells):
        return np.zeros(len(clock))
    order = np.argsort(cells.clock, kind="stable")
    at, size = cells.clock[order], cells.size[order]
    log_d = math.log(MOMENTUM_DECAY)
    momentum = np.empty(len(at))  # just after each drop
    carried = 0.0
    for k in range(len(at)):
        gap = at[k] - at[k - 1] if k else 0.0
        carried = carried * math.exp(log_d * gap) + size[k]
        momentum[k] = carried
    before = np.searchsorted(at, clock, side="left")  # drops strictly before each clock
    last = np.maximum(before - 1, 0)
    decayed = np.where(before > 0, momentum[last] * np.exp(log_d * np.maximum(clock - at[last], 0.0)), 0.0)
    return np.r_[0.0, np.cumsum(size)][before] - decayed


LR_ANNEALING = Law(
    name=defaults.LR_ANNEALING,
    reference="Tissue et al. 2024, Scaling Law with Learning Rate Annealing",
    theta_names=("alpha",),
    lower=(0.02,),
    upper=(3.0,),
    starts=((0.5,),),
    power=_power,
    anneal=_anneal,
    power_gradient=_power_gradient,
    power_slope=_power_slope,
    grid=np.geomspace(0.02, 3.0, 25),
    anneal_fixed=True,
)
