"""Many refits of one fit: the replicates of a bootstrap.

A replicate is the fitted law refitted to resampled loss values at the same points, with
the same robust weights and prior strength (:meth:`LawFit.refit`): the same search as
every fit, started from the fit's parameters. A batched search of its own once made this
faster by a few milliseconds per forecast, at the price of a second answer for the same
problem; one path serves every fit now.
"""

from __future__ import annotations

import numpy as np

from tracker_plugin.core.models.base import FitFailure
from tracker_plugin.core.models.schedule_law import LawFit

__all__ = ["refit_many"]


def refit_many(fit: LawFit, losses: np.ndarray, prior_means: list[float | None]) -> list[LawFit | FitFailure]:
    """``fit.refit(loss, mean)`` for each replicate's binned loss (one row of ``losses``) and prior mean."""
    return [fit.refit(loss, mean) for loss, mean in zip(losses, prior_means)]
