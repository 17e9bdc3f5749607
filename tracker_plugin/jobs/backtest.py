"""Backtest over runs: each finished run cut, forecast and scored (see :mod:`tracker_plugin.core.backtest`)."""

from __future__ import annotations

from collections.abc import Sequence

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import Backtest, BacktestCase, Skipped, backtest_run, summarize
from tracker_plugin.errors import TrackerPluginError
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.trackers import SourceOptions

__all__ = ["backtest_runs"]


def backtest_runs(
    specs: Sequence[str],
    options: SourceOptions,
    config: AnalysisConfig,
    *,
    fit_fractions: Sequence[float],
    target_quantiles: Sequence[float],
    models: Sequence[str],
    plan: str,
) -> Backtest:
    """Every case of every run, and the figures per model; a run that cannot be read is
    skipped with its error and the others are still scored.

    ``config`` gives the settings; its targets and model are the protocol's to choose.
    """
    cases: list[BacktestCase] = []
    skipped: list[Skipped] = []
    with opened_runs(specs, options) as opened:
        for source, runs in opened:
            for run in runs:
                try:
                    history = source.read(run)
                except TrackerPluginError as exc:
                    skipped.append(Skipped(run.ref, exc.problem))
                    continue
                cases += backtest_run(
                    history, config, fit_fractions=fit_fractions, target_quantiles=target_quantiles,
                    models=models, plan=plan,
                )
    return Backtest(plan, config, tuple(cases), tuple(summarize(cases)), tuple(skipped))
