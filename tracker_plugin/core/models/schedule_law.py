"""Schedule-aware loss laws and how they are fitted.

Every law here has the form

    L(t) = L0 + A * power(t) - G * anneal(t)

where ``power`` falls with the summed learning rate (the lr area ``S``, see
:mod:`tracker_plugin.core.clock`) and ``anneal`` grows as the lr decays; ``L0``, ``A >= 0`` and
``G >= 0`` enter linearly. For a given shape (the nonlinear parameters ``theta``) they are
solved exactly (variable projection), so the search runs over ``theta`` alone.

Fitting choices, each for a reason:

- **Raw loss, not the smoothed loss.** The EMA lags the loss by about half its window, and a
  law fitted to the lagged curve forecasts late. The fit uses the raw loss (averaged in bins
  of consecutive rows on long logs, which keeps it fast and changes nothing at the scale of
  the curve); forecasts pass the law through the same EMA as the observed loss.
- **Robust residuals.** Iteratively reweighted least squares with Huber weights, so a loss
  spike or a bad eval does not drag the curve. The reweighting stays around the solver
  rather than being ``least_squares``'s own robust loss: the linear parameters are solved
  exactly for the current weights (variable projection), which a robust loss inside the
  solver would not see, and each round re-estimates the noise scale (and with it the Huber
  threshold and the prior's strength) from the residuals, where ``f_scale`` is fixed.
- **A prior on the annealing gain.** ``G`` is the loss a full decay of the lr removes once
  it has taken effect. A log whose lr has not decayed yet says nothing about ``G``; yet the
  planned decay is exactly what brings a cosine or WSD run to its target. The gain gets a
  weak Gaussian prior centred on a fraction of the current loss (see :class:`GainPrior`);
  once a decay is logged the data outweigh it. The prior is on what the forecast reads:
  the loss the planned decay removes by the plan's end, per unit of the planned drop (see
  :class:`_PlannedEffect`), so a response too slow to act within the plan is no way to
  escape it, and a decay the log has only begun to show is held to it as much as the data
  leave free, with no threshold.
- **An origin shift of the lr area.** At constant lr a law reduces to
  ``L0 + A * (S / S_ref) ** -alpha``, and ``S`` summed from step 0 is an assumed origin: a
  warmup that counts for more or less than its area, or a run whose early progress per
  unit of lr area differs, makes the fit trade ``alpha`` against ``L0`` to meet it, which
  moves long extrapolations (early, on the public constant-lr runs and a synthetic power
  law; see ``benchmarks/bench_constant_phase.py``). Every law therefore takes its power of
  ``S / S_ref + shift``, ``shift`` a nonlinear parameter (the last of ``theta``) bounded
  by the fit window: from just above minus the window's first relative area (the power
  stays finite wherever the law is evaluated) to plus that area. It is held at 0 where it
  is not identified or takes up something else than an origin (few points, an lr assumed
  rather than logged, a decay already seen; see :func:`_shift_bounds`; and a positive shift
  that has the law start below the log's first row, see :func:`_starts_below_the_log`), by
  rules chosen on the public runs leave-one-family-out (``benchmarks/bench_calibration.py``).
- **Several starts** for laws with more than one nonlinear parameter (SciPy's
  ``least_squares``, trust-region reflective, with the analytic Jacobian of the projected
  residuals), and a grid plus Brent's method (``minimize_scalar``) for those with one, so
  the answer does not hang on an initial guess (see :mod:`.search`).

Every fit says how its solver ended (:class:`~tracker_plugin.core.models.base.FitStatus`).

The law's form is in :mod:`.law_form`, the points it is fitted to in :mod:`.law_observations`,
the search over its shape in :mod:`.law_search`, and a fitted law read as the smoothed loss
is (through the same EMA) in :mod:`.law_smoothing`; their public names are importable here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from tracker_plugin.core.clock import DropCells, Timeline
from tracker_plugin.core.models.base import FitFailure, FitStatus
from tracker_plugin.core.models.law_form import ANNEAL_GAIN, GainPrior, Law, _planned_effect
from tracker_plugin.core.models.law_observations import Observations, observations
from tracker_plugin.core.models.law_search import _prior_strength, _search, _Shapes, _status, robust_sigma
from tracker_plugin.core.models.law_smoothing import (
    SmoothedLaw,
    crossing_tokens,
    ema_steps,
    smooth_after,
    smooth_all,
)
from tracker_plugin.core.models.projection import Projection

__all__ = [
    "ANNEAL_GAIN",
    "GainPrior",
    "Law",
    "LawFit",
    "Observations",
    "SmoothedLaw",
    "crossing_tokens",
    "ema_steps",
    "fit_law",
    "observations",
    "robust_sigma",
    "smooth_after",
    "smooth_all",
]

# Fewer binned points than this and a law (three linear and at least one nonlinear
# parameter) is not fitted: two points beyond the four parameters are left for the noise
# the interval resamples.
MIN_POINTS = 6
# A window that has seen no lr decay identifies only L0, A and the exponent (the gain's
# column is zero there, and a decay's shape acts on nothing): one parameter fewer, one
# point fewer, the same two left for the noise.
MIN_POINTS_NO_DECAY = MIN_POINTS - 1
# Fewer binned points than this and the origin shift is held at 0 (a law then has one
# parameter fewer to meet the points with).
SHIFT_MIN_POINTS = 16
# The shift is held at 0 once the window's lr has shed this share of its peak: past it the
# decay's response bends the curve and the shift trades against it.
SHIFT_MAX_SEEN_DECAY = 0.25
# The shift keeps the shifted area at the window's first point above this share of its
# own area, and is at most this many reference areas; it is held at 0 where the window
# starts at less than the last share of the reference area.
_SHIFT_FLOOR = 0.01
_SHIFT_MAX = 1.0
_SHIFT_MIN_AREA = 0.01
# A positive shift is held at 0 where the law, continued back to the log's first row, leaves
# more than this share of the logged loss's excess over L0 there unexplained.
_SHIFT_START_TOLERANCE = 0.1
# Huber's constant: residuals within this many robust standard deviations keep full weight.
HUBER = 1.345
IRLS_ROUNDS = 3
# Two timelines of one log (on different lr plans) give its points the same lr area and
# clock to this relative precision when they agree over the log: each sums the lr on its
# own grid, which differs in the last bits (a few 1e-16 per step; 2e-13 at a 1,400-step cut).
_SAME_AREA = 1e-12


@dataclass(frozen=True, eq=False)
class LawFit:
    """A fitted law on its timeline: predicts the raw loss, and when its EMA reaches a target."""

    law: Law
    theta: np.ndarray  # the law's parameters, then the origin shift (in reference areas)
    coef: np.ndarray  # L0, A, G
    area_ref: float
    timeline: Timeline
    cells: DropCells  # every lr drop of the timeline: the plan's too
    ema_window: float
    start_step: float
    sigma: float  # robust standard deviation of a binned residual of unit weight
    residuals: np.ndarray = field(repr=False)  # of the binned raw loss
    fitted: np.ndarray = field(repr=False)
    observations: Observations = field(repr=False)
    status: FitStatus
    prior: GainPrior | None = None
    prior_mean: float | None = None
    weight: np.ndarray | None = field(default=None, repr=False)  # final robust weights
    strength: float = 0.0  # weight of the prior's pseudo-observation
    smoothed_start: float | None = None  # the observed EMA at the start step
    cadence: float = 1.0  # steps between logged rows (the median)

    @property
    def name(self) -> str:
        return self.law.name

    @property
    def params(self) -> dict[str, float]:
        l0, a, g = (float(c) for c in self.coef)
        params = {"L0": l0, "A": a, "G": g}
        params.update({k: float(v) for k, v in zip(self.law.parameter_names, self.theta)})
        params["area_ref"] = self.area_ref
        return params

    @property
    def l0(self) -> float:
        return float(self.coef[0])

    @property
    def alpha(self) -> float:
        return float(self.theta[0])

    @property
    def shift(self) -> float:
        """The origin shift of the lr area, in reference areas (0 when held)."""
        return float(self.theta[-1])

    @property
    def asymptote(self) -> float:
        """The loss the law approaches at the end of the timeline (the planned lr held)."""
        return float(self.predict_steps(np.array([self.timeline.horizon]))[0])

    @property
    def planned_gain(self) -> float | None:
        """The loss the planned lr decays remove by the plan's end (by the timeline's when no
        plan is known): ``G`` times the response realised there. None without a decay."""
        effect = _planned_effect(self.law, self.timeline, self.cells)
        return None if effect is None else float(self.coef[2]) * effect.value(self.theta[:-1]) * effect.total

    def predict_steps(self, steps: np.ndarray) -> np.ndarray:
        """The raw loss the law predicts at ``steps`` (the plan's lr decays included)."""
        steps = np.asarray(steps, float)
        area = self.timeline.area_at(steps)
        clock = self.timeline.clock_at(steps)
        power, anneal = self.law.columns(self.theta, clock, area, self.area_ref, self.cells)
        return self.coef[0] + self.coef[1] * power - self.coef[2] * anneal

    def predict(self, tokens: np.ndarray) -> np.ndarray:
        """The raw loss at ``tokens`` (for plots)."""
        return self.predict_steps(self.timeline.step_at_tokens(tokens))

    def smoothed(self) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, EMA of the law)`` from the fit start to the end of the timeline.

        Computed on each call (the fit holds no cache): to solve one fit for many targets,
        or many fits, smooth once with :func:`smooth_all` and keep what it returns.
        """
        (smoothed,) = smooth_all([self])
        return smoothed.steps, smoothed.curve

    def solve(self, target: float) -> float | None:
        """Tokens at which the smoothed law first reaches ``target`` after the log; None if never."""
        (smoothed,) = smooth_all([self])
        return smoothed.solve(target)

    def refit(self, loss: np.ndarray, prior_mean: float | None = None) -> LawFit | FitFailure:
        """The same law fitted to other loss values at the same points (for the bootstrap).

        One weighted least-squares pass with this fit's robust weights and prior strength,
        started from its parameters.
        """
        obs = replace(self.observations, loss=loss)
        return _fit(
            self.law, obs, self.timeline, self.cells, self.ema_window, self.start_step, self.prior, self.area_ref,
            prior_mean if prior_mean is not None else self.prior_mean,
            start=self.theta, rounds=1, weight=self.weight, strength=self.strength, smoothed_start=self.smoothed_start,
            cadence=self.cadence,
        )

    def on_timeline(
        self, timeline: Timeline, prior: GainPrior | None, like: LawFit | None = None
    ) -> LawFit | FitFailure:
        """The same law fitted afresh, from this fit's parameters, to the same binned loss
        on another timeline of the run (the same log on another lr plan): what fitting the
        window on ``timeline`` with ``prior`` gives, without binning the rows again.

        ``like`` (this fit on another timeline, with the same ``prior``) is taken over when
        the two timelines give the fit the same inputs: plans that differ only after the
        log (the cooldowns an lr held at its peak might end in) then cost one fit, not one
        each. The answer is the one a fit would give, to the rounding of the lr area (each
        plan's timeline sums it on its own grid).
        """
        obs = replace(self.observations, area=timeline.area_at(self.observations.step),
                      clock=timeline.clock_at(self.observations.step))
        if like is not None and _same_inputs(like, obs, timeline):
            return _taken_over(like, timeline)
        return fit_law(
            self.law, obs, timeline, ema_window=self.ema_window, start_step=self.start_step, prior=prior,
            start=self.theta, smoothed_start=self.smoothed_start, cadence=self.cadence,
        )

    def refit_window(
        self, obs: Observations, last_step: float, weight: np.ndarray, prior_mean: float | None
    ) -> LawFit | FitFailure:
        """The same law fitted to another window of the run from the same start (a sweep's,
        ending at ``last_step``): one pass with ``weight`` and this fit's prior strength,
        its exponent searched afresh."""
        return _fit(
            self.law, obs, replace(self.timeline, last_step=last_step), self.cells, self.ema_window, self.start_step,
            self.prior, float(obs.area[-1]), prior_mean, rounds=1, weight=weight, strength=self.strength,
            smoothed_start=self.smoothed_start, cadence=self.cadence,
        )


def _same_inputs(fit: LawFit, obs: Observations, timeline: Timeline) -> bool:
    """Whether fitting ``fit``'s law to ``obs`` on ``timeline`` (from the same start, with the
    same prior) would search as ``fit``'s own fit did: the same binned points (their lr area
    and clock equal but for rounding, :data:`_SAME_AREA`), the same lr drops seen by them, a
    prior or none alike (none where the timeline has no drop at all), and what the origin
    shift's bounds and check read from the timeline."""
    mine, seen = fit.observations, timeline.drops()
    if not (_same(mine.area, obs.area) and _same(mine.clock, obs.clock)):
        return False
    if (len(fit.cells) == 0) != (len(seen) == 0):
        return False
    last = float(obs.clock[-1])
    a, b = fit.cells.before(last), seen.before(last)
    if not all(np.array_equal(x, y) for x, y in
               ((a.size, b.size), (a.clock, b.clock), (a.area, b.area), (a.lr_after, b.lr_after))):
        return False
    # A plan whose decay has another effect by its end gives the gain prior another meaning,
    # unless the window has seen no drop: the gain is then the prior's alone, whatever the
    # plan, and the fit differs only in the law's G (see _taken_over).
    if fit.prior is not None and a.total > 0 and not _same_effect(fit, timeline, seen):
        return False
    there = np.array([fit.start_step, timeline.first_step])
    old = fit.timeline
    return (old.lr_assumed == timeline.lr_assumed and old.first_step == timeline.first_step
            and old.first_loss == timeline.first_loss
            and _same(old.area_at(there), timeline.area_at(there)))


