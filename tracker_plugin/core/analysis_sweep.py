"""The stability sweep: the fit refitted on growing windows of the run, each window solved
for a target, and whether the forecast has settled."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tracker_plugin.core.analysis_config import MIN_FIT_ROWS, AnalysisConfig
from tracker_plugin.core.analysis_result import Sweep, SweepRow
from tracker_plugin.core.clock import Timeline, tokens_to_step
from tracker_plugin.core.forecast import fit_window
from tracker_plugin.core.models import FitFailure, GainPrior, LawFit, Model, PowerLaw, fit_power_law
from tracker_plugin.core.models.prefixes import fit_prefixes
from tracker_plugin.core.models.schedule_law import smooth_all
from tracker_plugin.core.status import Verdict
from tracker_plugin.frame.history import History

__all__ = ["Fitter", "sweep_checkpoints"]

# Fits one window of a sweep, rows ``first:end``, from the fit of the window before.
Fitter = Callable[[int, int, Model | None], Model | FitFailure]


def _sample(rows: np.ndarray, max_points: int) -> np.ndarray:
    """At most ``max_points`` of ``rows``, evenly spaced, first and last included.

    The smoothed curve varies slowly, so a long log says no more to a fit than a few
    thousand evenly spread points, and fitting those keeps a sweep over a long run fast.
    """
    if len(rows) <= max_points:
        return rows
    # With more rows than points the rounded positions are strictly increasing: no repeats.
    return rows[np.linspace(0, len(rows) - 1, max_points).round().astype(np.int64)]


def _fit(history: History, smoothed: np.ndarray, rows: range, config: AnalysisConfig) -> PowerLaw | FitFailure:
    if config.max_fit_points is not None:
        picked = _sample(np.arange(rows.start, rows.stop), config.max_fit_points)
        return fit_power_law(history.tokens[picked], smoothed[picked])
    return fit_power_law(history.tokens[rows.start : rows.stop], smoothed[rows.start : rows.stop])


def sweep_checkpoints(fit_start: int, last_step: int, every: int, min_window: int) -> list[int]:
    """Window ends for the sweep: every ``every`` steps, ending with the last step.

    The last step replaces the final regular window when it falls less than half a
    sweep step after it, so the last two windows always differ by real data.
    """
    checkpoints = list(range(fit_start + min_window, last_step, every))
    if checkpoints and last_step - checkpoints[-1] < every / 2:
        checkpoints.pop()
    checkpoints.append(last_step)
    return checkpoints


def _law_sweep(
    history: History,
    smoothed: np.ndarray,
    fit_start: int,
    config: AnalysisConfig,
    fit: LawFit | FitFailure,
    chosen: str,
    timeline: Timeline,
    prior: GainPrior | None,
    targets: Sequence[float],
) -> tuple[tuple[SweepRow, ...], list[dict[float, float | None] | None]]:
    """The stability sweep with a schedule-aware law: its rows, and where each row's
    smoothed law reaches each target (None for a row without a fit).

    Every window is fitted with one weighted pass: for the lr-annealing law with the whole
    window's robust weights and prior strength (:func:`fit_prefixes`), else one by one.
    The windows' EMAs are computed together, a block at a time, and serve every target.
    """

    def one_by_one(start: int, end: int, hint: Model | None) -> LawFit | FitFailure:
        like = None if isinstance(fit, FitFailure) else fit
        # The windows before are fitted with this law too: a hint is always one of its fits.
        return fit_window(
            chosen, history, start, end, timeline, config.ema_token_window, prior,
            hint if isinstance(hint, LawFit) else None, smoothed, rounds=1, like=like,
        )

    if isinstance(fit, FitFailure):
        alone = _sweep_fits(history, smoothed, fit_start, config, fitter=one_by_one)
        return alone, _row_crossings(alone, [], targets)
    first = int(np.searchsorted(history.step, fit_start))
    windows = []
    for max_step in sweep_checkpoints(fit_start, history.last_step, config.sweep_step, config.sweep_min_window):
        end = int(np.searchsorted(history.step, max_step, side="right"))
        if end - first >= MIN_FIT_ROWS:
            windows.append((max_step, end))
    batch = fit_prefixes(fit, history.step[first:].astype(float), history.loss[first:], [end - first for _, end in windows])
    rows = []
    for (max_step, end), found in zip(windows, batch):
        window_fit = found if found is not None else one_by_one(first, end, None)
        note = window_fit.reason if isinstance(window_fit, FitFailure) else None
        rows.append(SweepRow(max_step, float(history.tokens[end - 1]), None, None,
                             None if isinstance(window_fit, FitFailure) else window_fit, note))
    return tuple(rows), _row_crossings(rows, [f for f in batch if isinstance(f, LawFit)], targets)


# The windows' smoothed laws are made this many at a time and solved at once: a sweep over
# a long log holds a few blocks of EMAs rather than one per window (1M rows: 3,300 windows
# of 42,000 points, over a gigabyte).
_SMOOTH_BLOCK = 32


def _row_crossings(
    rows: Sequence[SweepRow], together: list[LawFit], targets: Sequence[float]
) -> list[dict[float, float | None] | None]:
    """Where each row's smoothed law first reaches each target: the fits of ``together``
    (one run's windows from one start, cadence and law) smoothed a block at a time, any
    other alone. Each block is smoothed with the longest of ``together`` beside it, so every
    block lies on the grid the whole set would have (:func:`smooth_all` takes its grid from
    the fits' latest timeline) and its answers are those of one pass over all of them."""
    found: dict[int, dict[float, float | None]] = {}
    longest = max(together, key=lambda f: f.timeline.last_step) if together else None
    for lo in range(0, len(together), _SMOOTH_BLOCK):
        block = together[lo:lo + _SMOOTH_BLOCK]
        assert longest is not None
        for curve in smooth_all(block if any(f is longest for f in block) else [*block, longest]):
            found[id(curve.fit)] = {t: curve.solve(t) for t in targets}
    out: list[dict[float, float | None] | None] = []
    for row in rows:
        if row.fit is None:
            out.append(None)
        elif id(row.fit) in found:
            out.append(found[id(row.fit)])
        else:
            assert isinstance(row.fit, LawFit)
            alone = smooth_all([row.fit])[0]
            out.append({t: alone.solve(t) for t in targets})
    return out


def _sweep_fits(
    history: History,
    smoothed: np.ndarray,
    fit_start: int,
    config: AnalysisConfig,
    fitter: Fitter | None = None,
) -> tuple[SweepRow, ...]:
    """Fits on windows ending every sweep step; ``fitter(first, end, hint)`` makes each fit
    (default: the power law on the smoothed loss)."""
    if fitter is None:

        def power_law(start: int, end: int, hint: Model | None) -> Model | FitFailure:
            # No hint: the original script fits every window from its own start.
            return _fit(history, smoothed, range(start, end), config)

        fitter = power_law

    rows = []
    first = int(np.searchsorted(history.step, fit_start))
    previous = None
    for max_step in sweep_checkpoints(fit_start, history.last_step, config.sweep_step, config.sweep_min_window):
        end = int(np.searchsorted(history.step, max_step, side="right"))
        if end - first < MIN_FIT_ROWS:
            continue
        fit = fitter(first, end, previous)
        previous = None if isinstance(fit, FitFailure) else fit
        note = fit.reason if isinstance(fit, FitFailure) else None
        rows.append(
            SweepRow(
                max_step=max_step,
                max_tokens=float(history.tokens[end - 1]),
                tokens=None,
                step=None,
                fit=None if isinstance(fit, FitFailure) else fit,
                note=note,
            )
        )
    return tuple(rows)


def _solve_rows(
    rows: Sequence[SweepRow],
    target: float,
    history: History,
    config: AnalysisConfig,
    crossings: Sequence[float | None] | None = None,
) -> tuple[SweepRow, ...]:
    """Each row solved for ``target``: by its fit, or as ``crossings`` (each row's smoothed
    law's crossing of the target) says."""
    solved = []
    for i, row in enumerate(rows):
        if crossings is not None:
            tokens = crossings[i]
        else:
            tokens = row.fit.solve(target) if row.fit is not None else None
        note = row.note
        if row.fit is not None and tokens is None:
            note = f"the law fitted up to here levels off near {row.fit.asymptote:.4f}, above the target"
        elif tokens is not None and not math.isfinite(tokens):
            tokens, note = None, f"the law fitted up to here reaches the target only beyond 1e300 {history.unit}"
        step = tokens_to_step(tokens, history, config.batch_schedule) if tokens is not None else None
        solved.append(SweepRow(row.max_step, row.max_tokens, tokens, step, row.fit, note))
    return tuple(solved)


def _judge(rows: tuple[SweepRow, ...], tolerance: float) -> Sweep:
    """Converged when the last two window-to-window changes in predicted tokens are within tolerance."""
    valid = [row.tokens for row in rows if row.tokens is not None]
    if len(valid) < 3:
        return Sweep(rows, Verdict.NOT_ENOUGH_DATA, None, tolerance)
    t2, t1, t0 = valid[-3:]
    changes = (abs(t1 - t2) / t2, abs(t0 - t1) / t1)
    verdict = Verdict.CONVERGED if all(c <= tolerance for c in changes) else Verdict.NOT_CONVERGED
    return Sweep(rows, verdict, changes, tolerance)
