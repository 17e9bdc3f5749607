"""The wall-clock side of a report: throughput, hours to each target, ETA and deadline.

Text for people ("3.3 at about 2026-12-02 14:20 UTC, in 18.5 h (80%: 16.9–21.0 h)") and
the JSON fields of the contract (per target ``seconds``, ``seconds_interval``,
``seconds_left``, ``eta``, ``p_by_deadline``; a ``throughput`` object).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from tracker_plugin.core.analysis import Analysis, TargetResult
from tracker_plugin.core.throughput import TargetTime, Throughput
from tracker_plugin.report.tables import MISSING, glyphs, interval

__all__ = [
    "deadline_json",
    "duration",
    "eta_text",
    "iso_utc",
    "target_time_json",
    "target_p_by_deadline",
    "target_seconds",
    "target_time_text",
    "throughput_json",
    "throughput_line",
]


def _time_of(analysis: Analysis, k: int) -> TargetTime | None:
    timing = analysis.timing
    return None if timing is None or k >= len(timing.targets) else timing.targets[k]


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def iso_utc(unix: float | None) -> str | None:
    """Unix seconds as ISO 8601 UTC (``2026-12-02T14:20:00Z``); None past what a date holds."""
    when = _utc(unix)
    return None if when is None else when.strftime("%Y-%m-%dT%H:%M:%SZ")


def eta_text(unix: float | None) -> str:
    """Unix seconds at a glance: ``2026-12-02 14:20 UTC`` (``after 9999`` past the calendar)."""
    when = _utc(unix)
    if when is None:
        return "after 9999" if unix is not None and unix > 0 else MISSING
    return when.strftime("%Y-%m-%d %H:%M UTC")


def _utc(unix: float | None) -> datetime | None:
    """The date of Unix seconds, or None when there is none a calendar holds (year 1-9999)."""
    if unix is None or not math.isfinite(unix):
        return None
    try:
        return datetime.fromtimestamp(unix, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def duration(seconds: float | None) -> str:
    """``66600 -> '18.5 h'``, ``1500 -> '25 min'``, inf -> ``'∞'`` (see :func:`~tracker_plugin.report.tables.glyphs`)."""
    if seconds is None:
        return MISSING
    if not math.isfinite(seconds):
        return glyphs().infinity
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"


def _hours_pair(low: float, high: float) -> str:
    """``16.9–21.0 h``, ``14–25 min``, ``1.2–∞ h``: both ends in one unit, the larger's."""
    if high < 3600:
        return interval((low / 60, high / 60), lambda v: f"{v:.0f}") + " min"
    return interval((low / 3600, high / 3600), lambda v: f"{v:,.1f}") + " h"


def target_seconds(analysis: Analysis, k: int) -> tuple[float | None, float | None, float | None]:
    """The ``k``-th target's clock: seconds on the run's clock at the crossing, seconds
    left from the last logged row (0 once reached), and the Unix time of the crossing;
    None where there is none (no clock, or no finite value)."""
    when = _time_of(analysis, k) or TargetTime()
    return _num(when.seconds), _num(when.seconds_left), _num(when.eta_unix)


def target_p_by_deadline(analysis: Analysis, k: int) -> float | None:
    """P(the ``k``-th target is reached by the deadline), when a deadline is given."""
    when = _time_of(analysis, k)
    return None if when is None or analysis.timing is None or analysis.timing.deadline is None else _num(when.p_by_deadline)


def target_time_json(analysis: Analysis, k: int, result: TargetResult) -> dict[str, Any]:
    """The per-target time fields of the JSON contract."""
    when = _time_of(analysis, k) or TargetTime()
    interval = when.seconds_interval
    doc: dict[str, Any] = {
        "seconds": _num(when.seconds),
        "seconds_interval": None if interval is None else [_num(interval[0]), _num(interval[1])],
        "seconds_left": _num(when.seconds_left),
        "eta": iso_utc(when.eta_unix),
    }
    if analysis.timing is not None and analysis.timing.deadline is not None:
        doc["p_by_deadline"] = _num(when.p_by_deadline)
    return doc


