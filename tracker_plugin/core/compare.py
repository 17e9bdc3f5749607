"""Several runs side by side on the token axis: which reaches each target first, and by how much.

Pure: analyses in, rows out; :mod:`tracker_plugin.report.compare` renders the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.core.status import Status

__all__ = ["RUN_FAILED", "SORT_KEYS", "Compared", "ComparisonRow", "compare"]


@dataclass(frozen=True)
class ComparisonRow:
    """One run's answer for one target."""

    target: float
    run: str
    ref: str
    batch_first: float | None  # tokens per step in the first and last batch stage
    batch_last: float | None
    dynamic: bool
    # A target's status, or RUN_FAILED for a run with no analysis (could not be read; the
    # note says why), as the jobs' summary table says of such a run.
    status: Status | str
    tokens: float | None
    step: float | None
    tokens_low: float | None
    tokens_high: float | None
    vs_best: float | None  # tokens / the best run's tokens for this target
    note: str | None
    hours_left: float | None = None  # wall-clock hours from the run's last row (0 when reached)
    eta_unix: float | None = None  # when, in Unix time, where the run's clock is Unix time


@dataclass(frozen=True)
class Compared:
    """A run to compare: its name, its run string, and its analysis or why it has none."""

    name: str
    ref: str
    analysis: Analysis | None
    error: str | None = None


SORT_KEYS = ("tokens", "hours")
RUN_FAILED = "failed"  # the jobs' word for a run that could not be read or analysed


def compare(runs: Sequence[Compared], targets: Sequence[float], sort: str = "tokens") -> list[ComparisonRow]:
    """Rows grouped by target, each group sorted by tokens to target, or with ``sort="hours"``
    by wall-clock hours left (runs without one last)."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {SORT_KEYS}, got {sort!r}")
    rows = []
    for target in targets:
        group = [_row(run, target) for run in runs]
        best = min((r.tokens for r in group if r.tokens is not None), default=None)
        group = [_with_ratio(r, best) for r in group]
        group.sort(key=lambda r: _order(r, sort))
        rows += group
    return rows


def _order(row: ComparisonRow, sort: str) -> tuple[bool, float, str]:
    value = row.tokens if sort == "tokens" else row.hours_left
    return (value is None, value if value is not None else 0.0, row.run)


def _row(run: Compared, target: float) -> ComparisonRow:
    if run.analysis is None:
        return ComparisonRow(target, run.name, run.ref, None, None, False, RUN_FAILED, None, None, None, None, None, run.error)
    k, result = next((k, t) for k, t in enumerate(run.analysis.targets) if t.target == target)
    tokens = run.analysis.in_tokens  # a run on steps has no tokens to compare: None, sorted last
    low, high = result.tokens_interval or (None, None)
    timing = run.analysis.timing
    when = None if timing is None else timing.targets[k]
    left = None if when is None or when.seconds_left is None else when.seconds_left / 3600.0
    return ComparisonRow(
        target=target,
        run=run.name,
        ref=run.ref,
        batch_first=tokens(run.analysis.stages[0].batch),
        batch_last=tokens(run.analysis.stages[-1].batch),
        dynamic=run.analysis.dynamic_batch,
        status=result.status,
        tokens=tokens(result.tokens),
        step=result.step,
        tokens_low=tokens(low),
        tokens_high=tokens(high),
        vs_best=None,
        note=result.note,
        hours_left=left,
        eta_unix=None if when is None else when.eta_unix,
    )


def _with_ratio(row: ComparisonRow, best: float | None) -> ComparisonRow:
    if row.tokens is None or not best:
        return row
    return ComparisonRow(**{**asdict(row), "vs_best": row.tokens / best})
