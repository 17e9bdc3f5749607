"""Forecasts with the schedule-aware laws: which law, when, and how sure.

- :func:`resolve_plan`: the lr plan a forecast rests on (given, or inferred from the log, or
  an assumption said out loud).
- :func:`choose_law`: with ``auto``, each law forecasts the run's own later history from an
  earlier cut of its log; the law that did best forecasts the rest.
- :func:`forecast_targets`: when the smoothed law reaches each target, an interval for it,
  and the chance of reaching it within the planned run.

The interval is a moving-block bootstrap. The residuals of the binned raw loss are
resampled in blocks as long as their autocorrelation (so a wandering stretch stays a
wandering stretch), added to the fitted curve and refitted; the prior on the annealing gain
is redrawn from its own spread each time (a decay the log has not shown is uncertain by that
much). Each replicate's crossing is then found on its smoothed curve plus a path of the
smoothed loss's own fluctuations, resampled the same way: the observed loss crosses a target
the first time a fluctuation carries it there, which on a flat stretch is well before the
mean curve does. The point forecast is the fitted law's median first crossing over such
paths. Last, each replicate moves by the law's own track record on this run (its errors
forecasting the log's later part from earlier cuts), which the residuals cannot show: how
wrong the law's shape is for this run. With a plan inferred or assumed, the future lr is
unknown too: :mod:`tracker_plugin.core.plan_spread` draws the interval over the plans the
log cannot rule out.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tracker_plugin.core.clock import DropCells, Timeline
from tracker_plugin.core.models import (
    LAWS,
    LR_ANNEALING,
    FitFailure,
    GainPrior,
    LawFit,
    fit_law,
    observations,
)
from tracker_plugin.core.models.replicates import refit_many
from tracker_plugin.core.models.schedule_law import IRLS_ROUNDS, crossing_tokens, ema_steps, smooth_after
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.defaults import AUTO
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import STEPS_ONLY, LrSchedule, Plan, infer_lr_schedule

__all__ = [
    "AUTO",
    "FAILED_SCORE",
    "Selection",
    "TargetForecast",
    "choose_law",
    "fit_window",
    "forecast_targets",
    "plan_inflation",
    "replicate_crossings",
    "resolve_plan",
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
# The degrees of freedom of the Student-t that draws the track record's stretch: 0 counts
# the forecasts the scale rests on (ERROR_PRIOR_WEIGHT + the inner forecasts); a small
# fixed number gives the interval heavier tails for its centre. Chosen by the same
# validation.
ERROR_DOF = 5
# The bootstrap's spread around the point forecast, in log tokens (the track record's
# stretch included), is multiplied by the first when the lr plan is given (the lr_schedule
# setting, the run's params, a file), by the second when it is inferred from the log or
# assumed (whose unknown future the draws over plausible plans carry, see plan_spread).
# Chosen by leave-one-family-out cross-validation, as ERROR_PRIOR_SCALE is (0.8 and 1.0
# before those draws, then 1.0 and 1.0, then 0.8 and 0.8).
INTERVAL_INFLATION = 0.8
UNKNOWN_PLAN_INFLATION = 0.8
# Where the forecast curve is flat at the target, a small error in the loss's level is a
# large one in tokens. Each replicate's horizon in the track record's stretch is moved this
# share of the way up to its *loss horizon*, the fall still to come over the curve's slope
# per unit of ln tokens at its crossing, where that is longer (on a curve straight in
# ln tokens the two are equal). 0 keeps the horizon alone. Chosen by leave-one-family-out
# cross-validation among 0, 0.5 and 1 (benchmarks/bench_calibration.py): three folds of four
# choose 0.
LOSS_HORIZON_SHARE = 0.0
# The slope at a crossing is read over this half-width in ln tokens.
_SLOPE_HALF_WIDTH = 0.05
# Plans whose source says they are not the run's own plan (see Plan.source).
UNKNOWN_PLAN_SOURCES = ("inferred", "assumed", STEPS_ONLY)
# The EMA remembers its start for a few spans (2.5 spans: under 1%).
_SETTLE_SPANS = 2.5
# Replicates of the bootstrap.
REPLICATES = 40
# The fluctuation is resampled from at most this many of the log's latest rows (dozens of
# EMA spans at any usual logging cadence), or from its last _FLUCTUATION_SPANS spans when
# those hold more rows: the recent fluctuation is the one the future continues, and a
# million-row log then costs no more than a short one.
_FLUCTUATION_ROWS = 1 << 14
_FLUCTUATION_SPANS = 50
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


@dataclass(frozen=True)
class TargetForecast:
    """One target's forecast: tokens (None when never reached), interval, chance within plan."""

    tokens: float | None
    interval: tuple[float, float] | None
    p_reach_within_plan: float | None
    note: str | None = None
    # The bootstrap's crossings, sorted (inf: not reached within the timeline): what the
    # interval is read from, kept so a backtest can score every coverage level at once.
    draws: tuple[float, ...] = ()
    # The replicates' crossings before the track record's stretch, in replicate order (inf:
    # never): with the selection's error scale they let a backtest replay other priors.
    raw: tuple[float, ...] = ()
    # Each replicate's loss horizon (see LOSS_HORIZON_SHARE), in the order of ``raw``
    # (0: none, as where it does not cross), so a backtest can replay other shares.
    loss_horizons: tuple[float, ...] = ()
    # With an inferred or assumed plan, the crossings of replicates on the plans the log
    # cannot rule out, before the stretch (see tracker_plugin.core.plan_spread).
    plan_raw: tuple[float, ...] = ()
    plan_ends: tuple[float, ...] = ()  # each plan_raw draw's plan end, in tokens (inf: none)
    # The central plan's crossing (inf: never) where the point is taken over the plausible
    # plans too (plan_spread.point_share), so a backtest can replay either point; None where
    # the point is the central plan's own.
    central: float | None = None


