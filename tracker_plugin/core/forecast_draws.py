"""The bootstrap's draws past the log: the fluctuation paths of the smoothed loss and the
refitted replicates of the law, each resampled in blocks as long as its autocorrelation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tracker_plugin.core.clock import Timeline
from tracker_plugin.core.models import FitFailure, LawFit
from tracker_plugin.core.models.replicates import refit_many
from tracker_plugin.core.models.schedule_law import crossing_tokens, ema_steps, smooth_after
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.frame.history import History

# The slope at a crossing is read over this half-width in ln tokens.
_SLOPE_HALF_WIDTH = 0.05
# The EMA remembers its start for a few spans (2.5 spans: under 1%).
_SETTLE_SPANS = 2.5
# The fluctuation is resampled from at most this many of the log's latest rows (dozens of
# EMA spans at any usual logging cadence), or from its last _FLUCTUATION_SPANS spans when
# those hold more rows: the recent fluctuation is the one the future continues, and a
# million-row log then costs no more than a short one.
_FLUCTUATION_ROWS = 1 << 14
_FLUCTUATION_SPANS = 50


@dataclass(frozen=True)
class _Drawn:
    """A fit's bootstrap draws past the log: what :func:`forecast_targets` reads its point
    forecast and interval from."""

    steps: np.ndarray  # the EMA's steps past the last logged step, and the one before them
    central: list[np.ndarray]  # the fitted law's EMA plus a fluctuation path, each (empty: not asked)
    curves: list[tuple[LawFit, np.ndarray]]  # each refitted replicate, its EMA plus a path of its own
    clean: list[np.ndarray]  # each replicate's EMA alone, on the same steps

    def raw(self, target: float, beyond: float) -> list[float]:
        """The replicates' crossings of ``target`` (inf: never, or past ``beyond``)."""
        raw = []
        for replicate, curve in self.curves:
            crossing = crossing_tokens(replicate.timeline, self.steps, curve, target)
            raw.append(math.inf if crossing is None or crossing > beyond else crossing)
        return raw

    def loss_horizons(self, timeline: Timeline, target: float, raw: Sequence[float]) -> tuple[float, ...]:
        """Each replicate's fall still to come (its EMA's first value here less ``target``)
        over its EMA's fall per unit of ln tokens at its crossing in ``raw`` (0: no crossing,
        no fall, or an EMA that does not fall there; inf: one that is flat there)."""
        if not self.clean:
            return ()
        ln_tokens = np.log(np.maximum(timeline.tokens_at(self.steps), 1e-300))
        out = []
        for crossing, curve in zip(raw, self.clean):
            fall = float(curve[0]) - target
            if not math.isfinite(crossing) or crossing <= 0 or fall <= 0:
                out.append(0.0)
                continue
            at = math.log(crossing) + np.array([-_SLOPE_HALF_WIDTH, _SLOPE_HALF_WIDTH])
            low, high = np.interp(at, ln_tokens, curve)
            slope = (low - high) / (2 * _SLOPE_HALF_WIDTH)
            out.append(fall / slope if slope > 0 else (math.inf if slope == 0 else 0.0))
        return tuple(out)


def _draw(fit: LawFit, history: History, first: int, replicates: int, rng: np.random.Generator, *,
          point: bool, refit: bool = True) -> _Drawn:
    """The fluctuation paths on the fitted law (``point``: else their random draws alone are
    made, so the replicates' draws are the same either way), then the replicates (``refit``
    False: none; the paths draw first, so they are the same either way)."""
    last = fit.timeline.last_step
    if point:
        steps, curve = fit.smoothed()
    else:  # the same steps without the law's EMA on them
        steps = ema_steps(fit)
    fluctuation = _Fluctuation(history, fit, first)
    # Only steps past the log can hold a crossing: keep those and the one before them.
    ahead = max(int(np.searchsorted(steps, last, side="right")) - 1, 0)
    steps = steps[ahead:]
    # Fluctuation paths on the fitted law give the point forecast; a replicate of the fit
    # with a path of its own gives a draw of the interval.
    paths = fluctuation.paths(steps, last)
    central = []
    for _ in range(replicates):
        if point:
            central.append(curve[ahead:] + paths.draw(rng))
        else:
            paths.skip(rng)
    if not refit:
        return _Drawn(steps, central, [], [])
    resampler = _Resampler(fit)
    losses, means, drawn = [], [], []
    for _ in range(replicates):
        loss, mean = resampler.draw(rng)
        losses.append(loss)
        means.append(mean)
        drawn.append(paths.draw(rng))
    refits = refit_many(fit, np.array(losses), means)
    kept = [(r, path) for r, path in zip(refits, drawn) if not isinstance(r, FitFailure)]
    # A replicate shares the fit's timeline, so its EMA lies on the same steps.
    _, smoothed = smooth_after([replicate for replicate, _ in kept], last)
    clean = [rep[-len(steps):] for rep in smoothed]
    curves = [(replicate, curve + path) for (replicate, path), curve in zip(kept, clean)]
    return _Drawn(steps, central, curves, clean)


