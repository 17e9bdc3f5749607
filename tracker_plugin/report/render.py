"""An :class:`Analysis` as text for people and as the JSON document other tools read."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tracker_plugin.core.analysis import Analysis, Sweep, TargetResult
from tracker_plugin.core.models import TOKEN_UNIT, FitStatus, Model
from tracker_plugin.core.status import Status, Verdict
from tracker_plugin.report.law_json import plan_end_json, project_law_json
from tracker_plugin.report.tables import MISSING, interval, printable
from tracker_plugin.report.timing import (
    deadline_json,
    target_time_json,
    target_time_text,
    throughput_json,
    throughput_line,
)

__all__ = ["Wording", "as_written", "format_steps", "format_tokens", "not_reached_text", "status_head", "to_json", "to_text",
           "unlikely_text"]

# Rewords a message for its reader: see ``tracker_plugin.cli.words``.
Wording = Callable[[str], str]

_RULE = "-" * 100


def to_json(analysis: Analysis) -> dict[str, Any]:
    """The JSON document of the contract (see README, "JSON output"); extra keys may follow."""
    config = analysis.config
    tokens = analysis.in_tokens  # every field that says tokens is null on the step axis
    # The answer first (where each target stands), then how it was reached.
    return {
        "run": analysis.run,
        "targets": [
            {**_target_json(t, analysis.on_steps), **target_time_json(analysis, k, t)} for k, t in enumerate(analysis.targets)
        ],
        "plan_end": plan_end_json(analysis),
        "loss_key": analysis.loss_key,
        "ema_token_window": tokens(config.ema_token_window),
        "fit_start_step": analysis.fit_start_step,
        # "steps" when no tokens were to be had: tokens fields are null, the EMA window in ema_steps.
        "axis": "steps" if analysis.on_steps else "tokens",
        "ema_steps": config.ema_token_window if analysis.on_steps else None,
        "observed": {
            "step": float(analysis.observed_step),
            "tokens": tokens(analysis.observed_tokens),
            "seconds": _num(None if analysis.timing is None else analysis.timing.observed_seconds),
        },
        "batch": {
            "dynamic": analysis.dynamic_batch,
            "source": analysis.batch_source,
            "stages": [
                {
                    "first_step": s.first_step,
                    "last_step": s.last_step,
                    "first_tokens": tokens(s.first_tokens),
                    "last_tokens": tokens(s.last_tokens),
                    "batch": tokens(s.batch),
                }
                for s in analysis.stages
            ],
        },
        "fit_start_reason": analysis.fit_start_reason,
        "notes": list(analysis.notes),
        "model_selection": _selection_json(analysis),
        "lr_plan": _plan_json(analysis),
        "clock": None if config.model == "power-law" else _clock(analysis),
        "interval_level": None if config.model == "power-law" else config.interval,
        # How each column was found (the trainer's conventions), and the clock.
        "read_as": {**dict(analysis.history.read_as), "time": analysis.history.time_source},
        "throughput": throughput_json(analysis),
        "deadline": deadline_json(analysis),
        "calibration": _calibration_json(analysis),
        "project_law": project_law_json(analysis),
    }


def _calibration_json(analysis: Analysis) -> dict[str, Any] | None:
    """What the finished sibling runs set, and from what (None: not calibrated)."""
    cal = analysis.config.calibration
    if not cal.asked or analysis.config.model == "power-law":
        return None
    return {
        "runs": list(cal.runs),
        "count": len(cal.runs),
        "cases": cal.cases,
        "cut": cal.cut,
        "left_out": [{"run": run, "why": why} for run, why in cal.left_out],
        "bias": {"value": cal.bias, "siblings": _num(cal.raw_bias), "prior": 0.0, "weight": _num(cal.bias_weight),
                 "spread": cal.spread},
        "width": {"value": cal.width, "siblings": _num(cal.raw_width), "prior": 1.0, "weight": _num(cal.width_weight)},
    }


def _selection_json(analysis: Analysis) -> dict[str, Any] | None:
    selection = analysis.selection
    if selection is None:
        return None
    return {
        "requested": analysis.config.model,
        "chosen": selection.chosen,
        "method": selection.method,
        "inner_errors": {name: _num(score) for name, score in selection.scores},
        "error_scale": _num(selection.error_scale),
    }


def _plan_json(analysis: Analysis) -> dict[str, Any] | None:
    plan = analysis.plan
    if plan is None:
        return None
    schedule = plan.schedule
    return {
        "source": None if schedule is None else schedule.source,
        "description": None if schedule is None else schedule.description,
        "total_steps": None if schedule is None else _num(schedule.total_steps),
        # The run params the plan was read from (name: value as configured).
        "params": None if schedule is None or not schedule.params else dict(schedule.params),
        "note": plan.note,
    }


def _target_json(result: TargetResult, on_steps: bool) -> dict[str, Any]:
    """One target's fields; on the step axis its token fields are null (they would count steps)."""
    doc: dict[str, Any] = {
        "target": result.target,
        "status": str(result.status),
        "tokens": None if on_steps else _num(result.tokens),
        "step": _num(result.step),
        "tokens_interval": None if on_steps else _pair(result.tokens_interval),
        "step_interval": _pair(result.step_interval),
        "model": None if result.fit is None else _model_json(result.fit),
        "extrapolation_factor": _num(result.extrapolation_factor),
        "note": result.note,
        "beyond_warn_factor": result.beyond_warn_factor,
        "p_reach_within_plan": _num(result.p_reach_within_plan),
        # not_reached: the best smoothed loss, and where the run ended (or its plan ends).
        "best_smoothed_loss": _num(result.best_loss),
        "best_step": _num(result.best_step),
        "end_step": _num(result.end_step),
        "end_tokens": None if on_steps else _num(result.end_tokens),
        "run_finished": result.run_finished if result.status == Status.NOT_REACHED else None,
    }
    if result.sweep is not None:
        doc["sweep"] = _sweep_json(result.sweep, on_steps)
    return doc


