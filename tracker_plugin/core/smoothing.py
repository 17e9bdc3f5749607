"""Token-window EMA: smoothing whose window is a fixed number of tokens, not of rows.

A fixed step count covers a different amount of data at each batch size, which biases any
comparison across batch sizes (and across the stages of one dynamic-batch run). So each
step's EMA span is ``token_window / batch``. A row logged ``g`` steps after the previous
logged row decays the average by ``g`` steps' worth, so a log thinned to every N-th step
averages over the same tokens as the full log, and the loss between two logged rows is
taken as the straight line between them, so a log thinned to every N-th step crosses a
target where the full log does (to the curve's bend over one gap), not half a gap early.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ema_decay", "linear_recurrence", "linear_recurrence_rows", "token_window_ema"]

# Past this, older rows weigh less than one part in 2**60 of the newest: the scan can stop.
_NEGLIGIBLE = 2.0**-60


def ema_decay(step: np.ndarray, batch: np.ndarray, token_window: float) -> np.ndarray:
    """Per-row decay of the average: ``(1 - alpha) ** steps_since_previous_row``.

    ``alpha = 2 / (span + 1)`` with ``span = token_window / batch`` clamped to at least one
    step, as pandas' ``ewm(span=..., adjust=False)`` defines it. The first row's decay is 0:
    the average starts at the first value.
    """
    span = np.maximum(token_window / np.asarray(batch, float), 1.0)
    decay = 1.0 - 2.0 / (span + 1.0)
    gap = np.diff(np.asarray(step))
    skipped = np.flatnonzero(gap != 1) + 1
    if len(skipped):
        decay[skipped] = np.power(decay[skipped], gap[skipped - 1])
    decay[0] = 0.0
    return decay


def token_window_ema(loss: np.ndarray, step: np.ndarray, batch: np.ndarray, token_window: float) -> np.ndarray:
    """Smooth ``loss`` with an EMA whose window is ``token_window`` tokens.

    On consecutive steps at a fixed batch ``B`` this equals
    ``pd.Series(loss).ewm(span=token_window / B, adjust=False).mean()``.
    """
    decay = ema_decay(step, batch, token_window)
    x = np.asarray(loss, float)
    drive = (1.0 - decay) * x
    gap = np.diff(np.asarray(step, float))
    skipped = np.flatnonzero(gap > 1) + 1
    if len(skipped):
        # A logging gap of g steps: the EMA of the loss interpolated linearly between the
        # two logged rows, stepped g times, rather than the later value held over the gap
        # (which leads the dense log's EMA by about half a gap). Exact for a linear curve,
        # and the same as before for consecutive steps.
        g = gap[skipped - 1]
        per_step = np.power(decay[skipped], 1.0 / g)  # the decay of one step
        weight = _ramp_weight(per_step, g)
        drive[skipped] = (1.0 - decay[skipped]) * x[skipped - 1] + weight * (x[skipped] - x[skipped - 1])
    return linear_recurrence(decay, drive)


def _ramp_weight(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``(1 - d) / g * sum_{k=1..g} k d**(g-k)``: how much of a linear rise over ``g`` steps
    an EMA with per-step decay ``d`` has taken in by the end of them."""
    one_minus = 1.0 - d
    small = one_minus * g < 1e-4  # the closed form cancels: its first-order series
    with np.errstate(divide="ignore", invalid="ignore"):
        dg = np.power(d, g)
        s0 = (1.0 - dg) / one_minus  # sum_{j<g} d**j
        s1 = d * (s0 - g * np.power(d, g - 1.0)) / one_minus  # sum_{j<g} j d**j
        closed = one_minus / g * (g * s0 - s1)
    return np.where(small, one_minus * (g + 1.0) / 2.0, np.where(one_minus <= 0, 0.0, closed))


def linear_recurrence(decay: np.ndarray, drive: np.ndarray) -> np.ndarray:
    """Solve ``y[i] = decay[i] * y[i-1] + drive[i]`` (``y[-1] = 0``) without a loop per row.

    A Hillis-Steele prefix scan: after the pass with shift ``s`` each element has folded in
    the ``2s`` elements before it, so ``log2(n)`` vectorised passes suffice, and fewer when
    the accumulated decay has become negligible. Only products of decays in [0, 1] and sums
    appear, so nothing overflows.
    """
    y = np.array(drive, dtype=float)
    a = np.array(decay, dtype=float)
    n = len(y)
    if n:
        a[0] = 0.0
    scratch = np.empty(n)
    if n > 2 and (a[1:] == a[1]).all():
        return _constant_recurrence(y, float(a[1]), scratch)
    # After the pass with shift s, every product in ``a`` spans 2s rows: bounded by
    # largest**(2s), which decides when the remaining passes can change nothing.
    largest = float(a.max()) if n else 0.0
    bound = largest
    shift = 1
    while shift < n and bound > _NEGLIGIBLE:
        m = n - shift
        np.multiply(a[shift:], y[:m], out=scratch[:m])
        y[shift:] += scratch[:m]
        np.multiply(a[shift:], a[:m], out=scratch[:m])
        a[shift:] = scratch[:m]
        shift *= 2
        bound *= bound
    return y


def _constant_recurrence(y: np.ndarray, decay: float, scratch: np.ndarray) -> np.ndarray:
    """:func:`linear_recurrence` in place when every row after the first has one ``decay``
    (a fixed batch, every step logged): the products of decays are then one number per
    pass, and each pass halves its work. The arithmetic is the same, to the bit."""
    n = len(y)
    factor = decay
    shift = 1
    while shift < n and factor > _NEGLIGIBLE:
        m = n - shift
        np.multiply(y[:m], factor, out=scratch[:m])
        y[shift:] += scratch[:m]
        shift *= 2
        factor *= factor
    return y


def linear_recurrence_rows(decay: np.ndarray, drive: np.ndarray) -> np.ndarray:
    """:func:`linear_recurrence` for every row of ``drive`` at once (one ``decay`` for all).

    The same scan, on a 2-D array whose last axis is time: many curves smoothed alike
    (the windows of a stability sweep) cost a few vectorised passes.
    """
    y = np.array(drive, dtype=float)
    a = np.array(decay, dtype=float)
    n = a.shape[0]
    if n:
        a[0] = 0.0
    bound = float(a.max()) if n else 0.0
    shift = 1
    while shift < n and bound > _NEGLIGIBLE:
        m = n - shift
        y[:, shift:] += a[shift:] * y[:, :m]
        a[shift:] = a[shift:] * a[:m]
        shift *= 2
        bound *= bound
    return y
