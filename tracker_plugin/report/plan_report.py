"""A run not started, as text for people and as the analyze JSON document; several plans
of one budget compared in one table.

The JSON document is the analyze document (see docs/json.md) of a run with no row yet:
``observed`` is null, each target's status is ``forecast`` or ``unlikely``, ``plan_end``
carries the smoothed loss forecast at the plan's end, ``project_law`` the siblings' law.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tracker_plugin.core.planned import PlannedRun, PlannedTarget
from tracker_plugin.core.status import Status
from tracker_plugin.report.law_json import project_doc
from tracker_plugin.report.render import format_steps, format_tokens, status_head
from tracker_plugin.report.tables import Align, interval, printable, text_table
from tracker_plugin.report.timing import duration

__all__ = ["compare_json", "compare_text", "plan_json", "plan_text"]

_RULE = "-" * 100


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _pair(pair: tuple[float, float] | None) -> list[float | None] | None:
    return None if pair is None else [_num(pair[0]), _num(pair[1])]


# ---- JSON ------------------------------------------------------------------------------


def plan_json(plan: PlannedRun) -> dict[str, Any]:
    """The analyze JSON document of a run not started (``observed`` null)."""
    tokens: Callable[[float | None], float | None] = (lambda v: None) if plan.on_steps else _num
    end = plan.plan_end
    return {
        "run": plan.run,
        "targets": [_target_json(t, plan, tokens) for t in plan.targets],
        "plan_end": {"step": _num(end.step), "tokens": tokens(end.tokens), "loss": _num(end.loss),
                     "loss_interval": _pair(end.loss_interval), "source": end.source,
                     "seconds": _num(plan.plan_end_seconds)},
        "loss_key": None,
        "ema_token_window": tokens(plan.ema_window),
        "fit_start_step": int(round(plan.forecast.steps[0])) if len(plan.forecast.steps) else None,
        "axis": "steps" if plan.on_steps else "tokens",
        "ema_steps": plan.ema_window if plan.on_steps else None,
        "observed": None,
        "batch": _batch_json(plan, tokens),
        "fit_start_reason": "the end of the planned lr warmup",
        "notes": [plan.project.describe()],  # as analyze notes the project's law it joined
        "model_selection": None,
        "lr_plan": {"source": plan.schedule.source, "description": plan.schedule.description,
                    "total_steps": _num(plan.schedule.total_steps), "params": None, "note": None},
        "clock": "steps" if plan.on_steps else "tokens",
        "interval_level": plan.interval,
        "read_as": None,
        "throughput": None if plan.seconds_per_token is None else {
            "seconds_per_token": plan.seconds_per_token, "source": "the siblings' median pace over their logged clocks"},
        "deadline": None,
        "calibration": None,
        "project_law": project_doc(plan.project, plan.forecast),
    }


def _target_json(t: PlannedTarget, plan: PlannedRun, tokens: Callable[[float | None], float | None]) -> dict[str, Any]:
    end = plan.plan_end
    unlikely = t.status == Status.UNLIKELY
    return {
        "target": t.target, "status": str(t.status), "tokens": tokens(t.tokens), "step": _num(t.step),
        "tokens_interval": None if plan.on_steps else _pair(t.tokens_interval), "step_interval": _pair(t.step_interval),
        "model": None, "extrapolation_factor": None, "note": t.note, "beyond_warn_factor": False,
        "p_reach_within_plan": _num(t.p_reach_within_plan), "best_smoothed_loss": None, "best_step": None,
        "end_step": _num(end.step) if unlikely else None, "end_tokens": tokens(end.tokens) if unlikely else None,
        "run_finished": None, "seconds": _num(t.seconds), "seconds_interval": _pair(t.seconds_interval),
        "seconds_left": _num(t.seconds), "eta": None,
    }


def _batch_json(plan: PlannedRun, tokens: Callable[[float | None], float | None]) -> dict[str, Any]:
    stages = plan.batch_schedule.stages if plan.batch_schedule is not None else ((0.0, plan.batch),)
    return {"dynamic": len(stages) > 1, "source": "the plan",
            "stages": [{"first_step": None, "last_step": None, "first_tokens": tokens(start), "last_tokens": None,
                        "batch": tokens(batch)} for start, batch in stages]}


def compare_json(plans: Sequence[PlannedRun]) -> dict[str, Any]:
    """Several plans: each one's document, the first to reach each target, the lowest end."""
    return {
        "plans": [plan_json(p) for p in plans],
        "first": [{"target": target, "plan": None if first is None else first.run} for target, first in _firsts(plans)],
        "lowest_end": _lowest(plans).run,
    }


# ---- text ------------------------------------------------------------------------------


def plan_text(plan: PlannedRun, wording: Callable[[str], str] = lambda s: s) -> str:
    """The human report of a run not started: the plan, the siblings' law, each target and
    the plan's end."""
    lines = [f"planned run: {printable(plan.run)}", _header(plan), f"siblings: {wording(plan.project.describe())}"]
    if plan.seconds_per_token is not None:
        lines.append(f"hours: at the siblings' median pace, {plan.seconds_per_token * 1e6:.4g} s per million "
                     f"{'steps' if plan.on_steps else 'tokens'}")
    lines.append(_RULE)
    for t in plan.targets:
        lines.append(_target_line(plan, t))
        if t.seconds is not None:
            spread = "" if t.seconds_interval is None else f" ({plan.interval:.0%} interval {interval(t.seconds_interval, duration)})"
            lines.append(f"{'':<15}hours from the start: {duration(t.seconds)}{spread}")
    lines.append(_end_line(plan))
    return "\n".join(lines)


