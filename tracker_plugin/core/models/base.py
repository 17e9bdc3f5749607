"""What every loss-curve model shares: the fitted-model protocol, how a fit ended, and the
failure value a fit returns instead of raising."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["GIVEN", "FitFailure", "FitStatus", "Model"]


@dataclass(frozen=True)
class FitStatus:
    """How the optimizer behind a fit ended.

    ``converged`` is the solver's own verdict (a tolerance met, not an evaluation budget
    spent); ``reason`` says which, in the solver's words plus what the fit adds (a robust
    reweighting that had not settled, say); ``evaluations`` counts the evaluations of the
    residuals, the Jacobian and the grid points together, over every start.
    """

    converged: bool
    reason: str
    evaluations: int


GIVEN = FitStatus(True, "parameters given, not fitted", 0)
"""The status of a model whose parameters were given rather than fitted."""


@dataclass(frozen=True)
class FitFailure:
    """A fit that could not be made, and why (a degenerate window, too few points, ...)."""

    model: str
    reason: str


class Model(Protocol):
    """A fitted loss-curve law: what the analysis, the sweep and the report use of it.

    ``predict`` gives the loss the law predicts at ``tokens``; ``solve`` the tokens at
    which it reaches ``target`` (None when it never does, ``inf`` when only beyond the
    floating-point range); ``asymptote`` the loss it levels off at; ``status`` how its fit
    ended.
    """

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> Mapping[str, float]: ...

    @property
    def asymptote(self) -> float: ...

    @property
    def status(self) -> FitStatus: ...

    def predict(self, tokens: np.ndarray) -> np.ndarray: ...

    def solve(self, target: float) -> float | None: ...
