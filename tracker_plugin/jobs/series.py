"""The smoothed loss as a series for the trackers' own charts, thinned to what a chart draws.

A tracker's chart compares runs on one x-axis metric by pairing it with the loss at the
same steps (MLflow's line charts do, after sampling each metric on its own; a W&B panel
plots a key against its ``step_metric`` logged in the same row). So the smoothed loss the
forecast reads (:data:`~tracker_plugin.keys.SERIES_LOSS`) goes back with the tokens at
the same steps (:data:`~tracker_plugin.keys.SERIES_TOKENS`): several runs' curves then
overlay on a token axis, smoothed over the same number of tokens, as the tool compares them.

The steps kept are the first logged step in each bucket of ``2**k`` steps, ``k`` the
smallest that leaves at most :data:`~tracker_plugin.keys.SERIES_POINTS` buckets up to the
last step, and the last step. As a run grows the buckets double, and each kept step of the
coarser grid was kept by the finer one: a nightly pass writes only the new steps (and the
run's last), never a point again at a step it wrote. The series starts at the fit start
(the smoothed loss before it is the warm-up's, which the forecast does not read). Values
are rounded to six significant digits, tokens to whole ones, so the same history gives
the same numbers on every machine, and a tracker can tell a point it holds.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.keys import SERIES_LOSS, SERIES_POINTS, SERIES_TOKENS
from tracker_plugin.trackers.base import Series

__all__ = ["kept_rows", "series_provenance", "smoothed_series"]


def smoothed_series(analysis: Analysis, points: int = SERIES_POINTS) -> Series | None:
    """The run's smoothed loss and tokens at its kept steps; None when there is nothing to
    draw (fewer than two finite points from the fit start)."""
    history = analysis.history
    steps = np.asarray(history.step, dtype=np.int64)
    values = np.asarray(analysis.smoothed, dtype=float)
    usable = (steps >= analysis.fit_start_step) & np.isfinite(values)
    rows = np.flatnonzero(usable)
    if len(rows) < 2:
        return None
    kept = rows[kept_rows(steps[rows], points)]
    loss = [float(f"{v:.6g}") for v in values[kept]]
    series: dict[str, tuple[float, ...]] = {SERIES_LOSS: tuple(loss)}
    if not history.on_steps:  # on a run with no tokens the x-axis is the step itself
        series[SERIES_TOKENS] = tuple(float(round(t)) for t in np.asarray(history.tokens, dtype=float)[kept])
    return Series(steps=tuple(int(s) for s in steps[kept]), values=series)


def kept_rows(steps: np.ndarray, points: int = SERIES_POINTS) -> np.ndarray:
    """Indices into sorted ``steps``: the first in each bucket of ``2**k`` steps (``k`` the
    smallest giving at most ``points`` buckets up to the last step), and the last."""
    last = int(steps[-1])
    width = 1
    while (last // width) + 1 > points:
        width *= 2
    buckets = steps // width
    first = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    return np.union1d(first, [len(steps) - 1])


def series_provenance(series: Series) -> dict[str, Any]:
    """What the provenance tag records of the series: its keys, its points, its last step
    and the digest of every value (the marker commits to the series through it)."""
    text = json.dumps([series.steps, series.values], sort_keys=True, separators=(",", ":"))
    return {
        "keys": sorted(series.values),
        "points": len(series.steps),
        "last_step": series.steps[-1],
        "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
    }
