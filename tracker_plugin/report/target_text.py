"""The one line per target a tracker's runs table shows beside the sortable numbers.

A runs table shows about 10 characters of a text column at its default width (MLflow's
100 px column leaves 76 px for the text; W&B's are as narrow), so the answer comes
first: a mark that says where the target stands, then the one number that answers it,
then the status word, then the detail a person reads on the run's page::

    ✓ 10.18B tok · reached · step 7,769 · at 2.1 h
    ≈ 24.10B tok · forecast · 80%: 21.00B–27.90B · step 18,390 · in 5.2 h, 2026-12-04 02:10 UTC
    ≈ 24.10B tok · forecast · 80%: 22.00B–26.10B · step 18,390 · by the project's law (7 runs)
    → 250.00B tok · forecast_beyond_plan · 80%: 190.00B–∞ · step 190,000 · past the plan
    ✗ 3.497 best · not_reached · the run ended at 7.62B tok, step 14,533
    ✗ 3.507 best · not_reached · the plan ends at 5.00B tok, step 9,536 · P(within plan) 0.25
    ✗ 3.52 floor · unreachable · the smoothed loss levels off near 3.520, above the target
    – no forecast · not_enough_data · 12 rows after the fit start; need 20
    ✓ 7,769 steps · reached (a run with no tokens)

The lead is ``<mark> <number> <what it is>``: the tokens (or steps, on a run with no
tokens) where the target is reached or forecast, else the best smoothed loss; the
number comes whole within the first 10 characters, its word may be cut. The status word is always
the second part, the vocabulary of :mod:`tracker_plugin.core.status`, so a filter finds
the runs: MLflow's ``tags.when_3p3 LIKE '%· reached ·%'`` (or ``LIKE '✓%'``). A status
with no mark of its own here gets ``•`` and its probability or best loss as the number
(:data:`MARKS`); what more it has to say (a predicted loss at the plan's end, say) is
detail after the status word.

The glyphs are Unicode whatever the terminal: the text is for the trackers' web UIs.
"""

from __future__ import annotations

import math

from tracker_plugin.core.analysis import Analysis, TargetResult
from tracker_plugin.core.status import Status
from tracker_plugin.report.render import format_steps, format_tokens
from tracker_plugin.report.tables import UNICODE, interval, using_glyphs
from tracker_plugin.report.timing import duration, eta_text, target_p_by_deadline, target_seconds

__all__ = ["MARKS", "SEP", "target_status", "target_text"]

SEP = " · "
# The first character of each status's text: what a glance at a narrow column tells.
MARKS = {
    Status.REACHED: "✓",
    Status.FORECAST: "≈",
    Status.FORECAST_BEYOND_PLAN: "→",
    Status.NOT_REACHED: "✗",
    Status.UNREACHABLE: "✗",
    Status.UNLIKELY: "?",
    Status.NOT_ENOUGH_DATA: "–",
}
_OTHER = "•"  # a status this table does not know yet


def target_text(analysis: Analysis, k: int) -> str:
    """The runs-table text of ``analysis``'s ``k``-th target."""
    result = analysis.targets[k]
    with using_glyphs(UNICODE):
        if result.status.located:
            lead, detail = _located(analysis, k, result)
        else:
            lead, detail = _unlocated(analysis, result)
    return SEP.join([f"{MARKS.get(result.status, _OTHER)} {lead}", str(result.status), *detail])


def target_status(text: str) -> Status | None:
    """The status a runs-table text says (None: ``stale``, or not a text of ours)."""
    parts = text.split(SEP)
    return Status.read(parts[1]) if len(parts) > 1 else Status.read(text)


def _located(analysis: Analysis, k: int, result: TargetResult) -> tuple[str, list[str]]:
    level = f"{analysis.config.interval:.0%}"
    parts = []
    if not analysis.on_steps and result.tokens is not None:
        lead = f"{format_tokens(result.tokens)} tok"
        if result.tokens_interval is not None:
            parts.append(f"{level}: {interval(result.tokens_interval, format_tokens)}")
        if result.step is not None and math.isfinite(result.step):
            parts.append(f"step {format_steps(result.step)}")
    else:
        lead = f"{format_steps(result.step)} steps" if result.step is not None and math.isfinite(result.step) else "-"
        if result.step_interval is not None:
            parts.append(f"{level}: {interval(result.step_interval, format_steps)}")
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
    project, law = analysis.project, analysis.config.project_law
    if project is not None and law is not None and result.status != Status.REACHED and project.targets[k].own_share < 1.0:
        parts.append(f"by the project's law ({len(law.siblings)} run{'s' if len(law.siblings) != 1 else ''})")
    return lead, parts


def _unlocated(analysis: Analysis, result: TargetResult) -> tuple[str, list[str]]:
    """A target with no place on the axis: the best smoothed loss leads; an unreachable
    one's, the loss its law levels off at; a status this table does not know, its chance
    within the plan."""
    floor = getattr(result.fit, "asymptote", None) if result.status == Status.UNREACHABLE else None
    if result.status == Status.UNLIKELY and result.p_reach_within_plan is not None:
        lead = f"P {result.p_reach_within_plan:.2f} in plan"
    elif result.best_loss is not None:
        lead = f"{result.best_loss:.4g} best"
    elif floor is not None and math.isfinite(floor) and floor >= result.target:
        lead = f"{floor:.4g} floor"
    elif result.status not in MARKS and result.p_reach_within_plan is not None:
        lead = f"P {result.p_reach_within_plan:.2f}"
    else:
        lead = "no crossing" if result.status == Status.UNREACHABLE else "no forecast"
    parts = []
    if result.status in (Status.NOT_REACHED, Status.UNLIKELY) and result.end_step is not None:
        ends = "the run ended" if result.run_finished else "the plan ends"
        tokens = "" if analysis.on_steps or result.end_tokens is None else f"{format_tokens(result.end_tokens)} tok, "
        parts.append(f"{ends} at {tokens}step {format_steps(result.end_step)}")
        if result.status == Status.UNLIKELY and result.best_loss is not None:
            parts.insert(0, f"best {result.best_loss:.4g}")
        elif not result.run_finished and result.p_reach_within_plan is not None:
            parts.append(f"P(within plan) {result.p_reach_within_plan:.2f}")
    elif result.note:
        parts.append(result.note)
    return lead, parts

