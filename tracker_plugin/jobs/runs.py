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
from tracker_plugin.trackers import RunInfo, Source, SourceOptions, open_source
from tracker_plugin.trackers.base import select_states

__all__ = ["NotOneRun", "analyze_one", "open_runs", "opened_runs"]

Opened = list[tuple[Source, list[RunInfo]]]


class NotOneRun(ConfigError):
    """A run string that should name one run names none or several."""

    def __init__(self, spec: str, count: int) -> None:
        self.spec = spec
        self.count = count
        super().__init__(f"{spec} names {count} runs; one was expected")


def analyze_one(spec: str, options: SourceOptions, config: AnalysisConfig, calibrate_on: Sequence[str] = ()) -> Analysis:
    """The analysis of the one run ``spec`` names, whatever its state; with
    ``calibrate_on``, calibrated on the finished runs those run strings name.

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
    if calibrate_on:
        from tracker_plugin.jobs.calibration import calibration_on

        config = replace(config, calibration=calibration_on(calibrate_on, replace(options, states=("finished",)), history, config))
    return run_analysis(history, config)


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
