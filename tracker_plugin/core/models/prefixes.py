"""Many windows of one run, all from the same start: the windows of a stability sweep.

Each window is its run's first rows up to its end, binned as the whole window was (whole
bins, plus one bin of the rows a window cuts short), and fitted by the same search as any
fit (:meth:`LawFit.refit_window`) in one pass with the whole window's robust weights and
prior strength. Only the binning is particular to a sweep; the fitting is not.
"""

from __future__ import annotations

import numpy as np

from tracker_plugin.core.models.base import FitFailure
from tracker_plugin.core.models.schedule_law import MIN_POINTS, LawFit, Observations, _level

__all__ = ["fit_prefixes"]


def fit_prefixes(like: LawFit, step: np.ndarray, loss: np.ndarray, ends: list[int]) -> list[LawFit | FitFailure | None]:
    """``like``'s law fitted to the first ``end`` rows of its window, for each end.

    ``step`` and ``loss`` are the window's raw rows (those ``like`` was fitted to, binned).
    Each window sees exactly its rows, with ``like``'s robust weights and prior strength,
    its exponent searched afresh on the law's grid (so it does not hang on ``like``'s).
    None where this does not apply (a law with more than one nonlinear parameter, which
    has no grid, or a window too short): fit that one alone.
    """
    law, obs = like.law, like.observations
    if len(law.theta_names) != 1 or law.grid is None or like.weight is None or obs.rows is None:
        return [None] * len(ends)
    robust = like.weight / obs.weight  # each bin's Huber factor
    out: list[LawFit | FitFailure | None] = []
    for end in ends:
        prefix, weight = _prefix(like, obs, robust, step, loss, end)
        if len(prefix) < MIN_POINTS:
            out.append(None)
            continue
        mean = None if like.prior is None else like.prior.fraction * _level(prefix)
        out.append(like.refit_window(prefix, float(step[end - 1]), weight, mean))
    return out


def _prefix(
    like: LawFit, obs: Observations, robust: np.ndarray, step: np.ndarray, loss: np.ndarray, end: int
) -> tuple[Observations, np.ndarray]:
    """The bins of the first ``end`` rows and their robust weights.

    Whole bins keep their weight; the rows of a bin that ``end`` cuts short become a bin of
    their own, weighted by their count and the Huber factor of the bin they came from.
    """
    assert obs.rows is not None and like.weight is not None
    complete = int(np.searchsorted(obs.rows, end, side="right"))
    prefix, weight = obs.take(complete), like.weight[:complete]
    begin = int(obs.rows[complete - 1]) if complete else 0
    if complete < len(obs) and end > begin:
        cut_step = float(np.mean(step[begin:end]))
        area, clock = like.timeline.area_at(cut_step), like.timeline.clock_at(cut_step)
        count = float(end - begin)
        prefix = prefix.append(cut_step, float(np.mean(loss[begin:end])), count, float(area), float(clock), end)
        weight = np.r_[weight, count * robust[complete]]
    return prefix, weight
