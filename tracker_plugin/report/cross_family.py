"""A leave-one-family-out backtest as text for people and as one JSON document."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from tracker_plugin.core.backtest import PLANS, Skipped
from tracker_plugin.core.cross_family import (
    BEFORE,
    FRACTIONS,
    GAINS,
    LAWS,
    QUANTILES,
    SETTINGS,
    SPARSE_ROWS,
    TODAY,
    CrossFamily,
    FamilyRow,
    FigureRow,
    ReliabilityBin,
    Replay,
    Rule,
    family_rows,
    figure_rows,
    held_out,
    reliability_rows,
    rule_sets,
)
from tracker_plugin.report.render import Wording, as_written
from tracker_plugin.report.tables import MISSING, Align, json_row, json_value, text_table

__all__ = ["cross_family_json", "cross_family_text", "matching_text", "reliability_text"]

_PROTOCOL = (
    "each family held out in turn: the rules (gain prior, auto's margin, gate and inner cuts compared, interval "
    "inflations, error prior, plausible plans' share and point, the t's degrees of freedom, the loss horizon's share, "
    "the laws' mixture) "
    "chosen on the other families, the held-out family scored with them; error = ln(predicted / true tokens)"
)


def cross_family_json(result: CrossFamily, skipped: Sequence[Skipped] = ()) -> dict[str, Any]:
    """The validation as one JSON document: families, rules, figures, held-out families."""
    replay = result.replay
    sets = rule_sets(result)
    doc: dict[str, Any] = {
        "protocol": _PROTOCOL,
        "laws": list(LAWS),
        "anneal_gains": list(GAINS),
        "plans": list(PLANS),
        "fit_fractions": list(FRACTIONS),
        "target_quantiles": list(QUANTILES),
        "sparse_rows": SPARSE_ROWS,
        "families": [{"family": f, "runs": replay.runs(f)} for f in replay.families],
        "rules": {"before": _rule_json(BEFORE), "today": _rule_json(TODAY), "on_all": _rule_json(result.on_all),
                  "without": [{"family": f, **_rule_json(r)} for f, r in result.rules]},
        "figures": [json_row(x) for x in figure_rows(replay, sets)],
        "per_family": [_family_json(x) for x in family_rows(replay, sets[1][1], sets[2][1])],
        "reliability": _reliability_json(reliability_rows(replay, sets[2][1])),
        "held_out": None,
        "skipped": [json_row(s) for s in skipped],
    }
    if result.held_out is not None:
        rows, fams = held_out(result)
        doc["held_out"] = {
            "families": [{"family": f, "runs": result.held_out.runs(f)} for f in result.held_out.families],
            "figures": [json_row(x) for x in rows],
            "per_family": [_family_json(x) for x in fams],
            "reliability": _reliability_json(reliability_rows(result.held_out, result.held_out_rules)),
        }
    return doc


def _reliability_json(rows: list[tuple[str, tuple[ReliabilityBin, ...]]]) -> list[dict[str, Any]]:
    return [{"plan": plan, "bins": [json_row(b) for b in bins]} for plan, bins in rows]


def _rule_json(rule: Rule) -> dict[str, Any]:
    return {k: json_value(v) for k, v in asdict(rule).items()}


def _family_json(row: FamilyRow) -> dict[str, Any]:
    return {
        "plan": row.plan,
        "family": None if row.pooled else row.family,
        "signed_today": row.signed_today,
        "signed_lofo": row.signed_lofo,
        "coverage_80_today": row.coverage_80_today,
        "coverage_80_lofo": row.coverage_80_lofo,
        "brier": [{"fit_fraction": f, "today": a, "lofo": b, "cases": n} for f, a, b, n in row.brier],
    }


def cross_family_text(result: CrossFamily, skipped: Sequence[Skipped] = (), wording: Wording = as_written) -> str:
    """The figures with the rules before the plausible plans, today's and the leave-one-family-out rules, per family the
    signed bias and the Brier score, the rules chosen, and the held-out families."""
    sets = rule_sets(result)
    lines = [_header(result.replay), ""]
    lines += _figures_text(figure_rows(result.replay, sets), [name for name, _ in sets], "on the other families (LOFO)")
    lines += _families_text(family_rows(result.replay, sets[1][1], sets[2][1]), "today -> LOFO")
    lines += reliability_text(reliability_rows(result.replay, sets[2][1]), "LOFO")
    lines += [f"\nrules before the plausible plans: {BEFORE}\ntoday's rules: {TODAY}", "Rules chosen with each family held out:"]
    lines += [f"  without {held:8} {rule}" for held, rule in result.rules]
    lines.append(f"  on all families:  {result.on_all}  (what the forecast's defaults should be)")
    if result.held_out is not None:
        rows, fams = held_out(result)
        # A held-out family may share its name with a visible one (later runs of it): every
        # held-out row says it is held out, so the two cannot be read for one another.
        lines += ["", "Held-out runs, scored only (no rule chosen on them), with the rules from all visible families: "
                  + _header(result.held_out), ""]
        lines += _figures_text(rows, ["today", "all"], "on all visible families (all)")
        lines += _families_text(fams, "today -> all", held_out=True)
        lines += reliability_text(reliability_rows(result.held_out, result.held_out_rules), "all")
    lines += [f"skipped {item.run}: {wording(item.error)}" for item in skipped]
    return "\n".join(lines)


def _header(replay: Replay) -> str:
    counts = ", ".join(f"{f} {replay.runs(f)}" for f in replay.families)
    runs = sum(replay.runs(f) for f in replay.families)
    return (f"{runs} runs ({counts}); laws {LAWS} x gains {GAINS} x plans {PLANS}, cut at {FRACTIONS}, "
            f"targets at {QUANTILES}")


def _figures_text(rows: list[FigureRow], names: list[str], chosen: str) -> list[str]:
    header = ("plan", "f", "q", "runs", "rules", "cases", "never", "failed", "median", "p90", "signed", "cov50", "cov80", "cov95")
    cells = [(x.plan, f"{x.fit_fraction:g}", f"{x.target_quantile:g}", x.group, x.rules, f"{x.cases}", f"{x.never}", f"{x.failed}",
              _fmt(x.median_abs), _fmt(x.p90_abs), _fmt(x.signed, "+.3f"), _fmt(x.coverage_50, ".2f"), _fmt(x.coverage_80, ".2f"),
              _fmt(x.coverage_95, ".2f")) for x in rows if x.group != "pooled"]
    lines = [f"Forecasts of every family (\"all\": cuts with more than {SPARSE_ROWS} logged rows; \"sparse\": at most {SPARSE_ROWS}),",
             f"with today's rules and with the rules chosen {chosen} (never: reached targets forecast never to be,",
             "counted in the median and p90 as infinite misses; failed: reached targets of cuts whose fit failed, in no other figure):\n"]
    left: list[Align] = ["<"] * 5
    right: list[Align] = [">"] * 9
    lines += text_table(header, cells, align=left + right)
    settings = " | ".join(f"f={f:g} q={q:g}" for f, q in SETTINGS)
    lines.append(f"\nAll cuts pooled (sparse and not), {settings}: median / p90, cov50 / cov80 / cov95")
    pooled = {(x.plan, x.rules, x.fit_fraction, x.target_quantile): x for x in rows if x.group == "pooled"}
    for plan in PLANS:
        for name in names:
            parts = []
            for f, q in SETTINGS:
                x = pooled.get((plan, name, f, q))
                get = (lambda field: None) if x is None else (lambda field, x=x: getattr(x, field))
                parts.append(f"{_fmt(get('median_abs'))} / {_fmt(get('p90_abs'))}, {_fmt(get('coverage_50'), '.2f')} / "
                             f"{_fmt(get('coverage_80'), '.2f')} / {_fmt(get('coverage_95'), '.2f')}")
            lines.append(f"  plan {plan:5} {name:5}  " + " | ".join(parts))
    return lines


def _families_text(rows: list[FamilyRow], arrow: str, held_out: bool = False) -> list[str]:
    f0, q0 = SETTINGS[0]
    cuts = " | ".join(f"f={f:g}" for f in sorted(FRACTIONS, reverse=True))
    lines = [f"\nMean signed ln(predicted/true) (target within +-0.03) and 80% coverage per family at f={f0:g} q={q0:g},",
             f"and the Brier score of p_reach_within_plan ({cuts}; cases with a plan end), {arrow}:"]
    for x in rows:
        if x.pooled:
            pooled = "all held out" if held_out else "all"
            lines.append(f"  plan {x.plan:5} {pooled:8} Brier " + " | ".join(f"{_fmt(a)} -> {_fmt(b)} ({n})" for _, a, b, n in x.brier))
            continue
        briers = " | ".join(f"{_fmt(a)} -> {_fmt(b)} ({n})" for _, a, b, n in x.brier)
        name = f"{x.family} (held out)" if held_out else x.family
        lines.append(f"  plan {x.plan:5} {name:8} signed {_fmt(x.signed_today, '+.3f')} -> {_fmt(x.signed_lofo, '+.3f')}   "
                     f"cov80 {_fmt(x.coverage_80_today, '.2f')} -> {_fmt(x.coverage_80_lofo, '.2f')}   Brier " + briers)
    return lines


def matching_text(rows: Sequence[FigureRow]) -> list[str]:
    """The figures of :func:`~tracker_plugin.core.cross_family.matching_rows`, one line each."""
    header = ("runs like", "plan", "f", "q", "cases", "never", "failed", "median", "p90", "signed", "cov50", "cov80", "cov95")
    cells = [(x.group, x.plan, f"{x.fit_fraction:g}", f"{x.target_quantile:g}", f"{x.cases}", f"{x.never}", f"{x.failed}",
              _fmt(x.median_abs), _fmt(x.p90_abs), _fmt(x.signed, "+.3f"), _fmt(x.coverage_50, ".2f"),
              _fmt(x.coverage_80, ".2f"), _fmt(x.coverage_95, ".2f")) for x in rows]
    lines = ["\nThe runs whose name matches, each scored with the rules chosen without its family (LOFO), "
             "sparse and dense cuts pooled:"]
    left: list[Align] = ["<"] * 4
    right: list[Align] = [">"] * 9
    return lines + text_table(header, cells, align=left + right)


def reliability_text(rows: Sequence[tuple[str, Sequence[ReliabilityBin]]], rules: str) -> list[str]:
    """The reliability tables of p_reach_within_plan, one line per plan and bin."""
    lines = [f"\nReliability of p_reach_within_plan ({rules} rules, every cut and target with a plan end): "
             "per bin of the chance, the cases, their mean chance and the share the run reached:"]
    for plan, bins in rows:
        for b in bins:
            close = "]" if b.high >= 1 else ")"
            lines.append(f"  plan {plan:5} P in [{b.low:.1f}, {b.high:.1f}{close}: {b.cases:>4} cases, "
                         f"mean P {_fmt(b.mean_p, '.2f')}, reached {_fmt(b.reached, '.2f')}")
    return lines


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return MISSING if v is None else format(v, spec)
