"""The power law fitted to every window of a stability sweep at once, exactly.

A sweep fits ``L(T) = L0 + A * (T / 1e9) ** -alpha`` to the rows from one start up to each
window's end. Fitted one by one, each window costs a least-squares search over all of its
rows, and a sweep over a long log costs the square of its length. Here every window is
solved from a handful of sums over its rows, and the sums of all windows come from one
pass over the log:

- For a given ``alpha`` the best ``L0`` and ``A`` solve a 2x2 least-squares problem within
  their bounds; the fit's cost then depends on ``alpha`` alone (the profile), and its
  derivative (the envelope theorem) needs only the sums ``sum(w * u**j * x**-beta)`` of the
  window, for ``w`` in ``{1, y}``, ``j`` in ``{0, 1}`` and ``beta`` in ``{alpha, 2 alpha}``,
  with ``u = ln x``.
- Around a centre ``beta_c``, ``x**-beta = x**-beta_c * exp(-(beta - beta_c) * u)``, a power
  series in ``u`` whose terms vanish fast when ``beta`` is near ``beta_c``. So the moments
  ``sum(w * x**-beta_c * u**k / k!)`` of every window, for a few centres (those the search
  visits) and a few dozen ``k``, give those sums at any ``beta`` near a centre, to rounding.
  The moments of prefix windows are the running sums of the moments of the rows between
  consecutive window ends: one pass over the log per centre.
- Each window's exponent is the root of the profile's derivative, found by bisection from
  the original script's start (``alpha = 0.3``), on all windows at once.

The answer is the least-squares optimum within the script's bounds, the point
``curve_fit`` converges to; they differ by ``curve_fit``'s own stopping tolerance (under
1e-4 in forecast tokens on the parity runs). A window the sums cannot serve (too few rows,
no positive loss, a log whose token range is too wide for the series) is fitted by
:func:`fit_power_law` itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tracker_plugin.core.models.base import FitFailure, FitStatus
from tracker_plugin.core.models.power_law import (
    _A_MIN,
    _ALPHA_BOUNDS,
    _ALPHA_START,
    TOKEN_UNIT,
    PowerLaw,
    fit_power_law,
)

__all__ = ["fit_power_law_windows"]

# A centre serves exponents within half this spacing at the least: a log whose tokens span
# more than a factor e**50 (which would need a centre every 0.05 in the exponent) is fitted
# window by window instead.
_MIN_SPACING = 0.05
# The largest |delta * v| (exponent offset from its centre times the centred log tokens)
# a centre serves: the terms then fall below rounding within ~35 terms, and the
# alternating series loses at most a factor e**(2 * 2.5) of precision (about 1e-13).
_REACH = 2.5
# Rows per pass when the moments are accumulated (bounds the scratch memory to a few MB
# per moment, whatever the log's length).
_CHUNK = 8192
# Bisection steps on the exponent: the bracket starts within [1e-3, 10], so 64 halvings
# reach rounding.
_BISECTIONS = 64


def fit_power_law_windows(tokens: np.ndarray, loss: np.ndarray, ends: Sequence[int]) -> list[PowerLaw | FitFailure]:
    """:func:`fit_power_law` on ``tokens[:end]``, ``loss[:end]`` for each of ``ends`` (increasing).

    The same law, bounds and rows as :func:`fit_power_law`, solved to the optimum for all
    windows together (see the module's docstring).
    """
    x = np.asarray(tokens, float) / TOKEN_UNIT
    y = np.asarray(loss, float)
    ends = [int(e) for e in ends]
    if not ends:
        return []
    last = ends[-1]
    x, y = x[:last], y[:last]
    usable = (x > 0) & np.isfinite(x) & np.isfinite(y)
    count = np.cumsum(usable)
    floor = np.minimum.accumulate(np.where(usable, y, np.inf))
    latest = np.maximum.accumulate(np.where(usable, np.arange(len(x)), -1))  # last usable row so far
    first_x = x[int(np.argmax(usable))] if usable.any() else math.nan
    out: list[PowerLaw | FitFailure | None] = [None] * len(ends)
    solvable = []
    for i, end in enumerate(ends):
        # The checks of fit_power_law; a window that fails one is left to it, to say why.
        if end < 1 or count[end - 1] < 3 or not x[latest[end - 1]] > first_x or not floor[end - 1] > 0:
            out[i] = fit_power_law(tokens[:end], loss[:end])
        else:
            solvable.append(i)
    if solvable:
        fits = _solve(x, y, usable, [ends[i] for i in solvable], floor)
        for i, fit in zip(solvable, fits):
            out[i] = fit if fit is not None else fit_power_law(tokens[: ends[i]], loss[: ends[i]])
    return [f for f in out if f is not None]


@dataclass
class _Moments:
    """Each window's sums of ``w * exp(-beta_c * v) * v**k / k!`` for the centres computed
    so far: ``by_centre[c]`` has shape (windows, 3, terms), the three ``(w, beta)`` being
    ``(1, beta_c)``, ``(y, beta_c)`` and ``(1, 2 beta_c)`` with ``beta_c = c * spacing``."""

    v: np.ndarray  # centred log tokens of the usable rows
    y: np.ndarray  # their loss, centred
    segment: np.ndarray  # each usable row's segment (window ``i`` is segments ``0..i``)
    windows: int
    spacing: float
    terms: int
    by_centre: dict[int, np.ndarray]

    def at(self, centre: int) -> np.ndarray:
        if centre not in self.by_centre:
            self.by_centre[centre] = self._accumulate(centre * self.spacing)
        return self.by_centre[centre]

    def _accumulate(self, beta: float) -> np.ndarray:
        sums = np.zeros((self.windows, 3, self.terms))
        factorial = np.cumprod(np.r_[1.0, np.arange(1, self.terms)])
        for start in range(0, len(self.v), _CHUNK):
            v = self.v[start : start + _CHUNK]
            segment = self.segment[start : start + _CHUNK]
            powers = v[:, None] ** np.arange(self.terms) / factorial  # v**k / k!
            e1 = np.exp(-beta * v)
            weights = np.stack([e1, self.y[start : start + _CHUNK] * e1, e1 * e1], axis=1)
            products = weights[:, :, None] * powers[:, None, :]
            starts = np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]])
            np.add.at(sums, segment[starts], np.add.reduceat(products, starts, axis=0))
        return np.cumsum(sums, axis=0)  # segments to windows


def _solve(x: np.ndarray, y: np.ndarray, usable: np.ndarray, ends: list[int], floor: np.ndarray) -> list[PowerLaw | None]:
    rows = np.flatnonzero(usable[: ends[-1]])
    u = np.log(x[rows])
    centre_u = 0.5 * (float(u.min()) + float(u.max()))
    v = u - centre_u
    reach = float(np.max(np.abs(v)))
    # A centre serves exponents within half a spacing of it, and 2 alpha within a whole one.
    spacing = min(0.5, _REACH / max(reach, 1e-12))
    if spacing < _MIN_SPACING:
        return [None] * len(ends)
    terms = _terms(spacing * reach)
    level = float(np.mean(y[rows]))
    segment = np.searchsorted(np.asarray(ends), rows, side="right")
    moments = _Moments(v, y[rows] - level, segment, len(ends), spacing, terms, {})
    plain = _plain_sums(y[rows] - level, segment, len(ends))
    windows = _Windows(moments, plain, floor[np.asarray(ends) - 1] - level, -level, centre_u)
    alpha, evaluations = windows.minimise()
    l0, a, cost = windows.linear(alpha)
    fits: list[PowerLaw | None] = []
    for k in range(len(ends)):
        values = (float(l0[k] + level), float(a[k] * math.exp(alpha[k] * centre_u)), float(alpha[k]))
        if not all(map(math.isfinite, values)):
            fits.append(None)
            continue
        status = FitStatus(True, "least-squares optimum of the sweep's window (profile on alpha, bisection)", evaluations)
        fits.append(PowerLaw(l0=values[0], a=max(values[1], _A_MIN), alpha=values[2], status=status))
    return fits


def _terms(reach: float) -> int:
    """Terms of ``exp(z)``'s series, ``|z| <= reach``, until the next is below rounding."""
    term, k = 1.0, 0
    while term > 1e-17 * math.exp(-reach):
        k += 1
        term *= reach / k
    return k + 2  # one more for the derivative's shifted moments


def _plain_sums(y: np.ndarray, segment: np.ndarray, windows: int) -> np.ndarray:
    """Each window's (rows, sum y, sum y**2)."""
    sums = np.zeros((windows, 3))
    for j, values in enumerate((np.ones_like(y), y, y * y)):
        sums[:, j] = np.bincount(segment, weights=values, minlength=windows)[:windows]
    return np.cumsum(sums, axis=0)


@dataclass
class _Windows:
    """The profile of every window's fit on the exponent (in the centred variables)."""

    moments: _Moments
    plain: np.ndarray  # (windows, 3): n, sum y, sum y**2
    floor: np.ndarray  # each window's smallest loss, centred: L0's upper bound
    low: float  # L0's lower bound, 0, centred
    centre_u: float
    evaluations: int = 0

    def sums(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``sum(w e**(-beta v) v**j)`` for the three (w, beta) at each window's ``alpha``:
        arrays of shape (windows, 3) for j = 0 and j = 1."""
        self.evaluations += 1
        spacing = self.moments.spacing
        centre = np.rint(alpha / spacing).astype(np.int64)
        delta = alpha - centre * spacing
        out0, out1 = np.empty((len(alpha), 3)), np.empty((len(alpha), 3))
        k = np.arange(self.moments.terms - 1)
        for c in np.unique(centre):
            mine = centre == c
            m = self.moments.at(int(c))[mine]  # (w, 3, terms)
            d = delta[mine]
            # (-delta)**k for the exponent beta_c (the first two sums) and 2 beta_c (the third).
            shift = np.stack([d, d, 2 * d], axis=1)
            powers = (-shift[:, :, None]) ** k  # (w, 3, terms - 1)
            out0[mine] = np.sum(powers * m[:, :, :-1], axis=2)
            out1[mine] = np.sum(powers * (k + 1) * m[:, :, 1:], axis=2)
        return out0, out1

    def linear(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        l0, a, cost, _ = self._at(alpha)
        return l0, a, cost

    def _at(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The best (L0, A) at ``alpha`` within the bounds, the cost, and its derivative in alpha."""
        s0, s1 = self.sums(alpha)
        n, sy, syy = self.plain.T
        p1, py, p2 = s0.T
        vp1, vpy, vp2 = s1.T
        # A's bound in the centred variables: A' = A * exp(-alpha * centre_u).
        a_min = _A_MIN * np.exp(-alpha * self.centre_u)
        l0, a, cost = _box_least_squares(n, sy, syy, p1, py, p2, self.low, self.floor, a_min)
        # d cost / d alpha at fixed (L0, A): -2 A sum(r u p) with u = centre_u + v; the
        # bound on A' moves with alpha too, which matters only where it is active.
        rp = l0 * p1 + a * p2 - py
        rvp = l0 * vp1 + a * vp2 - vpy
        slope = -2.0 * a * (self.centre_u * rp + rvp)
        return l0, a, cost, slope

    def minimise(self) -> tuple[np.ndarray, int]:
        """Each window's exponent: the profile's minimum reached downhill from the
        original script's start, bracketed by steps that double, then bisected."""
        lo_bound, hi_bound = _ALPHA_BOUNDS
        alpha = np.full(len(self.floor), _ALPHA_START)
        slope = self._at(alpha)[3]
        up = slope < 0  # the cost falls as alpha grows: the minimum lies above
        lo, hi = alpha.copy(), alpha.copy()
        step = np.full(len(alpha), 0.5 * self.moments.spacing)
        searching = slope != 0
        while searching.any():
            near = np.where(up, hi, lo)
            probe = np.clip(np.where(up, near + step, near - step), lo_bound, hi_bound)
            slope = self._at(np.where(searching, probe, alpha))[3]
            crossed = np.where(up, slope >= 0, slope <= 0)
            # The bracket's far end moves to the probe where the slope turned, its near
            # end where it did not (the minimum lies further on).
            hi = np.where(searching & (up | crossed), probe, hi)
            lo = np.where(searching & (~up | crossed), probe, lo)
            lo = np.where(searching & up & crossed, near, lo)
            hi = np.where(searching & ~up & crossed, near, hi)
            at_bound = np.where(up, probe >= hi_bound, probe <= lo_bound)
            searching &= ~crossed & ~at_bound
            step = step * 2
        for _ in range(_BISECTIONS):
            mid = 0.5 * (lo + hi)
            slope = self._at(mid)[3]
            lo = np.where(slope < 0, mid, lo)
            hi = np.where(slope < 0, hi, mid)
        return 0.5 * (lo + hi), self.evaluations


def _box_least_squares(
    n: np.ndarray, sy: np.ndarray, syy: np.ndarray, p1: np.ndarray, py: np.ndarray, p2: np.ndarray,
    low: float, floor: np.ndarray, a_min: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """min over ``low <= L0 <= floor``, ``A >= a_min`` of ``sum((L0 + A p - y)**2)`` from
    its sums, for each window: the free optimum when within the bounds (a convex quadratic's
    minimum), else the best of the optima along each bound."""

    def cost(l0: np.ndarray, a: np.ndarray) -> np.ndarray:
        return syy - 2 * l0 * sy - 2 * a * py + n * l0 * l0 + 2 * l0 * a * p1 + a * a * p2

    with np.errstate(divide="ignore", invalid="ignore"):
        det = n * p2 - p1 * p1
        free_l0 = (sy * p2 - py * p1) / det
        free_a = (n * py - p1 * sy) / det
        candidates = [
            (np.full_like(n, low), np.maximum((py - low * p1) / p2, a_min)),
            (floor, np.maximum((py - floor * p1) / p2, a_min)),
            (np.clip((sy - a_min * p1) / n, low, floor), a_min),
        ]
    l0, a = candidates[0]
    best = cost(l0, a)
    for c_l0, c_a in candidates[1:]:
        c_cost = cost(c_l0, c_a)
        better = c_cost < best
        l0, a, best = np.where(better, c_l0, l0), np.where(better, c_a, a), np.where(better, c_cost, best)
    free = (det > 0) & (free_l0 >= low) & (free_l0 <= floor) & (free_a >= a_min)
    l0, a = np.where(free, free_l0, l0), np.where(free, free_a, a)
    return l0, a, cost(l0, a)
