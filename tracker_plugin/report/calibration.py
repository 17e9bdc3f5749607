"""What ``tracker-plugin calibrate`` prints: a project's finished runs as siblings.

Two tables: each finished run's backtest (its kind, peak lr, cases and mean error at three
cuts, or why it is no sibling), then the calibration the runs give at each cut, per lr
schedule kind: the siblings' own bias and width beside what a forecast takes after the
shrinkage toward none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tracker_plugin.core.siblings import SIBLING_CUTS, Calibration, SiblingRecord, calibrate_records
from tracker_plugin.report.tables import MISSING, text_table

__all__ = ["SHOWN_CUTS", "calibration_json", "calibration_table", "calibrations"]

# The cuts the runs table shows each run's error at (the JSON has every cut).
SHOWN_CUTS = (0.3, 0.5, 0.7)


def calibrations(records: Sequence[SiblingRecord]) -> list[tuple[str | None, float, Calibration]]:
    """The calibration at every cut, for each lr schedule kind the runs have (one set for
    all where no run's kind is known)."""
    kinds: list[str | None] = [*sorted({r.kind for r in records if r.kind is not None})] or [None]
    return [(kind, cut, calibrate_records(records, cut, kind)) for kind in kinds for cut in SIBLING_CUTS]


def calibration_table(records: Sequence[SiblingRecord], origin: str, read: int,
                      names: Mapping[str, str] | None = None) -> str:
    """Both tables, as text; ``names`` are what people call the runs (by ref)."""
    names = names or {}
    runs = [
        (names.get(r.run, r.run), r.kind or MISSING, _g(r.peak_lr), str(sum(len(c) for _, c in r.cuts)),
         *(_signed(_mean_error(r, cut)) for cut in SHOWN_CUTS), r.left_out or "")
        for r in records
    ]
    header = ("run", "kind", "peak lr", "cases", *(f"error@{cut:.0%}" for cut in SHOWN_CUTS), "left out")
    lines = [f"{origin}: {len(records)} finished run(s); {_read_words(read, len(records))}",
             "", *text_table(header, runs, align=("<", "<", ">", ">", ">", ">", ">"))]
    fitted = [
        (kind or "any", f"{cut:.0%}", str(len(cal.runs)), str(cal.cases), _signed(cal.raw_bias), _signed(cal.bias if cal.active else None),
         _g(cal.raw_width), _g(cal.width if cal.active else None))
        for kind, cut, cal in calibrations(records)
    ]
    header = ("kind", "cut", "runs", "cases", "bias (runs)", "bias used", "width (runs)", "width used")
    lines += ["", "error = ln(forecast / true tokens); bias is taken off the point, width stretches the interval;",
              "each shrunk toward none (0, x1) by the number of runs", "",
              *text_table(header, fitted, align=("<", ">", ">", ">", ">", ">", ">", ">"))]
    return "\n".join(lines)


def calibration_json(records: Sequence[SiblingRecord], origin: str, read: int,
                     names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Both tables, as one JSON object."""
    names = names or {}
    return {
        "origin": origin,
        "read": read,
        "runs": [{"run": names.get(r.run, r.run), "ref": r.run, "kind": r.kind, "peak_lr": r.peak_lr, "left_out": r.left_out,
                  "errors": {f"{cut:g}": _mean_error(r, cut) for cut, _ in r.cuts}} for r in records],
        "calibrations": [
            {"kind": kind, "cut": cut, "runs": len(cal.runs), "cases": cal.cases, "bias": cal.bias, "raw_bias": cal.raw_bias,
             "width": cal.width, "raw_width": cal.raw_width}
            for kind, cut, cal in calibrations(records)
        ],
    }


def _mean_error(record: SiblingRecord, cut: float) -> float | None:
    cases = record.at(cut)
    return float(np.mean([c.error for c in cases])) if cases else None


def _signed(value: float | None) -> str:
    return MISSING if value is None or not math.isfinite(value) else f"{value:+.3f}"


def _g(value: float | None) -> str:
    return MISSING if value is None or not math.isfinite(value) else f"{value:.3g}"


def _read_words(read: int, total: int) -> str:
    """How the records were had: ``5 read and backtested now``, ``3 stored``, or both."""
    stored = total - read
    if not read:
        return f"{stored} backtest{'s' if stored != 1 else ''} stored in their annotations"
    now = f"{read} read and backtested now"
    return now if not stored else f"{now}, {stored} stored in their annotations"