def _model_json(fit: Model) -> dict[str, Any]:
    return {"name": fit.name, "params": dict(fit.params), "fit_status": _status_json(fit.status)}


def _status_json(status: FitStatus) -> dict[str, Any]:
    return {"converged": status.converged, "reason": status.reason, "evaluations": status.evaluations}


def _sweep_json(sweep: Sweep, on_steps: bool) -> dict[str, Any]:
    return {
        "verdict": str(sweep.verdict),
        "changes": None if sweep.changes is None else list(sweep.changes),
        "tolerance": sweep.tolerance,
        "rows": [
            {
                "max_step": row.max_step,
                "max_tokens": None if on_steps else row.max_tokens,
                "tokens": None if on_steps else _num(row.tokens),
                "step": _num(row.step),
                "params": None if row.fit is None else dict(row.fit.params),
                "note": row.note,
                "converged": None if row.fit is None else row.fit.status.converged,
            }
            for row in sweep.rows
        ],
    }


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _pair(pair: tuple[float, float] | None) -> list[float | None] | None:
    return None if pair is None else [_num(pair[0]), _num(pair[1])]


def as_written(text: str) -> str:
    """The wording that keeps a message as the analysis wrote it."""
    return text


def to_text(analysis: Analysis, wording: Wording = as_written) -> str:
    """The human report: settings, batch stages, one line per target, sweeps and verdicts.

    ``wording`` rewords the analysis's messages for the reader (the command line says the
    settings they name as its flags).
    """
    analysis = _reworded(analysis, wording)
    lines = [f"run: {printable(analysis.run)}", _header(analysis)]
    if analysis.history.read_as:
        lines.append(wording(f"read as: {_read_as(analysis)}"))
    if analysis.selection is not None:
        lines.append(_model_line(analysis))
    if analysis.dynamic_batch:
        lines += _stage_table(analysis)
    lines += [f"note: {note}" for note in analysis.notes]
    lines.append(wording(throughput_line(analysis)))
    lines.append(_RULE)
    for k, result in enumerate(analysis.targets):
        lines += _target_lines(analysis, result)
        when = target_time_text(analysis, k)
        if when:
            lines.append(f"{'':<15}{when}")
    return "\n".join(lines)


def _reworded(analysis: Analysis, wording: Wording) -> Analysis:
    """The analysis with the messages the report shows in ``wording``."""
    if wording is as_written:
        return analysis
    targets = tuple(replace(t, note=wording(t.note)) if t.note else t for t in analysis.targets)
    return replace(
        analysis,
        fit_start_reason=wording(analysis.fit_start_reason),
        batch_source=wording(analysis.batch_source),
        notes=tuple(wording(note) for note in analysis.notes),
        targets=targets,
    )


def _read_as(analysis: Analysis) -> str:
    """``Hugging Face Trainer; step: train/global_step, loss: train/loss, ...`` (flat: the
    columns' own words carry brackets)."""
    items = dict(analysis.history.read_as)
    name = items.pop("framework", "generic")
    return f"{name}; " + ", ".join(f"{k}: {v}" for k, v in items.items())


