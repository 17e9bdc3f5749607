"""Many runs at once: read, analyse and write back concurrently, one failure at a time.

The same loop serves ``annotate`` (one pass), ``watch`` (repeated passes) and
``compare`` (analysis without writing). A run that fails is reported and the others
finish; nothing here raises for a single run's trouble.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, as_completed
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from tracker_plugin.core.analysis import Analysis, AnalysisConfig, run_analysis
from tracker_plugin.core.project_law import RunEvidence
from tracker_plugin.errors import ConfigError, TrackerPluginError
from tracker_plugin.frame.history import History
from tracker_plugin.jobs.annotation import build_annotation, settings_hash, settings_of
from tracker_plugin.jobs.dry_run import planned_changes, planned_lines
from tracker_plugin.jobs.fanout import shares_memory
from tracker_plugin.jobs.project_book import (
    ProjectBook,
    encode_evidence,
    evidence_hash,
    project_law_provenance,
    stored_evidence,
    take_evidence,
)
from tracker_plugin.jobs.redone import why_redone
from tracker_plugin.keys import plot_digest, target_collision
from tracker_plugin.redact import redact
from tracker_plugin.report.runs import RunRow, held_rows
from tracker_plugin.trackers import SourceOptions, open_source
from tracker_plugin.trackers.base import RunInfo, Source

__all__ = ["OVERTAKEN", "Action", "Outcome", "RunJob", "outcome_rows", "process_runs"]

OVERTAKEN = "another job's annotation, written at the same time, is the one the run holds"


class Action(str, Enum):
    """What a job did to a run; the word the summary table and its JSON show."""

    ANNOTATED = "annotated"  # analysed and written back
    UNCHANGED = "unchanged"  # its annotation was current: nothing written
    DRY_RUN = "dry run"  # analysed; what would be written was listed, not written
    ANALYSED = "analysed"  # analysed only (compare)
    FAILED = "failed"  # could not be read, analysed or written; the error says why

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Outcome:
    """What happened to one run."""

    run: RunInfo
    action: Action
    analysis: Analysis | None = None
    error: str | None = None
    planned: tuple[str, ...] = ()  # with --dry-run: what would be written
    note: str | None = None  # annotated, but another job's annotation is the one in place
    held: Any = None  # unchanged without an analysis: the stored report (its JSON), for its numbers
    evidence: RunEvidence | None = None  # a finished run's evidence for its project's law, taken or stored
    changes: dict[str, Any] | None = None  # with --dry-run: each key's old and new value

    @property
    def failed(self) -> bool:
        return self.action == Action.FAILED


def process_runs(
    source: Source,
    runs: Sequence[RunInfo],
    config: AnalysisConfig,
    *,
    write: bool,
    force: bool = False,
    dry_run: bool = False,
    workers: int = 4,
    progress: bool = True,
    label: str = "analysing",
    executor: Executor | None = None,
    book: ProjectBook | None = None,
    evidence: bool = False,
    plot: bool = True,
    series: bool = True,
) -> list[Outcome]:
    """Analyse each run and, with ``write``, annotate it; outcomes in the order of ``runs``.

    With ``write``, a run that holds a complete annotation (its keys match its marker, its
    report matches its keys) made with the same settings from a history with the same
    fingerprint is left alone (``unchanged``) unless ``force``; anything else is redone; with ``dry_run`` nothing is written and
    each outcome lists what would be.

    ``executor`` runs the runs (:mod:`tracker_plugin.jobs.fanout`): None, a pool of
    ``workers`` threads sharing ``source``; a thread pool given, the same on its threads;
    any other (processes, Dask, Ray), each run reopened in its worker as a :class:`RunJob`.
    Outcomes come back as each run ends, for one progress bar; a run whose task fails
    (its worker lost, say) is a failed outcome, and the others still count.

    ``book`` forecasts each run not finished by its project's law, fitted on the book's
    finished runs (its digest is a setting: a sibling that finishes redoes the runs
    forecast by it); with ``evidence``, each run in state ``finished`` has its evidence
    taken once (kept in its annotation, a run holding a current one is not read for it)
    and the outcome carries it. Without
    ``plot``, each run's ``loss_eta.png`` says no plot was drawn (``--no-plot``). ``series``:
    the annotation carries the smoothed loss as a series (:mod:`tracker_plugin.jobs.series`).
    """
    collision = target_collision(config.targets) if write else None
    if collision is not None:
        raise ConfigError(collision)  # before anything is written
    settings = settings_of(config, source.options.columns, source.options.batch_size, series=series)
    recorded = evidence_hash(settings) if evidence else None
    if book is not None:
        settings["siblings"] = book.settings()
    job = RunJob(
        "", source.portable_options() if not shares_memory(executor) else SourceOptions(), config, settings,
        settings_hash(settings), write=write, force=force, dry_run=dry_run, book=book, evidence_hash=recorded, plot=plot,
    )  # fmt: skip
    results: dict[int, Outcome] = {}
    with ExitStack() as stack:
        if executor is None:
            executor = stack.enter_context(ThreadPoolExecutor(max_workers=max(1, min(workers, len(runs) or 1))))
        futures = _submit(executor, source, runs, job)
        bar = stack.enter_context(progress_bar(len(runs), label, progress))
        submitted = set(futures.values())
        local = [k for k in range(len(runs)) if k not in submitted]
        for k in local:  # runs no run string reopens elsewhere: here, while the others run
            results[k] = job.guarded(source, runs[k])
            bar.update(1)
        for future in as_completed(futures):
            k = futures[future]
            results[k] = _result(future, runs[k])
            bar.update(1)
    return [results[k] for k in range(len(runs))]


def _submit(executor: Executor, source: Source, runs: Sequence[RunInfo], job: RunJob) -> dict[Future[Outcome], int]:
    """Each run's task: on the shared source where the executor shares this process's
    memory, else as a :class:`RunJob` with the run's own run string."""
    futures: dict[Future[Outcome], int] = {}
    for k, run in enumerate(runs):
        if shares_memory(executor):
            futures[executor.submit(job.guarded, source, run)] = k
            continue
        spec = source.run_string(run)
        if spec is not None:
            futures[executor.submit(replace(job, spec=spec), run)] = k
    return futures


