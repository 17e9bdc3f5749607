"""How well a finished run alone forecast itself: the ``own`` part of its evidence.

The project's law is confirmed against it (a sibling the law of the others forecasts worse
than the sibling's own early log did is no sibling, :mod:`.project`) and weighed beside it
(how much a running run's own law counts at each stage). It is the backtest of the run at
a few cuts with the analysis's own law (``core.backtest``), made once when the run
finishes, for the targets its smoothed loss reached at 60% and 80% of its tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import backtest_run
from tracker_plugin.core.project_law.loso import QUANTILES
from tracker_plugin.core.siblings import NONE
from tracker_plugin.frame.history import History

__all__ = ["OWN_CUTS", "own_errors"]

# The cuts a finished run is backtested at (the forecast run's share of its plan is read at
# the nearest): early, a quarter, half, as the validation scores.
OWN_CUTS = (0.1, 0.25, 0.5)
# An error past this scores as this (a forecast of never).
_MISS = 3.0


def own_errors(history: History, config: AnalysisConfig,
               cuts: Sequence[float] = OWN_CUTS) -> tuple[tuple[float, float, float], ...]:
    """``(cut, target quantile, ln(predicted / true tokens))`` of the run alone at each cut
    (``config``: its settings and plan; a forecast of never scores :data:`_MISS`)."""
    settings = replace(config, targets=(1.0,), calibration=NONE, project_law=None, stability_sweep=False)
    cases = backtest_run(history, settings, fit_fractions=tuple(cuts), target_quantiles=QUANTILES,
                         models=(config.model,))
    return tuple((c.fit_fraction, c.target_quantile, _MISS if c.error is None else max(min(c.error, _MISS), -_MISS))
                 for c in cases if c.reached_in_run)
