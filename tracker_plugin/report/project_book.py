"""What ``tracker-plugin calibrate`` prints: a project's finished runs and the law they share.

One table of the finished runs (each one's peak lr, how well its own early log forecast it
at 10, 25 and 50% of its tokens, and whether the law counts it or why not), then one line:
the law they share, what chose it, or why they share none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tracker_plugin.core.project_law import ProjectLaw, RunEvidence
from tracker_plugin.core.project_law.own_log import OWN_CUTS
from tracker_plugin.report.tables import MISSING, text_table

__all__ = ["project_json", "project_table"]


def project_table(origin: str, read: int, evidences: Sequence[RunEvidence], law: ProjectLaw,
                  names: Mapping[str, str] | None = None) -> str:
    """The table and the law's line, as text; ``names`` are what people call the runs (by ref)."""
    names = names or {}
    why = dict(law.left_out)
    taken = {e.run for e in evidences}
    rows = [
        (names.get(e.run, e.run), _g(e.peak_lr), *(_g(_own(e, cut)) for cut in OWN_CUTS),
         "counted" if e.run in law.siblings else why.get(e.run, "not counted"))
        for e in evidences
    ]
    rows += [(names.get(run, run), MISSING, *(MISSING for _ in OWN_CUTS), text)
             for run, text in law.left_out if run not in taken]
    header = ("run", "peak lr", *(f"own |ln|@{cut:.0%}" for cut in OWN_CUTS), "in the law")
    lines = [f"{origin}: {len(rows)} finished run(s); {_read_words(read, len(rows))}", "",
             *text_table(header, rows, align=("<", ">", ">", ">", ">")), "", law.describe()]
    return "\n".join(lines)


def project_json(origin: str, read: int, evidences: Sequence[RunEvidence], law: ProjectLaw,
                 names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The same, as one JSON object."""
    names = names or {}
    return {
        "origin": origin,
        "read": read,
        "runs": [{"run": names.get(e.run, e.run), "ref": e.run, "peak_lr": e.peak_lr,
                  "own_errors": {f"{cut:g}": _own(e, cut) for cut in OWN_CUTS}} for e in evidences],
        "shared": law.shared,
        "law": None if law.pooled is None else law.pooled.law,
        "siblings": list(law.siblings),
        "left_out": [{"run": run, "why": why} for run, why in law.left_out],
        "reason": law.reason,
        "said": law.describe(),
    }


def _own(evidence: RunEvidence, cut: float) -> float | None:
    """The run alone's mean |ln| at ``cut`` (None: it was not scored there)."""
    errors = [abs(err) for c, _, err in evidence.own if c == cut]
    return float(np.mean(errors)) if errors else None


def _g(value: float | None) -> str:
    return MISSING if value is None or not math.isfinite(value) else f"{value:.3g}"


def _read_words(read: int, total: int) -> str:
    if read == 0:
        return "each one's evidence as its annotation stores it"
    return f"{read} read now, the others' evidence as their annotations store it" if read < total else f"{read} read now"
