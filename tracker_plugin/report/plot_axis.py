"""The x axis of a run's plot: tokens (log scale) or the run's clock (linear), in hours, or
in minutes for a run whose plot spans less than two hours.

Everything a plot draws is placed in tokens; an axis maps tokens to its own x, so the
curves, markers and intervals land where the same tokens are on either axis. A run with
no tokens to be had is analysed on steps (one "token" per step): its axis, ticks and
labels say steps, never tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.report.render import format_tokens

__all__ = ["X_AXES", "NoClock", "XAxis", "hours_text", "tick_steps", "tick_tokens", "x_axis"]

X_AXES = ("tokens", "time")


class NoClock(ValueError):
    """A time axis was asked for a run whose log has no clock."""


@dataclass(frozen=True)
class XAxis:
    """Tokens -> x. ``kind`` is "tokens" (x is tokens) or "time" (x is time since the first
    row, in hours, or in minutes where ``unit_seconds`` is 60: the label, the ticks and
    every time a label says are in that one unit).

    On the time axis, tokens inside the log take the logged clock (interpolated), and
    tokens past it the measured throughput from the last logged row on: the rate the
    ETAs use.
    """

    kind: str
    tokens: np.ndarray | None = None  # the logged tokens and their hours (time axis only)
    hours: np.ndarray | None = None
    hours_per_token: float = 0.0
    steps: bool = False  # a batch of one "token" per step: the token axis counts steps
    on_steps: bool = False  # no tokens at all (the analysis is on steps): nothing says tokens
    unit_seconds: float = 3600.0  # the time axis's unit: an hour, or a minute

    @property
    def unit(self) -> str:
        return "minutes" if self.unit_seconds == 60.0 else "hours"

    @property
    def label(self) -> str:
        if self.kind == "time":
            return f"time since the first logged row ({self.unit})"
        if self.on_steps:
            return "steps"
        return "steps (a batch of 1: tokens count steps)" if self.steps else "tokens"

    @property
    def smoothed(self) -> str:
        """What the smoothed loss is, in the run's own units."""
        return "loss (step-window EMA)" if self.on_steps else "loss (token-window EMA)"

    @property
    def log(self) -> bool:
        return self.kind == "tokens"

    def x(self, tokens: Any) -> np.ndarray:
        values = np.asarray(tokens, float)
        if self.tokens is None or self.hours is None:
            return values
        inside = np.interp(values, self.tokens, self.hours)
        past = self.hours[-1] + (values - self.tokens[-1]) * self.hours_per_token
        return np.where(values > self.tokens[-1], past, inside) * (3600.0 / self.unit_seconds)

    def at_seconds(self, seconds: float) -> float:
        """Seconds since the first row on this axis (hours or minutes)."""
        return seconds / self.unit_seconds

    def in_unit(self, x: float) -> str:
        """An x of the time axis as a label says it, in the axis's own unit."""
        return f"{x:,.1f} h" if self.unit == "hours" else f"{x:,.1f} min"

    def text(self, tokens: float, step: float) -> str:
        """A place on this axis as a label says it: ``2.98B tokens, step 5,680`` (``, 5.2 h``
        added on the clock); on steps ``step 5,680``."""
        words = [f"step {step:,.0f}"] if self.on_steps else [f"{format_tokens(tokens)} tokens", f"step {step:,.0f}"]
        if self.kind == "time":
            words.append(self.in_unit(float(self.x(tokens))))
        return ", ".join(words)

    def short(self, tokens: float) -> str:
        """A place on this axis in its own units only: ``2.98B`` on tokens, ``5,680`` on
        steps, ``5.2 h`` on the clock."""
        if self.kind == "time":
            return self.in_unit(float(self.x(tokens)))
        return tick_steps(tokens) if self.on_steps else format_tokens(tokens)

    def format(self, ax: Any) -> None:
        """Ticks: the report's token units (2.98B) on the token axis, step numbers on steps,
        plain hours on the clock."""
        if not self.log:
            return
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        low, high = ax.get_xlim()
        if np.log10(high / low) < 2.5:  # a few decades: label 1, 2 and 5 of each
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ticks = tick_steps if self.on_steps else tick_tokens
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: ticks(value)))
        ax.xaxis.set_minor_formatter(NullFormatter())


def hours_text(hours: float) -> str:
    """``5.2 h``; under an hour in minutes (``6.5 min``), which a short run needs."""
    return f"{hours:.1f} h" if abs(hours) >= 1 else f"{hours * 60:.1f} min"


def tick_tokens(value: float) -> str:
    """A tick's tokens in the report's units, without the table's trailing zeros: 1B, 2.5B."""
    text = format_tokens(value)
    if text[-1:].isalpha() and "." in text:
        number, unit = text[:-1].rstrip("0").rstrip("."), text[-1]
        return number + unit
    return text


def tick_steps(value: float) -> str:
    """A tick's steps as the text report counts them (``5,000``); from a million on in the
    report's units (``2M``), which a tick has room for."""
    return f"{value:,.0f}" if abs(value) < 1e6 else tick_tokens(value)


# A plot whose time axis spans less than this is drawn in minutes: 0.05 h says nothing at a glance.
_MINUTES_BELOW_HOURS = 2.0


def x_axis(analysis: Analysis, kind: str, unit: str = "auto", span_tokens: float | None = None) -> XAxis:
    """The axis ``kind`` names for this run; raises :class:`NoClock` for time on a clockless log.

    ``unit`` ("auto", "hours" or "minutes") is the time axis's: "auto" takes minutes when
    the plot (to ``span_tokens``, default the log's end) spans under two hours."""
    if kind == "tokens":
        on_steps = bool(analysis.history.on_steps)
        return XAxis("tokens", steps=on_steps or bool(np.all(analysis.history.batch == 1)), on_steps=on_steps)
    if kind != "time":
        raise ValueError(f"no x axis '{kind}'; one of {', '.join(X_AXES)}")
    history, timing = analysis.history, analysis.timing
    if history.time is None:
        raise NoClock("the run's log has no clock (no time column): it cannot be plotted against time")
    seconds = np.asarray(history.time, float)
    start = history.time_start if history.time_start is not None else float(np.nanmin(seconds))
    known = np.isfinite(seconds)
    tokens = np.asarray(history.tokens, float)[known]
    hours = (seconds[known] - start) / 3600.0
    order = np.argsort(tokens, kind="stable")
    rate = 0.0
    if timing is not None and timing.throughput is not None:
        rate = timing.throughput.seconds_per_token / 3600.0
    axis = XAxis("time", tokens[order], np.maximum.accumulate(hours[order]), rate, on_steps=bool(history.on_steps))
    if unit == "auto":
        span = float(axis.x(max(span_tokens or 0.0, float(tokens[order][-1]))))
        unit = "minutes" if span < _MINUTES_BELOW_HOURS else "hours"
    if unit not in ("hours", "minutes"):
        raise ValueError(f"no time unit '{unit}'; hours or minutes")
    return XAxis(axis.kind, axis.tokens, axis.hours, rate, on_steps=axis.on_steps,
                 unit_seconds=60.0 if unit == "minutes" else 3600.0)
