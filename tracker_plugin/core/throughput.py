"""Wall-clock time: how fast a run goes, and when (in seconds) it reaches each target.

Throughput is measured on the recent stretch of the log, in seconds per token, so that a
forecast in tokens converts straight to seconds whatever batch comes next. The stretch
starts no earlier than the last batch stage (after a switch the new stage's rate holds),
and intervals between logged rows that hold a pause (an eval, a checkpoint, a resumed
run's downtime, the first steps' compilation) are left out of the rate: they are counted
and reported, and added back as an observed pause rate only when ``count_pauses`` asks.

A forecast's seconds interval combines, in log space, the token forecast's own interval
with the throughput's spread between blocks of the stretch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from statistics import NormalDist

import numpy as np
import pandas as pd

from tracker_plugin.errors import ConfigError
from tracker_plugin.frame.history import History
from tracker_plugin.frame.time import COARSE_TICK

__all__ = ["Deadline", "TargetTime", "Throughput", "Timing", "measure_throughput", "parse_deadline", "time_target"]

# The standard normal (stdlib: scipy.stats would load scipy.optimize for every report).
_NORMAL = NormalDist()
# The recent stretch: this share of the logged rows, but at least this many intervals.
RECENT_SHARE = 0.3
MIN_INTERVALS = 8
# An interval holds a pause when its excess over the typical rate is more than this many
# typical steps, and its rate more than this factor above the typical one.
PAUSE_STEPS = 3.0
PAUSE_FACTOR = 1.5
# The running median that tells a pause from the run's own rate spans this many intervals.
LOCAL_INTERVALS = 11
# A shift of the local rate by more than this factor starts a new stretch (new hardware).
RATE_SHIFT = 1.25
# The throughput's spread is measured between this many blocks of the stretch.
SPREAD_BLOCKS = 4


@dataclass(frozen=True)
class Throughput:
    """How fast the run goes, and how that was measured.

    ``seconds_per_token`` is the rate the forecasts use (pauses added when
    ``pauses_included``); ``spread`` is the standard deviation of the log of the rate
    between blocks of the measured stretch (0 when given by a setting).
    """

    source: str  # "clock", "step_time" or "throughput" (the setting that gave it)
    seconds_per_token: float
    seconds_per_step: float  # at the last logged batch
    spread: float
    first_step: int | None = None  # the stretch measured
    last_step: int | None = None
    pauses: int = 0  # pauses seen in the whole log
    pause_seconds: float = 0.0
    pause_rate: float = 0.0  # extra seconds per token the pauses add, over the log
    pauses_included: bool = False
    stage_start: int | None = None  # the stretch starts at this batch switch

    @property
    def tokens_per_second(self) -> float:
        return 1.0 / self.seconds_per_token


@dataclass(frozen=True)
class Deadline:
    """A deadline, as seconds after the last logged row (and Unix time when known)."""

    seconds_left: float
    unix: float | None
    text: str


@dataclass(frozen=True)
class TargetTime:
    """When (on the run's clock) a target is reached.

    ``seconds`` counts from the first logged row; ``seconds_left`` from the last one;
    ``eta_unix`` is Unix time when the clock is absolute. Unbounded ends are ``inf``.
    """

    seconds: float | None = None
    seconds_interval: tuple[float, float] | None = None
    seconds_left: float | None = None
    seconds_left_interval: tuple[float, float] | None = None
    eta_unix: float | None = None
    p_by_deadline: float | None = None


@dataclass(frozen=True)
class Timing:
    """The wall-clock side of an analysis."""

    throughput: Throughput | None
    observed_seconds: float | None  # the last logged row, from the first one
    start_unix: float | None  # the first logged row, when the clock is absolute
    deadline: Deadline | None
    targets: tuple[TargetTime, ...]
    note: str | None = None


def measure_throughput(
    history: History,
    *,
    step_time: float | None = None,
    tokens_per_second: float | None = None,
    count_pauses: bool = False,
) -> Throughput | None:
    """The run's throughput: a setting when given, else measured on its clock, else None."""
    batch = float(history.batch[-1])
    if tokens_per_second is not None:
        return Throughput("throughput", 1.0 / tokens_per_second, batch / tokens_per_second, 0.0)
    if step_time is not None:
        return Throughput("step_time", step_time / batch, step_time, 0.0)
    if history.time is None or len(history) < 3:
        return None
    return _measured(_clock_ticks(history), count_pauses)


def _clock_ticks(history: History) -> History:
    """The rows where a coarse clock ticks, or the history as it is.

    Whole-second stamps on sub-second steps put several rows on one stamp: an interval
    inside a stamp reads as no time at all and the next as a pause. Between the first rows
    of consecutive stamps the rate is the clock's, measured over whole ticks.
    """
    assert history.time is not None
    dt = np.diff(history.time)
    moved = dt > 0
    if moved.all() or not moved.any() or float(dt[moved].min()) < COARSE_TICK:
        return history
    return history.take(np.r_[0, np.flatnonzero(moved) + 1])


def _measured(history: History, count_pauses: bool) -> Throughput | None:
    assert history.time is not None
    dt = np.diff(history.time)
    dk = np.diff(history.tokens)
    ds = np.diff(history.step).astype(float)
    usable = (dk > 0) & (dt >= 0)
    if usable.sum() < 2:
        return None
    rate = np.where(usable, dt / np.where(dk > 0, dk, 1.0), np.nan)
    pause, excess = _pauses(rate, dt, dk, ds, usable)
    first = _stretch_start(history, rate, usable)
    clean = usable & ~pause
    clean[:first] = False
    if clean.sum() < 1:  # the stretch is all pauses: fall back to every usable interval
        clean = usable.copy()
    seconds_per_token = float(dt[clean].sum() / dk[clean].sum())
    if not (math.isfinite(seconds_per_token) and seconds_per_token > 0):
        return None
    # The first interval's pause is the compilation: it does not come back.
    recurring = pause.copy()
    recurring[0] = False
    pause_rate = float(excess[recurring].sum() / max(float(dk[usable].sum()), 1.0))
    rate_used = seconds_per_token + (pause_rate if count_pauses else 0.0)
    stage_start = _last_switch(history)
    return Throughput(
        source="clock",
        seconds_per_token=rate_used,
        seconds_per_step=rate_used * float(history.batch[-1]),
        spread=_spread(dt[clean], dk[clean]),
        first_step=int(history.step[first]),
        last_step=history.last_step,
        pauses=int(pause.sum()),
        pause_seconds=float(excess[pause].sum()),
        pause_rate=pause_rate,
        pauses_included=count_pauses,
        stage_start=stage_start if stage_start is not None and stage_start >= int(history.step[first]) else None,
    )


def _pauses(
    rate: np.ndarray, dt: np.ndarray, dk: np.ndarray, ds: np.ndarray, usable: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Intervals that hold a pause, and each interval's seconds beyond the local rate.

    The local rate is a running median over neighbouring intervals, so a batch or
    hardware switch, which changes the rate for good, is not read as a pause.
    """
    typical = _local_rate(rate)
    excess = np.where(usable, dt - typical * dk, 0.0)
    step_seconds = typical * dk / np.maximum(ds, 1.0)
    pause = usable & (excess > PAUSE_STEPS * step_seconds) & (rate > PAUSE_FACTOR * typical)
    return pause, np.where(pause, np.maximum(excess, 0.0), 0.0)


def _local_rate(rate: np.ndarray) -> np.ndarray:
    local = pd.Series(rate).rolling(LOCAL_INTERVALS, center=True, min_periods=1).median()
    return local.bfill().ffill().to_numpy(float)


def _stretch_start(history: History, rate: np.ndarray, usable: np.ndarray) -> int:
    """The first interval of the recent stretch: the last share of the log, within the last
    batch stage and after the last shift of the local rate, when what is left can be measured."""
    n = len(usable)
    first = max(n - max(int(math.ceil(RECENT_SHARE * n)), MIN_INTERVALS), 0)
    switch = np.flatnonzero(history.batch[1:] != history.batch[:-1])
    if len(switch):
        first = max(first, min(int(switch[-1]) + 1, n - 2))
    local = _local_rate(np.where(usable, rate, np.nan))
    shifted = np.flatnonzero(np.abs(np.log(local / local[-1])) > math.log(RATE_SHIFT))
    if len(shifted):
        first = max(first, min(int(shifted[-1]) + 1, n - 2))
    return max(min(first, n - 1), 0)


def _last_switch(history: History) -> int | None:
    switch = np.flatnonzero(history.batch[1:] != history.batch[:-1])
    return int(history.step[int(switch[-1]) + 1]) if len(switch) else None


def _spread(dt: np.ndarray, dk: np.ndarray) -> float:
    """Standard deviation of the log of the rate between consecutive blocks of intervals."""
    blocks = min(SPREAD_BLOCKS, len(dt))
    if blocks < 2:
        return 0.0
    edges = np.linspace(0, len(dt), blocks + 1).round().astype(int)
    rates = [dt[a:b].sum() / dk[a:b].sum() for a, b in zip(edges[:-1], edges[1:]) if b > a]
    logs = np.log([r for r in rates if r > 0])
    return float(np.std(logs, ddof=1)) if len(logs) >= 2 else 0.0


def parse_deadline(text: str, history: History) -> Deadline:
    """``+HOURS`` after the last logged row, or an ISO 8601 date (UTC unless it says).

    Raises
    ------
    ConfigError
        Unreadable, in the past of the log, or a date for a run whose clock is not Unix time.
    """
    text = text.strip()
    last = None if history.time is None or not history.time_absolute else float(history.time[-1])
    if text.startswith("+"):
        try:
            hours = float(text[1:])
        except ValueError:
            raise ConfigError(f"deadline {text!r}: give +HOURS (e.g. +12) or an ISO date") from None
        if not (math.isfinite(hours) and hours > 0):
            raise ConfigError(f"deadline {text!r} is in the past: +HOURS must be more than 0")
        return Deadline(hours * 3600.0, None if last is None else last + hours * 3600.0, text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"deadline {text!r}: give +HOURS (e.g. +12) or an ISO date (2026-12-02T14:00)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    if last is None:
        raise ConfigError(
            f"deadline {text!r}: run {history.run} has no Unix clock to place a date on; give +HOURS from its last row"
        )
    unix = when.timestamp()
    if unix <= last:
        logged = datetime.fromtimestamp(last, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        raise ConfigError(f"deadline {text!r} is in the past of run {history.run}: its last row was logged at {logged}")
    return Deadline(unix - last, unix, text)


def time_target(
    history: History,
    throughput: Throughput | None,
    *,
    tokens: float | None,
    tokens_interval: tuple[float, float] | None,
    reached: bool,
    level: float,
    deadline: Deadline | None,
) -> TargetTime:
    """The seconds at a target reached at (or forecast to reach) ``tokens``."""
    if tokens is None:
        return TargetTime(p_by_deadline=None if deadline is None else 0.0)
    observed = _observed_seconds(history, throughput)
    if reached:
        seconds = _seconds_at_tokens(history, throughput, tokens)
        if seconds is None:
            return TargetTime()
        return TargetTime(seconds, None, 0.0, None, _eta(history, seconds), None if deadline is None else 1.0)
    if throughput is None or observed is None:
        return TargetTime()
    left = max(tokens - history.last_tokens, 0.0) * throughput.seconds_per_token
    left_interval = None
    if tokens_interval is not None:
        low, high = (max(t - history.last_tokens, 0.0) * throughput.seconds_per_token for t in tokens_interval)
        left_interval = _widened(left, low, high, throughput.spread, level)
    interval = None if left_interval is None else (observed + left_interval[0], observed + left_interval[1])
    p = None if deadline is None else _p_by(deadline.seconds_left, left, left_interval, level)
    return TargetTime(observed + left, interval, left, left_interval, _eta(history, observed + left), p)


def _origin(history: History) -> float:
    """Where the run's seconds count from: its first logged time."""
    assert history.time is not None
    return float(history.time[0]) if history.time_start is None else min(history.time_start, float(history.time[0]))


def _observed_seconds(history: History, throughput: Throughput | None) -> float | None:
    if history.time is not None:
        return float(history.time[-1]) - _origin(history)
    if throughput is not None:
        return (history.last_tokens - float(history.tokens[0])) * throughput.seconds_per_token
    return None


def _seconds_at_tokens(history: History, throughput: Throughput | None, tokens: float) -> float | None:
    if history.time is not None:
        return float(np.interp(tokens, history.tokens, history.time)) - _origin(history)
    if throughput is not None:
        return (tokens - float(history.tokens[0])) * throughput.seconds_per_token
    return None


def _eta(history: History, seconds: float) -> float | None:
    if history.time is None or not history.time_absolute or not math.isfinite(seconds):
        return None
    return _origin(history) + seconds


def _widened(left: float, low: float, high: float, spread: float, level: float) -> tuple[float, float]:
    """The interval of ``left`` with the throughput spread added in log space."""
    z = _NORMAL.inv_cdf(0.5 + level / 2)
    extra = z * spread
    if left <= 0:
        return (0.0, high)
    down = math.inf if low <= 0 else math.log(left / low)
    up = math.inf if not math.isfinite(high) else math.log(high / left)
    lo = 0.0 if not math.isfinite(down) else left * math.exp(-math.hypot(down, extra))
    hi = math.inf if not math.isfinite(up) else left * math.exp(math.hypot(up, extra))
    return (lo, hi)


def _p_by(available: float, left: float, interval: tuple[float, float] | None, level: float) -> float:
    """P(seconds left <= available): a split log-normal through the point and the interval."""
    if left <= 0:
        return 1.0
    if interval is None:
        return 1.0 if available >= left else 0.0
    z = _NORMAL.inv_cdf(0.5 + level / 2)
    low, high = interval
    if available >= left:
        if not math.isfinite(high):
            return 0.5
        sigma = math.log(high / left) / z
    else:
        if low <= 0:
            sigma = math.inf
        else:
            sigma = math.log(left / low) / z
    if sigma == 0:
        return 1.0 if available >= left else 0.0
    if not math.isfinite(sigma):
        return 0.5
    return _NORMAL.cdf(math.log(available / left) / sigma)


def timing(
    history: History,
    results: Sequence[tuple[float | None, tuple[float, float] | None, bool]],
    *,
    step_time: float | None,
    tokens_per_second: float | None,
    count_pauses: bool,
    deadline: str | None,
    level: float,
) -> Timing:
    """The wall-clock side of an analysis: each result is (tokens, tokens interval, reached)."""
    throughput = measure_throughput(
        history, step_time=step_time, tokens_per_second=tokens_per_second, count_pauses=count_pauses
    )
    when = None if deadline is None else parse_deadline(deadline, history)
    targets = tuple(
        time_target(history, throughput, tokens=t, tokens_interval=iv, reached=r, level=level, deadline=when)
        for t, iv, r in results
    )
    note = None
    if history.time is None and throughput is None:
        note = "no time in the log: no hours; give step_time (seconds per step)" + (
            "" if history.on_steps else " or throughput (tokens per second)"  # a run on steps has no tokens
        )
    start = None if history.time is None or not history.time_absolute else _origin(history)
    return Timing(throughput, _observed_seconds(history, throughput), start, when, targets, note)
