"""Loss-curve models: fit one to a stretch of a run, then solve it for a target loss.

A fit either succeeds, giving a :class:`Model` (``name``, ``params``, ``predict``,
``solve``, and a :class:`FitStatus` saying how its solver ended), or returns a
:class:`FitFailure` that says why; fitting never raises on bad data. The solvers are
SciPy's (:mod:`.search`), imported when a fit runs.

- ``power-law`` (:mod:`.power_law`): the original script's power law in tokens.
- ``lr-annealing`` (:mod:`.annealing`): Tissue et al. 2024.
- ``multi-power`` (:mod:`.multipower`): Luo et al. 2025.

The schedule-aware laws share their fitting (:mod:`.schedule_law`), its linear part
(:mod:`.projection`) and the all-windows-at-once fitting of a sweep (:mod:`.prefixes`).
"""

from tracker_plugin.core.models.annealing import LR_ANNEALING
from tracker_plugin.core.models.base import FitFailure, FitStatus, Model
from tracker_plugin.core.models.multipower import MULTI_POWER
from tracker_plugin.core.models.power_law import TOKEN_UNIT, PowerLaw, fit_power_law
from tracker_plugin.core.models.schedule_law import (
    ANNEAL_GAIN,
    GainPrior,
    Law,
    LawFit,
    Observations,
    fit_law,
    observations,
)

__all__ = [
    "ANNEAL_GAIN",
    "LAWS",
    "LR_ANNEALING",
    "MULTI_POWER",
    "TOKEN_UNIT",
    "FitFailure",
    "FitStatus",
    "GainPrior",
    "Law",
    "LawFit",
    "Model",
    "Observations",
    "PowerLaw",
    "fit_law",
    "fit_power_law",
    "observations",
]

LAWS = {law.name: law for law in (LR_ANNEALING, MULTI_POWER)}
"""The schedule-aware laws by name."""
