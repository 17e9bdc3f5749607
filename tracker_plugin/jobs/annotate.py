"""Annotate: analyse every run the run strings name and write the forecasts back to it.

Where a run string names a project (an MLflow experiment, a W&B project, a folder of runs)
that holds finished runs beside running ones, the running runs are calibrated on the
finished ones (:mod:`tracker_plugin.jobs.calibration`): the finished runs go first, each
keeping its backtest record in its annotation, then the others, on the project's book.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import sibling_record
from tracker_plugin.core.siblings import SiblingRecord
from tracker_plugin.errors import TrackerPluginError
from tracker_plugin.jobs.annotation import settings_of
from tracker_plugin.jobs.calibration import SiblingBook, decode_record, record_hash
from tracker_plugin.jobs.runner import Outcome, process_runs
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.trackers import RunInfo, Source, SourceOptions
from tracker_plugin.trackers.base import select_states

__all__ = ["annotate_runs", "project_book"]


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
    calibrate: bool = True,
    plot: bool = True,
    series: bool = True,
) -> list[Outcome]:
    """One annotation pass; runs are selected as :func:`~tracker_plugin.jobs.runs.open_runs` does.

    A run whose annotation is current is left ``unchanged`` unless ``force``; with
    ``dry_run`` nothing is written and each outcome lists what would be. A run that fails
    is an outcome too: the others still finish. ``executor`` runs the runs (see
    :func:`~tracker_plugin.jobs.runner.process_runs`; default: ``options.workers`` threads).
    With ``calibrate`` (the default), the runs not finished are calibrated on the finished
    runs of the same run string (all of them, whatever ``states`` selects). Without
    ``plot``, each run's ``loss_eta.png`` says no plot was drawn (``--no-plot``). ``series``:
    write the smoothed loss back as a series for the trackers' own charts.
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
            if not calibrate or not finished or not subjects:
                outcomes += process_runs(source, selected, config, **common)
                continue
            first = process_runs(source, [run for run in selected if run.finished], config, records=True, **common)
            book = project_book(source, finished, config, first)
            second = process_runs(source, subjects, config, book=book, **common)
            done = {outcome.run.ref: outcome for outcome in first + second}
            outcomes += [done[run.ref] for run in selected]
    return outcomes


def project_book(source: Source, finished: Sequence[RunInfo], config: AnalysisConfig,
                 outcomes: Sequence[Outcome] = ()) -> SiblingBook:
    """The book of ``finished`` runs: each one's record from its outcome this pass, else
    the one its annotation stores, else its history read and backtested (counted in
    :attr:`SiblingBook.read`); a run that cannot be read is left out with why."""
    made = {outcome.run.ref: outcome for outcome in outcomes}
    fingerprint = record_hash(settings_of(config, source.options.columns, source.options.batch_size))
    records: list[SiblingRecord] = []
    read = 0
    for run in finished:
        outcome = made.get(run.ref)
        record = outcome.record if outcome is not None else None
        if record is None and outcome is not None and outcome.failed:
            record = SiblingRecord(run.ref, left_out=f"it could not be analysed: {outcome.error}")
        if record is None and run.previous is not None:
            record = decode_record(run.ref, run.previous.siblings, fingerprint)
        if record is None:
            read += 1
            record = _backtested(source, run, config)
        records.append(record)
    names = tuple((run.ref, run.name) for run in finished)
    return SiblingBook(tuple(records), f"the finished runs of {_run_string(source)}", read, names)


def _run_string(source: Source) -> str:
    """The run string the source was opened with, as a user writes it."""
    scheme = f"{source.scheme}:"
    return source.spec if source.scheme == "csv" or source.spec.startswith(scheme) else scheme + source.spec


def _backtested(source: Source, run: RunInfo, config: AnalysisConfig) -> SiblingRecord:
    try:
        return sibling_record(source.read(run), config)
    except TrackerPluginError as exc:
        return SiblingRecord(run.ref, left_out=f"it could not be read: {exc.problem}")
