"""The points a law is fitted to: a log's raw loss on its lr area, averaged in bins.

Long logs are averaged in bins of consecutive rows (at most ``MAX_BINS``, none spanning
more than ``BIN_STEP_RATIO`` of steps, so the steep early curve keeps its shape), which
keeps a fit fast and changes nothing at the scale of the curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracker_plugin.core.clock import Timeline

__all__ = ["BIN_STEP_RATIO", "MAX_BINS", "Observations", "observations"]


# Long logs are averaged in at most this many bins of consecutive rows ...
MAX_BINS = 192
# ... none spanning more than this ratio of steps, so the steep early curve keeps its shape.
BIN_STEP_RATIO = 1.08


@dataclass(frozen=True, eq=False)
class Observations:
    """The raw loss of a fit window, binned: per bin the mean step and loss, the row count."""

    step: np.ndarray
    loss: np.ndarray
    weight: np.ndarray
    area: np.ndarray
    clock: np.ndarray
    rows: np.ndarray | None = None  # each bin's end, in rows from the window's first row

    def __len__(self) -> int:
        return len(self.step)

    def head(self, last_step: float) -> Observations:
        keep = self.step <= last_step
        rows = None if self.rows is None else self.rows[keep]
        return Observations(self.step[keep], self.loss[keep], self.weight[keep], self.area[keep], self.clock[keep], rows)

    def take(self, bins: int) -> Observations:
        """The first ``bins`` bins."""
        rows = None if self.rows is None else self.rows[:bins]
        return Observations(
            self.step[:bins], self.loss[:bins], self.weight[:bins], self.area[:bins], self.clock[:bins], rows
        )

    def append(self, step: float, loss: float, weight: float, area: float, clock: float, rows: int) -> Observations:
        """These bins and one more."""
        tail = None if self.rows is None else np.r_[self.rows, rows]
        return Observations(
            np.r_[self.step, step], np.r_[self.loss, loss], np.r_[self.weight, weight],
            np.r_[self.area, area], np.r_[self.clock, clock], tail,
        )


def observations(step: np.ndarray, loss: np.ndarray, timeline: Timeline) -> Observations:
    """Bin the raw loss of consecutive rows (mean step, mean loss, count) for fitting.

    Bins hold about equal row counts, at most :data:`MAX_BINS` of them, split further so
    none spans more than a ratio :data:`BIN_STEP_RATIO` of steps.
    """
    step = np.asarray(step, float)
    loss = np.asarray(loss, float)
    n = len(step)
    if n > MAX_BINS:
        edges = np.linspace(0, n, MAX_BINS + 1).round().astype(np.int64)
        first = max(step[0], 1.0)
        ratio_edges = np.searchsorted(step, first * BIN_STEP_RATIO ** np.arange(1, 1 + math.ceil(
            math.log(max(step[-1], first) / first) / math.log(BIN_STEP_RATIO))))
        edges = np.unique(np.r_[edges, ratio_edges, n])
        edges = edges[(edges >= 0) & (edges <= n)]
        counts = np.diff(edges)
        keep = counts > 0
        starts, counts = edges[:-1][keep], counts[keep]
        step = np.add.reduceat(step, starts) / counts
        loss = np.add.reduceat(loss, starts) / counts
        weight = counts.astype(float)
        rows = starts + counts
    else:
        weight = np.ones(n)
        rows = np.arange(1, n + 1)
    return Observations(step, loss, weight, timeline.area_at(step), timeline.clock_at(step), rows)
