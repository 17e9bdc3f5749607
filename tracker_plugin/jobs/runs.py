"""The runs that run strings name: opened, selected by state, analysed one at a time.

A run string is a CSV path, ``mlflow:...``, ``wandb:...`` or ``wandb-offline:...`` (see
:func:`tracker_plugin.trackers.open_source`); one string may name many runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from tracker_plugin.core.analysis import Analysis, AnalysisConfig, run_analysis
from tracker_plugin.errors import ConfigError
from tracker_plugin.jobs.annotation import settings_of
from tracker_plugin.jobs.project_book import ProjectBook, book_of, evidence_hash
from tracker_plugin.trackers import RunInfo, Source, SourceOptions, open_source
from tracker_plugin.trackers.base import select_states

__all__ = ["NotOneRun", "analyze_one", "open_runs", "opened_runs", "siblings_book"]

Opened = list[tuple[Source, list[RunInfo]]]


class NotOneRun(ConfigError):
    """A run string that should name one run names none or several."""

    def __init__(self, spec: str, count: int) -> None:
        self.spec = spec
        self.count = count
        super().__init__(f"{spec} names {count} runs; one was expected")


def analyze_one(spec: str, options: SourceOptions, config: AnalysisConfig, siblings: Sequence[str] = ()) -> Analysis:
    """The analysis of the one run ``spec`` names, whatever its state; with ``siblings``,
    forecast by the law of the finished runs those run strings name (:func:`siblings_law`).

    Raises
    ------
    NotOneRun
        The run string names no run or several.
    """
    source = open_source(spec, options)
    try:
        runs = source.runs()
        if len(runs) != 1:
            raise NotOneRun(spec, len(runs))
        history = source.read(runs[0])
    finally:
        source.close()
    if siblings:
        book = siblings_book(siblings, options, config, runs[0].ref)
        config = replace(config, project_law=book.law(history, config))
    return run_analysis(history, config)


def siblings_book(specs: Sequence[str], options: SourceOptions, config: AnalysisConfig, own: str) -> ProjectBook:
    """The finished runs ``specs`` name, as one book: each one's evidence as its annotation
    stores it, else its history read. The run ``own`` (its ref) is never its own sibling:
    it is left out, and the report says so."""
    books: list[ProjectBook] = []
    itself: list[tuple[str, str]] = []
    with opened_runs(specs, replace(options, states=("finished",))) as opened:
        for source, runs in opened:
            fingerprint = evidence_hash(settings_of(config, source.options.columns, source.options.batch_size))
            itself += [(run.ref, "the forecast run itself") for run in runs if run.ref == own]
            books.append(book_of(source, [run for run in runs if run.ref != own], config, fingerprint))
    return ProjectBook(
        tuple(e for b in books for e in b.evidences), "; ".join(b.origin for b in books), sum(b.read for b in books),
        (*itself, *(x for b in books for x in b.left_out)), tuple(x for b in books for x in b.names),
    )


def open_runs(
    specs: Sequence[str],
    options: SourceOptions,
    keep: frozenset[str] = frozenset(),
    states: tuple[str, ...] | None = None,
) -> Opened:
    """Each run string's source and the runs it names, in ``states`` (default: the options').

    Runs whose ref is in ``keep`` are taken whatever their state. The caller closes the
    sources; if one cannot be opened, those opened before it are closed here.
    """
    states = options.states if states is None else states
    opened: Opened = []
    try:
        for spec in specs:
            source = open_source(spec, options)
            opened.append((source, []))
            opened[-1] = (source, select_states(source.runs(), states, keep))
    except BaseException:
        for source, _ in opened:
            source.close()
        raise
    return opened


@contextmanager
def opened_runs(
    specs: Sequence[str],
    options: SourceOptions,
    keep: frozenset[str] = frozenset(),
    states: tuple[str, ...] | None = None,
) -> Iterator[Opened]:
    """:func:`open_runs`, with every source closed when the block ends, however it ends."""
    opened = open_runs(specs, options, keep, states)
    try:
        yield opened
    finally:
        for source, _ in opened:
            source.close()