def throughput_json(analysis: Analysis) -> dict[str, Any] | None:
    """How the throughput was measured (null when there is none)."""
    timing = analysis.timing
    if timing is None or timing.throughput is None:
        return None
    t = timing.throughput
    return {
        "source": t.source,
        "tokens_per_second": analysis.in_tokens(t.tokens_per_second),
        "seconds_per_step": t.seconds_per_step,
        "spread": t.spread,
        "first_step": t.first_step,
        "last_step": t.last_step,
        "stage_start": t.stage_start,
        "pauses": t.pauses,
        "pause_seconds": t.pause_seconds,
        "pause_rate": t.pause_rate,
        "pauses_included": t.pauses_included,
        "clock_absolute": analysis.history.time_absolute if analysis.history.time is not None else None,
        "start": iso_utc(timing.start_unix),
    }


def deadline_json(analysis: Analysis) -> dict[str, Any] | None:
    timing = analysis.timing
    if timing is None or timing.deadline is None:
        return None
    d = timing.deadline
    return {"given": d.text, "seconds_left": d.seconds_left, "at": iso_utc(d.unix)}


def _rate(t: Throughput) -> str:
    tps = t.tokens_per_second
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if tps >= scale:
            return f"{tps / scale:,.1f}{unit} tokens/s"
    return f"{tps:,.3g} tokens/s"


def throughput_line(analysis: Analysis) -> str:
    """One line: how fast the run goes and how that was found, or that nothing says."""
    timing = analysis.timing
    if timing is None or timing.throughput is None:
        return "no time in the log" if timing is None or timing.note is None else timing.note
    t = timing.throughput
    # On the step axis the "tokens" are steps: the rate is the seconds per step alone.
    rate = f"throughput: {t.seconds_per_step:.4g} s/step" if analysis.on_steps else (
        f"throughput: {_rate(t)} ({t.seconds_per_step:.4g} s/step)"
    )
    if t.source != "clock":
        return f"{rate}, from the {t.source} setting"
    steps = (t.last_step or 0) - (t.first_step or 0)
    line = f"{rate} over the last {steps:,} steps"
    if t.stage_start is not None:
        line += f" (the batch stage from step {t.stage_start:,})"
    line += f"; clock: {analysis.history.time_source}"
    if t.pauses:
        included = "included in the hours" if t.pauses_included else "not included in the hours (count_pauses includes them)"
        line += f"; {t.pauses} pause{'s' if t.pauses > 1 else ''} ({duration(t.pause_seconds)}) {included}"
    return line


def target_time_text(analysis: Analysis, k: int) -> str | None:
    """The time line under a target, or None when there is nothing to say."""
    when = _time_of(analysis, k)
    result = analysis.targets[k]
    if when is None or when.seconds is None:
        return None
    name = f"{result.target:g}"
    if when.seconds_left == 0.0 and when.seconds_interval is None and result.status == "reached":
        at = f" ({eta_text(when.eta_unix)})" if when.eta_unix is not None else ""
        return f"time: {name} reached at {duration(when.seconds)} on the run's clock{at}"
    level = f"{analysis.config.interval:.0%}"
    left = when.seconds_left_interval
    interval = "" if left is None else f" ({level}: {_hours_pair(*left)})"
    if when.eta_unix is not None:
        text = f"time: {name} at about {eta_text(when.eta_unix)}, in {duration(when.seconds_left)}{interval}"
    else:
        text = f"time: {name} in {duration(when.seconds_left)}{interval}, at {duration(when.seconds)} on the run's clock"
    deadline = analysis.timing.deadline if analysis.timing is not None else None
    if deadline is not None and when.p_by_deadline is not None:
        verdict = "yes" if when.p_by_deadline >= 0.5 else "no"
        text += f"; P(by deadline {deadline.text})={when.p_by_deadline:.2f}: {verdict}"
    return text
