"""The wall-clock forecast of the speedrun records, today's beside the sibling-calibrated one.

    python benchmarks/bench_siblings_time.py [--quick] [--runs-time ../shared/data/runs-time [DIR ...]] [--fractions 0.5 0.25]
                                             [--speedrun-plans given|assumed] [--workers 2]

The runs are the modded-nanoGPT speedrun logs with a clock (``runs-time/``, one a record,
``modded-short-YYYY-MM-DD_Name.csv``), read as ``bench_calibration.py`` reads them: on
steps (``batch_size`` 1, a 200-step EMA), each with its record's planned lr from
``data/speedrun_plans.csv`` (the logs log no lr: the plan ``log`` falls back on the plan
given, as ``bench_calibration.py``'s default ``--speedrun-plans given`` does; ``assumed``:
the constant lr assumed). Every record R, sorted by date, at each cut ``f``:

- **today**: ``backtest_run(R, config, fit_fractions=(f,), target_quantiles=(0.6, 0.8),
  models=("auto",))``, the default ``AnalysisConfig`` (no calibration);
- **siblings** (temporal): the records dated strictly before R (R never among them, nor a
  record of the same day) are backtested at ``f`` (``sibling_cases``, each with its own
  plan; once per record and cut), ``calibrate`` turns their cases into a ``Calibration``
  and R is backtested again with it (``replace(config, calibration=cal)``).

The seconds interval is the product's at ``AnalysisConfig.interval``: each backtest is run
at ``interval`` 0.5, 0.8 and 0.95 to read the seconds (and steps) intervals at 50, 80 and
95% (the point does not depend on the level: checked, the count of mismatches printed).
A record with no earlier record (the first) counts under *today* only; *today (same)* is
today's forecast on the records the siblings column scores, for a like-for-like reading.

Prints the target; per cut and target quantile, each cut pooled and everything pooled, for
today (all records), today (same records) and siblings: the cases, the forecasts, the median
|ln(predicted / true)| in steps and in seconds, seconds minus steps (the medians over the
cases with both), the 50/80/95% coverage of the steps interval and of the seconds interval;
then each record's calibration (sibling runs, bias, width) at each cut.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
from bench_calibration import speedrun_plans
from bench_forecast import load
from harness import RUNS_TIME, csv_logs, median_of, number, share_of
from harness import parser as options

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import BacktestCase, backtest_run, sibling_cases
from tracker_plugin.core.siblings import Calibration, SiblingCase, calibrate
from tracker_plugin.plan.schedule import LrSchedule

QUANTILES = (0.6, 0.8)
LEVELS = (0.5, 0.8, 0.95)
# The target: the seconds 80% interval covers 70-90% of the cases, and the time forecast
# adds at most this to the steps forecast's median |ln| error.
COVERAGE_TARGET = (0.70, 0.90)
ADDED_TARGET = 0.01
DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")

# (record path, cut, level) -> that backtest's cases
Cases = dict[tuple[str, float, float], list[BacktestCase]]


def date_of(path: str) -> str:
    found = DATE.search(Path(path).stem)
    if found is None:
        raise SystemExit(f"{path}: no date in the name (modded-short-YYYY-MM-DD_Name.csv)")
    return found.group(1)


def config_of(path: str, plans: dict[str, LrSchedule]) -> AnalysisConfig:
    """The record's settings as bench_calibration.py gives them: its EMA window, and its
    record's plan where it logs no lr."""
    history, window = load(path)
    plan = plans.get(Path(path).stem) if history.lr is None else None
    return AnalysisConfig(targets=(1.0,), ema_token_window=window, lr_schedule=plan)


def today_job(job: tuple[str, float, dict[str, LrSchedule]]) -> tuple[dict[float, list[BacktestCase]], list[SiblingCase]]:
    """A record at cut ``f``: its uncalibrated backtest at each level, and its cases as a
    sibling (what the later records are calibrated on)."""
    path, f, plans = job
    history, _ = load(path)
    config = config_of(path, plans)
    by_level = {level: backtest_run(history, replace(config, interval=level), fit_fractions=(f,),
                                    target_quantiles=QUANTILES, models=("auto",)) for level in LEVELS}
    return by_level, sibling_cases(history, config, f)


def calibrated_job(job: tuple[str, float, dict[str, LrSchedule], Calibration]) -> dict[float, list[BacktestCase]]:
    """A record at cut ``f`` calibrated with ``cal``: its backtest at each level."""
    path, f, plans, cal = job
    history, _ = load(path)
    config = replace(config_of(path, plans), calibration=cal)
    return {level: backtest_run(history, replace(config, interval=level), fit_fractions=(f,),
                                target_quantiles=QUANTILES, models=("auto",)) for level in LEVELS}


