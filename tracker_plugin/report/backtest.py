"""A backtest as text for people and as one JSON document."""

from __future__ import annotations

import math
from typing import Any

from tracker_plugin.core.backtest import Backtest, BacktestCase, BacktestSummary
from tracker_plugin.report.render import Wording, as_written
from tracker_plugin.report.tables import MISSING, json_row, json_value, text_table

__all__ = ["backtest_json", "backtest_text"]

_PROTOCOL = (
    "cut at fit_fraction of the final tokens; target = the full run's smoothed loss at "
    "target_quantile of its tokens; truth = its first crossing; error = ln(predicted / true tokens)"
)


def backtest_json(backtest: Backtest) -> dict[str, Any]:
    """The backtest as one JSON document: settings, per-model summaries, every case."""
    return {
        "protocol": _PROTOCOL,
        "plan": backtest.plan,
        "ema_token_window": backtest.config.ema_token_window,
        "interval_level": backtest.config.interval,
        "summaries": [_summary_json(x) for x in backtest.summaries],
        "cases": [_case_json(c) for c in backtest.cases],
        "skipped": [json_row(s) for s in backtest.skipped],
    }


def _summary_json(x: BacktestSummary) -> dict[str, Any]:
    # The document's names say what each figure is; the dataclass's are short.
    return {
        "model": x.model,
        "fit_fraction": x.fit_fraction,
        "target_quantile": x.target_quantile,
        "cases": x.cases,
        "no_forecast": x.failures,
        "median_abs_log_error": json_value(x.median_abs),
        "p90_abs_log_error": json_value(x.p90_abs),
        "bias": json_value(x.bias),
        "interval_coverage": json_value(x.coverage),
        "intervals": x.intervals,
        "median_interval_width": json_value(x.median_width),
        "median_abs_log_error_seconds": json_value(x.median_abs_seconds),
        "seconds_interval_coverage": json_value(x.seconds_coverage),
        "seconds_intervals": x.seconds_intervals,
    }


def _case_json(c: BacktestCase) -> dict[str, Any]:
    return {
        "run": c.run,
        "model": c.model,
        "chosen": c.chosen,
        "fit_fraction": c.fit_fraction,
        "target_quantile": c.target_quantile,
        "target": c.target,
        "true_tokens": c.true_tokens,
        "status": json_value(c.status),
        "tokens": json_value(c.tokens),
        "tokens_interval": json_value(c.interval),
        "log_error": json_value(c.error),
        "covered": c.covered,
        "true_seconds": json_value(c.true_seconds),
        "seconds": json_value(c.seconds),
        "seconds_interval": json_value(c.seconds_interval),
        "log_error_seconds": json_value(c.seconds_error),
        "seconds_covered": c.seconds_covered,
        "p_reach_within_plan": json_value(c.p_reach),
        "plan_source": c.plan_source,
        "note": c.note,
    }


def backtest_text(backtest: Backtest, wording: Wording = as_written) -> str:
    """The backtest table: one row per model, fit fraction and target quantile.

    ``wording`` rewords the skipped runs' errors for the reader.
    """
    runs = len({c.run for c in backtest.cases})
    if backtest.plan == "log":
        given = "the finished run's logged lr as the planned schedule"
    else:
        given = "only the lr logged up to the cut"
    lines = [
        f"backtest of {runs} run(s); each forecast had {given}",
        "error = ln(predicted / true tokens); truth = where the full run's smoothed loss first reached the target",
    ]
    sources = _plan_sources(backtest.cases)
    if sources:
        lines.append("the plans the forecasts used (per cut): " + ", ".join(f"{n} {name}" for name, n in sources))
    header: tuple[str, ...] = ("model", "cut", "target", "cases", "no forecast", "median |ln|", "p90 |ln|", "bias",
                               f"{backtest.config.interval:.0%} coverage", "width (hi/lo)")
    # Runs with a clock are scored in seconds too, beside the token figures.
    clocked = any(c.true_seconds is not None for c in backtest.cases)
    if clocked:
        lines.append("seconds: ln(predicted / true seconds on the run's clock), over the runs with a clock")
        header += ("median |ln| sec", f"{backtest.config.interval:.0%} coverage sec")
    lines += text_table(header, [_summary_cells(x, clocked) for x in backtest.summaries])
    lines += [f"skipped {item.run}: {wording(item.error)}" for item in backtest.skipped]
    return "\n".join(lines)


def _plan_sources(cases: tuple[BacktestCase, ...]) -> list[tuple[str, int]]:
    """How many cuts forecast on each plan source (``log``, ``params``, ``inferred``, ``assumed``)."""
    cuts = {(c.run, c.fit_fraction, c.model): c.plan_source for c in cases if c.plan_source is not None}
    counts: dict[str, int] = {}
    for source in cuts.values():
        counts[source] = counts.get(source, 0) + 1
    return sorted(counts.items())


def _summary_cells(x: BacktestSummary, clocked: bool = False) -> tuple[str, ...]:
    cells = (
        x.model,
        f"{x.fit_fraction:g}",
        f"{x.target_quantile:g}",
        str(x.cases),
        str(x.failures),
        _fmt(x.median_abs),
        _fmt(x.p90_abs),
        _fmt(x.bias, signed=True),
        MISSING if x.coverage is None else f"{x.coverage:.0%} of {x.intervals}",
        _fmt(x.median_width, digits=2),
    )
    if not clocked:
        return cells
    coverage = MISSING if x.seconds_coverage is None else f"{x.seconds_coverage:.0%} of {x.seconds_intervals}"
    return (*cells, _fmt(x.median_abs_seconds), coverage)


def _fmt(value: float | None, *, signed: bool = False, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