def _block_length(values: np.ndarray) -> int:
    """Twice the lag at which the autocorrelation of ``values`` falls below 1/e; at least 1.

    The autocorrelation comes from one FFT, so long logs cost little.
    """
    n = len(values)
    centred = values - values.mean()
    if n < 4 or not np.any(centred):
        return 1
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(centred, size)
    acf = np.fft.irfft(spectrum * np.conj(spectrum), size)[: n // 2]
    below = np.flatnonzero(acf < math.exp(-1) * acf[0])
    lag = int(below[0]) if len(below) else n // 6
    return max(1, min(2 * lag, n // 3))


def _median(values: np.ndarray) -> float:
    """``np.median(values)``. A constant array (a fixed batch, a row logged every step or
    every N steps: the usual cases) is its own median, which a long log's fits and
    bootstraps then find without sorting a million rows each time."""
    if len(values) and values[0] == values[-1] and (values == values[0]).all():
        return float(values[0])
    return float(np.median(values))


def _blocks(rng: np.random.Generator, n_source: int, n_out: int, length: int) -> np.ndarray:
    """Indices of a moving-block resample: random blocks of ``length`` joined to ``n_out``."""
    length = max(1, min(length, n_source))
    starts = _block_starts(rng, n_source, n_out, length)
    return (starts[:, None] + np.arange(length)[None, :]).ravel()[:n_out]


def _block_starts(rng: np.random.Generator, n_source: int, n_out: int, length: int) -> np.ndarray:
    """The random starts of :func:`_blocks`' blocks (the only draws it makes)."""
    length = max(1, min(length, n_source))
    return rng.integers(0, n_source - length + 1, -(-n_out // length))


class _Resampler:
    """Draws for block-bootstrap replicates of a fit: its residuals resampled in blocks of a
    length found once from their autocorrelation."""

    def __init__(self, fit: LawFit) -> None:
        self.fit = fit
        self.root_weight = np.sqrt(fit.observations.weight)
        self.scaled = fit.residuals * self.root_weight
        self.block = _block_length(self.scaled)

    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, float | None]:
        """One replicate's binned loss and prior mean (the prior's own uncertainty drawn)."""
        fit = self.fit
        index = _blocks(rng, len(self.scaled), len(self.scaled), self.block)
        loss = fit.fitted + self.scaled[index] / self.root_weight
        prior_mean = fit.prior_mean
        if fit.prior is not None and prior_mean is not None:
            prior_mean = prior_mean * math.exp(rng.normal(0.0, fit.prior.sd))
        return loss, prior_mean


class _Fluctuation:
    """The smoothed loss's own fluctuation around the smoothed law, resampled into the future."""

    def __init__(self, history: History, fit: LawFit, first: int) -> None:
        # The smoothed loss minus the smoothed law is the EMA of the raw residuals (the EMA
        # is linear and the two start together), taken at the logged rows themselves.
        span = fit.ema_window / _median(history.batch[first:])
        first = self._tail_start(history.step, first, span)
        step = history.step[first:]
        residual = history.loss[first:] - fit.predict_steps(step.astype(float))
        residual[0] = 0.0
        values = token_window_ema(residual, step, history.batch[first:], fit.ema_window)
        # Skip the first spans: the EMA is still filling up there.
        settled = int(np.searchsorted(step, step[0] + _SETTLE_SPANS * span))
        if len(step) - settled < 8:
            settled = 0
        self.values = values[settled:]
        logged = step[settled:].astype(float)
        self.spacing = _median(np.diff(logged)) if len(logged) > 1 else 1.0
        self.block = _block_length(self.values)

    @staticmethod
    def _tail_start(step: np.ndarray, first: int, span: float) -> int:
        """The first row of the tail the fluctuation is drawn from (see _FLUCTUATION_ROWS)."""
        by_rows = len(step) - _FLUCTUATION_ROWS
        by_spans = int(np.searchsorted(step, step[-1] - (_FLUCTUATION_SPANS + _SETTLE_SPANS) * span))
        return max(first, min(by_rows, by_spans))

    def paths(self, steps: np.ndarray, last_step: float) -> _Paths:
        """Paths of the fluctuation on ``steps``: zero up to ``last_step``, resampled blocks after."""
        return _Paths(self, steps, last_step)


class _Paths:
    """Fluctuation paths on one grid of steps, drawn one at a time (what every path on the
    grid shares is found once)."""

    def __init__(self, fluctuation: _Fluctuation, steps: np.ndarray, last_step: float) -> None:
        self.fluctuation = fluctuation
        self.size = len(steps)
        self.rows = 0  # rows of fluctuation a path resamples (0: every path is zero)
        if len(fluctuation.values) >= 4 and np.any(fluctuation.values) and len(steps) and steps[-1] > last_step:
            # Far beyond the log the steps are coarse; a few thousand rows of path reach far enough.
            reach = min(float(steps[-1]) - last_step, 4.0 * max(last_step, 1.0))
            self.rows = int(min(max(reach / fluctuation.spacing, 2), 20_000))
        self.where = last_step + fluctuation.spacing * np.arange(1, self.rows + 1)
        # The steps past the log that the resampled rows reach: past the last of them a
        # path is zero (far past it, on a long log's grid, are most of the steps).
        ahead = np.flatnonzero(steps > last_step)
        if self.rows:
            ahead = ahead[: int(np.searchsorted(steps[ahead], self.where[-1], side="right"))]
        self.index = ahead
        self.at = steps[ahead]

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """A path."""
        path = np.zeros(self.size)
        if self.rows:
            values = self.fluctuation.values
            resampled = values[_blocks(rng, len(values), self.rows, self.fluctuation.block)]
            path[self.index] = np.interp(self.at, self.where, resampled, right=0.0)
        return path

    def skip(self, rng: np.random.Generator) -> None:
        """Draw from ``rng`` what :meth:`draw` draws, without making the path."""
        if self.rows:
            _block_starts(rng, len(self.fluctuation.values), self.rows, self.fluctuation.block)