def figures(keys: Sequence[tuple[str, float]], cases: Cases) -> dict[str, float | int | None]:
    """The figures over the records and cuts ``keys`` (every target quantile of each)."""
    central = [c for key in keys for c in cases[(*key, 0.8)]]
    steps = [abs(c.error) for c in central if c.error is not None]
    seconds = [abs(c.seconds_error) for c in central if c.seconds_error is not None]
    paired = [c for c in central if c.error is not None and c.seconds_error is not None]
    added = None
    if paired:
        added = float(np.median([abs(c.seconds_error) for c in paired]) - np.median([abs(c.error) for c in paired]))
    out: dict[str, float | int | None] = {
        "cases": len(central),
        "forecasts": len(steps),
        "paired": len(paired),
        "steps": median_of(steps),
        "seconds": median_of(seconds),
        "added": added,
    }
    for level in LEVELS:
        at = [c for key in keys for c in cases[(*key, level)]]
        out[f"steps{level:g}"] = share_of([c.covered for c in at if c.covered is not None])
        out[f"seconds{level:g}"] = share_of([c.seconds_covered for c in at if c.seconds_covered is not None])
    out["seconds_intervals"] = sum(c.seconds_covered is not None for c in central)
    return out


def only_q(cases: Cases, q: float) -> Cases:
    return {key: [c for c in found if c.target_quantile == q] for key, found in cases.items()}


def _x(value: float | int | None, digits: int = 3, signed: bool = False) -> str:
    return number(value, f"{'+' if signed else ''}.{digits}f")


HEADER = (f"{'cut':>6} {'q':>6}  {'forecast':<16} {'cases':>5} {'fcst':>4}  {'steps|ln|':>9} {'secs|ln|':>8} "
          f"{'secs-steps':>10}  {'steps cov 50/80/95':>18}  {'secs cov 50/80/95':>18}")


def row(cut: str, q: str, label: str, x: dict[str, float | int | None]) -> str:
    steps = "/".join(_x(x[f"steps{level:g}"], 2) for level in LEVELS)
    secs = "/".join(_x(x[f"seconds{level:g}"], 2) for level in LEVELS)
    return (f"{cut:>6} {q:>6}  {label:<16} {_x(x['cases']):>5} {_x(x['forecasts']):>4}  {_x(x['steps']):>9} "
            f"{_x(x['seconds']):>8} {_x(x['added'], signed=True):>10}  {steps:>18}  {secs:>18}")


def verdict(x: dict[str, float | int | None]) -> str:
    cov, added = x["seconds0.8"], x["added"]
    ok_cov = cov is not None and COVERAGE_TARGET[0] <= cov <= COVERAGE_TARGET[1]
    ok_added = added is not None and added <= ADDED_TARGET
    return (f"seconds cov80 {_x(cov, 2)} {'met' if ok_cov else 'MISSED'}, "
            f"secs-steps {_x(added, signed=True)} {'met' if ok_added else 'MISSED'}")


