"""A run's calibration from finished runs named by the user (``--calibrate-on``).

Each sibling is read whole and backtested where the forecast run stands (the share of its
plan the run has done), with the forecast's own settings; the cases give the calibration
(:mod:`tracker_plugin.core.siblings`). The run itself is never among its siblings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import sibling_cases
from tracker_plugin.core.forecast import resolve_plan
from tracker_plugin.core.siblings import Calibration, SiblingCase, calibrate
from tracker_plugin.errors import ConfigError
from tracker_plugin.frame.history import History
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.trackers import SourceOptions

__all__ = ["SiblingTable", "calibration_on", "progress", "sibling_table"]

# The cuts a sibling is backtested at are kept inside the range the validation scored.
_LOWEST, _HIGHEST = 0.1, 0.9


def progress(history: History, config: AnalysisConfig) -> float:
    """The share of its planned steps the run has done, kept within [0.1, 0.9].

    Raises
    ------
    ConfigError
        The run's plan says nothing of its length: no cut to backtest the siblings at.
    """
    plan = resolve_plan(history, config.lr_schedule)
    total = plan.total_steps
    if total is None or not total > 0:
        raise ConfigError(
            "--calibrate-on backtests the siblings where this run stands in its plan, and the run's length is not "
            "known: give its plan (--lr-spec, or --total-steps) or log it in the run's params", run=history.run)
    return min(max(float(history.last_step) / float(total), _LOWEST), _HIGHEST)


@dataclass(frozen=True)
class SiblingTable:
    """The siblings' backtest at one cut: each run's cases, the ones left out and why,
    and the calibration they give."""

    fraction: float
    cases: tuple[tuple[str, tuple[SiblingCase, ...]], ...]
    left_out: tuple[tuple[str, str], ...]
    calibration: Calibration


def sibling_table(specs: Sequence[str], options: SourceOptions, config: AnalysisConfig, fraction: float,
                  exclude: str | None = None) -> SiblingTable:
    """Read every run ``specs`` name (finished ones: the options' states) and backtest each
    at ``fraction``; ``exclude`` is the forecast run's name, never its own sibling."""
    cases: list[tuple[str, tuple[SiblingCase, ...]]] = []
    left_out: list[tuple[str, str]] = []
    with opened_runs(specs, options) as opened:
        for source, runs in opened:
            for ref in runs:
                history = source.read(ref)
                if exclude is not None and history.run == exclude:
                    left_out.append((history.run, "the forecast run itself"))
                    continue
                found = tuple(sibling_cases(history, config, fraction))
                if found:
                    cases.append((history.run, found))
                else:
                    left_out.append((history.run, f"its backtest at {fraction:.0%} of its tokens forecast none of the targets it reached"))
    calibration = replace(calibrate([c for _, run_cases in cases for c in run_cases]), left_out=tuple(left_out))
    return SiblingTable(fraction, tuple(cases), tuple(left_out), calibration)


def calibration_on(specs: Sequence[str], options: SourceOptions, history: History, config: AnalysisConfig) -> Calibration:
    """The calibration of ``history``'s forecast from the runs ``specs`` name.

    Raises
    ------
    ConfigError
        The model is the power law, which is not calibrated; or the run's length is unknown.
    """
    if config.model == "power-law":
        raise ConfigError("--calibrate-on calibrates the schedule-aware laws (auto, lr-annealing, multi-power); "
                          "--model power-law is not one", run=history.run)
    return sibling_table(specs, options, config, progress(history, config), exclude=history.run).calibration
