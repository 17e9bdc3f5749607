"""Which schedule-aware law forecasts a run: the one named, or with ``auto`` the one whose
forecasts of the run's own later history (from earlier cuts of its log) did best, and its
track record on the run (:class:`Selection`); and the fit of a law to a window of the log."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tracker_plugin.core.clock import DropCells, Timeline
from tracker_plugin.core.forecast_draws import _median
from tracker_plugin.core.models import (
    LAWS,
    LR_ANNEALING,
    FitFailure,
    GainPrior,
    LawFit,
    fit_law,
    observations,
)
from tracker_plugin.core.models.schedule_law import IRLS_ROUNDS
from tracker_plugin.defaults import AUTO
from tracker_plugin.frame.history import History

__all__ = [
    "CANDIDATES",
    "COMPARED_SHARE",
    "ERROR_PRIOR_SCALE",
    "ERROR_PRIOR_WEIGHT",
    "FAILED_SCORE",
    "INNER_CUTS",
    "MIN_SEEN_DECAY",
    "SELECTION_MARGIN",
    "Selection",
    "choose_law",
    "fit_window",
    "selection_score",
]

# Candidates of ``auto``, in order of preference when they forecast equally well: the
# richer law first, as long as the log shows enough of a decay to fit its response.
CANDIDATES = ("multi-power", "lr-annealing")
# The run's own history is forecast from cuts at these shares of its logged tokens, each
# time to when the smoothed loss reached its last logged value (stretches of up to 1.7x).
# Cuts late in the log see about as much of the lr decay as the real forecast does, so the
# laws are compared in the regime they will forecast in.
INNER_CUTS = (0.6, 0.7, 0.8)
# A law after the first must beat it by this much (mean |ln| over the inner cuts): the
# choice of leave-one-family-out cross-validation (benchmarks/bench_calibration.py).
SELECTION_MARGIN = 0.0
# The multi-power law's response shape needs a logged decay: at least this share of the
# peak lr must have been shed in the log before it is a candidate (chosen by the same
# validation among 0.1, 0.25 and 0.5).
MIN_SEEN_DECAY = 0.1
# ``auto`` compares the laws on the inner cuts whose log had shed at least this share of
# the lr the whole log has shed, the multi-power law forecasting where none had: a cut
# before the decay scores that law's response on its prior alone, which is not the regime
# the forecast is in (a step drop late in the log leaves every inner cut before it). Chosen
# with the gain prior by the same validation among 0, 0.25, 0.5 and 0.75: all four families
# together take 0.5 with a gain of 0.05 (see ANNEAL_GAIN); two folds 0, two 0.25.
COMPARED_SHARE = 0.5
# Prior for the law's own error per unit of log horizon: an extrapolation over a factor e
# in tokens is taken to be uncertain by this much in log tokens, before the run's own inner
# forecasts say otherwise; it counts as this many forecasts. Chosen, with the inflations
# below, by leave-one-family-out cross-validation over four families of public runs
# (benchmarks/bench_calibration.py; 0.3 worth one forecast before the interval drew over an
# unknown plan's futures, 0.1 worth three before a reached target forecast never to be was
# counted as a miss and the interval rules were chosen from a fixed start; the weight moves
# between one and ten forecasts with small changes to the runs, as it did when one more
# speedrun got its plan: weakly identified, see the README).
ERROR_PRIOR_SCALE = 0.2
ERROR_PRIOR_WEIGHT = 10.0
# A forecast that fails in the inner backtest scores this (|ln| of a factor e^3).
FAILED_SCORE = 3.0


@dataclass(frozen=True)
class Selection:
    """How the law was chosen, and how well each candidate forecast the run's own history.

    ``scores`` holds each candidate's mean |ln(predicted / actual tokens)| over the inner
    cuts (None when the log is too short for any); ``error_scale`` is the chosen law's
    root-mean-square error per unit of log horizon (``ln(actual / cut tokens)``), which
    widens the interval by the model's own track record.
    """

    chosen: str
    method: str
    scores: tuple[tuple[str, float | None], ...] = ()
    error_scale: float | None = None
    error_count: int = 0
    # The chosen law's inner forecasts: (|ln(predicted / actual)|, the share of the peak lr
    # the log had shed at the cut), so a backtest can replay the choice under another gate.
    inner: tuple[tuple[float, float], ...] = ()
    # (law, cut share) of the inner fits whose solver stopped without converging (its
    # evaluation budget spent): scored as any other, and said (:meth:`note`).
    unconverged: tuple[tuple[str, float], ...] = ()

    def note(self) -> str | None:
        """One line on the inner fits scored though their solver did not converge."""
        if not self.unconverged:
            return None
        which = ", ".join(f"{law} at {cut:.0%}" for law, cut in self.unconverged)
        return (f"the inner fit{'s' if len(self.unconverged) > 1 else ''} of the law choice ({which} of the logged "
                "run) stopped without converging (the solver's evaluation budget spent): scored as fitted, so "
                "the law choice and the interval's width rest partly on an unsettled fit")


def fit_window(
    law_name: str,
    history: History,
    first: int,
    end: int,
    timeline: Timeline,
    ema_window: float,
    prior: GainPrior | None,
    hint: LawFit | None = None,
    smoothed: np.ndarray | None = None,
    rounds: int = IRLS_ROUNDS,
    like: LawFit | None = None,
) -> LawFit | FitFailure:
    """Fit a law to the raw loss of rows ``first:end`` of ``history``.

    ``hint`` (the fit of an overlapping window, as in a sweep) starts the search near its
    parameters; it changes the speed, not the answer. ``smoothed`` (the run's EMA) starts
    the law's EMA at the observed one. ``rounds`` caps the reweighting rounds; ``like`` (the
    fit of the whole window) lends its prior strength, so a single round still weighs the
    prior as the full fit does.
    """
    obs = observations(history.step[first:end], history.loss[first:end], timeline)
    window_timeline = replace(timeline, last_step=float(history.step[end - 1])) if end < len(history) else timeline
    return fit_law(
        LAWS[law_name], obs, window_timeline, ema_window=ema_window, start_step=float(history.step[first]), prior=prior,
        start=None if hint is None else hint.theta,
        smoothed_start=None if smoothed is None else float(smoothed[first]),
        cadence=_median(np.diff(history.step[first:end])) if end - first > 1 else 1.0,
        rounds=rounds,
        strength=0.0 if like is None else like.strength,
    )


def choose_law(
    model: str,
    history: History,
    smoothed: np.ndarray,
    first: int,
    timeline: Timeline,
    ema_window: float,
    prior: GainPrior | None,
) -> tuple[LawFit | FitFailure, Selection]:
    """The fitted law for the whole window: the one named, or the one ``auto`` picks.

    Either way the chosen law's forecasts of the run's own later history (from the inner
    cuts) give :attr:`Selection.error_scale`.
    """
    end = len(history)
    names = [model] if model != AUTO else list(CANDIDATES)
    cells = timeline.drops()
    shed = cells.before(float(timeline.clock_at(history.step[-1]))).total
    if model == AUTO and shed < MIN_SEEN_DECAY:
        names = [LR_ANNEALING.name]
    unconverged: list[tuple[str, float]] = []
    inner = {name: _inner_errors(name, history, smoothed, first, timeline, ema_window, prior, cells, unconverged)
             for name in names}
    # Alone, a law is scored on every cut.
    floor = COMPARED_SHARE * shed if len(names) > 1 else 0.0
    scores = {name: selection_score([(abs(e), seen) for e, _, seen in errs], floor) for name, errs in inner.items()}
    chosen = names[0]
    for name in names[1:]:
        score, best = scores[name], scores[chosen]
        if score is not None and best is not None and score < best - SELECTION_MARGIN:
            chosen = name
    if model != AUTO:
        method = "named by the model setting"
    elif len(names) == 1:
        method = (
            f"auto: the lr has fallen by less than {MIN_SEEN_DECAY:.0%} of its peak in the log, "
            "too little to fit the multi-power law's response"
        )
    else:
        cuts = ", ".join(f"{c:.0%}" for c in INNER_CUTS)
        method = (
            f"auto: each law, fitted to the first {cuts} of the logged {history.unit}, forecast where the smoothed "
            "loss ended, and the smallest mean log error won"
            + (f", counting the cuts by which the lr had made {COMPARED_SHARE:.0%} of its logged fall, else taking "
               "the multi-power law" if COMPARED_SHARE > 0 else "")
            + (f" by more than {SELECTION_MARGIN}" if SELECTION_MARGIN > 0 else ", a tie going to the richer law")
        )
    fit = fit_window(chosen, history, first, end, timeline, ema_window, prior, smoothed=smoothed)
    errors = inner[chosen]
    return fit, Selection(chosen, method, tuple(scores.items()), *_error_scale([(e, r) for e, r, _ in errors]),
                          inner=tuple((abs(e), seen) for e, _, seen in errors), unconverged=tuple(unconverged))


def selection_score(inner: Sequence[tuple[float, float]], floor: float) -> float | None:
    """A law's mean ``|ln|`` over its inner forecasts ``(|ln|, share of the peak lr shed
    at the cut)`` from cuts that had shed at least ``floor`` (None: no such cut). Every law
    has the same cuts, so the laws' scores rest on the same ones (see :data:`COMPARED_SHARE`)."""
    seen = [error for error, shed in inner if shed >= floor]
    return float(np.mean(seen)) if seen else None