def _result(future: Future[Outcome], run: RunInfo) -> Outcome:
    """A task's outcome; a task that did not return one (its worker died, its result did
    not travel) is the run's failure, not the job's."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - one run's lost task must not lose the others
        return Outcome(run, Action.FAILED, error=redact(f"the run's task failed: {type(exc).__name__}: {exc}"))


@dataclass(frozen=True)
class RunJob:
    """One run's work, as it travels to a worker process or machine: the run string that
    reopens its run, the options to open it with, and the job's settings. Calling it with
    the run (as the job listed it) processes the run and returns its :class:`Outcome`."""

    spec: str
    options: SourceOptions
    config: AnalysisConfig
    settings: dict[str, Any]
    fingerprint: str
    write: bool
    force: bool = False
    dry_run: bool = False
    book: ProjectBook | None = None  # forecast a running run by the law of these finished runs
    evidence_hash: str | None = None  # take (or keep) a finished run's evidence, with these settings
    plot: bool = True  # draw loss_eta.png (False: a picture that says none was drawn)

    def __call__(self, run: RunInfo) -> Outcome:
        try:
            source = open_source(self.spec, self.options)
        except TrackerPluginError as exc:
            return Outcome(run, Action.FAILED, error=exc.problem if exc.run == run.ref else str(exc))
        try:
            # Listed again here: the source learns the run (an MLflow record, say) as the job's did.
            found = self.guarded(source, run, relist=True)
        finally:
            source.close()
        return found

    def guarded(self, source: Source, run: RunInfo, relist: bool = False) -> Outcome:
        """:func:`_one`, with any failure made the run's outcome."""
        try:
            if relist:
                listed = [r for r in source.runs() if r.ref == run.ref]
                if len(listed) != 1:
                    return Outcome(run, Action.FAILED, error=f"{self.spec} no longer names this run")
            return _one(self, source, run)
        except TrackerPluginError as exc:
            return Outcome(run, Action.FAILED, error=exc.problem if exc.run == run.ref else str(exc))
        except Exception as exc:  # noqa: BLE001 - one run's bug must not stop the others
            return Outcome(run, Action.FAILED, error=redact(f"internal error: {type(exc).__name__}: {exc}"))


