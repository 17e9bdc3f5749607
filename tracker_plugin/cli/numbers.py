"""Numeric options, checked as click parses them: a finite number in the option's range.

Every numeric option of the command line takes its type from :data:`NUMBERS`, so ``nan``,
``inf`` or ``1e300`` given anywhere ends in one line naming the option and its range, and
exit code 2, before a run is read. The upper bounds are far past any real run (a step
time of four months, a quadrillion tokens) and exist so that no absurd value reaches the
arithmetic of dates and tokens.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import click

__all__ = ["DEADLINE", "NUMBERS", "Deadline", "Number"]


class Number(click.ParamType):
    """A finite number (or a whole one) between ``low`` and ``high``."""

    name = "number"

    def __init__(
        self, low: float, high: float, *, low_open: bool = False, high_open: bool = False, whole: bool = False
    ) -> None:
        self.low, self.high = low, high
        self.low_open, self.high_open = low_open, high_open
        self.whole = whole
        self.name = "integer" if whole else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = self._parse(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.whole and not number.is_integer():
            self.fail(f"{value!r} is not a whole number", param, ctx)
        below = number < self.low or (self.low_open and number == self.low)
        above = number > self.high or (self.high_open and number == self.high)
        if below or above:
            self.fail(f"{value!r} is not in the range {self.range_text()}", param, ctx)
        return int(number) if self.whole else number

    def range_text(self) -> str:
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        return f"{left}{self.low:g}, {self.high:g}{right}"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str | None:
        return "INTEGER" if self.whole else "FLOAT"

    def __repr__(self) -> str:
        return f"Number{self.range_text()}"

    def _parse(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, bool):
            self.fail(f"{value!r} is not a number", param, ctx)
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return float(str(value).strip())
        except (ValueError, OverflowError):
            self.fail(f"{value!r} is not a number", param, ctx)


# Loss, tokens, steps, seconds and shares: each option's range, by its parameter's name.
NUMBERS: dict[str, Number] = {
    "targets": Number(0, 1e4, low_open=True),
    "ema_token_window": Number(0, 1e15, low_open=True),
    "ema_steps": Number(0, 1e12, low_open=True),
    "fit_start_step": Number(0, 1e12, whole=True),
    "planned_total": Number(0, 1e12, low_open=True),
    "interval": Number(0, 1, low_open=True, high_open=True),
    "anneal_gain": Number(0, 1, high_open=True),
    "extrapolation_warn_factor": Number(0, 1e6, low_open=True),
    "sweep_step": Number(1, 1e12, whole=True),
    "sweep_min_window": Number(0, 1e12, whole=True),
    "convergence_tol": Number(0, 1e3, low_open=True),
    "step_time": Number(0, 1e7, low_open=True),
    "throughput": Number(0, 1e15, low_open=True),
    "batch_size": Number(0, 1e12, low_open=True),
    "seq_len": Number(1, 1e9),
    "world_size": Number(1, 1e7),
    "fit_fractions": Number(0, 1, low_open=True, high_open=True),
    "target_quantiles": Number(0, 1, low_open=True, high_open=True),
    "every": Number(0, 1e6, low_open=True),
}

_MAX_HOURS = 1e6  # about 114 years after the last logged row


class Deadline(click.ParamType):
    """``+HOURS`` (finite, above 0, at most a century or so) or an ISO 8601 date a clock can
    hold; checked here for its form, and against the run's clock once it is read."""

    name = "deadline"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip()
        if text.startswith("+"):
            try:
                hours = float(text[1:])
            except ValueError:
                self.fail(f"{text!r}: give +HOURS (e.g. +12) or an ISO date (2026-12-02T14:00)", param, ctx)
            if not (math.isfinite(hours) and 0 < hours <= _MAX_HOURS):
                self.fail(f"{text!r}: +HOURS must be a number above 0 and at most {_MAX_HOURS:g}", param, ctx)
            return text
        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{text!r}: give +HOURS (e.g. +12) or an ISO date (2026-12-02T14:00)", param, ctx)
        return text

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str | None:
        return "+HOURS|DATE"


DEADLINE = Deadline()
