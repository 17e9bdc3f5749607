"""Many windows of one run fitted at once: the windows of a stability sweep.

For the lr-annealing law (whose anneal column does not depend on its exponent) the normal
equations of every window at every exponent of a fine grid come from cumulative sums, and
the windows' EMAs are smoothed together, so hundreds of windows cost a few array passes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tracker_plugin.core.models.projection import Projection, normal_equations
from tracker_plugin.core.models.schedule_law import MIN_POINTS, LawFit, Observations, _level, robust_sigma

__all__ = ["fit_prefixes"]


# Exponents tried at once when many windows are fitted together (ratio 1.03 apart; a
# parabola through the best three refines the answer).
_PREFIX_GRID = np.geomspace(0.02, 3.0, 161)


def fit_prefixes(like: LawFit, step: np.ndarray, loss: np.ndarray, ends: list[int]) -> list[LawFit | None]:
    """``like``'s law fitted to the first ``end`` rows of its window, for each end.

    ``step`` and ``loss`` are the window's raw rows (those ``like`` was fitted to, binned).
    For a law whose anneal column does not depend on its one nonlinear parameter (the
    lr-annealing law), the normal equations of every prefix at every exponent of a fine grid
    come from cumulative sums over ``like``'s bins, plus one bin of the rows a prefix cuts
    short, so a sweep's hundreds of windows cost a few array passes and each sees exactly
    its rows. Each prefix takes one weighted pass with ``like``'s robust weights and prior
    strength, at the grid's best exponent refined by a parabola. None where this does not
    apply (another law, or every exponent breaking a sign constraint): fit that one alone.
    """
    law, obs = like.law, like.observations
    if not law.anneal_fixed or len(law.theta_names) != 1 or like.weight is None or obs.rows is None:
        return [None] * len(ends)
    weight = like.weight
    robust = weight / obs.weight  # each bin's Huber factor
    anneal = law.anneal(like.theta, obs.clock, obs.area, like.cells)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        z = np.power(obs.area / obs.area[-1], -_PREFIX_GRID[:, None])
    wz = weight * z
    zero = np.zeros((len(_PREFIX_GRID), 1))
    cum = {
        "z": np.hstack([zero, np.cumsum(wz, axis=1)]), "zz": np.hstack([zero, np.cumsum(wz * z, axis=1)]),
        "za": np.hstack([zero, np.cumsum(wz * anneal, axis=1)]), "zy": np.hstack([zero, np.cumsum(wz * obs.loss, axis=1)]),
    }
    wa = weight * anneal
    one = {
        key: np.r_[0.0, np.cumsum(values)]
        for key, values in (("w", weight), ("a", wa), ("aa", wa * anneal), ("ay", wa * obs.loss),
                            ("y", weight * obs.loss), ("yy", weight * obs.loss**2))
    }
    use_gain = like.prior is not None or bool(anneal.any())
    out: list[LawFit | None] = []
    for end in ends:
        complete = int(np.searchsorted(obs.rows, end, side="right"))
        prefix = obs.take(complete)
        extra = None
        if complete < len(obs) and end > (obs.rows[complete - 1] if complete else 0):
            begin = int(obs.rows[complete - 1]) if complete else 0
            cut_step = float(np.mean(step[begin:end]))
            area, clock = like.timeline.area_at(cut_step), like.timeline.clock_at(cut_step)
            extra = (cut_step, float(np.mean(loss[begin:end])), float(end - begin) * robust[complete], area, clock)
            prefix = prefix.append(cut_step, extra[1], float(end - begin), float(area), float(clock), end)
        if len(prefix) < MIN_POINTS:
            out.append(None)
            continue
        mean = None if like.prior is None else like.prior.fraction * _level(prefix)
        terms = _prefix_terms(cum, one, complete, extra, anneal_of=lambda c, a: law.anneal(like.theta, np.array([c]), np.array([a]), like.cells)[0], area0=float(obs.area[-1]))
        alpha = _best_exponent(terms, use_gain or (extra is not None and terms["a"] != 0), mean, like.strength)
        if alpha is None:
            out.append(None)
            continue
        robust_prefix = np.r_[weight[:complete], [] if extra is None else [extra[2]]]
        out.append(_prefix_fit(like, prefix, alpha, robust_prefix, mean, float(step[end - 1])))
    return out


def _prefix_terms(cum, one, complete, extra, anneal_of, area0):
    """The sums of one prefix: ``complete`` whole bins, plus the ``extra`` cut-short bin."""
    terms = {key: values[:, complete].copy() for key, values in cum.items()}
    terms.update({key: float(values[complete]) for key, values in one.items()})
    if extra is not None:
        _, y, w, area, clock = extra
        a = float(anneal_of(clock, area))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            z = np.power(area / area0, -_PREFIX_GRID)
        terms["z"] += w * z
        terms["zz"] += w * z * z
        terms["za"] += w * z * a
        terms["zy"] += w * z * y
        terms["w"] += w
        terms["a"] += w * a
        terms["aa"] += w * a * a
        terms["ay"] += w * a * y
        terms["y"] += w * y
        terms["yy"] += w * y * y
    return terms


def _best_exponent(terms: dict, use_gain: bool, mean: float | None, strength: float) -> float | None:
    k = len(_PREFIX_GRID)
    size = 3 if use_gain else 2
    extra = strength**2 if use_gain and mean is not None else 0.0
    g, rhs = normal_equations(
        terms["w"], terms["z"], terms["zz"], terms["zy"], terms["za"], terms["a"], terms["aa"], terms["ay"],
        terms["y"], extra=extra, mean=mean if extra else 0.0,
    )
    g, rhs = np.broadcast_to(g, (k, 3, 3))[:, :size, :size], np.broadcast_to(rhs, (k, 3))[:, :size]
    yy = terms["yy"] + (extra * mean**2 if extra else 0.0)
    ok = np.isfinite(g).all(axis=(1, 2)) & (np.abs(np.linalg.det(np.where(np.isfinite(g), g, 0.0))) > 1e-300)
    cost = np.full(k, np.inf)
    if ok.any():
        coef = np.linalg.solve(g[ok], rhs[ok][..., None])[..., 0]
        value = yy - 2 * np.einsum("ki,ki->k", coef, rhs[ok]) + np.einsum("ki,kij,kj->k", coef, g[ok], coef)
        value[(coef < 0).any(axis=1)] = np.inf
        cost[ok] = value
    best = int(np.argmin(cost))
    if not np.isfinite(cost[best]):
        return None
    u = np.log(_PREFIX_GRID)
    if 0 < best < k - 1 and np.isfinite(cost[best - 1]) and np.isfinite(cost[best + 1]):
        c0, c1, c2 = cost[best - 1], cost[best], cost[best + 1]
        curvature = c0 - 2 * c1 + c2
        if curvature > 0:
            step = 0.5 * (c0 - c2) / curvature
            return float(np.exp(u[best] + min(max(step, -1.0), 1.0) * (u[1] - u[0])))
    return float(_PREFIX_GRID[best])


def _prefix_fit(
    like: LawFit, obs: Observations, alpha: float, weight: np.ndarray, mean: float | None, last: float
) -> LawFit | None:
    area_ref = float(obs.area[-1])
    seen = like.cells.before(float(obs.clock[-1]))
    theta = np.array([alpha])
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        power = like.law.power(theta, obs.area / area_ref)
    anneal = like.law.anneal(theta, obs.clock, obs.area, seen)
    problem = Projection(obs.loss, weight, mean, like.strength if mean is not None else 0.0)
    coef, fitted = problem.solve(power, anneal)
    if not np.isfinite(coef).all():
        return None
    residuals = obs.loss - fitted
    return replace(
        like, theta=theta, coef=coef, area_ref=area_ref, timeline=replace(like.timeline, last_step=last),
        sigma=robust_sigma(residuals, obs.weight), residuals=residuals, fitted=fitted, observations=obs, prior_mean=mean, weight=weight,
        _cache={},
    )
