"""An lr read at every step, thinned to the knots of a piecewise-linear plan.

The plan is within ``TOLERANCE`` (relative) of the lr at every step: knots are first
spaced by the lr's local curvature, then every interval that still errs is split in two,
with the budget of knots shared out along the steps. An lr that changes too often to meet
the tolerance in ``max_knots`` knots is met with a tolerance loosened fourfold at a time;
past the loosest, the knots are spread evenly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

__all__ = ["TOLERANCE"]


# A plan thinned to ``max_knots`` knots is within this of the lr at every step, relative.
TOLERANCE = 1e-6
# The knots are chosen to half the tolerance, so that rounding in np.interp cannot tip a step over.
_MARGIN = 0.5
# Below this share of the peak an lr counts as 0 for the relative tolerance.
_ZERO = 1e-12
# When the lr changes too often to meet the tolerance in max_knots knots, the tolerance is
# loosened fourfold at a time up to this; past it, the knots are spread evenly.
_LOOSEST = 0.25


def _knots(
    chunks: Iterable[np.ndarray], first: int, points: int, cap: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """(steps, lr, tolerance met) of the knots kept from ``points`` values at steps
    ``first``, ``first + 1``, ... given in chunks: all of them when they fit in ``cap``,
    else at most ``cap`` (see :func:`plan_from_scheduler`). The tolerance is 0 when every
    step is kept and inf when the knots had to be spread evenly.

    The budget is shared out along the steps: a chunk may keep its share of ``cap`` plus
    what the chunks before it left unused.
    """
    if points <= cap:
        values = [chunk for chunk in chunks if len(chunk)]
        lr = np.concatenate(values) if values else np.empty(0)
        return first + np.arange(len(lr), dtype=np.int64), lr, 0.0
    out_steps: list[np.ndarray] = []
    out_lr: list[np.ndarray] = []
    worst, kept, done, peak = 0.0, 0, 0, 0.0
    last: tuple[int, float] | None = None
    for chunk in chunks:
        if not len(chunk):
            continue
        peak = max(peak, float(np.max(np.abs(chunk))))
        if last is None:
            segment, start = chunk, first
            out_steps.append(np.array([first], np.int64))
            out_lr.append(chunk[:1])
            kept = 1
        else:
            segment, start = np.concatenate(([last[1]], chunk)), last[0]
        done += len(chunk)
        share = math.floor(cap * (done - 1) / (points - 1))
        keep, tolerance = _thin(segment, max(1, share - kept), max(peak * _ZERO, np.finfo(float).tiny))
        new = keep[1:]
        out_steps.append(start + new.astype(np.int64))
        out_lr.append(segment[new])
        kept += len(new)
        worst = max(worst, tolerance)
        last = (start + len(segment) - 1, float(segment[-1]))
    if last is None:
        return np.empty(0, np.int64), np.empty(0), 0.0
    return np.concatenate(out_steps), np.concatenate(out_lr), worst


def _thin(v: np.ndarray, allowed: int, floor: float) -> tuple[np.ndarray, float]:
    """Indices of the knots of ``v`` (its first and last always; at most ``allowed`` after
    the first), and the tolerance they meet (0: all kept; inf: spread evenly)."""
    m = len(v)
    if m - 1 <= allowed:
        return np.arange(m), 0.0
    tolerance = TOLERANCE
    while tolerance <= _LOOSEST:
        keep = _fit(v, tolerance * _MARGIN, floor, allowed)
        if len(keep) - 1 <= allowed:
            return keep, tolerance
        tolerance *= 4.0
    return np.unique(np.linspace(0, m - 1, allowed + 1).round().astype(np.int64)), math.inf


def _fit(v: np.ndarray, tolerance: float, floor: float, allowed: int) -> np.ndarray:
    """Indices of knots through which linear interpolation is within ``tolerance`` x
    max(|v|, ``floor``) of ``v`` at every index, 0 and the last included (given up, with
    too many, as soon as they are more than ``allowed`` after the first).

    A first guess spaces the knots by the local curvature (the second difference: linear
    interpolation over h steps errs by h**2 |v''| / 8), which puts a knot at every step
    where the slope changes sharply; then every interval that still errs is split in two
    until none does.
    """
    m = len(v)
    bound = tolerance * np.maximum(np.abs(v), floor)
    need = np.zeros(m)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        need[1:-1] = np.sqrt(np.abs(v[2:] - 2.0 * v[1:-1] + v[:-2]) / (8.0 * bound[1:-1]))
    need = np.minimum(np.nan_to_num(1.25 * need, nan=1.0, posinf=1.0), 1.0)
    counted = np.floor(np.cumsum(need))
    marked = np.zeros(m, bool)
    marked[[0, m - 1]] = True
    marked[1:][np.diff(counted) > 0] = True
    keep = np.flatnonzero(marked)
    x = np.arange(m - 1)
    while True:
        gaps = np.diff(keep)
        if gaps.max() <= 1 or len(keep) - 1 > allowed:
            return keep
        left = np.repeat(keep[:-1], gaps)
        right = np.repeat(keep[1:], gaps)
        guess = v[left] + (v[right] - v[left]) * ((x - left) / (right - left))
        bad = np.abs(guess - v[:-1]) > bound[:-1]
        if not bad.any():
            return keep
        split = np.zeros(len(gaps), bool)
        split[np.repeat(np.arange(len(gaps)), gaps)[bad]] = True
        marked[(keep[:-1][split] + keep[1:][split]) // 2] = True
        keep = np.flatnonzero(marked)
