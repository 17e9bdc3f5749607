"""Annotate: analyse every run the run strings name and write the forecasts back to it."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.jobs.runner import Outcome, process_runs
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.trackers import SourceOptions

__all__ = ["annotate_runs"]


def annotate_runs(
    specs: Sequence[str],
    options: SourceOptions,
    config: AnalysisConfig,
    *,
    force: bool = False,
    dry_run: bool = False,
    keep: frozenset[str] = frozenset(),
    states: tuple[str, ...] | None = None,
    executor: Executor | None = None,
) -> list[Outcome]:
    """One annotation pass; runs are selected as :func:`~tracker_plugin.jobs.runs.open_runs` does.

    A run whose annotation is current is left ``unchanged`` unless ``force``; with
    ``dry_run`` nothing is written and each outcome lists what would be. A run that fails
    is an outcome too: the others still finish. ``executor`` runs the runs (see
    :func:`~tracker_plugin.jobs.runner.process_runs`; default: ``options.workers`` threads).
    """
    outcomes: list[Outcome] = []
    with opened_runs(specs, options, keep, states) as opened:
        for source, runs in opened:
            outcomes += process_runs(
                source, runs, config, write=True, force=force, dry_run=dry_run, workers=options.workers,
                label="annotating", executor=executor,
            )
    return outcomes
