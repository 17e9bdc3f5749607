"""The one small interface every tracker adapter implements.

A :class:`Source` is opened from a run string (``runs/a.csv``, ``mlflow:RUN_ID``,
``wandb:ENTITY/PROJECT``, ...), the shared :class:`~.options.ReadOptions` and its
tracker's own options (see :mod:`tracker_plugin.trackers.options`). It lists the runs the string
names, reads a run into a validated :class:`~tracker_plugin.History`, and writes an
:class:`~tracker_plugin.jobs.annotation.Annotation` back. Sources move data only; they never
decide anything about the analysis.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from tracker_plugin.errors import SourceError
from tracker_plugin.frame.history import History
from tracker_plugin.keys import (
    JSON_PATH,
    MARKER,
    PNG_DIGEST,
    PNG_PATH,
    PROVENANCE,
    STALE,
    content_hash,
    is_legacy,
    is_own,
    is_series,
    report_digest,
)
from tracker_plugin.redact import redact
from tracker_plugin.trackers.options import ReadOptions, SourceOptions

__all__ = [
    "FINISHED_STATES",
    "STATES",
    "Annotation",
    "encode_report",
    "Previous",
    "RunInfo",
    "Series",
    "Source",
    "SourceOptions",
    "previous_of",
    "select_states",
]

# A write that another job's write overlapped is checked and done again, this many times.
_WRITE_ATTEMPTS = 4
# Before looking again a job waits a random time, in units of how long its own write took
# (under load everything is slower, another job's write too), doubling with each attempt:
# a write in flight lands meanwhile, and two jobs that both found a mix fall out of step.
_RETRY_PAUSE = (0.5, 1.5)  # times the write's own duration, times 2**attempt


@dataclass(frozen=True)
class Previous:
    """What an earlier annotation of a run left: enough to tell if it is complete and current.

    ``settings_hash``, ``progress`` (the source's fingerprint of the analysed history),
    ``report`` (the digest of ``loss_eta.json``) and ``plot`` (the digest of the plot's own
    inputs, the run's name in its title) come from the provenance tag ``loss_eta``.
    ``marker`` is the completion marker (``loss_eta_marker``): the hash of every other key
    of ours as that annotation wrote them; ``holds`` is the same hash of the keys the run
    holds now. They differ when a write was cut short or overlapped by another job's.
    ``legacy`` says the run holds keys of the earlier layout.
    """

    settings_hash: str | None
    progress: str | None
    marker: str | None = None
    holds: str | None = None
    report: str | None = None
    plot: str | None = None
    legacy: bool = False
    # A finished run's evidence for its project's law (``siblings`` in the provenance tag),
    # as stored: the jobs layer reads it (see tracker_plugin.jobs.project_book).
    siblings: Any = field(default=None, compare=False)
    # What the last annotation was made with (its settings, as stored, and the loss key it
    # read): the jobs layer says what changed when it redoes one.
    settings: Any = field(default=None, compare=False)
    loss_key: str | None = field(default=None, compare=False)

    @property
    def complete(self) -> bool:
        """Does the run hold exactly what its completion marker commits to?"""
        return self.marker is not None and self.marker == self.holds

    def current(self, settings_hash: str, progress: str | None, plot: str) -> bool:
        """Complete, and made with these settings from a history at this progress, its plot
        from these inputs (see :func:`~tracker_plugin.keys.plot_digest`)?"""
        return self.why_redone(settings_hash, progress, plot) is None

    def why_redone(self, settings_hash: str, progress: str | None, plot: str) -> str | None:
        """Why an annotation with these settings, progress and plot is not this one (None: it is)."""
        if self.legacy:
            return "redone: the last annotation was written by an earlier version, in keys this version replaced"
        if not self.complete:
            return "redone: the last annotation was cut short or mixed with another job's"
        if self.settings_hash != settings_hash:
            return "redone: the last annotation was made with other settings"
        if progress is None or self.progress != progress:
            return f"redone: the history moved on since the last annotation ({self.progress} -> {progress})"
        if self.plot != plot:
            return "redone: the run was renamed, or its plot turned on or off (--no-plot), since the last annotation"
        return None


def previous_of(held: Mapping[str, Any]) -> Previous | None:
    """What the keys of ours a run holds say of its last annotation (None: never annotated)."""
    own = {k: v for k, v in held.items() if is_own(k) and not _cleared(v)}
    if not own:
        return None
    provenance = _provenance(own.get(PROVENANCE))

    def text(name: str) -> str | None:
        value = provenance.get(name)
        return None if value is None else str(value)

    marker = own.get(MARKER)
    return Previous(
        settings_hash=text("settings_hash"),
        progress=text("progress"),
        marker=None if marker is None else str(marker),
        holds=content_hash(own),
        report=text("report_sha256"),
        plot=text("plot_sha256"),
        legacy=any(is_legacy(k) for k in own),
        siblings=provenance.get("siblings"),
        settings=provenance.get("settings"),
        loss_key=text("loss_key"),
    )


def _cleared(value: Any) -> bool:
    """A key's value that says nothing: None, or NaN (how MLflow keeps a cleared metric)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _provenance(value: Any) -> dict[str, Any]:
    """The provenance tag's fields; empty when it is missing or not ours to read."""
    try:
        found = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class Series:
    """Metric histories to write at the run's own steps (the smoothed loss and its tokens,
    :data:`~tracker_plugin.keys.SERIES`): each key's values at ``steps``, all finite."""

    steps: tuple[int, ...]
    values: dict[str, tuple[float, ...]]

    def points(self) -> int:
        """The rows the series are, one per key and step."""
        return len(self.steps) * len(self.values)


@dataclass(frozen=True)
class Annotation:
    """Everything written back to one run: a finished document, built by the jobs layer."""

    run: str
    metrics: dict[str, float | None]
    labels: dict[str, str | None]  # None: the tag is removed
    report: dict[str, Any]
    progress: str
    settings_hash: str
    step: int  # the last analysed step, where step-indexed trackers log the metrics
    plot: Callable[[], bytes] = field(repr=False, compare=False)  # ``loss_eta.png``, drawn on demand
    series: Series | None = field(default=None, repr=False)  # for the trackers' own charts; None: none

    def keys(self) -> list[str]:
        """Every key this annotation writes: its numbers, its texts and its series."""
        return sorted([*self.metrics, *self.labels, *(self.series.values if self.series is not None else ())])

    def marker(self) -> str:
        """The completion marker's value: the hash of every key this annotation writes."""
        return content_hash({**self.metrics, **self.labels})

    def clearing(self, held: Mapping[str, Any]) -> Annotation:
        """This annotation, plus the keys of ours the run holds that it does not write: a
        dropped target's numbers cleared (``None``) and its text set to ``stale``; the
        earlier layout's numbers cleared and its text removed."""
        metrics, labels = dict(self.metrics), dict(self.labels)
        for key, value in held.items():
            if not is_own(key) or key == MARKER or is_series(key) or key in metrics or key in labels or _cleared(value):
                continue
            if isinstance(value, str):
                labels[key] = None if is_legacy(key) else STALE
            else:
                metrics[key] = None
        return replace(self, metrics=metrics, labels=labels)

    def report_bytes(self) -> bytes:
        """``loss_eta.json``: the same document as ``analyze --json``, byte-stable."""
        return encode_report(self.report)

    def plot_bytes(self) -> bytes:
        """``loss_eta.png``: the report's plot, drawn only when a tracker writes it."""
        return self.plot()

    def is_current(self, previous: Previous | None) -> bool:
        """Does the run already hold a complete annotation with these settings and progress?"""
        return previous is not None and previous.current(self.settings_hash, self.progress, self.plot_inputs)

    @property
    def replaces_legacy(self) -> bool:
        """Does the run hold keys of the earlier layout, which this write removes?"""
        return any(is_legacy(key) for key in (*self.metrics, *self.labels))

    @property
    def plot_inputs(self) -> str:
        """The digest of the plot's own inputs (:func:`~tracker_plugin.keys.plot_digest`)."""
        return str(self.report["plot_sha256"])


def png_text(data: bytes) -> dict[str, str]:
    """A PNG's uncompressed text chunks (``tEXt``), where a plot keeps its metadata; empty
    for anything that is not a PNG."""
    import struct

    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return {}
    found, at = {}, 8
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        if kind == b"tEXt":
            key, _, value = data[at + 8 : at + 8 + size].partition(b"\0")
            found[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        at += 12 + size  # length, type, data, CRC
    return found


def encode_report(report: Mapping[str, Any]) -> bytes:
    """A report document as ``loss_eta.json`` holds it, with every credential cut.

    The keys keep the report's own order, the answer first (``run``, ``targets``), then
    how it was reached: sorted, the targets came two screens down, after the settings.
    """
    return (redact(json.dumps(report, indent=2)) + "\n").encode()


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

    def write(self, run: RunInfo, annotation: Annotation) -> bool:
        """Write ``annotation`` to the run: keys, ``loss_eta.json`` and ``loss_eta.png``.

        Everything else goes first (:meth:`write_content`), the completion marker
        ``loss_eta_marker`` last (:meth:`write_markers`): its value is the hash of every
        other key written, and the keys record the report's digest, so a write cut short,
        or mixed with another job's, leaves a run whose keys do not match its marker, and
        the next run redoes it. Keys of ours the run holds that this annotation does not
        write (a dropped target's) are cleared. Where other jobs may write the same run at
        the same time (:attr:`shared`), the run is read back after the marker until it
        holds one complete annotation: this one, or another job's that overlapped it (the
        run is consistent either way); while it holds a mix the job waits (a random time,
        growing, in units of its own write's duration) and looks again, and writes again
        only if the mix is still there. Writing the same annotation twice leaves the run as
        the first write left it; nothing but our keys and our artifacts is
        touched.

        Returns whether the run holds this annotation (False: another job's complete
        annotation, made with other settings or from another history, landed after it).
        """
        annotation = replace(annotation, plot=functools.cache(annotation.plot))  # drawn once
        for attempt in range(_WRITE_ATTEMPTS):
            started = time.monotonic()
            held = self.held(run)
            full = annotation.clearing(held)
            self.write_content(run, full, held)
            self.write_markers(run, full)
            if not self.shared:
                return True
            holds = self.settled(run)
            if holds is None:  # a mix: give another job's write in flight time to land
                time.sleep((time.monotonic() - started) * random.uniform(*_RETRY_PAUSE) * 2**attempt)
                holds = self.settled(run)
            if holds is not None:
                return holds == full.marker()
        raise SourceError(
            f"another job kept writing this run's annotation; tried {_WRITE_ATTEMPTS} times, "
            "and the next run will redo it",
            run=run.ref,
        )

    def held(self, run: RunInfo) -> dict[str, Any]:
        """The keys of ours the run holds now, read fresh: numbers and text. A source may
        return a subclass of dict carrying the rest of that read, for :meth:`write_content`."""
        return {}

    def stored_report(self, run: RunInfo) -> bytes | None:
        """The run's ``loss_eta.json`` as stored now; None when there is none."""
        return self.stored_artifact(run, JSON_PATH)

    def stored_plot(self, run: RunInfo) -> bytes | None:
        """The run's ``loss_eta.png`` as stored now; None when there is none.
        Only sources that set :attr:`reads_plot` can say."""
        return self.stored_artifact(run, PNG_PATH)

    def stored_artifact(self, run: RunInfo, path: str) -> bytes | None:
        """One of our artifacts (``path`` in the run's artifacts, e.g. ``loss_eta.json``)
        as stored now; None when it is not there or the source keeps none."""
        return None

    # Whether :meth:`stored_plot` reads the stored picture (so :meth:`intact` checks it).
    reads_plot: ClassVar[bool] = False

    def intact(self, run: RunInfo) -> bool:
        """Is the run's stored report the one its (complete) keys record, and (where the
        source can read it) its picture the one drawn with that report?"""
        return self.intact_report(run) is not None

    def intact_report(self, run: RunInfo) -> bytes | None:
        """:meth:`intact`, giving the stored report it read (the summary of a run left
        unchanged shows its numbers) where the run is intact; None where it is not."""
        previous = run.previous
        if previous is None or previous.report is None:
            return None
        stored = self.stored_report(run)
        if stored is None or report_digest(stored) != previous.report:
            return None
        if not self.reads_plot:
            return stored
        picture = self.stored_plot(run)
        # Another job's picture (after a race) carries another report's digest.
        return stored if picture is not None and png_text(picture).get(PNG_DIGEST) == previous.report else None

    # Whether other jobs may write a run at the same time, so that a write must be read
    # back (:meth:`settled`); sources whose write is one atomic replacement say no.
    shared: ClassVar[bool] = True

    def settled(self, run: RunInfo) -> str | None:
        """After a write: the completion marker of the one complete annotation the run holds
        (this one or another job's that overlapped it); None while it holds a mix."""
        now = previous_of(self.held(run))
        if now is None or not now.complete or not self.intact(replace(run, previous=now)):
            return None
        return now.marker

    def write_content(self, run: RunInfo, annotation: Annotation, held: Mapping[str, Any]) -> None:
        """The annotation's metrics, labels and artifacts, all but the completion marker.
        ``held`` is what :meth:`held` read just before (the write is measured against it)."""
        raise SourceError(f"{self.scheme} runs cannot be annotated", run=run.ref)

    def write_markers(self, run: RunInfo, annotation: Annotation) -> None:
        """The completion marker, once :meth:`write_content` has succeeded."""
        raise SourceError(f"{self.scheme} runs cannot be annotated", run=run.ref)

    def describe_write(self, run: RunInfo, annotation: Annotation) -> list[str]:
        """Where :meth:`write` would put the annotation, for ``--dry-run`` (the jobs say
        which keys would change)."""
        return [f"to: keys, {JSON_PATH} and {PNG_PATH} of {run.ref}"]

    def portable_options(self) -> SourceOptions:
        """The options this source was opened with, with whatever it took from this
        process (a default tracking URI) written in: another process opening a run string
        with them opens the same tracker."""
        return SourceOptions(read=self.options)

    def run_string(self, run: RunInfo) -> str | None:
        """A run string naming this run alone, which reopens it in another process or on
        another machine (with the options this source was opened with); None where no
        one string does (a run read from several places at once)."""
        return run.ref

    def close(self) -> None:  # noqa: B027 - a hook: most sources hold nothing to release
        """Release connections and background processes."""

