"""Leave-one-family-out cross-validation of the forecast's rules, beside today's rules.

    python benchmarks/bench_calibration.py [--quick] [--runs ../shared/data/runs] [--runs-time ../shared/data/runs-time]
                                           [--held-out DIR ...] [--speedrun-plans given|assumed]
                                           [--law-mixes 0 0.03 0.1 0.3] [--workers 2] [--cache /tmp/calibration.pkl]

The protocol is ``tracker-plugin backtest --cross-family`` (``tracker_plugin.core.cross_family``:
every run backtested with each law, gain prior and plan; ``auto`` replayed under each rule;
each family scored with the rules chosen on the other families). This script only reads the
runs as the forecast benchmark beside it reads them and prints the library's report.

Families: MPL (``mpl-*``), the OLMo ladder (``olmo-*``), nanoGPT (``nanogpt-*``) and the
modded-nanoGPT speedrun logs (``runs-time/``, read on steps: ``batch_size`` 1 and a
200-step EMA, as the MPL runs are): the family is the run name's prefix before the first
'-'. The speedrun logs log no lr: with the plan given (``log``) each gets its record's
schedule from ``data/speedrun_plans.csv`` (warmup, constant, linear warmdown, from the
training script at the top of its log), or with ``--speedrun-plans assumed`` the constant
lr assumed; with the plan inferred they always get the constant lr assumed.

Held-out runs (``--held-out DIR``, repeatable; by default the CSV files of ``data/heldout/``,
ten GPT-2-medium speedrun records, family ``medium``, and of ``data/heldout-time/``, five
2025 GPT-2-small speedrun records, family ``modded``: later runs of a visible family; see
their READMEs) are scored with the rules chosen on all the visible families, nothing tuned
on them, and printed separately (the figures pooled over them, the signed error and Brier
score per family; for one family's figures pass its folder alone). Their plans come from the same
table as the visible speedrun logs'. The visible cases are cached in ``--cache``, the
held-out ones beside it (``.heldout``), one cache for all the held-out folders.
"""

from __future__ import annotations

import csv
import os
import time
from dataclasses import replace
from pathlib import Path

# The runs are read as the forecast benchmark beside this file reads them.
from bench_forecast import load
from harness import DATA, RUNS, RUNS_TIME, csv_logs, fewer
from harness import parser as options

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.cross_family import (
    MIXES,
    TODAY,
    CrossFamily,
    cross_family,
    family_of,
    figure_rows,
    matching_rows,
)
from tracker_plugin.jobs.cross_family import Member, cross_family_cases
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.report.cross_family import cross_family_text, matching_text

PLANS_TABLE = DATA / "speedrun_plans.csv"
# Runs no rule is chosen on: the GPT-2-medium records and the 2025 GPT-2-small records.
HELD_OUT = (DATA / "heldout", DATA / "heldout-time")


def speedrun_plans(path: Path = PLANS_TABLE) -> dict[str, LrSchedule]:
    """Each speedrun record's planned lr, by run name (``modded-short-<record>``), from the
    table of its training script's numbers: linear warmup, constant, linear warmdown."""
    plans = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            total, warmup, warmdown = int(row["num_iterations"]), int(row["warmup_iters"]), int(row["warmdown_iters"])
            spec = f"wsd:warmup={warmup},total={total},decay={warmdown},final={float(row['final_lr_fraction']):g}"
            plans[row["run"]] = LrSchedule.parse_spec(spec)
    return plans


def members(files: list[str], plans: dict[str, LrSchedule]) -> list[Member]:
    out = []
    for path in files:
        history, window = load(path)
        name = Path(path).stem
        config = AnalysisConfig(targets=(1.0,), ema_token_window=window)
        out.append(Member(history, family_of(name), config, plans.get(name) if history.lr is None else None))
    return out


