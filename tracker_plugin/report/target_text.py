"""The one line per target a tracker's runs table shows beside the sortable numbers.

It starts with the status word (the vocabulary of :mod:`tracker_plugin.core.status`, so a
filter such as MLflow's ``tags.when_3p3 LIKE 'reached%'`` finds the runs), then the
answer a person reads at a glance, in the tables' own formats::

    reached · 10.2B tok · step 7,763 · at 2.1 h
    forecast · 24.1B tok (80%: 21.0B–27.9B) · step 18,390 · in 5.2 h, 2026-12-04 02:10 UTC
    forecast · 24.1B tok (80%: 22.0B–26.1B) · step 18,390 · calibrated on 7 runs
    forecast_beyond_plan · 250.0B tok (80%: 190.0B–∞) · step 190,000 · past the plan
    not_reached · best 3.412 · the run ended at 37.2B tok, step 9,536 · P(within plan) 0.03
    unreachable · levels off near 3.52
    not_enough_data · 12 rows after the fit start; need 20

The glyphs are Unicode whatever the terminal: the text is for the trackers' web UIs.
"""

from __future__ import annotations

import math

from tracker_plugin.core.analysis import Analysis, TargetResult
from tracker_plugin.core.status import Status
from tracker_plugin.report.render import format_steps, format_tokens
from tracker_plugin.report.tables import UNICODE, interval, using_glyphs
from tracker_plugin.report.timing import duration, eta_text, target_p_by_deadline, target_seconds

__all__ = ["target_text"]

_SEP = " · "


def target_text(analysis: Analysis, k: int) -> str:
    """The runs-table text of ``analysis``'s ``k``-th target."""
    result = analysis.targets[k]
    with using_glyphs(UNICODE):
        if result.status.located:
            parts = _located(analysis, k, result)
        elif result.status in (Status.NOT_REACHED, Status.UNLIKELY):
            parts = _not_reached(analysis, result)
        else:
            parts = [result.note] if result.note else []
    return _SEP.join([str(result.status), *parts])


def _located(analysis: Analysis, k: int, result: TargetResult) -> list[str]:
    level = f"{analysis.config.interval:.0%}"
    parts = []
    if not analysis.on_steps and result.tokens is not None:
        spread = "" if result.tokens_interval is None else f" ({level}: {interval(result.tokens_interval, format_tokens)})"
        parts.append(f"{format_tokens(result.tokens)} tok{spread}")
    if result.step is not None and math.isfinite(result.step):
        spread = ""
        if analysis.on_steps and result.step_interval is not None:
            spread = f" ({level}: {interval(result.step_interval, format_steps)})"
        parts.append(f"step {format_steps(result.step)}{spread}")
    seconds, left, eta = target_seconds(analysis, k)
    if result.status == Status.REACHED:
        if seconds is not None:
            parts.append(f"at {duration(seconds)}")
    elif left is not None:
        parts.append(f"in {duration(left)}" + (f", {eta_text(eta)}" if eta is not None else ""))
    if result.status == Status.FORECAST_BEYOND_PLAN:
        parts.append("past the plan")
    chance = target_p_by_deadline(analysis, k)
    if chance is not None and result.status != Status.REACHED:
        parts.append(f"P(by deadline) {chance:.2f}")
    calibration = analysis.config.calibration
    if calibration.active and result.status != Status.REACHED and analysis.config.model != "power-law":
        parts.append(f"calibrated on {len(calibration.runs)} run{'s' if len(calibration.runs) != 1 else ''}")
    return parts


def _not_reached(analysis: Analysis, result: TargetResult) -> list[str]:
    parts = [] if result.best_loss is None else [f"best {result.best_loss:.4g}"]
    if result.end_step is not None:
        ends = "the run ended" if result.run_finished else "the plan ends"
        tokens = "" if analysis.on_steps or result.end_tokens is None else f"{format_tokens(result.end_tokens)} tok, "
        parts.append(f"{ends} at {tokens}step {format_steps(result.end_step)}")
    if result.p_reach_within_plan is not None:
        parts.append(f"P(within plan) {result.p_reach_within_plan:.2f}")
    return parts
