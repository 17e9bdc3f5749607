"""Annotate: analyse every run the run strings name and write the forecasts back to it.

Where a run string names a project (an MLflow experiment, a W&B project, a folder of runs)
that holds finished runs beside running ones, the running runs are forecast by the
project's law (:mod:`tracker_plugin.core.project_law`), fitted on the finished ones: the
finished runs go first, each keeping its evidence in its annotation
(:mod:`tracker_plugin.jobs.project_book`), then the others, by the law of their
configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.project_law import ProjectLaw, fit_project
from tracker_plugin.jobs.annotation import settings_of
from tracker_plugin.jobs.project_book import ProjectBook, book_of, evidence_hash
from tracker_plugin.jobs.runner import Outcome, process_runs
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.trackers import RunInfo, Source, SourceOptions
from tracker_plugin.trackers.base import select_states

__all__ = ["annotate_runs", "project_book", "project_laws"]


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
    siblings: bool = True,
    plot: bool = True,
    series: bool = True,
) -> list[Outcome]:
    """One annotation pass; runs are selected as :func:`~tracker_plugin.jobs.runs.open_runs` does.

    A run whose annotation is current is left ``unchanged`` unless ``force``; with
    ``dry_run`` nothing is written and each outcome lists what would be. A run that fails
    is an outcome too: the others still finish. ``executor`` runs the runs (see
    :func:`~tracker_plugin.jobs.runner.process_runs`; default: ``options.workers`` threads).
    With ``siblings`` (the default), the runs not finished are forecast by the law of the
    finished runs of the same run string (all of them, whatever ``states`` selects).
    Without ``plot``, each run's ``loss_eta.png`` says no plot was drawn (``--no-plot``).
    ``series``: write the smoothed loss back as a series for the trackers' own charts.
    """
    wanted = options.states if states is None else states
    outcomes: list[Outcome] = []
    with opened_runs(specs, options, keep, states=()) as opened:
        for source, every in opened:
            selected = select_states(every, wanted, keep)
            common: dict[str, Any] = dict(write=True, force=force, dry_run=dry_run, workers=options.workers,
                                          label="annotating", executor=executor, plot=plot,
                                          series=series)
            finished = [run for run in every if run.state == "finished"]
            subjects = [run for run in selected if not run.finished]
            if not siblings or not finished or not subjects:
                outcomes += process_runs(source, selected, config, **common)
                continue
            first = process_runs(source, [run for run in selected if run.finished], config, evidence=True, **common)
            book = project_book(source, finished, config, first)
            second = process_runs(source, subjects, config, book=book, **common)
            done = {outcome.run.ref: outcome for outcome in first + second}
            outcomes += [done[run.ref] for run in selected]
    return outcomes


def project_book(source: Source, finished: Sequence[RunInfo], config: AnalysisConfig,
                 outcomes: Sequence[Outcome] = ()) -> ProjectBook:
    """The book of ``finished`` runs: each one's evidence from its outcome this pass, else
    the one its annotation stores, else its history read (counted in
    :attr:`ProjectBook.read`); a run that cannot be read or analysed is left out with why."""
    made: dict[str, Any] = {}
    for outcome in outcomes:
        if outcome.evidence is not None:
            made[outcome.run.ref] = outcome.evidence
        elif outcome.failed:
            made[outcome.run.ref] = f"it could not be analysed: {outcome.error}"
    fingerprint = evidence_hash(settings_of(config, source.options.columns, source.options.batch_size))
    return book_of(source, finished, config, fingerprint, made)


def project_laws(specs: Sequence[str], options: SourceOptions, config: AnalysisConfig) -> list[tuple[ProjectBook, ProjectLaw]]:
    """Each run string's book of finished runs and the law they share (every run a
    candidate: no run is forecast), written nowhere: a run's stored evidence where it is
    current, else its history read."""
    found = []
    with opened_runs(specs, options, states=("finished",)) as opened:
        for source, runs in opened:
            book = project_book(source, [run for run in runs if run.state == "finished"], config)
            found.append((book, fit_project(book.evidences)))
    return found
