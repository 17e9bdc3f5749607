"""The smoothed loss a run's own law forecasts at its planned end, with an interval.

Every running run gets one, siblings or not. Without siblings it is the run's own fitted
law, smoothed as the observed loss is, at the plan's last step; its interval carries the
law's own track record on the run (:attr:`~tracker_plugin.core.forecast.Selection.error_scale`:
its error in ln tokens per unit of ln horizon, forecasting the log's later part from
earlier cuts) turned into loss through the law's slope at the end: a forecast that may be
late by a factor ``e^x`` in tokens is off there by the loss the curve falls over ``x``.
"""

from __future__ import annotations

import math

import numpy as np

from tracker_plugin.core.forecast import ERROR_PRIOR_SCALE, Selection
from tracker_plugin.core.models import LawFit
from tracker_plugin.core.models.schedule_law import smooth_all
from tracker_plugin.core.project_law.forecast import PlanEnd

__all__ = ["END_INFLATION", "own_plan_end"]

# The interval's z (80%: a normal's 1.28) is multiplied by this; chosen, as the other
# interval rules are, so the 80% interval covers 70-90% leave-one-family-out
# (benchmarks/bench_law.py prints the coverage).
END_INFLATION = 1.0
# The slope at the end is read over this half-width in ln tokens.
_SLOPE = 0.05


def own_plan_end(fit: LawFit, selection: Selection | None, last_tokens: float, level: float = 0.8,
                 finished_loss: float | None = None) -> PlanEnd | None:
    """The run's own law at its planned end (None: no planned end); ``finished_loss``: the
    smoothed loss logged there, for a run that has reached it."""
    end = fit.timeline.plan_end
    if end is None:
        return None
    tokens = float(fit.timeline.tokens_at(end))
    if finished_loss is not None:
        return PlanEnd(float(end), tokens, float(finished_loss), None, "logged")
    (smoothed,) = smooth_all([fit])
    loss = float(np.interp(end, smoothed.steps, smoothed.curve))
    if not math.isfinite(loss):
        return None
    ln_tokens = np.log(np.maximum(fit.timeline.tokens_at(smoothed.steps), 1e-300))
    at = math.log(max(tokens, 1e-300)) + np.array([-_SLOPE, _SLOPE])
    low, high = np.interp(at, ln_tokens, smoothed.curve)
    slope = max(float(low - high) / (2 * _SLOPE), 0.0)
    scale = selection.error_scale if selection is not None and selection.error_scale else ERROR_PRIOR_SCALE
    horizon = math.log(max(tokens / max(last_tokens, 1e-300), 1.0))
    z = _normal_quantile(0.5 + level / 2) * END_INFLATION
    half = z * slope * scale * horizon
    return PlanEnd(float(end), tokens, loss, (loss - half, loss + half), "this run's law")


def _normal_quantile(p: float) -> float:
    """The standard normal's quantile."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)
