"""The analysis's names and defaults: what the core validates against and the command line shows.

One light module (it imports nothing), so that the command line answers ``--help`` and a
bad argument without loading the analysis (and with it pandas and scipy), and the core
(:class:`~tracker_plugin.core.analysis.AnalysisConfig`, the laws, the clock, the
backtest) takes its defaults from the same place.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "AUTO",
    "CLOCKS",
    "DEFAULTS",
    "DEFAULT_FAMILY_RULE",
    "LR_ANNEALING",
    "MODELS",
    "MULTI_POWER",
    "PLANS",
    "POWER_LAW",
]

# The models a forecast can use: ``auto`` chooses among the schedule-aware laws on the
# run's own evidence; ``power-law`` is the original script's power law in tokens.
AUTO = "auto"
POWER_LAW = "power-law"
LR_ANNEALING = "lr-annealing"  # Tissue et al. 2024 (core.models.annealing)
MULTI_POWER = "multi-power"  # Luo et al. 2025 (core.models.multipower)
MODELS = (AUTO, POWER_LAW, LR_ANNEALING, MULTI_POWER)
# What a step of summed lr counts in (core.clock).
CLOCKS = ("tokens", "steps")
# How a backtest plans a cut run's lr: from its logged lr, or inferred (core.backtest).
PLANS = ("log", "infer")
# The family of a run: the first group of this pattern matched against the run's name.
DEFAULT_FAMILY_RULE = r"^([^-]+)"

# AnalysisConfig's defaults for the settings that have one: the original
# ``find_target_loss.py``'s, except the model. ``anneal_gain`` is the choice of
# leave-one-family-out validation (see core.models.schedule_law.ANNEAL_GAIN).
DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "ema_token_window": 100_000_000.0,
        "ema_steps": 100.0,
        "model": AUTO,
        "clock": "tokens",
        "interval": 0.8,
        "anneal_gain": 0.05,
        "fit_start_step": None,
        "fit_last_stage": False,
        "extrapolation_warn_factor": 3.0,
        "stability_sweep": False,
        "sweep_step": 300,
        "sweep_min_window": 500,
        "convergence_tol": 0.05,
        "step_time": None,
        "throughput": None,
        "count_pauses": False,
        "deadline": None,
    }
)