def main() -> None:
    parser = options(__doc__, quick="three runs per family, no held-out runs", workers=min(os.cpu_count() or 2, 2))
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--runs-time", type=Path, default=RUNS_TIME)
    parser.add_argument("--held-out", type=Path, action="append",
                        help="a folder of held-out runs, scored only (repeatable; default: data/heldout and "
                             "data/heldout-time)")
    parser.add_argument("--speedrun-plans", choices=("given", "assumed"), default="given",
                        help="the speedrun logs' plan given: their records' schedules, or the constant lr assumed")
    parser.add_argument("--law-mixes", type=float, nargs="+", default=list(MIXES),
                        help="candidate widths of the laws' evidence weighting (0: auto's hard pick); with 0.03 0.1 0.3 "
                             "the other families chose a mixture that forecast the held-out OLMo runs later (p90 0.41 "
                             "against 0.31 at f=0.5 q=0.8, plan given)")
    parser.add_argument("--runs-like", action="append", metavar="REGEX",
                        help="also print the LOFO figures of the runs whose name matches (repeatable; "
                             "default: the MPL cosine runs, mpl-.*-cosine)")
    parser.add_argument("--error-priors", nargs="+", metavar="SCALE,WEIGHT", default=[],
                        help="also print today's rules with each of these error priors (the track record's prior "
                             "error per unit of log horizon and its weight in forecasts) on every family, pooled")
    parser.add_argument("--cache", type=Path, help="keep the backtest cases here and reuse them (same runs, settings and version)")
    args = parser.parse_args()
    files = csv_logs(args.runs, args.runs_time)
    files = fewer(files) if args.quick else files
    if not files:
        raise SystemExit(f"no runs in {args.runs} or {args.runs_time}")
    plans = speedrun_plans() if args.speedrun_plans == "given" else {}
    start = time.perf_counter()
    results = cross_family_cases(members(files, plans), processes=args.workers, cache=args.cache)
    held = [] if args.quick and not args.held_out else csv_logs(*(args.held_out or HELD_OUT))
    held_cache = None if args.cache is None else args.cache.with_name(args.cache.name + ".heldout")
    other = cross_family_cases(members(held, plans), processes=args.workers, cache=held_cache) if held else None
    print(f"cases in {time.perf_counter() - start:.0f} s; speedrun plans {args.speedrun_plans}\n")
    result = cross_family(results, other, mixes=tuple(args.law_mixes))
    print(cross_family_text(result))
    rows = [row for pattern in args.runs_like or ["mpl-.*-cosine"] for row in matching_rows(result, pattern)]
    print("\n".join(matching_text(rows)))
    if args.error_priors:
        print("\n".join(error_prior_text(result, [tuple(map(float, x.split(","))) for x in args.error_priors])))


def error_prior_text(result: CrossFamily, priors: list[tuple[float, ...]]) -> list[str]:
    """Today's rules with each error prior in place, every family scored with it (no
    family held out: a reading of what the prior does, not a choice of it), pooled cuts."""
    lines = ["", "Today's rules with other error priors (scale, weight), every family, pooled cuts: "
             "median / p90 / cov80"]
    groups = [("visible", result.replay)] + ([("held-out", result.held_out)] if result.held_out else [])
    for label, replay in groups:
        for scale, weight in [(TODAY.error_scale, TODAY.error_weight), *priors]:
            rule = replace(TODAY, error_scale=scale, error_weight=weight)
            rows = figure_rows(replay, [("x", dict.fromkeys(replay.families, rule))])
            cells = [f"{x.plan[:5]} f={x.fit_fraction:g} q={x.target_quantile:g} {x.median_abs or 0:.3f}/"
                     f"{x.p90_abs or 0:.3f}/{x.coverage_80 or 0:.2f}" for x in rows if x.group == "pooled"]
            lines.append(f"  {label:<8} {scale:g},{weight:g}: " + " | ".join(cells))
    return lines


if __name__ == "__main__":
    main()
