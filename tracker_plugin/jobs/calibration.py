"""A run's calibration from finished runs: the project's own, or the ones the user names.

Two ways in:

- ``analyze --calibrate-on SOURCE``: each named run is read whole and backtested where the
  forecast run stands (the share of its plan the run has done), with the forecast's own
  settings.
- ``annotate`` over a project (the default): each finished run of the project is
  backtested once, at every cut of :data:`~tracker_plugin.core.siblings.SIBLING_CUTS`, when
  it is annotated; its **record** (the cases, its plan's kind and peak lr) is stored in its
  own provenance tag ``loss_eta``, beside the settings it was made with. That tag comes
  with the listing of the project's runs, so a nightly job reads the records, not the
  finished runs' histories: each run carries its own evidence, written once when it
  finishes, removed with it, and no experiment-level place is written (two jobs would
  race there). The :class:`SiblingBook` of a project is those records; a running run's
  calibration is the book's at the cut nearest its progress.

The cases give the calibration (:mod:`tracker_plugin.core.siblings`). The run itself is
never among its siblings.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import SIBLING_QUANTILES, sibling_cases
from tracker_plugin.core.siblings import (
    LEVELS,
    SIBLING_CUTS,
    Calibration,
    SiblingCase,
    SiblingRecord,
    calibrate,
    calibrate_records,
    plan_shape,
)
from tracker_plugin.errors import ConfigError, TrackerPluginError
from tracker_plugin.frame.history import History
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.trackers import SourceOptions

__all__ = [
    "RECORD_FIELD",
    "SiblingBook",
    "SiblingTable",
    "calibration_on",
    "decode_record",
    "encode_record",
    "progress",
    "project_books",
    "record_hash",
    "sibling_table",
]

# The provenance tag's field holding a finished run's record.
RECORD_FIELD = "siblings"
_DIGITS = 6  # significant digits a record keeps (its errors are read to 3)

# The cuts a sibling is backtested at are kept inside the range the validation scored.
_LOWEST, _HIGHEST = 0.1, 0.9


def progress(history: History, config: AnalysisConfig) -> float:
    """The share of its planned steps the run has done, kept within [0.1, 0.9].

    Raises
    ------
    ConfigError
        The run's plan says nothing of its length: no cut to backtest the siblings at.
    """
    share = plan_shape(history, config.lr_schedule).share(history.last_step)
    if share is None:
        raise ConfigError(
            "--calibrate-on backtests the siblings where this run stands in its plan, and the run's length is not "
            "known: give its plan (--lr-spec, or --total-steps) or log it in the run's params", run=history.run)
    return min(max(share, _LOWEST), _HIGHEST)


@dataclass(frozen=True)
class SiblingTable:
    """The siblings' backtest at one cut: each run's cases, the ones left out and why,
    and the calibration they give."""

    fraction: float
    cases: tuple[tuple[str, tuple[SiblingCase, ...]], ...]
    left_out: tuple[tuple[str, str], ...]
    calibration: Calibration


def sibling_table(specs: Sequence[str], options: SourceOptions, config: AnalysisConfig, fraction: float,
                  exclude: str | None = None, kind: str | None = None) -> SiblingTable:
    """Read every run ``specs`` name (finished ones: the options' states) and backtest each
    at ``fraction``; ``exclude`` is the forecast run's name, never its own sibling; with
    ``kind``, a run whose plan is of another kind is left out."""
    cases: list[tuple[str, tuple[SiblingCase, ...]]] = []
    left_out: list[tuple[str, str]] = []
    with opened_runs(specs, options) as opened:
        for source, runs in opened:
            for ref in runs:
                try:
                    history = source.read(ref)
                except TrackerPluginError as exc:  # one unreadable sibling is left out, not the forecast
                    left_out.append((ref.ref, f"it could not be read: {exc.problem}"))
                    continue
                if exclude is not None and history.run == exclude:
                    left_out.append((history.run, "the forecast run itself"))
                    continue
                own = plan_shape(history, config.lr_schedule).kind
                if kind is not None and own is not None and own != kind:
                    left_out.append((history.run, f"its lr schedule is of another kind ({own}; this run's: {kind})"))
                    continue
                found = tuple(sibling_cases(history, config, fraction))
                if found:
                    cases.append((history.run, found))
                else:
                    left_out.append((history.run, f"its backtest at {fraction:.0%} of its tokens forecast none of the targets it reached"))
    calibration = replace(calibrate([c for _, run_cases in cases for c in run_cases]), left_out=tuple(left_out))
    return SiblingTable(fraction, tuple(cases), tuple(left_out), calibration)


def calibration_on(specs: Sequence[str], options: SourceOptions, history: History, config: AnalysisConfig) -> Calibration:
    """The calibration of ``history``'s forecast from the runs ``specs`` name.

    Raises
    ------
    ConfigError
        The model is the power law, which is not calibrated; or the run's length is unknown.
    """
    if config.model == "power-law":
        raise ConfigError("--calibrate-on calibrates the schedule-aware laws (auto, lr-annealing, multi-power); "
                          "--model power-law is not one", run=history.run)
    kind = plan_shape(history, config.lr_schedule).kind
    return sibling_table(specs, options, config, progress(history, config), exclude=history.run, kind=kind).calibration


def record_hash(settings: Mapping[str, Any]) -> str:
    """The fingerprint of what a record depends on: the settings but the targets (a
    sibling's targets are its own quantiles), the cuts and the quantiles."""
    kept = {k: v for k, v in settings.items() if k not in ("targets", "calibration", "series")}
    kept["sibling_backtest"] = {"cuts": SIBLING_CUTS, "quantiles": SIBLING_QUANTILES, "levels": LEVELS}
    text = json.dumps(kept, sort_keys=True, default=list, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_record(record: SiblingRecord, fingerprint: str) -> dict[str, Any]:
    """A record as the provenance tag keeps it (plain JSON; ``null`` for an open side)."""
    return {
        "hash": fingerprint,
        "kind": record.kind,
        "peak_lr": _num(record.peak_lr),
        "left_out": record.left_out,
        "cuts": {f"{cut:g}": [[_num(c.error), *map(_num, c.lows), *map(_num, c.highs)] for c in cases]
                 for cut, cases in record.cuts},
    }


def decode_record(run: str, stored: Any, fingerprint: str) -> SiblingRecord | None:
    """The record a run's provenance holds, if made with these settings (None: none, made
    with others, or not readable: the run is backtested again)."""
    if not isinstance(stored, Mapping) or stored.get("hash") != fingerprint:
        return None
    try:
        n = len(LEVELS)
        cuts = tuple(
            (float(cut), tuple(SiblingCase(run, float(row[0]), _sides(row[1:1 + n]), _sides(row[1 + n:1 + 2 * n]))
                               for row in rows))
            for cut, rows in stored["cuts"].items()
        )
        if any(len(row) != 1 + 2 * n for _, rows in stored["cuts"].items() for row in rows):
            return None
        peak = stored.get("peak_lr")
        return SiblingRecord(run, stored.get("kind"), None if peak is None else float(peak), cuts, stored.get("left_out"))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.{_DIGITS}g}")


def _sides(values: Sequence[Any]) -> tuple[float, ...]:
    return tuple(math.inf if v is None else float(v) for v in values)


@dataclass(frozen=True)
class SiblingBook:
    """The records of a project's finished runs: what its running runs are calibrated on.

    ``origin`` says where they come from, for the report ("the finished runs of
    mlflow:experiment/7"); ``read`` counts the finished runs whose histories had to be read
    for it (their record was not stored, or stored with other settings).
    """

    records: tuple[SiblingRecord, ...]
    origin: str
    read: int = 0
    names: tuple[tuple[str, str], ...] = ()  # (ref, what people call the run)

    @property
    def digest(self) -> str:
        """Changes when a record does: a new finished run, or one backtested again."""
        text = json.dumps([encode_record(r, "") | {"run": r.run} for r in sorted(self.records, key=lambda r: r.run)],
                          sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def settings(self) -> dict[str, Any]:
        """What the book adds to a calibrated run's settings (its fingerprint)."""
        return {"siblings": self.digest, "count": len(self.records), "origin": self.origin}

    def calibration(self, history: History, config: AnalysisConfig) -> Calibration:
        """``history``'s calibration: the records at the cut nearest its progress, of its
        plan's kind. A run whose plan says nothing of its length is not calibrated (the
        report says why)."""
        if config.model == "power-law":
            return replace(calibrate([]), left_out=((self.origin, "--model power-law is not calibrated"),))
        plan = plan_shape(history, config.lr_schedule)
        share = plan.share(history.last_step)
        if share is None:
            why = "this run's planned length is unknown, so where it stands in its plan is too"
            return replace(calibrate([]), left_out=((self.origin, why),))
        return calibrate_records(self.records, share, plan.kind, exclude=history.run)



def project_books(specs: Sequence[str], options: SourceOptions, config: AnalysisConfig) -> list[SiblingBook]:
    """Each run string's book of finished runs (``calibrate``), written nowhere: a run's
    stored record where it is current, else its history read and backtested."""
    from tracker_plugin.jobs.annotate import project_book

    with opened_runs(specs, options, states=("finished",)) as opened:
        return [project_book(source, [run for run in runs if run.state == "finished"], config) for source, runs in opened]
