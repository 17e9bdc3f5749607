"""The words a result is told in: where a target stands, and what a stability sweep found.

They are ``str`` enums: a member's value is the word the JSON document, the tables and
the trackers' tags show (``reached``, ``not_converged``), and a member equals its word,
so a status read back from a tracker's tag still compares equal.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Status", "Verdict"]


class Status(str, Enum):
    """Where a target loss stands for a run."""

    REACHED = "reached"  # the smoothed loss has crossed it; tokens and step interpolated
    EXTRAPOLATED = "extrapolated"  # forecast past the log by a fitted curve
    UNREACHABLE = "unreachable"  # the fitted curve levels off above it
    FAILED = "failed"  # no forecast: too few rows after the fit start, or the fit failed

    def __str__(self) -> str:
        # The word itself, as the tables and the trackers' tags show it.
        return self.value

    @property
    def located(self) -> bool:
        """Whether the target has a place on the token axis (reached or forecast)."""
        return self in (Status.REACHED, Status.EXTRAPOLATED)


class Verdict(str, Enum):
    """Whether a stability sweep's forecasts have settled."""

    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"
    NOT_ENOUGH_DATA = "not_enough_data"

    def __str__(self) -> str:
        return self.value
