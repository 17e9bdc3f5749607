"""Token-window EMA: smoothing whose window is a fixed number of tokens, not of rows.

A fixed step count covers a different amount of data at each batch size, which biases any
comparison across batch sizes (and across the stages of one dynamic-batch run). So each
step's EMA span is ``token_window / batch``. A row logged ``g`` steps after the previous
logged row decays the average by ``g`` steps' worth, so a log thinned to every N-th step
averages over the same tokens as the full log.

Between two logged rows the loss is not known; what the EMA takes in over a gap decides
where a sparse log (a loss logged at an eval cadence) crosses a target. Across a gap that is
short next to the steps before it the loss is the monotone cubic (Fritsch-Carlson, PCHIP)
through the rows on the step axis: it bends as the rows beside the gap say the curve bends,
stays between the two rows of the gap (a noisy row does not ring), and is the straight line
on a linear stretch. The straight line itself sits above a bending curve over every gap, so
an eval every 250 or 500 steps crossed late by a near-constant number of steps once the
crossing lay past the first gaps. Across a gap that spans more than a factor ``e`` in
``1 + step`` (the first evals after step 0, where the loss falls by half between two rows)
the step axis is far off: the curve falls fastest at the gap's start, and a line held the
loss up over the whole gap (a log every 250 steps crossed 9% later than the same run logged
every 10). There the cubic is drawn on the axis ``log(1 + step)``, where a power law in the
step is nearly straight, and it leaves the first row level: its slope there, per unit of
``log(1 + step)``, is the loss's fall over the first step, small beside its fall over a gap
that wide (the three-point end slope would carry the later, steeper log-slope back to the
start, and put the fall too early). A first gap whose rows bend less on the step axis (a
slow start: the loss falls at a near-steady rate over the first two gaps) is drawn on steps. The EMA is stepped through each gap at up to
:data:`GAP_POINTS` points, and :func:`fine_ema` gives it at those points, so a crossing
inside a gap is placed where the EMA passes the target, not on the chord between the rows
(the EMA bends between them). A log with a row every step is smoothed exactly as before.

Some trainers log, at each logging step, the mean of the training loss over the steps
since their last log (Hugging Face ``Trainer``'s ``loss``, Lightning's ``on_epoch`` means):
the frame records it as ``History.loss_spans``, the steps each value averages. Such a value
belongs to the middle of its interval, not its end (over a linear stretch the mean is the
curve at the middle): the curve is drawn through the middles, and the EMA at a row's own
step takes in the half interval after its middle (a straight line past the last middle).
Logged every 500 steps, a mean placed at its end crossed a target 16% late.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "GAP_POINTS",
    "between_rows",
    "ema_decay",
    "fine_ema",
    "interval_middles",
    "linear_recurrence",
    "linear_recurrence_rows",
    "token_window_ema",
]

# Past this, older rows weigh less than one part in 2**60 of the newest: the scan can stop.
_NEGLIGIBLE = 2.0**-60
# A gap is stepped through at up to this many points (every step of a gap up to this long).
GAP_POINTS = 32
# The points of all gaps together are kept below this many (a long, sparse log): each gap
# then gets fewer, and a gap stepped at one point is the straight line between its rows.
_MAX_FINE_POINTS = 1 << 23
# A gap wider than this in log(1 + step) takes the cubic rather than the line.
_WIDE_GAP = 1.0


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


def token_window_ema(
    loss: np.ndarray, step: np.ndarray, batch: np.ndarray, token_window: float, spans: np.ndarray | None = None
) -> np.ndarray:
    """Smooth ``loss`` with an EMA whose window is ``token_window`` tokens, at each row.

    On consecutive steps at a fixed batch ``B`` this equals
    ``pd.Series(loss).ewm(span=token_window / B, adjust=False).mean()``. Over a logging
    gap the loss follows :func:`between_rows` (see the module's docstring). ``spans``: the
    steps each logged value is a mean over, ending at its row (None: values at their steps).
    """
    fine_step, smoothed, rows = _fine(loss, step, batch, token_window, spans)
    return smoothed if rows is None else smoothed[rows]


def fine_ema(
    loss: np.ndarray, step: np.ndarray, batch: np.ndarray, token_window: float, spans: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(steps, EMA): :func:`token_window_ema` at the rows and at the points it steps
    through inside each logging gap, in step order; the rows' own steps when there are
    no gaps."""
    fine_step, smoothed, _ = _fine(loss, step, batch, token_window, spans)
    return fine_step, smoothed


def interval_middles(step: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Where a mean over the ``spans[i]`` steps ending at ``step[i]`` belongs: the middle of
    those steps, ``step - (spans - 1) / 2``."""
    return np.asarray(step, float) - (np.maximum(np.asarray(spans, float), 1.0) - 1.0) / 2.0


def between_rows(step: np.ndarray, loss: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The loss at steps ``at`` (within the logged steps) as the EMA takes it between the
    logged rows: the monotone cubic through ``(step, loss)``, or through
    ``(log(1 + step), loss)`` across a gap that spans more than a factor ``e`` in
    ``1 + step``, level at the first row (see the module's docstring). ``step`` must
    increase strictly."""
    x = np.asarray(step, float)
    y = np.asarray(loss, float)
    q = np.asarray(at, float)
    curve = _pchip(x, y, q)
    if x[0] <= -1.0:  # no log axis to draw on
        return curve
    lx, lq = np.log1p(x), np.log1p(q)
    wide = np.diff(lx) > _WIDE_GAP
    if not wide.any():
        return curve
    j = np.clip(np.searchsorted(x, q, side="right") - 1, 0, len(x) - 2)
    on_log = _pchip(lx, y, lq, level_start=bool(wide[0]))
    if wide[0] and _straighter_on_steps(x, lx, y):
        on_log = np.where(j == 0, curve, on_log)
    return np.where(wide[j], on_log, curve)


def _straighter_on_steps(x: np.ndarray, lx: np.ndarray, y: np.ndarray) -> bool:
    """Do the first three rows bend less on the step axis than on ``log(1 + step)``? The
    ratio of the slopes over the first two gaps says how much: a power law from step 0
    falls many times faster per step over its first gap than its second (nearly straight
    on the log axis), a slow start at a near-steady rate (nearly straight on steps)."""
    if len(x) < 3:
        return False

    def bend(axis: np.ndarray) -> float:
        first, second = (y[1] - y[0]) / (axis[1] - axis[0]), (y[2] - y[1]) / (axis[2] - axis[1])
        return abs(float(np.log(first / second))) if first * second > 0 else np.inf

    return bend(x) < bend(lx)


def _fine(
    loss: np.ndarray, step: np.ndarray, batch: np.ndarray, token_window: float, spans: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The EMA on the rows and the points inside each gap: (steps, EMA, the rows' indices
    among them, None when there are no points but the rows)."""
    step = np.asarray(step)
    loss = np.asarray(loss, float)
    gap = np.diff(np.asarray(step, float))
    means = spans is not None and len(spans) == len(step) and bool(np.any(np.asarray(spans) > 1))
    per_gap = GAP_POINTS if len(step) * GAP_POINTS <= _MAX_FINE_POINTS else _MAX_FINE_POINTS // max(len(step), 1)
    plain = (
        len(step) < 2
        or per_gap < 2
        or not np.all(gap >= 1)
        or not np.any(gap > 1)
        or not np.isfinite(loss).all()
    )
    if plain:  # a row every step, or nothing a curve can be drawn through: the rows alone
        return step, _row_ema(loss, step, batch, token_window), None
    pieces = np.minimum(np.ceil(gap), per_gap).astype(np.int64)  # sub-intervals per gap
    ends = np.cumsum(pieces)  # each row's index among the fine points, the first at 0
    owner = np.repeat(np.arange(1, len(step)), pieces)  # the row that closes each point's gap
    k = np.arange(1, int(ends[-1]) + 1) - np.repeat(ends - pieces, pieces)
    start = np.asarray(step, float)[owner - 1]
    inside = np.round(start + k * gap[owner - 1] / pieces[owner - 1])
    fine_step = np.r_[float(step[0]), inside]
    rows = np.r_[0, ends]
    fine_step[rows] = step  # the rows' own steps, exactly
    if means and spans is not None:
        values = _through_middles(interval_middles(step, spans), loss, fine_step)
    else:
        values = between_rows(step, loss, fine_step)
        values[rows] = loss
    fine_batch = np.asarray(batch, float)[np.r_[0, owner]]  # a gap's steps have its later row's batch
    return fine_step, _row_ema(values, fine_step, fine_batch, token_window), rows


def _through_middles(middle: np.ndarray, loss: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The per-step loss at ``at`` from interval means placed at their ``middle``s: as
    :func:`between_rows` between the middles, the straight line through the last two past
    the last one (the half interval a row's own step lies beyond its middle)."""
    values = between_rows(middle, loss, np.clip(at, middle[0], middle[-1]))
    past = at > middle[-1]
    if past.any() and len(middle) > 1:
        slope = (loss[-1] - loss[-2]) / (middle[-1] - middle[-2])
        values[past] = loss[-1] + slope * (at[past] - middle[-1])
    return values


def _pchip(x: np.ndarray, y: np.ndarray, q: np.ndarray, level_start: bool = False) -> np.ndarray:
    """The monotone piecewise cubic through ``(x, y)`` at ``q``: Fritsch-Carlson slopes,
    the ends as SciPy's ``PchipInterpolator`` makes them (here, so that smoothing a log
    does not load scipy.interpolate), or level at the first point when ``level_start``."""
    h = np.diff(x)
    delta = np.diff(y) / h
    slope = np.zeros(len(x))
    if len(x) == 2:
        slope[:] = delta[0]
    else:
        w1, w2 = 2 * h[1:] + h[:-1], h[1:] + 2 * h[:-1]
        same = np.sign(delta[:-1]) * np.sign(delta[1:]) > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = (w1 + w2) / (w1 / delta[:-1] + w2 / delta[1:])
        slope[1:-1] = np.where(same, mean, 0.0)
        slope[0] = _end_slope(h[0], h[1], delta[0], delta[1])
        slope[-1] = _end_slope(h[-1], h[-2], delta[-1], delta[-2])
    if level_start:
        slope[0] = 0.0
    j = np.clip(np.searchsorted(x, q, side="right") - 1, 0, len(x) - 2)
    t = (q - x[j]) / h[j]
    t2, t3 = t * t, t * t * t
    return (
        (2 * t3 - 3 * t2 + 1) * y[j]
        + (t3 - 2 * t2 + t) * h[j] * slope[j]
        + (-2 * t3 + 3 * t2) * y[j + 1]
        + (t3 - t2) * h[j] * slope[j + 1]
    )


def _end_slope(h0: float, h1: float, d0: float, d1: float) -> float:
    """The slope at an end: the three-point estimate, kept in the shape of the data."""
    slope = ((2 * h0 + h1) * d0 - h0 * d1) / (h0 + h1)
    if np.sign(slope) != np.sign(d0):
        return 0.0
    if np.sign(d0) != np.sign(d1) and abs(slope) > abs(3 * d0):
        return 3 * d0
    return float(slope)


def _row_ema(loss: np.ndarray, step: np.ndarray, batch: np.ndarray, token_window: float) -> np.ndarray:
    """The EMA at each row, the loss taken as the straight line between rows over a gap."""
    decay = ema_decay(step, batch, token_window)
    x = np.asarray(loss, float)
    drive = np.subtract(1.0, decay)
    drive *= x  # (1 - decay) * x, without a temporary the length of the log
    _ramps_over_gaps(drive, decay, x, step)
    return _solved(decay, drive)


def _ramps_over_gaps(drive: np.ndarray, decay: np.ndarray, x: np.ndarray, step: np.ndarray) -> None:
    """A logging gap of g steps: the EMA of the loss interpolated linearly between the
    two logged rows, stepped g times, rather than the later value held over the gap
    (which leads the dense log's EMA by about half a gap). Exact for a linear curve,
    and the same as before for consecutive steps. ``drive`` is changed in place."""
    gap = np.diff(np.asarray(step))  # the steps' own type: no float copy of a long log's steps
    skipped = np.flatnonzero(gap > 1) + 1
    if len(skipped):
        g = gap[skipped - 1].astype(float)
        per_step = np.power(decay[skipped], 1.0 / g)  # the decay of one step
        weight = _ramp_weight(per_step, g)
        drive[skipped] = (1.0 - decay[skipped]) * x[skipped - 1] + weight * (x[skipped] - x[skipped - 1])


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
    return _solved(np.asarray(decay, float), np.array(drive, dtype=float))


def _solved(decay: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`linear_recurrence`, solved in ``y`` (the drive, overwritten); ``decay`` is
    left as it is, and copied only where the decays differ from row to row."""
    n = len(y)
    scratch = np.empty(n)
    if n > 2 and (decay[1:] == decay[1]).all():
        return _constant_recurrence(y, float(decay[1]), scratch)
    a = np.array(decay, dtype=float)
    if n:
        a[0] = 0.0
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