def _taken_over(like: LawFit, timeline: Timeline) -> LawFit:
    """``like`` on ``timeline`` (see :func:`_same_inputs`): where the planned decay's effect
    by the plan's end differs, the solved gain (the prior's, the window having seen no drop)
    is the same and the law's ``G`` is that over the other plan's effect."""
    cells = timeline.drops()
    fit = replace(like, timeline=timeline, cells=cells)
    if like.prior is None:
        return fit
    shape = like.theta[:-1]
    mine, theirs = _planned_effect(like.law, like.timeline, like.cells), _planned_effect(like.law, timeline, cells)
    solved = like.coef[2] * (1.0 if mine is None else mine.value(shape))
    gain = solved / (1.0 if theirs is None else theirs.value(shape))
    return replace(fit, coef=np.array([like.coef[0], like.coef[1], gain]))


def _same_effect(fit: LawFit, timeline: Timeline, cells: DropCells) -> bool:
    """Whether the planned decay's effect that ``fit``'s gain was solved as (see
    :class:`_PlannedEffect`) is the same on ``timeline`` (its drops ``cells``): the same
    plan end and drops by it."""
    mine, theirs = _planned_effect(fit.law, fit.timeline, fit.cells), _planned_effect(fit.law, timeline, cells)
    if mine is None or theirs is None:
        return mine is None and theirs is None
    return (_same(mine.area, theirs.area) and _same(mine.clock, theirs.clock)
            and _same(mine.cells.area, theirs.cells.area) and _same(mine.cells.size, theirs.cells.size)
            and _same(mine.cells.lr_after, theirs.cells.lr_after))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal but for the rounding of sums taken on different grids."""
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=_SAME_AREA, atol=0.0))


def fit_law(
    law: Law,
    obs: Observations,
    timeline: Timeline,
    *,
    ema_window: float,
    start_step: float,
    prior: GainPrior | None = GainPrior(),
    start: np.ndarray | None = None,
    smoothed_start: float | None = None,
    cadence: float = 1.0,
    rounds: int = IRLS_ROUNDS,
    strength: float = 0.0,
) -> LawFit | FitFailure:
    """Fit ``law`` to the binned raw loss ``obs`` of a run on ``timeline``.

    ``start`` (parameters of a nearby fit, with or without its shift) narrows the first
    search around them.
    ``smoothed_start`` is the observed EMA at ``start_step``: the law's EMA starts there.
    ``cadence`` is the steps between logged rows: the law's EMA is taken at that cadence,
    as the observed one is. ``rounds`` caps the reweighting rounds; ``strength`` (the prior
    weight of a fit of the same run) lets even the first round use the prior.

    The fit sees only the lr drops before its last point; the returned fit predicts with
    every drop of the timeline (the planned ones too).

    Returns a :class:`FitFailure` with the reason when the window cannot carry a fit.
    """
    cells = timeline.drops()
    failure = _degenerate(law.name, obs, seen_decay=len(cells.before(float(obs.clock[-1]))) > 0)
    if failure is not None:
        return failure
    if not len(cells):
        prior = None  # no decay logged or planned: the gain has nothing to act on
    area_ref = float(obs.area[-1])
    prior_mean = None if prior is None else prior.fraction * _level(obs)
    return _fit(
        law, obs, timeline, cells, ema_window, start_step, prior, area_ref, prior_mean, start=start,
        smoothed_start=smoothed_start, cadence=cadence, rounds=rounds,
        strength=strength if prior is not None else 0.0,
    )


def _level(obs: Observations) -> float:
    """The loss at the end of the window: the weighted mean of its last tenth."""
    tail = max(3, len(obs) // 10)
    return float(np.average(obs.loss[-tail:], weights=obs.weight[-tail:]))


def _degenerate(name: str, obs: Observations, *, seen_decay: bool) -> FitFailure | None:
    needed = MIN_POINTS if seen_decay else MIN_POINTS_NO_DECAY
    if len(obs) < needed:
        why = " (it shows an lr decay, whose gain is one more parameter)" if seen_decay and len(obs) >= MIN_POINTS_NO_DECAY else ""
        return FitFailure(name, f"needs at least {needed} points in the fit window{why}, has {len(obs)}")
    if not (np.isfinite(obs.loss).all() and np.isfinite(obs.area).all()):
        return FitFailure(name, "the fit window holds values that are not finite")
    if obs.area[0] <= 0 or obs.area[-1] <= obs.area[0]:
        return FitFailure(name, "the lr area does not grow over the fit window (is the lr zero there?)")
    if float(np.ptp(obs.loss)) <= 1e-12 * max(1.0, float(np.abs(obs.loss).max())):
        return FitFailure(name, "the loss does not change over the fit window")
    return None


def _fit(
    law: Law,
    obs: Observations,
    timeline: Timeline,
    cells: DropCells,
    ema_window: float,
    start_step: float,
    prior: GainPrior | None,
    area_ref: float,
    prior_mean: float | None,
    *,
    start: np.ndarray | None = None,
    rounds: int = IRLS_ROUNDS,
    weight: np.ndarray | None = None,
    strength: float = 0.0,
    smoothed_start: float | None = None,
    cadence: float = 1.0,
) -> LawFit | FitFailure:
    given_weight = weight is not None
    weight = obs.weight.copy() if weight is None else weight
    theta = None if start is None else np.asarray(start, float)
    if theta is not None and len(theta) == len(law.theta_names):
        theta = np.r_[theta, 0.0]
    shapes = _Shapes(law, obs, cells.before(float(obs.clock[-1])), area_ref,
                     _planned_effect(law, timeline, cells) if prior is not None else None)
    shift = _shift_bounds(obs, timeline, start_step, area_ref, shapes.seen.total)
    residuals = fitted = coef = None
    evaluations, settled, done = 0, False, 0
    previous_theta = None
    for round_ in range(rounds):
        use_prior = round_ > 0 or strength > 0
        problem = Projection(obs.loss, weight, prior_mean if use_prior else None, strength)
        theta, search = _search(law, problem, shapes, theta, shift)
        evaluations += search.evaluations
        done += 1
        if theta is None:
            return FitFailure(law.name, f"the least-squares problem has no finite solution ({search.reason})")
        coef, fitted = problem.solve(*shapes(theta))
        if shift is not None and _starts_below_the_log(law, theta, coef, timeline, start_step, area_ref):
            shift = None  # and this round again, the shift held at 0
            theta, search = _search(law, problem, shapes, theta, shift)
            evaluations += search.evaluations
            if theta is None:
                return FitFailure(law.name, f"the least-squares problem has no finite solution ({search.reason})")
            coef, fitted = problem.solve(*shapes(theta))
        residuals = obs.loss - fitted
        scaled = residuals * np.sqrt(obs.weight)
        sigma = robust_sigma(residuals, obs.weight)
        if given_weight:
            break
        if previous_theta is not None and np.allclose(theta, previous_theta, rtol=1e-3, atol=1e-5):
            settled = True
            break  # the reweighting has settled
        previous_theta = theta
        huber = np.minimum(1.0, HUBER * sigma / np.maximum(np.abs(scaled), 1e-300))
        weight = obs.weight * huber
        if prior is not None and prior_mean is not None and prior_mean > 0:
            strength = _prior_strength(scaled, sigma, prior.sd * prior_mean)
    assert theta is not None and coef is not None and residuals is not None and fitted is not None
    return LawFit(
        law=law,
        theta=theta,
        coef=shapes.law_coef(theta, coef),
        area_ref=area_ref,
        timeline=timeline,
        cells=cells,
        ema_window=ema_window,
        start_step=start_step,
        sigma=sigma,
        residuals=residuals,
        fitted=fitted,
        observations=obs,
        status=_status(search, evaluations, done, settled, given_weight, rounds),
        prior=prior,
        prior_mean=prior_mean,
        weight=weight,
        strength=strength,
        smoothed_start=smoothed_start,
        cadence=cadence,
    )


def _shift_bounds(
    obs: Observations, timeline: Timeline, start_step: float, area_ref: float, seen_decay: float
) -> tuple[float, float] | None:
    """The bounds of the origin shift, or None where it is held at 0.

    The shifted relative area stays positive from the fit start on, where the law's EMA
    starts, and so wherever the law is evaluated: the lower bound is just above minus the
    relative area there. The steps before the window count for at most twice their area:
    the upper bound is that area. Held at 0: a window of fewer than
    :data:`SHIFT_MIN_POINTS` points; one that starts within :data:`_SHIFT_MIN_AREA` of the
    origin (the bounds would pin it there anyway, and a shift too small to matter only
    moves the multi-power law between the flat valleys of its response); and an lr that is
    assumed rather than logged or planned, where the shift takes up the unknown schedule
    (the unseen warmup early, the unseen cooldown later) instead of an origin; and a
    window whose lr has shed :data:`SHIFT_MAX_SEEN_DECAY` of its peak, where the response
    to the decay bends the curve and the shift would trade against it.
    """
    if len(obs) < SHIFT_MIN_POINTS or timeline.lr_assumed or seen_decay >= SHIFT_MAX_SEEN_DECAY:
        return None
    first = min(float(obs.area[0]), float(timeline.area_at(np.array([start_step]))[0])) / area_ref
    if first < _SHIFT_MIN_AREA:
        return None
    return -(1.0 - _SHIFT_FLOOR) * first, min(_SHIFT_MAX, first)


def _starts_below_the_log(
    law: Law, theta: np.ndarray, coef: np.ndarray, timeline: Timeline, start_step: float, area_ref: float
) -> bool:
    """Whether a positive shift has the law, continued back before the window, start below the
    loss logged at the log's first row.

    A positive shift says the run behaves as if it had trained ``shift * area_ref`` of lr area
    before step 0: the law then puts a finite loss at the first row, and the run cannot have
    been better there than it was (fast early progress that the fit takes for an earlier
    origin; the shift then bends the curve instead of placing one). The first row counts
    only before the window (within it the fit meets the log, noise and all); the decay's
    response is left out (nothing has decayed before the window where the shift is free).
    Only a clear shortfall counts: the law's excess over ``L0`` there short of the logged
    one by more than :data:`_SHIFT_START_TOLERANCE` (a run that follows a shifted law from
    step 0 comes within a percent; the first row is one raw reading, the law's value there
    an extrapolation back over the steps before the window).
    """
    shift = float(theta[-1])
    if shift <= 0.0 or not timeline.first_step < start_step or not math.isfinite(timeline.first_loss):
        return False
    at = float(timeline.area_at(np.array([timeline.first_step]))[0]) / area_ref + shift
    excess = float(coef[1] * law.power(theta[:-1], np.array([at]))[0])
    return excess < (1.0 - _SHIFT_START_TOLERANCE) * (timeline.first_loss - float(coef[0]))


