"""A fitted law as the observed loss is read: through the same EMA, and where it crosses.

The smoothed loss is an EMA of the logged rows, so a forecast passes the law through that
EMA too (computed at the run's logging cadence on a fine grid, the law itself evaluated on
a coarser one and interpolated); :func:`crossing_tokens` finds where a curve crosses a
target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tracker_plugin.core.clock import Timeline
from tracker_plugin.core.smoothing import ema_decay, linear_recurrence_rows

if TYPE_CHECKING:  # a fit smooths itself with these: only its type is needed here
    from tracker_plugin.core.models.schedule_law import LawFit

__all__ = ["SmoothedLaw", "crossing_tokens", "ema_steps", "smooth_after", "smooth_all"]


# The EMA of a forecast is computed at the run's logging cadence (the smoothed loss is an
# EMA of the logged rows, each held until the next), or at a quarter of the EMA's span when
# that is coarser, with at most this many points; the model itself is evaluated on a
# coarser grid and interpolated.
_EMA_POINTS_PER_SPAN = 4
_EMA_MAX_POINTS = 60_000
_MODEL_POINTS = 800
# An EMA started this many spans before the steps it is needed at has forgotten its start
# (by a factor e**-24).
_WARM_SPANS = 12
# Fits smoothed in one pass hold at most this many grid values (8 MB) at once.
_SMOOTH_CELLS = 1 << 20


@dataclass(frozen=True, eq=False)
class SmoothedLaw:
    """A fitted law's EMA on a grid of steps, from its fit start to the end of its timeline:
    what its forecasts are read from. :func:`smooth_all` makes them; whoever solves a fit
    for targets holds them."""

    fit: LawFit
    steps: np.ndarray = field(repr=False)
    curve: np.ndarray = field(repr=False)

    def solve(self, target: float) -> float | None:
        """Tokens at which the smoothed law first reaches ``target`` after the log; None if never."""
        return crossing_tokens(self.fit.timeline, self.steps, self.curve, target)


def crossing_tokens(timeline: Timeline, steps: np.ndarray, curve: np.ndarray, target: float) -> float | None:
    """Tokens where ``curve`` (on ``steps``) first reaches ``target`` after the last logged step."""
    after = np.flatnonzero((steps > timeline.last_step) & (curve <= target))
    if not len(after):
        return None
    i = int(after[0])
    if i == 0 or steps[i - 1] <= timeline.last_step and curve[i - 1] <= target:
        step = float(steps[i])
    else:
        before, now = curve[i - 1], curve[i]
        frac = 1.0 if before == now else (before - target) / (before - now)
        step = float(steps[i - 1] + min(max(frac, 0.0), 1.0) * (steps[i] - steps[i - 1]))
    return float(timeline.tokens_at(step))


def _fine_end(tl: Timeline) -> float:
    """Where the fine grid for the EMA may stop: twice the log or the plan. Further out the
    EMA's lag is negligible beside the distance, and a coarse grid holds each value."""
    return min(tl.horizon, 2.0 * max(tl.last_step, tl.plan_end or 0.0, 1.0))


def _ema_grid(tl: Timeline, start: float, cadence: float, window: float) -> tuple[np.ndarray, float]:
    end = _fine_end(tl)
    span = window / float(np.max(tl.batch))
    spacing = max(cadence, span / _EMA_POINTS_PER_SPAN, (end - start) / _EMA_MAX_POINTS, 1e-9)
    fine = np.arange(start, end, spacing)
    beyond = tl.step[tl.step > end]
    return np.unique(np.r_[fine, end, beyond]), spacing


def ema_steps(fit: LawFit) -> np.ndarray:
    """The steps :meth:`LawFit.smoothed` puts the law's EMA on, without the EMA."""
    return _ema_grid(fit.timeline, fit.start_step, fit.cadence, fit.ema_window)[0]


def smooth_all(fits: list[LawFit]) -> list[SmoothedLaw]:
    """:meth:`LawFit.smoothed` for many fits of one run at once (a sweep's windows).

    The fits share their law, timeline (but for the last logged step), start and cadence.
    Each law is evaluated on a coarse grid and interpolated onto one fine enough for the EMA
    (a few points per span), then smoothed exactly as the observed loss is.
    """
    if not fits:
        return []
    fine, curves = _smooth(fits, None)
    return [SmoothedLaw(fit, fine, curve) for fit, curve in zip(fits, curves)]


def smooth_after(fits: list[LawFit], step: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """The EMAs of :func:`smooth_all` from just before ``step`` on: ``(steps, curves)``.

    Each EMA starts from its law a few spans before ``step`` (see :data:`_WARM_SPANS`)
    rather than at the fit start, which for a long log skips most of the grid.
    """
    if not fits:
        return np.empty(0), []
    return _smooth(fits, step)


def _smooth(fits: list[LawFit], since: float | None) -> tuple[np.ndarray, list[np.ndarray]]:
    """The fits' EMAs on the fine grid, from its start or from a few spans before ``since``;
    a block of fits at a time."""
    first = fits[0]
    tl = max((f.timeline for f in fits), key=lambda t: t.last_step)
    fine, spacing = _ema_grid(tl, first.start_step, first.cadence, first.ema_window)
    begin = 0
    if since is not None:
        span = first.ema_window / float(np.min(tl.batch))
        begin = max(int(np.searchsorted(fine, since - _WARM_SPANS * span, side="right")) - 1, 0)
    coarse = _coarse_steps(tl, first)
    area, clock = tl.area_at(coarse), tl.clock_at(coarse)
    # On a grid coarser than the cadence each point stands for the rows logged since the
    # previous one: hold the value from the middle of that stretch, which gives the EMA the
    # log's own lag to first order.
    fine = fine[begin:]
    at = np.maximum(fine - max(spacing - first.cadence, 0.0) / 2, first.start_step)
    batch = tl.batch[np.clip(np.searchsorted(tl.step, fine, side="right") - 1, 0, len(tl.batch) - 1)]
    decay = ema_decay(fine, batch, first.ema_window)  # the first is 0: the EMA starts at its first value
    curves: list[np.ndarray] = []
    per_pass = max(1, _SMOOTH_CELLS // len(at))
    for lo in range(0, len(fits), per_pass):
        block = fits[lo:lo + per_pass]
        series = np.empty((len(block), len(at)))
        for row, fit in enumerate(block):
            power, anneal = fit.law.columns(fit.theta, clock, area, fit.area_ref, fit.cells)
            series[row] = np.interp(at, coarse, fit.coef[0] + fit.coef[1] * power - fit.coef[2] * anneal)
            if fit.smoothed_start is not None and begin == 0:
                # Start from the observed EMA, so the law's EMA carries the same memory of
                # the steps before the fit and the two differ only by the fit.
                series[row, 0] = fit.smoothed_start
        curves.extend(linear_recurrence_rows(decay, (1.0 - decay) * series))
    return fine, curves


def _coarse_steps(tl: Timeline, fit: LawFit) -> np.ndarray:
    """Steps where the law is evaluated: even to the fine grid's end, then geometric, and
    at every lr drop, where the law bends quickly."""
    end = _fine_end(tl)
    drops = np.interp(fit.cells.clock, tl.clock_steps, tl.step)
    return np.unique(np.r_[
        np.linspace(fit.start_step, end, _MODEL_POINTS),
        drops[drops > fit.start_step],
        np.geomspace(end, tl.horizon, 128),
    ])