def _error_scale(errors: list[tuple[float, float]]) -> tuple[float, int]:
    """The law's error per unit of log horizon, and the Student-t degrees of freedom for it.

    A scale estimated from two or three inner forecasts can come out near zero by luck, so
    it is shrunk towards a prior scale (:data:`ERROR_PRIOR_SCALE`, worth
    :data:`ERROR_PRIOR_WEIGHT` forecasts): the conjugate update of a normal variance,
    ``(w * s0^2 + sum e^2) / (w + n)``, whose predictive law is a t with ``w + n`` degrees
    of freedom.
    """
    squares = [(e / math.log(r)) ** 2 for e, r in errors]
    weight = ERROR_PRIOR_WEIGHT
    scale = math.sqrt((weight * ERROR_PRIOR_SCALE**2 + sum(squares)) / (weight + len(squares)))
    return scale, int(weight + len(squares))


def _inner_errors(
    name: str,
    history: History,
    smoothed: np.ndarray,
    first: int,
    timeline: Timeline,
    ema_window: float,
    prior: GainPrior | None,
    cells: DropCells,
    unconverged: list[tuple[str, float]],
) -> list[tuple[float, float, float]]:
    """``(ln(predicted / actual tokens), actual / cut tokens, share of the peak lr shed by
    the cut)`` of forecasts of the log's end; ``cells`` are the timeline's drops. A cut
    whose fit did not converge is added to ``unconverged``."""
    tokens = history.tokens
    target = float(smoothed[-1])
    out = []
    for cut in INNER_CUTS:
        end = int(np.searchsorted(tokens, cut * tokens[-1], side="right"))
        if end - first < 8:
            continue
        reached = np.flatnonzero(smoothed[end:] <= target)
        if not len(reached) or tokens[end - 1] <= 0:
            continue
        actual = float(tokens[end + reached[0]])
        ratio = actual / float(tokens[end - 1])
        if ratio <= 1.05:
            continue
        fit = fit_window(name, history, first, end, timeline, ema_window, prior, smoothed=smoothed)
        if not isinstance(fit, FitFailure) and not fit.status.converged:
            unconverged.append((name, cut))
        predicted = None if isinstance(fit, FitFailure) else fit.solve(target)
        error = FAILED_SCORE if predicted is None else max(min(math.log(predicted / actual), FAILED_SCORE), -FAILED_SCORE)
        shed = cells.before(float(timeline.clock_at(history.step[end - 1]))).total
        out.append((error, ratio, shed))
    return out