def _header(analysis: Analysis) -> str:
    window = analysis.config.ema_token_window
    if analysis.on_steps:
        return (
            f"loss col: {analysis.loss_key} | ema window: {window:,.0f} steps | no tokens: the analysis is on steps | "
            f"fit start step: {analysis.fit_start_step} ({analysis.fit_start_reason})"
        )
    spans = [window / s.batch for s in analysis.stages]
    if analysis.dynamic_batch:
        first, last = analysis.stages[0].batch, analysis.stages[-1].batch
        batch = (
            f"batch: DYNAMIC, {len(analysis.stages)} stages ({first:,.0f} -> {last:,.0f} tokens/step, "
            f"from {analysis.batch_source})"
        )
        span = f"~{max(spans):,.0f}-{min(spans):,.0f} steps across stages"
    else:
        batch = f"batch size: {analysis.stages[0].batch:,.0f} tokens/step (from {analysis.batch_source})"
        span = f"~{spans[0]:,.0f} steps at this batch size"
    return (
        f"loss col: {analysis.loss_key} | ema token window: {window:,.0f} ({span}) | {batch} | "
        f"fit start step: {analysis.fit_start_step} ({analysis.fit_start_reason})"
    )


def _model_line(analysis: Analysis) -> str:
    selection = analysis.selection
    assert selection is not None
    line = f"model: {selection.chosen}"
    if analysis.config.model == "auto":
        scores = ", ".join(f"{name} {score:.3f}" if score is not None else f"{name} -" for name, score in selection.scores)
        line += f" ({selection.method}" + (f"; mean log error {scores})" if len(selection.scores) > 1 else ")")
    return line + f" | clock: {_clock(analysis)}"


def _clock(analysis: Analysis) -> str:
    """The law's clock: on the step axis the token clock counts steps."""
    return "steps" if analysis.on_steps else analysis.config.clock


def _stage_table(analysis: Analysis) -> list[str]:
    lines = [f"{'stage':>7} {'steps':>17} {'tokens (before step)':>33} {'batch':>11}"]
    for k, s in enumerate(analysis.stages, 1):
        lines.append(
            f"{k:>7} {s.first_step:>8} - {s.last_step:<6} {s.first_tokens:>15,.0f} - "
            f"{s.last_tokens:<15,.0f} {s.batch:>11,.0f}"
        )
    return lines


# How the text report says each status: one vocabulary, the JSON's words in capitals.
_HEADS = {
    Status.REACHED: "REACHED",
    Status.FORECAST: "FORECAST within the plan",
    Status.FORECAST_BEYOND_PLAN: "FORECAST BEYOND THE PLAN",
    Status.UNLIKELY: "UNLIKELY within the plan",
    Status.NOT_REACHED: "NOT REACHED in this run",
    Status.UNREACHABLE: "UNREACHABLE",
    Status.NOT_ENOUGH_DATA: "NOT ENOUGH DATA",
}


def status_head(status: Status) -> str:
    """The text report's words for a status (``FORECAST within the plan``)."""
    return _HEADS[status]


def _target_lines(analysis: Analysis, result: TargetResult) -> list[str]:
    head = f"target={result.target:<8g} {status_head(result.status)}"
    on_steps = analysis.on_steps
    if result.status == Status.REACHED:
        tokens = "" if on_steps else f" tokens={result.tokens:,.0f}"
        return [f"{head} (interpolated): step={result.step:,.0f}{tokens}"]
    lines = []
    chance = "" if result.p_reach_within_plan is None else f" P(reached within plan)={result.p_reach_within_plan:.2f}"
    if result.status.forecast:
        flag = " ** EXTRAPOLATION BEYOND WARN FACTOR **" if result.beyond_warn_factor else ""
        spread = ""
        if result.tokens_interval is not None:
            level = f"{analysis.config.interval:.0%}"
            # Written as every table writes an interval: an open end reads the same everywhere.
            spread = f" {level} interval:" + ("" if on_steps else f" tokens={interval(result.tokens_interval, format_tokens)}")
            if result.step_interval is not None:
                spread += f" steps={interval(result.step_interval, format_steps)}"
        note = f"; {result.note}" if result.note else ""
        tokens = "" if on_steps else f" tokens={result.tokens:,.0f}"
        observed = "" if on_steps else f"T={analysis.observed_tokens:,.0f}, "
        lines.append(
            f"{head} ({_fit_text(result.fit, on_steps)}): step={result.step:,.0f}"
            f"{tokens}{spread}{chance} ({result.extrapolation_factor:.2f}x past observed "
            f"{observed}S={analysis.observed_step:,}){flag}{note}"
        )
    elif result.status == Status.NOT_REACHED:
        lines.append(f"{head}: {not_reached_text(result, on_steps)}{_then(result.note)}")
    elif result.status == Status.UNLIKELY:
        lines.append(f"{head}: {unlikely_text(result, on_steps)}{_then(result.note)}")
    else:
        lines.append(f"{head}: {result.note}")
    if result.sweep is not None:
        lines += _sweep_lines(result, analysis.config.extrapolation_warn_factor, on_steps)
    return lines


