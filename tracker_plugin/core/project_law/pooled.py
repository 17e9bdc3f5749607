"""One law for the runs of one configuration, fitted on them all at once.

Runs of one model configuration share a loss law across lr schedules and horizons (Luo et
al. 2025 fit one multi-power law on a few runs and predict the whole curve of others). The
pooled fit takes a schedule-aware law of :mod:`tracker_plugin.core.models` (its
:class:`~tracker_plugin.core.models.schedule_law.Law`, its analytic columns and
gradients, the variable projection of its linear part and the same SciPy searches) and
fits its shape, ``L0``, ``A`` and ``G`` to the binned raw loss of every run together, each
run weighing the same whatever its length (a run is one experiment; a long one is not
worth three short ones), with Huber's robust reweighting as a single run's fit has.

Runs are put on one clock first (:class:`Units`): each run's lr area in tokens of a common
reference batch, and, where the runs' absolute peak lrs are known and the law is asked to
carry across them, in units of a common peak lr (the law then has the peak lr in it: a run
at twice the lr covers twice the area per step, and its drops are twice as deep). A run's
timeline is scaled into those units (:func:`common_timeline`), so a law fitted there is an
ordinary :class:`~tracker_plugin.core.models.schedule_law.LawFit` on it: it predicts,
smooths and solves for targets as a single run's fit does.

Each run's *level*, its mean residual from the pooled law, is kept: their scatter is how
far a new run of the configuration may sit from the law (:mod:`.join`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tracker_plugin.core.clock import DropCells, Timeline
from tracker_plugin.core.models import LAWS, FitFailure, FitStatus, Law, LawFit, Observations, observations
from tracker_plugin.core.models.projection import Projection
from tracker_plugin.core.models.schedule_law import HUBER, _search, robust_sigma

__all__ = ["Member", "PooledLaw", "Units", "common_timeline", "fit_pooled", "member"]

# Robust reweighting rounds of the pooled fit (a single run's fit takes three).
ROUNDS = 2
# Fewer binned points than this over all runs and no pooled law is fitted.
MIN_POINTS = 12
# A run's raw loss is fitted in at most this many bins: the law is smooth, the fit's cost
# grows with the points, and a run's noise averages out in its bins (a fit of the MPL runs
# moves its forecasts by under 0.005 in ln tokens against 192 bins; bench_law.py).
FIT_BINS = 64


@dataclass(frozen=True)
class Units:
    """The common clock: lr area in steps of ``batch`` tokens at ``peak_lr`` (None: each
    run's lr in units of its own peak, as every single-run fit has it)."""

    batch: float
    peak_lr: float | None = None

    def scales(self, reference_batch: float, peak_lr: float | None) -> tuple[float, float]:
        """``(batch scale, lr scale)`` of a run with this reference batch and peak lr."""
        lr = 1.0 if self.peak_lr is None or peak_lr is None else peak_lr / self.peak_lr
        return reference_batch / self.batch, lr


def common_timeline(timeline: Timeline, units: Units, peak_lr: float | None) -> Timeline:
    """``timeline`` on the common clock: its lr, lr area and clock scaled (the steps, tokens
    and batch, which the smoothing reads, kept)."""
    b, s = units.scales(timeline.reference_batch, peak_lr)
    if b == 1.0 and s == 1.0:
        return timeline
    return replace(timeline, lr=timeline.lr * s, area=timeline.area * (b * s), clock_steps=timeline.clock_steps * b,
                   reference_batch=units.batch)


@dataclass(frozen=True, eq=False)
class Member:
    """A run as the pooled fit reads it: its timeline on the common clock, its binned raw
    loss from its fit start, and the lr drops those points have seen."""

    run: str
    timeline: Timeline
    obs: Observations
    cells: DropCells
    start: float

    @property
    def seen(self) -> DropCells:
        return self.cells.before(float(self.obs.clock[-1]))


def member(run: str, timeline: Timeline, step: np.ndarray, loss: np.ndarray, rows: np.ndarray | None = None,
           start: float | None = None) -> Member:
    """A member from a run's common timeline and its raw loss (``rows``: the rows each value
    averages already, as a run's evidence keeps them; None: one row each, binned here),
    merged into at most :data:`FIT_BINS` bins."""
    step = np.asarray(step, float)
    loss = np.asarray(loss, float)
    if rows is None:
        binned = observations(step, loss, timeline)
        step, loss, rows = binned.step, binned.loss, binned.weight
    step, loss, rows = _merged(step, loss, np.asarray(rows, float), FIT_BINS)
    obs = Observations(step, loss, rows, timeline.area_at(step), timeline.clock_at(step))
    first = start if start is not None else (float(step[0]) if len(step) else 0.0)
    return Member(run, timeline, obs, timeline.drops(), first)


def _merged(step: np.ndarray, loss: np.ndarray, rows: np.ndarray, at_most: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At most ``at_most`` bins: consecutive bins averaged (by their rows) between edges
    spaced evenly in the step and in its log, half each, so the steep start and a late
    decay both keep their shape."""
    if len(step) <= at_most or step[0] <= 0:
        return step, loss, rows
    half = at_most // 2
    edges = np.unique(np.r_[np.linspace(step[0], step[-1], half + 1), np.geomspace(step[0], step[-1], half + 1)])
    group = np.clip(np.searchsorted(edges, step, side="right") - 1, 0, len(edges) - 2)
    _, index = np.unique(group, return_inverse=True)
    total = np.bincount(index, rows)
    return np.bincount(index, rows * step) / total, np.bincount(index, rows * loss) / total, total


@dataclass(frozen=True)
class PooledLaw:
    """A law fitted on several runs: its shape ``theta`` (the law's parameters, then the
    origin shift), ``L0, A, G`` and the reference area, on the common clock ``units``.

    ``levels`` are each run's weighted mean residual (its own level less the law's),
    ``sigma`` the robust spread of a binned residual, ``correlation`` the lag-one
    autocorrelation of a run's residuals (a misfit that wanders with the curve, not noise),
    ``control`` the runs' mean residual on a grid of the lr area (``(area, residual)``):
    where the law misses every run alike, which a run's own early residuals are read
    against (see :mod:`.join`).
    """

    law: str
    theta: tuple[float, ...]
    coef: tuple[float, float, float]
    area_ref: float
    units: Units
    runs: tuple[str, ...]
    levels: tuple[float, ...]
    sigma: float
    status: FitStatus
    correlation: float = 0.0
    control: tuple[tuple[float, float], ...] = ()

    @property
    def level_spread(self) -> float:
        """The runs' levels' standard deviation about their mean (0 for one run)."""
        return float(np.std(self.levels)) if len(self.levels) > 1 else 0.0

    def on(self, timeline: Timeline, *, level: float = 0.0, start_step: float, ema_window: float,
           smoothed_start: float | None = None, cadence: float = 1.0, obs: Observations | None = None) -> LawFit:
        """The law on one run's common timeline, moved by the run's ``level``: a
        :class:`LawFit` that predicts, smooths and solves as a single run's fit does."""
        law = LAWS[self.law]
        if obs is None:
            at = np.array([start_step])
            obs = Observations(at, np.full(1, math.nan), np.ones(1), timeline.area_at(at), timeline.clock_at(at))
        l0, a, g = self.coef
        return LawFit(
            law=law, theta=np.array(self.theta, float), coef=np.array([l0 + level, a, g]), area_ref=self.area_ref,
            timeline=timeline, cells=timeline.drops(), ema_window=ema_window, start_step=start_step, sigma=self.sigma,
            residuals=np.zeros(0), fitted=np.zeros(0), observations=obs, status=self.status,
            smoothed_start=smoothed_start, cadence=cadence,
        )

    def predict(self, m: Member, level: float = 0.0) -> np.ndarray:
        """The law's raw loss at a member's binned points."""
        law = LAWS[self.law]
        theta = np.array(self.theta, float)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            power, anneal = law.columns(theta, m.obs.clock, m.obs.area, self.area_ref, m.seen)
        l0, a, g = self.coef
        return l0 + level + a * power - g * anneal

    def control_at(self, area: np.ndarray) -> np.ndarray:
        """The runs' mean residual at ``area`` (common units; 0 outside the grid)."""
        if not self.control:
            return np.zeros(len(area))
        grid, value = (np.array(x, float) for x in zip(*self.control))
        inside = (area >= grid[0]) & (area <= grid[-1])
        return np.where(inside, np.interp(area, grid, value), 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"law": self.law, "theta": list(self.theta), "coef": list(self.coef), "area_ref": self.area_ref,
                "units": {"batch": self.units.batch, "peak_lr": self.units.peak_lr}, "runs": list(self.runs),
                "levels": list(self.levels), "sigma": self.sigma, "correlation": self.correlation,
                "control": [list(p) for p in self.control],
                "status": {"converged": self.status.converged, "reason": self.status.reason,
                           "evaluations": self.status.evaluations}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PooledLaw:
        status = data["status"]
        return cls(str(data["law"]), tuple(float(x) for x in data["theta"]),
                   tuple(float(x) for x in data["coef"]),  # type: ignore[arg-type]
                   float(data["area_ref"]), Units(float(data["units"]["batch"]),
                                                  None if data["units"]["peak_lr"] is None else float(data["units"]["peak_lr"])),
                   tuple(str(r) for r in data["runs"]), tuple(float(x) for x in data["levels"]), float(data["sigma"]),
                   FitStatus(bool(status["converged"]), str(status["reason"]), int(status["evaluations"])),
                   float(data.get("correlation", 0.0)), tuple((float(a), float(r)) for a, r in data.get("control", ())))


class _PooledShapes:
    """A law's power and anneal columns on every member's points at once, at a trial
    ``theta`` (the law's parameters, then the shift), and their derivatives: what the
    single-run fit's shapes give its search, for many runs."""

    def __init__(self, law: Law, members: Sequence[Member], area_ref: float) -> None:
        self.law = law
        self.relative = np.concatenate([m.obs.area / area_ref for m in members])
        self.members = members
        self.fixed: np.ndarray | None = None
        self.responses = []
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            if law.anneal_fixed:
                zero = np.zeros(len(law.lower))
                self.fixed = np.concatenate([law.anneal(zero, m.obs.clock, m.obs.area, m.seen) for m in members])
            elif law.response is not None:
                self.responses = [law.response(m.obs.clock, m.obs.area, m.seen) for m in members]
        self._last: tuple[bytes, tuple[np.ndarray, np.ndarray]] | None = None

    def _anneal(self, shape: np.ndarray) -> np.ndarray:
        if self.fixed is not None:
            return self.fixed
        if self.responses:
            return np.concatenate([r.value(shape) for r in self.responses])
        return np.concatenate([self.law.anneal(shape, m.obs.clock, m.obs.area, m.seen) for m in self.members])

    def __call__(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = theta.tobytes() if theta.ndim == 1 else None
        if key is not None and self._last is not None and self._last[0] == key:
            return self._last[1]
        if theta.ndim == 1:
            shape, relative = theta[:-1], self.relative + theta[-1]
        else:  # rows of trial values (a one-parameter law's grid): its anneal column is fixed
            shape, relative = theta[:, :-1], self.relative[None, :] + theta[:, -1:]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            power = self.law.power(shape, relative)
            anneal = self._anneal(shape if theta.ndim == 1 else shape[0])
        if key is not None:
            self._last = (key, (power, anneal))
        return power, anneal

    def gradients(self, theta: np.ndarray, shift: bool) -> tuple[np.ndarray, np.ndarray]:
        assert self.law.power_gradient is not None and self.law.power_slope is not None
        shape, relative = theta[:-1], self.relative + theta[-1]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            d_power = self.law.power_gradient(shape, relative)
            if self.responses:
                d_anneal = np.vstack([r.gradient(shape) for r in self.responses])
            elif self.law.anneal_gradient is not None and self.fixed is None:
                d_anneal = np.vstack([self.law.anneal_gradient(shape, m.obs.clock, m.obs.area, m.seen)
                                      for m in self.members])
            else:
                d_anneal = np.zeros((len(relative), len(shape)))
            if shift:
                d_power = np.column_stack((d_power, self.law.power_slope(shape, relative)))
                d_anneal = np.column_stack((d_anneal, np.zeros(len(relative))))
        return d_power, d_anneal


def fit_pooled(
    members: Sequence[Member],
    law_name: str,
    units: Units,
    *,
    area_ref: float | None = None,
    shift: bool = False,
    start: Sequence[float] | None = None,
    weights: Sequence[float] | None = None,
) -> PooledLaw | FitFailure:
    """The law ``law_name`` fitted on ``members`` together (see the module's docstring).

    ``area_ref`` is the reference area on the common clock (default: the members' median
    last area); ``shift`` searches a shared origin shift of the lr area (else held at 0);
    ``start`` (a previous fit's ``theta``) narrows the search to one start near it;
    ``weights`` weigh the members (default: 1 each).
    """
    law = LAWS[law_name]
    weights = [1.0] * len(members) if weights is None else list(weights)
    weights = [w for w, m in zip(weights, members) if len(m.obs)]
    members = [m for m in members if len(m.obs)]
    points = sum(len(m.obs) for m in members)
    if not members or points < MIN_POINTS:
        return FitFailure(law.name, f"a pooled law needs at least {MIN_POINTS} binned points, the runs have {points}")
    loss = np.concatenate([m.obs.loss for m in members])
    if not np.isfinite(loss).all():
        return FitFailure(law.name, "a run's binned loss holds values that are not finite")
    reference = float(np.median([m.obs.area[-1] for m in members])) if area_ref is None else area_ref
    # Each run weighs the same: its bins' row counts over its rows.
    size = np.mean([len(x.obs) for x in members])
    base = np.concatenate([w * m.obs.weight / m.obs.weight.sum() * size for w, m in zip(weights, members)])
    # The single-run search reads its shapes by their calls alone: these serve it for many runs.
    shapes: Any = _PooledShapes(law, members, reference)
    bounds = _shift_bounds(members, reference) if shift else None
    weight = base.copy()
    theta = None if start is None else np.asarray(start, float)
    evaluations, status = 0, FitStatus(False, "not searched", 0)
    for _ in range(ROUNDS):
        problem = Projection(loss, weight, None, 0.0)
        theta, status = _search(law, problem, shapes, theta, bounds)
        evaluations += status.evaluations
        if theta is None:
            return FitFailure(law.name, f"the pooled least-squares problem has no finite solution ({status.reason})")
        coef, fitted = problem.solve(*shapes(theta))
        residuals = loss - fitted
        sigma = robust_sigma(residuals, base)
        scaled = residuals * np.sqrt(base)
        weight = base * np.minimum(1.0, HUBER * sigma / np.maximum(np.abs(scaled), 1e-300))
    assert theta is not None
    if not np.isfinite(coef).all():
        return FitFailure(law.name, "the pooled law's linear parameters are not finite")
    parts = np.split(residuals, np.cumsum([len(m.obs) for m in members])[:-1])
    levels = [float(np.average(r, weights=m.obs.weight)) for r, m in zip(parts, members)]
    return PooledLaw(law.name, tuple(float(x) for x in theta), (float(coef[0]), float(coef[1]), float(coef[2])),
                     reference, units, tuple(m.run for m in members), tuple(levels),
                     robust_sigma(residuals, np.ones(len(residuals))),
                     replace(status, evaluations=evaluations, reason=f"{status.reason}; pooled over {len(members)} runs"),
                     _correlation(parts), _control(members, parts))


def _correlation(parts: Sequence[np.ndarray]) -> float:
    """The lag-one autocorrelation of the residuals within runs, pooled (0 to 0.98)."""
    pairs = [(r[:-1] - r.mean(), r[1:] - r.mean()) for r in parts if len(r) > 3]
    if not pairs:
        return 0.0
    num = sum(float(a @ b) for a, b in pairs)
    den = sum(float(a @ a) for a, _ in pairs)
    return min(max(num / den, 0.0), 0.98) if den > 0 else 0.0


def _control(members: Sequence[Member], parts: Sequence[np.ndarray], points: int = 64) -> tuple[tuple[float, float], ...]:
    """The runs' mean residual on a log grid of the lr area, over the runs that cover each point."""
    low = min(float(m.obs.area[0]) for m in members)
    high = max(float(m.obs.area[-1]) for m in members)
    if not (low > 0 and high > low):
        return ()
    grid = np.geomspace(low, high, points)
    values = np.full((len(members), points), np.nan)
    for k, (m, r) in enumerate(zip(members, parts)):
        inside = (grid >= m.obs.area[0]) & (grid <= m.obs.area[-1])
        values[k, inside] = np.interp(grid[inside], m.obs.area, r)
    counted = np.isfinite(values).sum(axis=0)
    mean = np.where(counted > 0, np.nansum(values, axis=0) / np.maximum(counted, 1), 0.0)
    return tuple((float(a), float(v)) for a, v in zip(grid, mean))


def _shift_bounds(members: Sequence[Member], area_ref: float) -> tuple[float, float] | None:
    """The shared origin shift's bounds: the shifted area stays above 1% of every run's first
    point's; at most that first area (as a single run's fit bounds it)."""
    first = min(float(m.obs.area[0]) for m in members) / area_ref
    if first < 0.01:
        return None
    return -0.99 * first, min(1.0, first)
