"""Token-window EMA: pandas parity, gap awareness, dynamic batch, the scan itself."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tracker_plugin.core.smoothing import between_rows, linear_recurrence, token_window_ema


def _noisy(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 3.0 + np.linspace(2.0, 0.0, n) + rng.normal(0, 0.1, n)


def test_consecutive_steps_equal_pandas_ewm():
    loss = _noisy(50_000)
    step = np.arange(50_000)
    batch = np.full(50_000, 524_288.0)
    ours = token_window_ema(loss, step, batch, 1e8)
    expected = pd.Series(loss).ewm(span=1e8 / 524_288.0, adjust=False).mean().to_numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=0)


def test_thinned_log_averages_over_the_same_tokens():
    """A log thinned to every N-th step smooths the loss as the curve between its rows
    (between_rows): feed the full-resolution EMA that curve, and at the logged steps both
    agree (a gap of 25 steps is stepped through at every step)."""
    every = 25
    step = np.arange(1, 20_001)
    logged = _noisy(len(step) // every, seed=3)
    logged_steps = step[every - 1 :: every]
    full_steps = step[every - 1 :]
    full_loss = between_rows(logged_steps, logged, full_steps)
    batch = np.full(len(step), 262_144.0)
    full = token_window_ema(full_loss, full_steps, batch[every - 1 :], 5e7)
    thinned = token_window_ema(logged, logged_steps, batch[::every], 5e7)
    full = np.r_[np.zeros(every - 1), full]
    np.testing.assert_allclose(thinned[40:], full[every - 1 :: every][40:], rtol=1e-12)


def test_a_linear_fall_from_step_0_logged_every_500_steps_smooths_as_logged_every_step():
    """A slow start (the loss falling at a steady rate over the first two gaps) is drawn on
    the step axis: a straight line logged sparsely is the EMA of that line. On log(1 + step)
    the first gap put the fall at its start, 0.5% below the dense EMA at the next row."""
    steps = np.arange(0, 5001, dtype=float)
    loss = 4.0 - 0.0003 * steps
    dense = token_window_ema(loss, steps, np.ones(len(steps)), 300.0)
    sparse = token_window_ema(loss[::500], steps[::500], np.ones(11), 300.0)
    np.testing.assert_allclose(sparse, dense[::500], rtol=1e-12)


def test_between_rows_stays_between_the_rows_of_its_gap():
    """The cubic is monotone across each gap (no ringing past a noisy row), on either axis."""
    steps = np.array([0.0, 250, 500, 750, 1000, 1250, 1500])
    loss = np.array([8.0, 3.3, 3.0, 3.05, 2.7, 2.72, 2.5])
    at = np.arange(0.0, 1501.0)
    values = between_rows(steps, loss, at)
    gap = np.clip(np.searchsorted(steps, at, side="right") - 1, 0, len(steps) - 2)
    low = np.minimum(loss[gap], loss[gap + 1])
    high = np.maximum(loss[gap], loss[gap + 1])
    assert np.all(values >= low - 1e-12) and np.all(values <= high + 1e-12)


def test_row_based_ema_on_a_thinned_log_would_smooth_n_times_too_long():
    """The defect the gap-aware weights fix: treating each logged row as one step."""
    step = np.arange(0, 40_000, 500)
    loss = np.where(step < 20_000, 4.0, 3.0)  # a step change in the loss
    batch = np.full(len(step), 786_432.0)
    ours = token_window_ema(loss, step, batch, 1e8)
    row_based = pd.Series(loss).ewm(span=1e8 / 786_432.0, adjust=False).mean().to_numpy()
    after = np.searchsorted(step, 20_500)
    assert abs(ours[after] - 3.0) < 0.01  # 500 steps is ~4 spans: the change has come through
    assert row_based[after] > 3.9  # one row of 127 "steps": barely moved


def test_each_step_uses_its_own_batch():
    """In a dynamic run the span in steps shrinks as the batch grows."""
    step = np.arange(2_000)
    batch = np.where(step < 1000, 100_000.0, 1_000_000.0)
    loss = _noisy(2_000, seed=4)
    ours = token_window_ema(loss, step, batch, 1e7)
    first = pd.Series(loss[:1000]).ewm(span=100, adjust=False).mean().to_numpy()
    np.testing.assert_allclose(ours[:1000], first, rtol=1e-12)
    # from step 1000 on, span 10 steps starting from the stage-one average
    alpha = 2 / 11
    expected = ours[999]
    for x in loss[1000:1010]:
        expected = alpha * x + (1 - alpha) * expected
    assert ours[1009] == np.float64(expected) or abs(ours[1009] - expected) < 1e-12


def test_window_below_one_batch_means_no_smoothing():
    loss = _noisy(100)
    out = token_window_ema(loss, np.arange(100), np.full(100, 1e6), 1e5)
    np.testing.assert_array_equal(out, loss)


@settings(max_examples=200, deadline=None)
@given(
    arrays(np.float64, st.integers(1, 300), elements=st.floats(0, 1)),
    st.integers(0, 2**32 - 1),
)
def test_scan_equals_the_sequential_recurrence(decay, seed):
    drive = np.random.default_rng(seed).normal(size=len(decay))
    expected = np.empty(len(decay))
    y = 0.0
    for i, (d, u) in enumerate(zip(decay, drive)):
        y = (d if i else 0.0) * y + u
        expected[i] = y
    np.testing.assert_allclose(linear_recurrence(decay, drive), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n", [3, 4, 1000, 4097])
def test_one_decay_for_every_row_takes_a_shortcut_to_the_same_bits(n):
    """A fixed batch logged every step has one decay; the scan then skips the decay products."""
    drive = np.random.default_rng(n).normal(size=n)
    decay = np.full(n, 0.99)
    varied = decay.copy()
    varied[-1] = np.nextafter(0.99, 1.0)  # not one decay: the general scan
    shortcut = linear_recurrence(decay, drive)
    general = linear_recurrence(varied, drive)
    np.testing.assert_array_equal(shortcut[:-1], general[:-1])