def not_reached_text(result: TargetResult, on_steps: bool) -> str:
    """What a ``not_reached`` target's line says: the best smoothed loss, where the run ended
    (or its plan ends), and the chance within the plan."""
    assert result.best_loss is not None and result.end_step is not None and result.end_tokens is not None
    ends = "ended" if result.run_finished else "ends"
    at = "" if on_steps else f", tokens={result.end_tokens:,.0f}"
    chance = "unknown" if result.p_reach_within_plan is None else f"{result.p_reach_within_plan:.2f}"
    return (f"best smoothed loss={result.best_loss:.4f} (step {result.best_step:,.0f}); the run {ends} at "
            f"step={result.end_step:,.0f}{at}; P(reached within plan)={chance}")


def _then(note: str | None) -> str:
    return f"; {note}" if note else ""


def unlikely_text(result: TargetResult, on_steps: bool) -> str:
    """What an ``unlikely`` target's line says: a chance within the plan, and where it ends."""
    chance = "unknown" if result.p_reach_within_plan is None else f"{result.p_reach_within_plan:.2f}"
    at = "" if on_steps or result.end_tokens is None else f", tokens={result.end_tokens:,.0f}"
    end = "" if result.end_step is None else f"; the plan ends at step={result.end_step:,.0f}{at}"
    return f"P(reached within plan)={chance}{end}"


def format_steps(value: float) -> str:
    """``7768.56 -> '7,769'``: a step at a glance."""
    return f"{value:,.0f}"


def _fit_text(fit: Model | None, on_steps: bool = False) -> str:
    if fit is None:
        return "no fit"
    params = fit.params
    if fit.name == "power-law":
        unit = "steps" if on_steps else "tokens"  # the law's T is the analysis's axis
        text = f"fit L0={params['L0']:.4f} A={params['A']:.4f} alpha={params['alpha']:.4f}, T in {TOKEN_UNIT:.0e} {unit}"
    else:
        text = f"{fit.name}: " + " ".join(f"{k}={v:.4g}" for k, v in params.items() if k != "area_ref")
    # A fit whose solver gave up still forecasts; the reader should know.
    return text if fit.status.converged else f"{text}; NOT CONVERGED: {fit.status.reason}"


def _sweep_lines(result: TargetResult, warn_factor: float, on_steps: bool) -> list[str]:
    sweep = result.sweep
    assert sweep is not None
    lines = [
        "",
        f"target={result.target:g} -- stability sweep",
        f"{'max_step':>10} {'s_pred':>14} {'t_pred':>18} {'ratio':>8} {'L0':>8} {'alpha':>8} note",
    ]
    for row in sweep.rows:
        if row.tokens is None:
            lines.append(f"{row.max_step:>10} {'--':>14} {'--':>18} {'--':>8} {'--':>8} {'--':>8} {row.note}")
            continue
        ratio = row.tokens / row.max_tokens
        flag = " [beyond warn factor]" if ratio > warn_factor else ""
        params = row.fit.params if row.fit is not None else {}
        l0, alpha = params.get("L0", math.nan), params.get("alpha", math.nan)
        tokens = f"{'--':>18}" if on_steps else f"{row.tokens:>18,.0f}"
        lines.append(
            f"{row.max_step:>10} {row.step:>14,.0f} {tokens} {ratio:>7.2f}x "
            f"{l0:>8.4f} {alpha:>8.4f}{flag}"
        )
    lines.append(_verdict(sweep))
    return lines


def _verdict(sweep: Sweep) -> str:
    if sweep.changes is None:
        return "verdict: NOT ENOUGH DATA to judge convergence yet (need >=3 valid windows)"
    a, b = sweep.changes
    if sweep.verdict == Verdict.CONVERGED:
        return (
            f"verdict: CONVERGED -- last two window-to-window changes ({a:.1%}, {b:.1%}) "
            f"both within tolerance {sweep.tolerance:.0%}"
        )
    return (
        f"verdict: NOT YET CONVERGED -- last two window-to-window changes ({a:.1%}, {b:.1%}) "
        f"exceed tolerance {sweep.tolerance:.0%}; keep training and re-check"
    )


def format_tokens(value: float | None) -> str:
    """``19058662904 -> '19.06B'``: tokens at a glance."""
    if value is None or not math.isfinite(value):
        return MISSING
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"
