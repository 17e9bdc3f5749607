"""Forecast accuracy on real finished runs, beside the power law's.

    python benchmarks/bench_forecast.py [--quick] [--runs ../shared/data/runs] [--workers 2] [--sensitivity]

The protocol (see ``tracker_plugin.core.backtest``): cut each run at a fraction ``f`` of its
final tokens, forecast when its smoothed loss reaches the value the full run's smoothed
loss had at a quantile ``q`` of its tokens, and score ``|ln(predicted / true tokens)|``, the
truth being the full run's first crossing. Each forecast gets the finished run's logged lr
as its planned schedule (``--plan log``, as a user passes ``--lr-schedule``).

Runs are the CSV files of ``--runs`` except ``*.wandb-export.csv`` (a duplicate). The loss
is ``train_loss`` where logged, else ``val_loss``. Runs that log no batch size (the
MultiPowerLaw runs) are read with ``--batch-size 1``, so tokens count steps, and smoothed
over 200 steps (about the span the default 1e8-token window has at the other runs' batch
sizes); nothing is guessed per file.

Prints the figures the forecast must meet, the per-model table, per-family figures (no
setting is fitted to any family: each family's figures are out of sample for the method)
and, with ``--sensitivity``, the figures for other values of the one prior the method
rests on (the annealing gain).
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from harness import ROOT, RUNS, csv_logs, fewer, number, parser

import tracker_plugin as tp
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.core.backtest import BacktestCase, backtest_run, summarize
from tracker_plugin.errors import DataError
from tracker_plugin.report.tables import text_table

MODELS = ("auto", "power-law", "lr-annealing", "multi-power")
FRACTIONS = (0.25, 0.5)
QUANTILES = (0.6, 0.8, 0.95)
STEPS_WINDOW = 200.0
COLUMNS = tp.Columns().with_overrides(loss=("train_loss", "val_loss"))


def load(path: str) -> tuple[tp.History, float]:
    """The run and its EMA window: steps-clock runs get a window in steps."""
    try:
        history = tp.load_csv(path, columns=COLUMNS)
    except DataError as exc:
        if "batch size" not in str(exc):
            raise
    else:
        if not history.on_steps:
            return history, 1e8
    # No tokens and no batch size: read on steps (one token a step), as these figures were
    # measured, with the window in steps (a window of 1e8 tokens would smooth the whole run).
    return tp.load_csv(path, columns=COLUMNS, batch_size=1.0), STEPS_WINDOW


def one_run(job: tuple[str, tuple[str, ...], float]) -> list[BacktestCase]:
    path, models, gain = job
    history, window = load(path)
    config = AnalysisConfig(targets=(1.0,), ema_token_window=window, anneal_gain=gain)
    return backtest_run(history, config, fit_fractions=FRACTIONS, target_quantiles=QUANTILES, models=models)


def run_all(files: list[str], models: tuple[str, ...], workers: int, gain: float = 0.05) -> list[BacktestCase]:
    with ProcessPoolExecutor(workers) as pool:
        return [case for cases in pool.map(one_run, [(f, models, gain) for f in files]) for case in cases]


def parity() -> str:
    """``--model power-law`` against the original script's golden values (tests/data)."""
    golden = json.loads((ROOT / "tests" / "data" / "parity_golden.json").read_text())
    checked = worst = 0
    for run in golden["runs"]:
        history = tp.load_csv(ROOT / "tests" / "data" / run["file"])
        schedule = tp.BatchSchedule.parse(run["batch_schedule"]) if run["batch_schedule"] else None
        config = AnalysisConfig(targets=tuple(run["targets"]), ema_token_window=run["ema_token_window"],
                                batch_schedule=schedule, model="power-law")
        analysis = run_analysis(history, config)
        for expected, result in zip(run["targets_result"], analysis.targets):
            if expected["status"] != result.status:
                return f"CHANGED: target {expected['target']} is {result.status}, was {expected['status']}"
            if result.status.located:
                worst = max(worst, abs(result.tokens / expected["tokens"] - 1))
                checked += 1
    return f"unchanged ({checked} forecasts, largest relative difference {worst:.1e})"


def family(run: str) -> str:
    name = os.path.basename(run)
    return name.split("-")[0] if not name.startswith("olmo") else "olmo"


def figures(cases: list[BacktestCase]) -> dict[tuple[str, float, float], object]:
    return {(s.model, s.fit_fraction, s.target_quantile): s for s in summarize(cases)}


