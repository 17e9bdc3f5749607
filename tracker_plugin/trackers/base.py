"""The one small interface every tracker adapter implements.

A :class:`Source` is opened from a run string (``runs/a.csv``, ``mlflow:RUN_ID``,
``wandb:ENTITY/PROJECT``, ...), the shared :class:`~.options.ReadOptions` and its
tracker's own options (see :mod:`tracker_plugin.trackers.options`). It lists the runs the string
names, reads a run into a validated :class:`~tracker_plugin.History`, and writes an
:class:`~tracker_plugin.jobs.annotation.Annotation` back. Sources move data only; they never
decide anything about the analysis.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tracker_plugin.errors import SourceError
from tracker_plugin.frame.history import History
from tracker_plugin.trackers.options import ReadOptions, SourceOptions

__all__ = [
    "FINISHED_STATES",
    "STATES",
    "Annotation",
    "Previous",
    "RunInfo",
    "Source",
    "SourceOptions",
    "select_states",
]

@dataclass(frozen=True)
class Previous:
    """What an earlier annotation of a run recorded: enough to tell if it is still current.

    ``progress`` is the source's marker of how far the run had got (its last step, or a
    file's size and time), recorded in ``loss_eta/progress``.
    """

    settings_hash: str | None
    progress: str | None


@dataclass(frozen=True)
class Annotation:
    """Everything written back to one run: a finished document, built by the jobs layer."""

    run: str
    metrics: dict[str, float | None]
    labels: dict[str, str]
    report: dict[str, Any]
    progress: str
    settings_hash: str
    step: int  # the last analysed step, where step-indexed trackers log the metrics
    plot: Callable[[], bytes] = field(repr=False, compare=False)  # ``loss_eta.png``, drawn on demand

    def keys(self) -> list[str]:
        return sorted([*self.metrics, *self.labels])

    def report_bytes(self) -> bytes:
        """``loss_eta.json``: the same document as ``analyze --json``, byte-stable."""
        return (json.dumps(self.report, indent=2, sort_keys=True) + "\n").encode()

    def plot_bytes(self) -> bytes:
        """``loss_eta.png``: the report's plot, drawn only when a tracker writes it."""
        return self.plot()

    def is_current(self, previous: Previous | None) -> bool:
        """Did an earlier annotation already record this one (same settings, same progress)?"""
        return previous == Previous(self.settings_hash, self.progress)


# Normalised run states; a tracker's own states map onto these.
STATES = ("running", "finished", "failed", "crashed", "killed", "unknown")
FINISHED_STATES = frozenset({"finished", "failed", "crashed", "killed"})
# Tracker-specific states a user may ask for with --state, as the normalised state.
_STATE_ALIASES = {"preempting": "running", "scheduled": "running", "pending": "unknown", "preempted": "killed"}


def select_states(runs: list[RunInfo], states: tuple[str, ...], keep: frozenset[str] = frozenset()) -> list[RunInfo]:
    """The runs in one of ``states`` (``--state``; case-insensitive), all runs if none given.

    Runs whose ref is in ``keep`` stay whatever their state: a watched run that was
    running must still get its final annotation once it has finished.
    """
    if not states:
        return runs
    wanted = {_STATE_ALIASES.get(s.lower(), s.lower()) for s in states}
    return [run for run in runs if run.state in wanted or run.ref in keep]


@dataclass(frozen=True)
class RunInfo:
    """One run a source found, with what is known without reading its history."""

    ref: str  # the canonical run string, e.g. "mlflow:3f2a..." or "runs/a.csv"
    name: str  # what people call it (the tracker's run name)
    state: str = "unknown"  # running | finished | failed | crashed | killed | unknown
    # How far the run has got, in the source's own terms (its loss key's last step, a
    # file's size and time); None when unknown before reading the history.
    progress: str | None = None
    previous: Previous | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


class Source(ABC):
    """A tracker (or a folder of files) holding runs."""

    scheme: ClassVar[str]

    def __init__(self, spec: str, options: ReadOptions | None = None) -> None:
        self.spec = spec
        self.options = options or ReadOptions()

    @classmethod
    def from_options(cls, spec: str, options: SourceOptions) -> Source:
        """The source for ``spec``, given the parts of ``options`` it reads: the shared
        reading options (and, for a tracker with options of its own, its part)."""
        return cls(spec, options.read)

    @abstractmethod
    def runs(self) -> list[RunInfo]:
        """The runs the spec names, in a stable order.

        Raises
        ------
        RunNotFound
            The spec names no run, experiment, project or file.
        SourceError
            The tracker could not be reached or refused the request.
        """

    @abstractmethod
    def read(self, run: RunInfo) -> History:
        """The run's history in the common frame.

        Raises
        ------
        DataError
            The run's data cannot be analysed (a missing key, no loss history).
        SourceError
            The tracker could not be read.
        """

    def write(self, run: RunInfo, annotation: Annotation) -> None:
        """Write ``annotation`` to the run: keys, ``loss_eta.json`` and ``loss_eta.png``.

        Writing the same annotation twice leaves the run as the first write left it, and
        nothing but the annotation's own keys and artifacts is touched. Everything else
        goes first (:meth:`write_content`); the labels ``loss_eta/settings_hash`` and
        ``loss_eta/progress`` go last (:meth:`write_markers`): they mark the annotation
        complete, so a write cut short before them is redone by the next run.
        """
        self.write_content(run, annotation)
        self.write_markers(run, annotation)

    def write_content(self, run: RunInfo, annotation: Annotation) -> None:
        """The annotation's metrics, labels and artifacts, all but the completion markers."""
        raise SourceError(f"{self.scheme} runs cannot be annotated", run=run.ref)

    def write_markers(self, run: RunInfo, annotation: Annotation) -> None:
        """The completion markers, once :meth:`write_content` has succeeded."""
        raise SourceError(f"{self.scheme} runs cannot be annotated", run=run.ref)

    def describe_write(self, run: RunInfo, annotation: Annotation) -> list[str]:
        """What :meth:`write` would do, one line per key or file, for ``--dry-run``."""
        lines = [f"{key} = {_show(value)}" for key, value in sorted(annotation.metrics.items())]
        lines += [f"{key} = {value!r}" for key, value in sorted(annotation.labels.items())]
        return lines + ["artifact loss_eta.json", "artifact loss_eta.png"]

    def close(self) -> None:  # noqa: B027 - a hook: most sources hold nothing to release
        """Release connections and background processes."""


def _show(value: float | None) -> str:
    return "(none)" if value is None else f"{value:.10g}"