def _one(job: RunJob, source: Source, run: RunInfo) -> Outcome:
    previous = run.previous
    drawn = plot_digest(run.name, job.plot)  # renamed since, or --no-plot toggled: the picture is redone
    recording = job.evidence_hash is not None and run.state == "finished"
    stored = stored_evidence(run, job.evidence_hash) if recording and job.evidence_hash else None
    if (job.write and not job.force and previous is not None and previous.current(job.fingerprint, run.progress, drawn)
            and (stored is not None or not recording)):
        # The report is read only when everything else says current, and once.
        report = source.intact_report(run)
        if report is not None:
            return Outcome(run, Action.UNCHANGED, held=_parsed(report), evidence=stored)
    history = source.read(run)
    config, law = job.config, None
    if job.book is not None and not run.finished:
        law = job.book.law(history, config)
        config = replace(config, project_law=law)
    analysis = run_analysis(history, config)
    record = _evidence(history, config, run, stored) if recording else None
    if not job.write:
        return Outcome(run, Action.ANALYSED, analysis, evidence=record)
    encoded = None if record is None or job.evidence_hash is None else encode_evidence(record, job.evidence_hash)
    annotation = build_annotation(analysis, job.settings, progress=run.progress, run_name=run.name, record=encoded,
                                  plot=job.plot, project=None if job.book is None else project_law_provenance(law, job.book))
    # A source that knew no progress before reading: the annotation's own says it.
    if (not job.force and run.progress is None and annotation.is_current(previous)
            and (stored is not None or not recording) and source.intact(run)):
        return Outcome(run, Action.UNCHANGED, analysis, evidence=record)
    redone = None
    if previous is not None and not job.force:
        redone = why_redone(previous, job.settings, job.fingerprint, annotation.progress, annotation.plot_inputs,
                            analysis.loss_key)
        if redone is None and recording:
            redone = "redone: its evidence for the project's law was not stored yet"
    if job.dry_run:
        changes, unchanged = planned_changes(source, run, annotation)
        action = ("annotate: no annotation yet" if previous is None else
                  "redo: --force" if redone is None else f"redo: {redone.removeprefix('redone: ')}")  # fmt: skip
        planned = planned_lines(action, source.describe_write(run, annotation), changes, unchanged)
        return Outcome(run, Action.DRY_RUN, analysis, planned=tuple(planned), evidence=record, changes=changes)
    if source.write(run, annotation):
        return Outcome(run, Action.ANNOTATED, analysis, note=redone, evidence=record)
    # Both writes were whole; the other job's, with other settings or a newer history, landed last.
    return Outcome(run, Action.ANNOTATED, analysis, note=OVERTAKEN, evidence=record)


def _evidence(history: History, config: AnalysisConfig, run: RunInfo, stored: RunEvidence | None) -> RunEvidence:
    """A finished run's evidence: the stored one while its history is the one it was taken
    from (a change of targets keeps it), else taken now."""
    previous = run.previous
    if stored is not None and previous is not None and run.progress is not None and previous.progress == run.progress:
        return stored
    return take_evidence(history, config)


def _parsed(stored: bytes) -> Any:
    """The stored report of an unchanged run, parsed; None when it cannot be. Only the
    summary's numbers come from it: nothing fails for want of it."""
    try:
        return json.loads(stored)
    except (ValueError, RecursionError):
        return None


class _NoBar:
    """Stands in for the progress bar where none is shown."""

    def update(self, n: int) -> None:
        return None


def progress_bar(length: int, label: str, enabled: bool) -> AbstractContextManager[Any]:
    """A progress bar on stderr, when stderr is a terminal (not in cron logs)."""
    if not enabled or length < 2 or not sys.stderr.isatty():
        return nullcontext(_NoBar())
    import click

    return click.progressbar(length=length, label=label, file=sys.stderr, show_pos=True)


def outcome_rows(outcomes: Sequence[Outcome]) -> list[RunRow]:
    """One row per run and target: the summary table's content, also its JSON form."""
    rows = []
    for outcome in outcomes:
        run = outcome.run
        if outcome.analysis is None:
            held = held_rows(run.name, run.ref, outcome.action, outcome.held)
            rows += held or [RunRow(run.name, run.ref, outcome.action, note=outcome.error)]
            continue
        timing = outcome.analysis.timing
        tokens = outcome.analysis.in_tokens  # None on the step axis
        for k, result in enumerate(outcome.analysis.targets):
            when = None if timing is None else timing.targets[k]
            left = None if when is None or when.seconds_left is None else when.seconds_left / 3600.0
            rows.append(
                RunRow(
                    run.name, run.ref, outcome.action, result.target, result.status, tokens(result.tokens), result.step,
                    None if outcome.analysis.on_steps else result.tokens_interval, _note(outcome.note, result.note),
                    left, None if when is None else when.eta_unix, outcome.changes,
                )
            )
    return rows


def _note(*notes: str | None) -> str | None:
    return "; ".join(note for note in notes if note) or None