def resolve_plan(history: History, given: LrSchedule | None) -> Plan:
    """The plan given (the ``lr_schedule`` setting), else the run's own (its params, as a
    source put it in ``history.lr_plan``), else what the logged lr shows. A plan from the
    params that knows only the planned total (``steps-only``) takes its shape from the log."""
    given = given if given is not None else history.lr_plan
    if given is not None and given.source == STEPS_ONLY:
        # The params know the planned total, not the shape: the log shows the shape.
        return infer_lr_schedule(history.step, history.lr, planned=given)
    if given is not None:
        return Plan(given, f"planned lr: {given.description}")
    return infer_lr_schedule(history.step, history.lr)


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


def forecast_targets(
    fit: LawFit,
    targets: Sequence[float],
    history: History,
    first: int,
    *,
    level: float,
    error_scale: float | None = None,
    error_dof: int = 1,
    replicates: int = REPLICATES,
    inflation: float = INTERVAL_INFLATION,
    seed: int | None = None,
    refit: bool = True,
) -> list[TargetForecast]:
    """When the smoothed loss reaches each target, with an interval and the chance within plan.

    ``level`` is the interval's coverage (0.8 for an 80% interval). ``error_scale`` (see
    :class:`Selection`) adds the law's own track record: each replicate's log horizon
    ``ln(tokens / observed tokens)`` is multiplied by ``exp(error_scale * t)``, ``t`` a
    Student-t draw whose degrees of freedom count the forecasts the scale rests on (a scale
    from three errors is itself uncertain, which the t's heavier tails carry). The
    replicates are fitted once and serve every target. ``seed`` replaces the one drawn from
    the run's data (the plans of :mod:`~tracker_plugin.core.plan_spread` each take their own).
    ``refit`` False leaves out the bootstrap's replicates: the point forecast alone, for a
    caller that draws the interval elsewhere (the point is the same either way).
    """
    seed = _seed(history) if seed is None else seed
    rng = np.random.default_rng(seed)
    spread = np.random.default_rng(seed + 1)
    drawn = _draw(fit, history, first, replicates, rng, point=True, refit=refit)
    shifts = spread.standard_t(error_dof_of(error_dof), len(drawn.curves))
    observed = float(history.tokens[-1])
    # Past the end of the timeline (20x the run) a forecast means "not in sight".
    beyond = float(fit.timeline.tokens[-1])
    plan_end = fit.timeline.plan_end
    out = []
    for target in targets:
        crossings = [crossing_tokens(fit.timeline, drawn.steps, path, target) for path in drawn.central]
        # The point forecast: the fitted law's median first crossing over the fluctuation
        # paths alone (its plain crossing when the smoothed loss hardly fluctuates).
        tokens = float(np.median([math.inf if t is None else t for t in crossings]))
        if not refit:
            out.append(TargetForecast(tokens if math.isfinite(tokens) else None, None, None))
            continue
        if not drawn.curves:
            out.append(TargetForecast(tokens if math.isfinite(tokens) else None, None, None,
                                      "the bootstrap could not refit the law: no interval"))
            continue
        raw = drawn.raw(target, beyond)
        horizons = drawn.loss_horizons(fit.timeline, target, raw)
        found = stretched(np.array(raw), shifts, error_scale, observed, beyond, np.array(horizons))
        values = np.sort(_inflated(found, tokens, observed, inflation))
        low, high = interval_of(values, level)
        p_reach = None if plan_end is None else float(np.mean(values <= float(fit.timeline.tokens_at(plan_end))))
        draws = tuple(float(v) for v in values)
        note = None
        if not math.isfinite(tokens) and math.isfinite(median := float(values[len(values) // 2])):
            # The law levels off just above the target, by less than its own uncertainty:
            # most refits reach it, so "unreachable" would be the point's word, not the evidence's.
            tokens, note = median, _near_miss_note(fit, values)
        if not math.isfinite(tokens):
            out.append(TargetForecast(None, None, p_reach, draws=draws, raw=tuple(raw), loss_horizons=horizons))
        else:
            out.append(TargetForecast(tokens, (low, high), p_reach, note, draws=draws, raw=tuple(raw),
                                      loss_horizons=horizons))
    return out


def _near_miss_note(fit: LawFit, values: np.ndarray) -> str:
    share = float(np.mean(np.isfinite(values)))
    return (f"the fitted law levels off near {fit.asymptote:.4f}, just above the target, but {share:.0%} of the "
            f"laws fitted to resampled data reach it: the forecast is their median, and the interval is open-ended "
            f"where they do not")


def replicate_crossings(
    fit: LawFit, targets: Sequence[float], history: History, first: int, *, replicates: int, seed: int
) -> list[tuple[float, ...]]:
    """Each target's :attr:`TargetForecast.raw` of :func:`forecast_targets` with the same
    arguments, and nothing else: the replicates' crossings (inf: never; none when no
    replicate could be refitted) without the point forecast, its fluctuation paths or the
    interval, which a plausible plan of :mod:`~tracker_plugin.core.plan_spread` does not use."""
    drawn = _draw(fit, history, first, replicates, np.random.default_rng(seed), point=False)
    beyond = float(fit.timeline.tokens[-1])
    return [tuple(drawn.raw(target, beyond)) if drawn.curves else () for target in targets]


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


def error_dof_of(count: int) -> float:
    """The t's degrees of freedom for a scale from ``count`` forecasts (see :data:`ERROR_DOF`)."""
    return float(ERROR_DOF) if ERROR_DOF > 0 else float(max(count, 1))


def stretched(raw: np.ndarray, shifts: np.ndarray, error_scale: float | None, observed: float, beyond: float,
              loss_horizons: np.ndarray | None = None, share: float | None = None) -> np.ndarray:
    """Raw crossings (inf: never) moved by the law's track record: each log horizon
    ``h = ln(tokens / observed)`` becomes ``h + H * (exp(error_scale * shift) - 1)``,
    ``shift`` a Student-t draw per crossing (see :func:`forecast_targets`) and ``H`` the
    horizon moved ``share`` (default :data:`LOSS_HORIZON_SHARE`) of the way up to the
    crossing's loss horizon where that is longer (``H = h`` without them); past ``beyond``,
    never."""
    if not error_scale or observed <= 0:
        return np.where(raw > beyond, math.inf, raw)
    share = LOSS_HORIZON_SHARE if share is None else share
    # For small errors ln(tokens) moves by about scale * H * t, and a forecast never lands
    # before the tokens already logged.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        horizon = np.log(np.maximum(raw / observed, 1.0))
        spread = horizon
        if share > 0 and loss_horizons is not None and len(loss_horizons) == len(raw):
            spread = horizon + share * np.maximum(loss_horizons - horizon, 0.0)
        stretch = np.exp(np.clip(error_scale * shifts, -20.0, 5.0))
        moved = observed * np.exp(np.clip(horizon + spread * (stretch - 1.0), 0.0, 600.0))
    return np.where(np.isfinite(raw) & (moved <= beyond), moved, math.inf)


def interval_of(values: np.ndarray, level: float) -> tuple[float, float]:
    """The ``level`` interval of sorted draws: order statistics rather than interpolated
    quantiles, so draws that never reach the target count as infinitely late."""
    top = len(values) - 1
    return float(values[math.floor((1 - level) / 2 * top)]), float(values[math.ceil((1 + level) / 2 * top)])


def plan_inflation(plan: Plan) -> float:
    """The interval's inflation for a forecast on ``plan`` (see :data:`UNKNOWN_PLAN_INFLATION`)."""
    return UNKNOWN_PLAN_INFLATION if plan.source in UNKNOWN_PLAN_SOURCES else INTERVAL_INFLATION


def _inflated(draws: np.ndarray, tokens: float, observed: float, inflation: float) -> np.ndarray:
    """The draws' log horizons from the point forecast, scaled by ``inflation`` (never
    before the tokens already logged; a draw that never reaches stays never)."""
    if inflation == 1.0 or not math.isfinite(tokens) or tokens <= 0:
        return draws
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        moved = tokens * np.exp(inflation * np.log(draws / tokens))
    return np.where(np.isfinite(draws), np.maximum(moved, observed), draws)


def _seed(history: History) -> int:
    """A seed from the run's data: the same run gives the same forecast and interval."""
    # crc32(b, crc32(a)) == crc32(a + b), without copying a long log's arrays.
    return zlib.crc32(np.ascontiguousarray(history.step).data, zlib.crc32(np.ascontiguousarray(history.loss).data))


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
