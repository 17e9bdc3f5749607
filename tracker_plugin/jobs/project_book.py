"""A project's finished runs as its law reads them: their evidence, kept and fitted once.

Each finished run's evidence (:class:`~tracker_plugin.core.project_law.RunEvidence`: its
binned loss, smoothed curve, lr as it ran, batch, clock, configuration, and how well it
forecast itself from its own early log) is taken once, when the run is annotated finished,
and stored in its own provenance tag ``loss_eta`` (:data:`EVIDENCE_FIELD`) beside the
settings it was made with. That tag comes with the listing of a project's runs, so a
nightly job reads the evidence, not the finished runs' histories: each run carries its
own, written once, removed with it, and no experiment-level place is written (two jobs
would race there).

A :class:`ProjectBook` is a project's evidence; :meth:`ProjectBook.law` fits the law of a
running run's configuration on it (:func:`~tracker_plugin.core.project_law.fit_project`),
once per configuration in a pass. Its :attr:`~ProjectBook.digest` is a setting of the runs
it forecasts: a sibling that finishes changes it and redoes them; nothing else does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.project_law import (
    ProjectLaw,
    RunEvidence,
    descriptors_from_history,
    fit_project,
    run_evidence,
)
from tracker_plugin.core.project_law.evidence import EVIDENCE_VERSION
from tracker_plugin.core.project_law.own_log import OWN_CUTS, own_errors
from tracker_plugin.errors import ConfigError, TrackerPluginError
from tracker_plugin.frame.history import History
from tracker_plugin.trackers import RunInfo, Source

__all__ = [
    "EVIDENCE_FIELD",
    "ProjectBook",
    "decode_evidence",
    "encode_evidence",
    "book_of",
    "evidence_hash",
    "project_law_provenance",
    "read_evidence",
    "run_string",
    "storable",
    "stored_evidence",
    "take_evidence",
]

# The provenance tag's field holding a finished run's evidence (the trackers hand it over
# as ``Previous.siblings``).
EVIDENCE_FIELD = "siblings"
# The settings a run's evidence does not depend on: its targets (the evidence is the run's
# own), the write-back's series, the project's book of a running run.
_NOT_EVIDENCE = ("targets", "calibration", "series", "siblings", "stability_sweep", "sweep_step",
                 "sweep_min_window", "extrapolation_warn_factor", "deadline")
# The stored evidence, compressed, is kept under this many characters: the provenance tag
# holds it beside the settings, and MLflow keeps a tag of at most 8,000.
STORED_AT_MOST = 5000


def evidence_hash(settings: Mapping[str, Any]) -> str:
    """The fingerprint of what a run's evidence depends on: its settings but those of
    :data:`_NOT_EVIDENCE`, and the evidence's own form and cuts."""
    kept = {k: v for k, v in settings.items() if k not in _NOT_EVIDENCE}
    kept["evidence"] = {"version": EVIDENCE_VERSION, "own_cuts": OWN_CUTS}
    text = json.dumps(kept, sort_keys=True, default=list, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def take_evidence(history: History, config: AnalysisConfig) -> RunEvidence:
    """A finished run's evidence, with ``config``'s smoothing and plan (the run's own
    logged lr or params' plan where no plan is given), its configuration as its rows show
    it, and how well the run alone forecast itself at :data:`OWN_CUTS`."""
    window = config.ema_steps if history.on_steps else config.ema_token_window
    plan = config.lr_schedule if config.lr_schedule is not None else history.lr_plan
    return storable(run_evidence(history, plan, ema_window=window, descriptors=descriptors_from_history(history),
                                 own=own_errors(history, config)))


def storable(evidence: RunEvidence) -> RunEvidence:
    """The evidence as it is stored and read back: its numbers rounded as stored, its bins
    and curve halved (neighbours merged) until it fits :data:`STORED_AT_MOST`. The jobs fit
    this form only, so a pass that took the evidence and one that read it agree."""
    while True:
        text = json.dumps(evidence.to_dict(), separators=(",", ":"))
        if len(_packed(text)) <= STORED_AT_MOST or len(evidence.bins) < 16:
            return RunEvidence.from_dict(json.loads(text))
        evidence = _halved(evidence)


def _halved(evidence: RunEvidence) -> RunEvidence:
    """Each two neighbouring bins one (their rows' mean), every other curve point (the last kept)."""
    bins = evidence.bins
    merged = []
    for k in range(0, len(bins), 2):
        pair = bins[k:k + 2]
        rows = sum(b[2] for b in pair)
        merged.append((sum(b[0] * b[2] for b in pair) / rows, sum(b[1] * b[2] for b in pair) / rows, rows))
    curve = (*evidence.curve[:-1:2], evidence.curve[-1])
    return replace(evidence, bins=tuple(merged), curve=curve)


def _packed(text: str) -> str:
    return base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")


def encode_evidence(evidence: RunEvidence, fingerprint: str) -> dict[str, Any]:
    """A run's evidence as its provenance tag keeps it: its JSON, compressed (zlib, base64)."""
    return {"hash": fingerprint, "zlib": _packed(json.dumps(evidence.to_dict(), separators=(",", ":")))}


def decode_evidence(stored: Any, fingerprint: str) -> RunEvidence | None:
    """The evidence a run's provenance holds, if taken with these settings (None: none,
    taken with others, of another form, or not readable: it is taken again)."""
    if not isinstance(stored, Mapping) or stored.get("hash") != fingerprint:
        return None
    try:
        data = json.loads(zlib.decompress(base64.b64decode(str(stored.get("zlib")), validate=True)))
        return RunEvidence.from_dict(data) if isinstance(data, Mapping) else None
    except (ConfigError, AttributeError, ValueError, binascii.Error, zlib.error):
        return None


def stored_evidence(run: RunInfo, fingerprint: str) -> RunEvidence | None:
    """The evidence ``run``'s last annotation stored, when taken with these settings."""
    return None if run.previous is None else decode_evidence(run.previous.siblings, fingerprint)


@dataclass(frozen=True)
class ProjectBook:
    """The evidence of a project's finished runs: what its running runs' law is fitted on.

    ``origin`` says where they come from, for the report ("the finished runs of
    mlflow:experiment/7"); ``read`` counts the finished runs whose histories had to be read
    for it (their evidence was not stored, or stored with other settings); ``left_out``
    the finished runs with no evidence, each with why; ``names`` what people call each run.
    """

    evidences: tuple[RunEvidence, ...]
    origin: str
    read: int = 0
    left_out: tuple[tuple[str, str], ...] = ()
    names: tuple[tuple[str, str], ...] = ()
    _laws: dict[Any, ProjectLaw] = field(default_factory=dict, compare=False, repr=False)
    _memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    _lock: Any = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def digest(self) -> str:
        """Changes when the evidence does: a sibling finishes, or is taken again."""
        text = json.dumps(sorted((e.to_dict() for e in self.evidences), key=lambda d: d["run"]),
                          sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def settings(self) -> dict[str, Any]:
        """What the book adds to a forecast run's settings (its fingerprint)."""
        return {"digest": self.digest, "count": len(self.evidences), "origin": self.origin}

    def __getstate__(self) -> dict[str, Any]:
        """What travels to a worker process: the evidence, not this process's fits and lock."""
        return {k: getattr(self, k) for k in ("evidences", "origin", "read", "left_out", "names")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in {**state, "_laws": {}, "_memo": {}, "_lock": threading.Lock()}.items():
            object.__setattr__(self, k, v)

    def law(self, history: History, config: AnalysisConfig) -> ProjectLaw:
        """The law of ``history``'s configuration: fitted once per configuration the book
        is asked for (the runs of a pass share it), the run itself never among its siblings."""
        described = descriptors_from_history(history)
        mine = any(e.run == history.run for e in self.evidences)
        key = (tuple(sorted(described.items())), history.run if mine else None, config.model)
        with self._lock:  # the pass's threads wait for one fit rather than each making it
            if key not in self._laws:
                self._laws[key] = self._fit(history.run, described, config)
            return self._laws[key]

    def _fit(self, run: str, described: Mapping[str, str | float], config: AnalysisConfig) -> ProjectLaw:
        if config.model == "power-law":
            return ProjectLaw(None, left_out=self.left_out, reason="--model power-law forecasts each run alone")
        law = fit_project(self.evidences, run=run, descriptors=described, memo=self._memo)
        return replace(law, left_out=(*self.left_out, *law.left_out))


def read_evidence(source: Source, run: RunInfo, config: AnalysisConfig) -> RunEvidence | str:
    """``run``'s evidence taken from its history now, or why it could not be."""
    try:
        return take_evidence(source.read(run), config)
    except TrackerPluginError as exc:
        return f"it could not be read: {exc.problem}"


def project_law_provenance(law: ProjectLaw | None, book: ProjectBook) -> dict[str, Any] | None:
    """What a running run's annotation says of its project's law: the runs it was fitted on
    (by ref and name), or why none was used."""
    if law is None:
        return None
    names = dict(book.names)
    return {
        "shared": law.shared,
        "law": None if law.pooled is None else law.pooled.law,
        "siblings": [{"run": run, "name": names.get(run, run)} for run in law.siblings],
        "left_out": len(law.left_out),
        "reason": law.reason,
        "origin": book.origin,
    }


def book_of(source: Source, finished: Sequence[RunInfo], config: AnalysisConfig, fingerprint: str,
            made: Mapping[str, RunEvidence | str] | None = None) -> ProjectBook:
    """The book of ``finished`` runs: each one's evidence as ``made`` this pass, else the one
    its annotation stores, else its history read (counted in :attr:`ProjectBook.read`)."""
    made = made or {}
    evidences: list[RunEvidence] = []
    left: list[tuple[str, str]] = []
    read = 0
    for run in finished:
        found: RunEvidence | str | None = made.get(run.ref)
        if found is None:
            found = stored_evidence(run, fingerprint)
        if found is None:
            read += 1
            found = read_evidence(source, run, config)
        if isinstance(found, str):
            left.append((run.ref, found))
        else:
            evidences.append(found)
    names = tuple((run.ref, run.name) for run in finished)
    return ProjectBook(tuple(evidences), f"the finished runs of {run_string(source)}", read, tuple(left), names)


def run_string(source: Source) -> str:
    """The run string the source was opened with, as a user writes it."""
    scheme = f"{source.scheme}:"
    return source.spec if source.scheme == "csv" or source.spec.startswith(scheme) else scheme + source.spec