def show_requirements(cases: list[BacktestCase], level: float) -> None:
    table = figures(cases)

    def get(model: str, f: float, q: float, field: str) -> float | None:
        summary = table.get((model, f, q))
        return None if summary is None else getattr(summary, field)

    def coverage(model: str) -> tuple[float | None, float | None]:
        held = [c.covered for c in cases if c.model == model and c.covered is not None]
        widths = [c.interval[1] / c.interval[0] for c in cases if c.model == model and c.covered is not None]
        return (float(np.mean(held)) if held else None, float(np.median(widths)) if widths else None)

    rows = [
        ("f=0.5 q=0.8: median |ln|", lambda m: get(m, 0.5, 0.8, "median_abs"), "<= 0.08", lambda v: v <= 0.08),
        ("f=0.5 q=0.8: p90 |ln|", lambda m: get(m, 0.5, 0.8, "p90_abs"), "<= 0.4", lambda v: v <= 0.4),
        ("f=0.5 q=0.8: runs without a forecast", lambda m: get(m, 0.5, 0.8, "failures"), "<= 1", lambda v: v <= 1),
        ("f=0.25 q=0.6: median |ln|", lambda m: get(m, 0.25, 0.6, "median_abs"), "<= 0.15", lambda v: v <= 0.15),
        (f"{level:.0%} interval coverage, f=0.5 q=0.8", lambda m: get(m, 0.5, 0.8, "coverage"), "0.70-0.90",
         lambda v: 0.7 <= v <= 0.9),
        (f"{level:.0%} interval coverage, f=0.25 q=0.6", lambda m: get(m, 0.25, 0.6, "coverage"), "0.70-0.90",
         lambda v: 0.7 <= v <= 0.9),
        (f"{level:.0%} interval coverage, all {len(FRACTIONS) * len(QUANTILES)} settings", lambda m: coverage(m)[0],
         "0.70-0.90", lambda v: 0.7 <= v <= 0.9),
        ("median interval width (high/low), all settings", lambda m: coverage(m)[1], "(report)", None),
    ]
    header = ("figure", *MODELS, "target", "auto meets it")
    lines = []
    for label, value, target, test in rows:
        values = [value(m) for m in MODELS]
        shown = [number(v, ".0f" if "without" in label else ".3f") for v in values]
        met = "-" if test is None or values[0] is None else ("yes" if test(values[0]) else "NO")
        lines.append((label, *shown, target, met))
    print("\n".join(text_table(header, lines)))
    print(f"--model power-law parity with the original script: {parity()}")


def show_table(cases: list[BacktestCase]) -> None:
    header = ("model", "f", "q", "cases", "no fcst", "median", "p90", "bias", "cover", "width")
    rows = [
        (s.model, f"{s.fit_fraction:g}", f"{s.target_quantile:g}", str(s.cases), str(s.failures), number(s.median_abs),
         number(s.p90_abs), number(s.bias, "+.3f"), number(s.coverage, ".2f"), number(s.median_width, ".2f"))
        for s in summarize(cases)
    ]
    print()
    print("\n".join(text_table(header, rows, align="<" + ">" * (len(header) - 1))))


def show_families(cases: list[BacktestCase]) -> None:
    print("\nauto per family (f=0.5 q=0.8 | f=0.25 q=0.6), median / p90 |ln|, coverage:")
    for name in sorted({family(c.run) for c in cases}):
        parts = []
        for f, q in ((0.5, 0.8), (0.25, 0.6)):
            group = [c for c in cases if c.model == "auto" and family(c.run) == name and (c.fit_fraction, c.target_quantile) == (f, q)]
            (s,) = summarize(group)
            parts.append(f"{s.median_abs:.3f} / {s.p90_abs:.3f}, {s.coverage:.2f} of {s.intervals}")
        runs = len({c.run for c in cases if family(c.run) == name})
        print(f"  {name:8} ({runs:2} runs)  {parts[0]:28} | {parts[1]}")


def main() -> None:
    options = parser(__doc__, quick="three runs per family", workers=os.cpu_count() or 2)
    options.add_argument("--runs", type=Path, default=RUNS)
    options.add_argument("--sensitivity", action="store_true", help="also run auto with the annealing-gain prior halved and doubled")
    args = options.parse_args()
    if not args.runs.is_dir():
        raise SystemExit(f"no runs directory {args.runs} (pass --runs)")
    files = csv_logs(args.runs)
    files = fewer(files) if args.quick else files
    start = time.perf_counter()
    cases = run_all(files, MODELS, args.workers)
    level = AnalysisConfig(targets=(1.0,)).interval
    print(f"{len(files)} runs from {args.runs}; cut at {FRACTIONS} of the tokens, targets at {QUANTILES}; "
          f"the planned lr is each run's logged lr ({time.perf_counter() - start:.0f} s)\n")
    show_requirements(cases, level)
    show_table(cases)
    show_families(cases)
    if args.sensitivity:
        print("\nauto with another annealing-gain prior (f=0.5 q=0.8 | f=0.25 q=0.6: median / p90, coverage):")
        for gain in (0.025, 0.1):
            other = figures(run_all(files, ("auto",), args.workers, gain))
            parts = [f"{other[('auto', f, q)].median_abs:.3f} / {other[('auto', f, q)].p90_abs:.3f}, "
                     f"{other[('auto', f, q)].coverage:.2f}" for f, q in ((0.5, 0.8), (0.25, 0.6))]
            print(f"  --anneal-gain {gain:<6}  {parts[0]:24} | {parts[1]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
