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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from tracker_plugin.core.clock import DropCells, Timeline
from tracker_plugin.core.models.base import FitFailure, FitStatus
from tracker_plugin.core.models.projection import Projection
from tracker_plugin.core.models.search import least_squares_from, minimize_on_grid
from tracker_plugin.core.smoothing import ema_decay, linear_recurrence_rows
from tracker_plugin.defaults import DEFAULTS

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

# The anneal-gain prior's share of the loss (GainPrior): chosen among 0.025, 0.05 and 0.1 by
# leave-one-family-out cross-validation over four families of public runs
# (benchmarks/bench_calibration.py). Three of the four folds choose 0.1 (OLMo's held out:
# 0.05); all four families together choose 0.05, jointly with auto's comparison of the laws
# (forecast.COMPARED_SHARE), by a hair (mean point loss 0.185 against 0.186), and the
# families none of those rules saw (the held-out speedruns) are forecast far better with it
# (median |ln| 0.053 against 0.088 at half the run, 0.076 against 0.203 at a quarter).
ANNEAL_GAIN: float = DEFAULTS["anneal_gain"]
# Fewer binned points than this and a law (three linear and at least one nonlinear
# parameter) is not fitted: two points beyond the four parameters are left for the noise
# the interval resamples.
MIN_POINTS = 6
# A window that has seen no lr decay identifies only L0, A and the exponent (the gain's
# column is zero there, and a decay's shape acts on nothing): one parameter fewer, one
# point fewer, the same two left for the noise.
MIN_POINTS_NO_DECAY = MIN_POINTS - 1
# A response that realises less than this share of the planned decay by the plan's end is
# taken at this share (the gain it was solved as stays finite; see _PlannedEffect).
_MIN_REALISED = 1e-6
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
# A one-exponent law with a free shift is searched on its exponent grid times these shifts
# (shares of the bound on each side of 0), then by least squares from the best point.
_SHIFT_GRID = (1.0, 0.9, 0.6, 0.3, 0.0, 0.03, 0.1, 0.3, 1.0)
# Long logs are averaged in at most this many bins of consecutive rows ...
MAX_BINS = 192
# ... none spanning more than this ratio of steps, so the steep early curve keeps its shape.
BIN_STEP_RATIO = 1.08
# Huber's constant: residuals within this many robust standard deviations keep full weight.
HUBER = 1.345
IRLS_ROUNDS = 3
# The exponent to this precision (absolute) is far finer than its uncertainty.
_XTOL = 1e-5
# A search near a previous answer (a refit, a later reweighting round) first looks within
# this factor of it, on this many points.
_BRACKET = 1.5
_BRACKET_POINTS = 7
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
# Two timelines of one log (on different lr plans) give its points the same lr area and
# clock to this relative precision when they agree over the log: each sums the lr on its
# own grid, which differs in the last bits (a few 1e-16 per step; 2e-13 at a 1,400-step cut).
_SAME_AREA = 1e-12


@dataclass(frozen=True)
class GainPrior:
    """Prior on ``G``, the loss a full lr decay removes: ``N(fraction * loss, (sd * mean)^2)``.

    ``fraction`` is the share of the current loss (the loss at the end of the fit window)
    that a decay of the lr from its peak to zero removes by the plan's end (a shorter
    planned drop removes its share of that; see :class:`_PlannedEffect`). The published runs of 25M to
    760M-parameter models show 3-5%, up to 13% in short high-lr runs; the default,
    :data:`ANNEAL_GAIN`, is the choice of leave-one-family-out validation among 2.5%, 5% and
    10%. ``sd`` (relative) is wide enough to cover that range at two standard deviations;
    a spread, it was scored as the interval rules are, by the calibration loss of the same
    validation among 0.25, 0.5 and 1, and four of the five folds (all four families among
    them) keep 0.5 (the point loss alone would take 0.25, and the 80% intervals would then
    cover 74% at half the run, plan given, and 66% at a quarter, plan inferred; see the
    README). The gain of SGD noise scales with the loss, which is why the prior is relative
    to it.
    """

    fraction: float = ANNEAL_GAIN
    sd: float = 0.5


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


