"""The words a result is told in: where a target stands, and what a stability sweep found.

They are ``str`` enums: a member's value is the word the JSON document, the text report,
the tables, the plot and the trackers' tags show (``reached``, ``not_converged``), and a
member equals its word, so a status read back from a tracker's tag still compares equal.

One vocabulary of outcomes for a target:

- ``reached``: the smoothed loss crossed it in the log (where, interpolated).
- ``forecast``: a fitted law reaches it before the planned end of the run.
- ``forecast_beyond_plan``: a fitted law reaches it, and no planned end bounds the run
  (the plan is unknown, or its lr goes on with no end): the forecast assumes the run
  continues until then.
- ``unlikely``: the run has not reached its planned end, and the forecast puts the target
  past it (or never gets there): a chance, not a verdict. The report says the chance of
  reaching it within the plan (``unlikely within the plan: P 0.42``) and the smoothed loss
  forecast at the plan's end; a run stopped on an early "no" is the costliest error, so no
  running run is told ``not_reached`` or ``unreachable`` before its end.
- ``not_reached``: not in this run, which has reached (or passed) its planned end. Then the
  report says the best smoothed loss and where the run ended; no crossing is reported as a
  number.
- ``unreachable``: on the evidence the law levels off above it (even far past the plan):
  the fitted law and most of its bootstrap refits (one the law misses by less than its own
  uncertainty is a forecast, at the refits' median, with an open-ended interval); said of a
  run with no planned end, or one past it.
- ``not_enough_data``: no forecast: too few rows after the fit start, or no law could be
  fitted to them (the note says which).

Earlier versions wrote ``extrapolated`` and ``failed``: :meth:`Status.read` maps them to
the nearest word of today, and a tracker annotation holding them is redone.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["RETIRED", "Status", "Verdict"]

# Words earlier versions wrote, and the word each is read as now. ``extrapolated`` covered
# every forecast past the log, within the plan or not: read as a forecast.
RETIRED = {"extrapolated": "forecast", "failed": "not_enough_data"}


class Status(str, Enum):
    """Where a target loss stands for a run (see the module's vocabulary)."""

    REACHED = "reached"
    FORECAST = "forecast"
    FORECAST_BEYOND_PLAN = "forecast_beyond_plan"
    UNLIKELY = "unlikely"
    NOT_REACHED = "not_reached"
    UNREACHABLE = "unreachable"
    NOT_ENOUGH_DATA = "not_enough_data"

    def __str__(self) -> str:
        # The word itself, as the tables and the trackers' tags show it.
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Status | None:
        # An old word read back (a tag, a pickled backtest): today's nearest word.
        word = RETIRED.get(str(value).lower()) if isinstance(value, str) else None
        return None if word is None else cls(word)

    @classmethod
    def read(cls, word: str) -> Status | None:
        """The status a tag's word says, old words included; None for any other word
        (``stale``: a target no longer asked for)."""
        try:
            return cls(word.strip().lower())
        except ValueError:
            return None

    @property
    def located(self) -> bool:
        """Whether the target has a place on the token axis (reached or forecast)."""
        return self in (Status.REACHED, Status.FORECAST, Status.FORECAST_BEYOND_PLAN)

    @property
    def forecast(self) -> bool:
        """Whether the place is a fitted law's (not a crossing in the log)."""
        return self in (Status.FORECAST, Status.FORECAST_BEYOND_PLAN)


class Verdict(str, Enum):
    """Whether a stability sweep's forecasts have settled."""

    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"
    NOT_ENOUGH_DATA = "not_enough_data"

    def __str__(self) -> str:
        return self.value
