"""What every loss-curve model shares: the failure value a fit returns instead of raising."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FitFailure"]


@dataclass(frozen=True)
class FitFailure:
    """A fit that could not be made, and why (a degenerate window, too few points, ...)."""

    model: str
    reason: str
