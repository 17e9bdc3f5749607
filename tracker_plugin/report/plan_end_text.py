"""The smoothed loss at the plan's end as a runs table and a console show it."""

from __future__ import annotations

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.core.project_law import PlanEnd
from tracker_plugin.report.tables import interval

__all__ = ["plan_end_line", "plan_end_text"]


def _loss(value: float) -> str:
    return f"{value:#.4g}"  # 3.300, not 3.3: the ends of an interval read alike


def plan_end_text(analysis: Analysis) -> str | None:
    """``3.289 · 80%: 3.277–3.300 · step 24,000 · project law`` (None: no planned end):
    the loss first, so the column reads at a glance."""
    end = analysis.plan_end
    if end is None:
        return None
    spread = "" if end.loss_interval is None else f" · {analysis.config.interval:.0%}: {interval(end.loss_interval, _loss)}"
    return f"{_loss(end.loss)}{spread} · step {end.step:,.0f} · {end.source}"


def plan_end_line(end: PlanEnd, level: float) -> str:
    """The live console's line: ``end 3.289 (80%: 3.277–3.300) at step 24,000``."""
    spread = "" if end.loss_interval is None else f" ({level:.0%}: {interval(end.loss_interval, _loss)})"
    return f"end {_loss(end.loss)}{spread} at step {end.step:,.0f}"
