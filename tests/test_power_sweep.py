"""The power-law sweep's all-windows-at-once fit (core/models/power_sweep.py).

Each window's answer must be the least-squares optimum of that window within the original
script's bounds: checked against Gauss-Newton polished on the window's own rows, and against
``curve_fit`` (the script's solver), whose answer it may only beat in cost, never lose to.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracker_plugin as tp
from tracker_plugin.core.analysis import sweep_checkpoints
from tracker_plugin.core.models import FitFailure, PowerLaw, fit_power_law
from tracker_plugin.core.models.power_sweep import fit_power_law_windows
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.testing import synthetic_run

# Relative agreement with the polished optimum (both solve the same problem to rounding).
OPTIMUM = 1e-8
# The cost may exceed curve_fit's only by rounding: relatively, or, where both fit the
# window exactly (three points), by residuals of 1e-11 of the loss.
COST = 1e-12
EXACT = 1e-22


def _cost(fit: PowerLaw, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum((fit.l0 + fit.a * x ** -fit.alpha - y) ** 2))


def _no_worse(fit: PowerLaw, reference: PowerLaw, x: np.ndarray, y: np.ndarray) -> bool:
    return _cost(fit, x, y) <= _cost(reference, x, y) * (1 + COST) + EXACT * float(np.sum(y * y))


def _polished(fit: PowerLaw, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gauss-Newton from ``fit`` on the rows themselves (no bound active in these windows)."""
    p = np.array([fit.l0, fit.a, fit.alpha])
    for _ in range(30):
        power = x ** -p[2]
        residual = p[0] + p[1] * power - y
        jacobian = np.c_[np.ones_like(x), power, -p[1] * np.log(x) * power]
        p = p + np.linalg.lstsq(jacobian, -residual, rcond=None)[0]
    return p


def _windows(history, window: float):
    smoothed = token_window_ema(history.loss, history.step, history.batch, window)
    start = tp.analyze(history, 1.0, model="power-law", ema_token_window=window).fit_start_step
    first = int(np.searchsorted(history.step, start))
    ends = [int(np.searchsorted(history.step, s, side="right")) - first
            for s in sweep_checkpoints(start, history.last_step, 300, 500)]
    return history.tokens[first:], smoothed[first:], ends


@pytest.mark.parametrize(("name", "window"), [("parity_long_fixed.csv", 5e7), ("parity_dynamic.csv", 1e8)])
def test_every_window_is_the_least_squares_optimum(data_dir, name, window):
    tokens, smoothed, ends = _windows(tp.load_csv(data_dir / name), window)
    fits = fit_power_law_windows(tokens, smoothed, ends)
    assert len(fits) == len(ends)
    bound_active = 0
    for end, fit in zip(ends, fits):
        x, y = tokens[:end] / 1e9, smoothed[:end]
        reference = fit_power_law(tokens[:end], y)
        assert isinstance(fit, PowerLaw) and isinstance(reference, PowerLaw)
        assert _no_worse(fit, reference, x, y), end
        if fit.l0 <= 1e-12 or fit.l0 >= y.min() * (1 - 1e-12):
            bound_active += 1  # L0 on a bound: Gauss-Newton would leave the box
            np.testing.assert_allclose([fit.a, fit.alpha], [reference.a, reference.alpha], rtol=1e-4)
            continue
        np.testing.assert_allclose([fit.l0, fit.a, fit.alpha], _polished(fit, x, y), rtol=OPTIMUM)
    if name == "parity_dynamic.csv":
        assert bound_active >= 2  # its first windows put L0 on 0: the bounds are exercised


def test_a_long_sweep_equals_the_window_by_window_fits():
    """30,000 rows, every 20th of the sweep's windows: the same answers as curve_fit window by window."""
    history = tp.analyze(synthetic_run(30_000, seed=3), 2.9, model="power-law").history
    tokens, smoothed, ends = _windows(history, 1e8)
    ends = ends[::20]
    fits = fit_power_law_windows(tokens, smoothed, ends)
    for end, fit in zip(ends, fits):
        x, y = tokens[:end] / 1e9, smoothed[:end]
        reference = fit_power_law(tokens[:end], y)
        assert _no_worse(fit, reference, x, y)
        np.testing.assert_allclose([fit.l0, fit.a, fit.alpha], [reference.l0, reference.a, reference.alpha], rtol=1e-4)


def test_windows_that_cannot_be_fitted_say_why():
    tokens = np.r_[0.0, 0.0, np.arange(1, 30) * 1e8]
    loss = np.r_[5.0, 5.0, 3 + 2 * (np.arange(1, 30) * 0.1) ** -0.3]
    fits = fit_power_law_windows(tokens, loss, [2, 4, 31])
    assert isinstance(fits[0], FitFailure) and "at least 3 points" in fits[0].reason
    assert isinstance(fits[1], FitFailure) and "at least 3 points" in fits[1].reason
    assert isinstance(fits[2], PowerLaw)
    assert fits[2].alpha == pytest.approx(0.3, rel=1e-6)
    negative = fit_power_law_windows(tokens, loss - 10, [31])
    assert isinstance(negative[0], FitFailure) and "asymptote has no room" in negative[0].reason


REAL_RUNS = [
    "modded-short-2024-11-24_WindowWarmup.csv", "mpl-25M-wsdcon-9.csv", "nanogpt-124M-adamw-llmc.csv",
    "nanogpt-bs-constant.csv", "olmo-ladder-190M-1xC.csv", "olmo-ladder-370M-5xC.csv",
]


@pytest.mark.parametrize("name", REAL_RUNS)
def test_real_runs_every_window_costs_no_more_than_curve_fit(data_dir, name):
    """Public runs (noisy, short, a decaying lr): each window at least as good as the
    script's solver on it, and a window that cannot be fitted fails the same way."""
    history = tp.load_csv(data_dir / name)
    analysis = tp.analyze(history, 1.0, model="power-law")
    first = int(np.searchsorted(history.step, analysis.fit_start_step))
    ends = [int(np.searchsorted(history.step, s, side="right")) - first
            for s in sweep_checkpoints(analysis.fit_start_step, history.last_step, 300, 500)]
    ends = ([e for e in ends if e >= 3] or [len(history) - first])[::4]  # a few hundred rows apart
    smoothed = analysis.smoothed[first:]
    for end, fit in zip(ends, fit_power_law_windows(history.tokens[first:], smoothed, ends)):
        reference = fit_power_law(history.tokens[first:first + end], smoothed[:end])
        assert type(fit) is type(reference), (end, fit, reference)
        if isinstance(fit, PowerLaw):
            x, y = history.tokens[first:first + end] / 1e9, smoothed[:end]
            keep = x > 0
            assert _no_worse(fit, reference, x[keep], y[keep]), end