def main() -> None:
    parser = options(__doc__, quick="the first six records by date, the cut at 0.5 only",
                     workers=min(os.cpu_count() or 2, 2))
    parser.add_argument("--runs-time", type=Path, nargs="+", default=[RUNS_TIME],
                        help="folder(s) of speedrun logs with a clock, pooled and sorted by date (default: "
                             "../shared/data/runs-time beside the repo; add benchmarks/data/heldout-time for the 2025 "
                             "records, calibrated on every record dated before them)")
    parser.add_argument("--fractions", type=float, nargs="+", default=None,
                        help="the cuts, shares of the steps [default: 0.5 0.25; 0.5 with --quick]")
    parser.add_argument("--speedrun-plans", choices=("given", "assumed"), default="given",
                        help="the records' planned lr from data/speedrun_plans.csv, or the constant lr assumed")
    args = parser.parse_args()
    files = sorted(csv_logs(*args.runs_time), key=lambda p: (date_of(p), Path(p).stem))[:6 if args.quick else None]
    if not files:
        raise SystemExit(f"no runs in {', '.join(map(str, args.runs_time))}")
    plans = speedrun_plans() if args.speedrun_plans == "given" else {}
    fractions = tuple(args.fractions or ([0.5] if args.quick else [0.5, 0.25]))
    start = time.perf_counter()

    today: Cases = {}
    as_sibling: dict[tuple[str, float], list[SiblingCase]] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        keys = [(path, f) for f in fractions for path in files]
        for key, (by_level, found) in zip(keys, pool.map(today_job, [(p, f, plans) for p, f in keys])):
            for level, cases in by_level.items():
                today[(*key, level)] = cases
            as_sibling[key] = found
        cals: dict[tuple[str, float], Calibration] = {}
        for path, f in keys:
            earlier = [s for s in files if date_of(s) < date_of(path)]
            assert path not in earlier
            if earlier:
                cals[(path, f)] = calibrate([c for s in earlier for c in as_sibling[(s, f)]])
        calibrated: Cases = {}
        for key, by_level in zip(cals, pool.map(calibrated_job, [(p, f, plans, cal) for (p, f), cal in cals.items()])):
            for level, cases in by_level.items():
                calibrated[(*key, level)] = cases
    seconds = time.perf_counter() - start

    # The point must not depend on the interval's level (the levels' intervals are read
    # off runs at each level).
    mismatches = sum(
        a.tokens != b.tokens
        for table in (today, calibrated)
        for (path, f, level), cases in table.items() if level != 0.8
        for a, b in zip(cases, table[(path, f, 0.8)])
    )
    alone = [p for p in files if not any(date_of(s) < date_of(p) for s in files)]
    inactive = sum(not cal.active for cal in cals.values())
    print(f"{len(files)} speedrun records with a clock ({', '.join(map(str, args.runs_time))}), on steps, speedrun plans "
          f"{args.speedrun_plans}; cuts {', '.join(f'{f:g}' for f in fractions)}; target quantiles "
          f"{', '.join(f'{q:g}' for q in QUANTILES)}; model auto; {seconds:.0f} s on {args.workers} worker(s)")
    print(f"siblings: the records dated strictly before each one. {len(alone)} record(s) with no earlier sibling "
          f"count under today only ({', '.join(Path(p).stem for p in alone)}); {inactive} calibration(s) of "
          f"{len(cals)} left inactive (no sibling case); points differing between interval levels: {mismatches}")
    print(f"TARGET (siblings): seconds 80% coverage in {COVERAGE_TARGET[0]:.0%}-{COVERAGE_TARGET[1]:.0%}; "
          f"seconds median |ln| - steps median |ln| <= {ADDED_TARGET:g} (secs-steps: medians over the cases "
          f"with both)\n")
    print(HEADER)
    print("-" * len(HEADER))
    sibling_keys = sorted(cals, key=lambda k: -k[1])
    # (cut label, quantile label, cuts, quantile or None: pooled)
    groups: list[tuple[str, str, tuple[float, ...], float | None]] = []
    for f in fractions:
        groups += [(f"{f:g}", f"{q:g}", (f,), q) for q in QUANTILES] + [(f"{f:g}", "pooled", (f,), None)]
    groups.append(("pooled", "pooled", fractions, None))
    verdicts = []
    for cut, q, fs, qv in groups:
        t = today if qv is None else only_q(today, qv)
        s = calibrated if qv is None else only_q(calibrated, qv)
        all_keys = [(p, f) for f in fs for p in files]
        same = [k for k in sibling_keys if k[1] in fs]
        rows = [("today (all)", figures(all_keys, t)), ("today (same)", figures(same, t)),
                ("siblings", figures(same, s))]
        for label, x in rows:
            print(row(cut, q, label, x))
            if x["paired"] != x["forecasts"] or x["seconds_intervals"] != x["forecasts"]:
                print(f"{'':>32}(of the forecasts, {x['paired']} with a seconds forecast, "
                      f"{x['seconds_intervals']} with a seconds interval scored)")
        print()
        if q == "pooled":
            verdicts.append(f"  f={cut}: today (same) {verdict(rows[1][1])}  ->  siblings {verdict(rows[2][1])}")
    print("Against the target, pooled over the target quantiles (today -> siblings, same records):")
    print("\n".join(verdicts))

    print("\nEach record's calibration (temporal siblings): sibling runs, bias (ln, taken off the point), width "
          "(the siblings' raw width)")
    for f in fractions:
        print(f"  f={f:g}")
        for path in files:
            cal = cals.get((path, f))
            if cal is None:
                print(f"    {Path(path).stem:<45} no earlier record: today only")
                continue
            raw = "-" if cal.raw_width is None else f"{cal.raw_width:.2f}"
            print(f"    {Path(path).stem:<45} {len(cal.runs):>2} runs {cal.cases:>3} cases  bias {cal.bias:+.3f}  "
                  f"width {cal.width:.2f} ({raw})")


if __name__ == "__main__":
    main()