class Response(Protocol):
    """A law's anneal column and its gradient by the law's parameters, on one fit window's
    points and drops (see :attr:`Law.response`)."""

    def value(self, theta: np.ndarray) -> np.ndarray: ...

    def gradient(self, theta: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Law:
    """A schedule-aware law: its nonlinear parameters and its two shape functions.

    ``power(theta, area / area_ref + shift)`` and ``anneal(theta, clock, area, cells)``
    give the columns that ``A`` and ``G`` multiply; ``theta`` here is the law's own
    parameters (``theta_names``), a fit's ``theta`` holds them and then the origin shift.
    The power is taken of the area relative to the area at the end of the fit window, so
    ``A`` is the reducible loss there. ``power_gradient`` and ``anneal_gradient`` (same
    arguments) give their derivatives by ``theta``, one column per parameter, and
    ``power_slope`` the power's by its area (the shift's column), for the solver's
    Jacobian; without them it differences the residuals. ``response(clock, area, cells)``,
    when given, computes the same anneal column and its gradient for one fit window, with
    the work that does not depend on ``theta`` done once (a fit evaluates both at a few
    dozen trial shapes).
    """

    name: str
    reference: str
    theta_names: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    starts: tuple[tuple[float, ...], ...]
    power: Callable[[np.ndarray, np.ndarray], np.ndarray]
    anneal: Callable[[np.ndarray, np.ndarray, np.ndarray, DropCells], np.ndarray]
    grid: np.ndarray | None = field(default=None, compare=False)  # for one-parameter laws
    anneal_fixed: bool = False  # the anneal column does not depend on theta (computed once)
    power_gradient: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    anneal_gradient: Callable[[np.ndarray, np.ndarray, np.ndarray, DropCells], np.ndarray] | None = None
    power_slope: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    response: Callable[[np.ndarray, np.ndarray, DropCells], Response] | None = field(default=None, compare=False)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The names of a fit's ``theta``: the law's own parameters, then the origin shift."""
        return (*self.theta_names, "shift")

    def columns(
        self, theta: np.ndarray, clock: np.ndarray, area: np.ndarray, area_ref: float, cells: DropCells
    ) -> tuple[np.ndarray, np.ndarray]:
        """The power and anneal columns at a fit's ``theta`` (the shift last)."""
        shape, shift = theta[:-1], float(theta[-1])
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            return self.power(shape, area / area_ref + shift), self.anneal(shape, clock, area, cells)


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


def _status(search: FitStatus, evaluations: int, done: int, settled: bool, given_weight: bool, cap: int) -> FitStatus:
    """The last round's solver verdict, the evaluations of every round, and how the reweighting ended.

    ``converged`` is the solver's: the reweighting is a fixed number of rounds by design (an
    estimator in its own right), so one that was still moving at the cap is said in the
    reason rather than counted as a failure to converge.
    """
    if given_weight:
        ending = "one pass with given weights"
    elif cap == 1:
        ending = "one pass, no reweighting"
    elif settled:
        ending = f"the robust weights settled in {done} rounds"
    else:
        ending = f"the robust weights still moved after {done} rounds (the cap)"
    return FitStatus(search.converged, f"{search.reason}; {ending}", evaluations)

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


def robust_sigma(residuals: np.ndarray, weight: np.ndarray) -> float:
    """The robust standard deviation (scaled MAD) of residuals of unit weight; never 0."""
    scaled = residuals * np.sqrt(weight)
    return 1.4826 * float(np.median(np.abs(scaled))) or float(np.std(scaled)) or 1e-12


def _prior_strength(scaled: np.ndarray, sigma: float, prior_sd: float) -> float:
    """Weight of the prior's pseudo-observation: residual noise over the prior's spread.

    Residuals of neighbouring bins are correlated (the curve and the log wander together),
    so they carry less information than their number says; the noise is inflated by the
    usual AR(1) factor ``(1 + r1) / (1 - r1)`` before it is weighed against the prior.
    """
    if len(scaled) > 3 and np.std(scaled) > 0:
        r1 = float(np.corrcoef(scaled[:-1], scaled[1:])[0, 1])
        r1 = min(max(r1 if np.isfinite(r1) else 0.0, 0.0), 0.95)
    else:
        r1 = 0.0
    return sigma * math.sqrt((1.0 + r1) / (1.0 - r1)) / max(prior_sd, 1e-12)


def _search(
    law: Law, problem: Projection, shapes: _Shapes, start: np.ndarray | None, shift: tuple[float, float] | None
) -> tuple[np.ndarray | None, FitStatus]:
    """A fit's ``theta`` (the law's parameters, then the shift) that minimises ``problem``'s
    cost, and how the solver ended.

    ``shift`` holds the shift's bounds, or None to hold it at 0. ``start`` (a previous
    answer) narrows a one-parameter search to a bracket around it and is the only start of
    a several-parameter one; else the law's grid or its starts.
    """
    if len(law.theta_names) == 1 and law.grid is not None:
        if shift is None:
            found, status = _search_exponent(law, problem, shapes, start)
            return (None if found is None else np.r_[found, 0.0]), status
        return _search_exponent_and_shift(law, problem, shapes, start, shift)
    lower, upper = np.array(law.lower, float), np.array(law.upper, float)
    if shift is not None:
        lower, upper = np.r_[lower, shift[0]], np.r_[upper, shift[1]]

    def full(x: np.ndarray) -> np.ndarray:
        return x if shift is not None else np.append(x, 0.0)

    def residuals(x: np.ndarray) -> np.ndarray:
        return problem.residuals(*shapes(full(x)))

    jacobian = None
    if law.power_gradient is not None and law.anneal_gradient is not None and law.power_slope is not None:

        def jacobian(x: np.ndarray) -> np.ndarray:
            return problem.jacobian(*shapes(full(x)), *shapes.gradients(full(x), shift is not None))

    if start is not None:
        starts = [start if shift is not None else start[:-1]]
    else:
        starts = [np.array(s + ((0.0,) if shift is not None else ()), float) for s in law.starts]
    x, _, status = least_squares_from(starts, residuals, jacobian, lower, upper)
    return (None if x is None else full(x)), status


def _search_exponent_and_shift(
    law: Law, problem: Projection, shapes: _Shapes, start: np.ndarray | None, shift: tuple[float, float]
) -> tuple[np.ndarray | None, FitStatus]:
    """A one-exponent law with its shift free: least squares (exact Jacobian) from ``start``,
    or from the best point of the exponent grid times :data:`_SHIFT_GRID`."""
    assert law.grid is not None
    lower, upper = np.array([law.lower[0], shift[0]]), np.array([law.upper[0], shift[1]])
    evaluations = 0
    if start is None:
        shifts = np.unique([shift[0] * v for v in _SHIFT_GRID[:4]] + [shift[1] * v for v in _SHIFT_GRID[4:]])
        grid = np.array([(a, s) for s in shifts for a in law.grid])
        values = problem.costs(*shapes(grid))
        values[~np.isfinite(values)] = np.inf
        evaluations = len(grid)
        if not np.isfinite(values).any():
            return None, FitStatus(False, "no grid point gives a finite cost", evaluations)
        start = grid[int(np.argmin(values))]

    def residuals(x: np.ndarray) -> np.ndarray:
        return problem.residuals(*shapes(x))

    def jacobian(x: np.ndarray) -> np.ndarray:
        return problem.jacobian(*shapes(x), *shapes.gradients(x, True))

    x, _, status = least_squares_from([start], residuals, jacobian, lower, upper)
    return x, replace(status, evaluations=status.evaluations + evaluations)


def _search_exponent(
    law: Law, problem: Projection, shapes: _Shapes, start: np.ndarray | None
) -> tuple[np.ndarray | None, FitStatus]:
    """A one-parameter law, its shift held at 0: its grid (or a bracket around ``start``),
    then Brent in the best cell. Returns the exponent alone.

    Near a previous answer (a refit, a later reweighting round) a bracket around it; the
    law's grid when the best point lands on the bracket's edge, so a start changes the
    speed, not the answer.
    """
    assert law.grid is not None
    lower, upper = law.lower[0], law.upper[0]

    def profile(x: float) -> float:
        return problem.cost(*shapes(np.array([x, 0.0])))

    def search(grid: np.ndarray) -> tuple[float, float, FitStatus]:
        values = problem.costs(*shapes(np.c_[grid, np.zeros(len(grid))])) if law.anneal_fixed else None
        return minimize_on_grid(profile, grid, xtol=_XTOL, values=values)

    evaluations = 0
    if start is not None:
        lo, hi = max(start[0] / _BRACKET, lower), min(start[0] * _BRACKET, upper)
        x, cost, status = search(np.linspace(lo, hi, _BRACKET_POINTS))
        evaluations = status.evaluations
        edge = (x <= lo * 1.001 and lo > lower) or (x >= hi * 0.999 and hi < upper)
        if math.isfinite(cost) and not edge:
            return np.array([x]), status
    x, cost, status = search(law.grid)
    status = replace(status, evaluations=status.evaluations + evaluations)
    return (np.array([x]) if math.isfinite(cost) else None), status


class _PlannedEffect:
    """The share of the planned lr decay's full effect that a law has realised by the
    plan's end: ``anneal(theta)`` there over the planned drop.

    A law whose response to a drop is fitted (the multi-power law's ``C``, ``beta``,
    ``gamma``) can meet the gain prior with a full ``G`` and a response so slow that the
    decay never acts within the plan: a log that has seen a decay barely begun (the lr at
    0.85 of its peak) leaves the response's speed free, and the fit then sends it to its
    bounds and forecasts no gain at all. Scaling the anneal column by this share makes the
    gain the fit solves for, and so the prior's, the loss the planned decay removes by the
    plan's end, which is what the forecast reads; it moves only the prior's meaning (a fit
    without a prior finds the same curve). A law of fixed response (lr-annealing) gets a
    constant share: its prior, too, is on the loss removed by the plan's end, which
    leave-one-family-out validation prefers to the full decay's (plan given, a quarter of
    the way in, q=0.8: median |ln| 0.108 against 0.187 with the share applied to the
    multi-power law alone; benchmarks/bench_calibration.py).
    """

    def __init__(self, law: Law, clock: np.ndarray, area: np.ndarray, cells: DropCells) -> None:
        self.law, self.clock, self.area, self.cells = law, clock, area, cells
        self.total = cells.total
        self._key: bytes | None = None
        self._value = 1.0

    def value(self, shape: np.ndarray) -> float:
        key = b"" if self.law.anneal_fixed else shape.tobytes()  # a fixed response: one share
        if key != self._key:
            with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
                realised = float(self.law.anneal(shape, self.clock, self.area, self.cells)[0]) / self.total
            self._key, self._value = key, max(realised, _MIN_REALISED) if math.isfinite(realised) else 1.0
        return self._value

    def gradient(self, shape: np.ndarray) -> np.ndarray:
        """``d value / d shape`` (0 where the share is held at its floor)."""
        if self.law.anneal_gradient is None or self.value(shape) <= _MIN_REALISED:
            return np.zeros(len(shape))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            d = self.law.anneal_gradient(shape, self.clock, self.area, self.cells)[0] / self.total
        return np.where(np.isfinite(d), d, 0.0)


def _planned_effect(law: Law, timeline: Timeline, cells: DropCells) -> _PlannedEffect | None:
    """The plan-end share of :class:`_PlannedEffect` (None for a timeline without a decay by
    its end: the plan's, or the timeline's when no plan is known)."""
    end = timeline.plan_end if timeline.plan_end is not None else timeline.horizon
    clock = timeline.clock_at(np.array([end]))
    planned = cells.before(float(clock[0]) + 0.5)
    if planned.total <= 0:
        return None
    return _PlannedEffect(law, clock, timeline.area_at(np.array([end])), planned)


class _Shapes:
    """A law's columns (and their derivatives) on a fit window's points at a fit's trial
    ``theta`` (the law's parameters, then the shift).

    The last evaluation is kept: ``least_squares`` asks for the Jacobian at the point whose
    residuals it has just computed, and the anneal column is the costly part of both.
    """

    def __init__(
        self, law: Law, obs: Observations, seen: DropCells, area_ref: float, effect: _PlannedEffect | None = None
    ) -> None:
        self.law = law
        self.effect = effect
        self.obs = obs
        self.seen = seen
        self.relative = obs.area / area_ref
        self.fixed = None
        if law.anneal_fixed:
            with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
                self.fixed = law.anneal(np.zeros(len(law.lower)), obs.clock, obs.area, seen)
        self.response = None if law.response is None or law.anneal_fixed else law.response(obs.clock, obs.area, seen)
        self._last: tuple[bytes, tuple[np.ndarray, np.ndarray]] | None = None

    def __call__(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(power, anneal)``; ``theta`` may be rows of trial values (a grid, one row each),
        for a law whose anneal column is fixed."""
        key = theta.tobytes() if theta.ndim == 1 else None
        if key is not None and self._last is not None and self._last[0] == key:
            return self._last[1]
        if theta.ndim == 1:
            shape, relative = theta[:-1], self.relative + theta[-1]
        else:
            shape, relative = theta[:, :-1], self.relative[None, :] + theta[:, -1:]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            power = self.law.power(shape, relative)
            if self.fixed is not None:
                anneal = self.fixed
            elif self.response is not None and theta.ndim == 1:
                anneal = self.response.value(shape)
            else:
                anneal = self.law.anneal(shape, self.obs.clock, self.obs.area, self.seen)
            if self.effect is not None:
                # a fixed response is the same for every row of a grid
                anneal = anneal / self.effect.value(shape if theta.ndim == 1 else shape[0])
        if key is not None:
            self._last = (key, (power, anneal))
        return power, anneal

    def gradients(self, theta: np.ndarray, shift: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(d power / d x, d anneal / d x)``, a column per searched parameter ``x``: the
        law's, then the shift's when it is searched (the anneal column does not move with it)."""
        assert self.law.power_gradient is not None and self.law.power_slope is not None
        shape, relative = theta[:-1], self.relative + theta[-1]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            d_power = self.law.power_gradient(shape, relative)
            if self.response is not None:
                d_anneal = self.response.gradient(shape)
            elif self.law.anneal_gradient is not None:
                d_anneal = self.law.anneal_gradient(shape, self.obs.clock, self.obs.area, self.seen)
            else:  # a fixed anneal column
                d_anneal = np.zeros((len(relative), len(shape)))
            if self.effect is not None:
                # d (a / k) = da / k - a dk / k^2, k the planned effect's share
                realised = self.effect.value(shape)
                raw = self(theta)[1] * realised
                d_anneal = d_anneal / realised - np.outer(raw, self.effect.gradient(shape)) / realised**2
            if shift:
                d_power = np.column_stack((d_power, self.law.power_slope(shape, relative)))
                d_anneal = np.column_stack((d_anneal, np.zeros(len(relative))))
        return d_power, d_anneal

    def law_coef(self, theta: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """The law's ``L0, A, G`` from the solved ones: the gain back from the planned effect
        it was solved as (see :class:`_PlannedEffect`) to the law's own."""
        if self.effect is None:
            return coef
        return np.array([coef[0], coef[1], coef[2] / self.effect.value(theta[:-1])])