def _header(plan: PlannedRun) -> str:
    if plan.on_steps:
        return f"lr plan: {plan.schedule.description} | no tokens: on steps | ema window: {plan.ema_window:,.0f} steps"
    batch = (f"batch: {plan.batch_schedule}" if plan.batch_schedule is not None and len(plan.batch_schedule.stages) > 1
             else f"batch size: {plan.batch:,.0f} tokens/step")
    return f"lr plan: {plan.schedule.description} | {batch} | ema token window: {plan.ema_window:,.0f}"


def _target_line(plan: PlannedRun, t: PlannedTarget) -> str:
    head = f"target={t.target:<8g} {status_head(t.status)}"
    chance = "unknown" if t.p_reach_within_plan is None else f"{t.p_reach_within_plan:.2f}"
    if t.tokens is None or t.step is None:
        return f"{head}: P(reached within plan)={chance}; {t.note}"
    where = f"step={t.step:,.0f}" + ("" if plan.on_steps else f" tokens={t.tokens:,.0f}")
    spread = ""
    if t.tokens_interval is not None:
        spread = f" {plan.interval:.0%} interval:" + ("" if plan.on_steps else f" tokens={interval(t.tokens_interval, format_tokens)}")
        if t.step_interval is not None:
            spread += f" steps={interval(t.step_interval, format_steps)}"
    note = f"; {t.note}" if t.note else ""
    return f"{head}: {where}{spread} P(reached within plan)={chance}{note}"


def _end_line(plan: PlannedRun) -> str:
    end = plan.plan_end
    at = f"step={end.step:,.0f}" + ("" if plan.on_steps else f" tokens={end.tokens:,.0f}")
    spread = "" if end.loss_interval is None else f" ({plan.interval:.0%} interval {interval(end.loss_interval, _loss)})"
    hours = "" if plan.plan_end_seconds is None else f"; {duration(plan.plan_end_seconds)} from the start"
    return f"plan end: {at} predicted smoothed loss={end.loss:.4f}{spread}{hours}"


def _loss(value: float) -> str:
    return f"{value:.4f}"


def compare_text(plans: Sequence[PlannedRun], wording: Callable[[str], str] = lambda s: s) -> str:
    """Several plans of one budget in one table: per target each plan's steps, tokens,
    interval and chance (the first to reach it marked), then each plan's end loss (the
    lowest marked)."""
    on_steps = plans[0].on_steps
    lines = [f"siblings: {wording(plans[0].project.describe())}"]
    totals = {p.plan_end.step for p in plans}
    if len(totals) > 1:
        lines.append("note: the plans end at different steps (" + ", ".join(f"{t:,.0f}" for t in sorted(totals)) +
                     "): they are not one budget")
    hours = any(p.seconds_per_token is not None for p in plans)  # a column only where a sibling logged a clock
    header = ["target", "plan", "status", "step", *([] if on_steps else ["tokens"]),
              f"{plans[0].interval:.0%} interval", "P(within plan)", *(["hours"] if hours else []), ""]
    rows = []
    for target, first in _firsts(plans):
        for p in sorted(plans, key=lambda p: _tokens_key(p, target)):
            t = next(x for x in p.targets if x.target == target)
            spread = interval(t.step_interval if on_steps else t.tokens_interval, format_steps if on_steps else format_tokens)
            rows.append([f"{target:g}", printable(p.run), str(t.status), "-" if t.step is None else format_steps(t.step),
                         *([] if on_steps else [format_tokens(t.tokens)]), spread,
                         "-" if t.p_reach_within_plan is None else f"{t.p_reach_within_plan:.2f}",
                         *([duration(t.seconds) if t.seconds is not None else "-"] if hours else []),
                         "first" if p is first else ""])
    numbers: list[Align] = [">"] * (2 + (not on_steps) + hours + 1)  # step, tokens, interval, chance, hours
    lines += text_table(header, rows, align=["<", "<", "<", *numbers, "<"])
    lines.append("")
    lowest = _lowest(plans)
    end_rows = [[printable(p.run), format_steps(p.plan_end.step), f"{p.plan_end.loss:.4f}",
                 interval(p.plan_end.loss_interval, _loss), "lowest" if p is lowest else ""]
                for p in sorted(plans, key=lambda p: p.plan_end.loss)]
    lines += text_table(["plan", "end step", "end loss", f"{plans[0].interval:.0%} interval", ""], end_rows,
                        align=("<", ">", ">", ">", "<"))
    return "\n".join(lines)


def _tokens_key(plan: PlannedRun, target: float) -> float:
    t = next(x for x in plan.targets if x.target == target)
    return math.inf if t.tokens is None else t.tokens


def _firsts(plans: Sequence[PlannedRun]) -> list[tuple[float, PlannedRun | None]]:
    """Per target, the plan whose forecast reaches it in the fewest tokens within its plan
    (None: none does)."""
    out = []
    for target in [t.target for t in plans[0].targets]:
        within = [p for p in plans if next(x for x in p.targets if x.target == target).status == Status.FORECAST]
        out.append((target, min(within, key=lambda p: _tokens_key(p, target)) if within else None))
    return out


def _lowest(plans: Sequence[PlannedRun]) -> PlannedRun:
    return min(plans, key=lambda p: p.plan_end.loss)
