"""Several runs side by side on the token axis: which reaches each target first, and by how much.

Pure: analyses in, rows out; :mod:`tracker_plugin.report.compare` renders the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.core.status import Status

__all__ = ["Compared", "ComparisonRow", "compare"]


@dataclass(frozen=True)
class ComparisonRow:
    """One run's answer for one target."""

    target: float
    run: str
    ref: str
    batch_first: float | None  # tokens per step in the first and last batch stage
    batch_last: float | None
    dynamic: bool
    status: Status
    tokens: float | None
    step: float | None
    tokens_low: float | None
    tokens_high: float | None
    vs_best: float | None  # tokens / the best run's tokens for this target
    note: str | None


@dataclass(frozen=True)
class Compared:
    """A run to compare: its name, its run string, and its analysis or why it has none."""

    name: str
    ref: str
    analysis: Analysis | None
    error: str | None = None


def compare(runs: Sequence[Compared], targets: Sequence[float]) -> list[ComparisonRow]:
    """Rows grouped by target, each group sorted by tokens to target (runs without one last)."""
    rows = []
    for target in targets:
        group = [_row(run, target) for run in runs]
        best = min((r.tokens for r in group if r.tokens is not None), default=None)
        group = [_with_ratio(r, best) for r in group]
        group.sort(key=lambda r: (r.tokens is None, r.tokens if r.tokens is not None else 0.0, r.run))
        rows += group
    return rows


def _row(run: Compared, target: float) -> ComparisonRow:
    if run.analysis is None:
        return ComparisonRow(target, run.name, run.ref, None, None, False, Status.FAILED, None, None, None, None, None, run.error)
    result = next(t for t in run.analysis.targets if t.target == target)
    low, high = result.tokens_interval or (None, None)
    return ComparisonRow(
        target=target,
        run=run.name,
        ref=run.ref,
        batch_first=run.analysis.stages[0].batch,
        batch_last=run.analysis.stages[-1].batch,
        dynamic=run.analysis.dynamic_batch,
        status=result.status,
        tokens=result.tokens,
        step=result.step,
        tokens_low=low,
        tokens_high=high,
        vs_best=None,
        note=result.note,
    )


def _with_ratio(row: ComparisonRow, best: float | None) -> ComparisonRow:
    if row.tokens is None or not best:
        return row
    return ComparisonRow(**{**asdict(row), "vs_best": row.tokens / best})
