"""Live accuracy on the public runs: each visible run replayed as a live stream, beside the backtest.

    python benchmarks/bench_live_accuracy.py [--quick] [--runs ../shared/data/runs] [--runs-time ../shared/data/runs-time]
                                             [--workers 2] [--per-run] [--json]

The runs are the visible ones ``bench_calibration.py`` scores (the CSV files of ``--runs``
and ``--runs-time``), read as it reads them (its ``members``: the loss, the batch, the EMA
window and the family of each run; the speedrun logs on steps, each with its record's
planned lr from ``data/speedrun_plans.csv`` where the table has one). For each run, each
fraction ``f`` of 0.25, 0.5 and 0.75 of its final tokens and the target quantile q = 0.8:

1. the backtest's plan-given case (``tracker_plugin.core.backtest.backtest_run``, plan
   ``log``, model ``auto``): the target is the full run's smoothed loss at q of its tokens,
   the truth where that smoothed loss first reaches it; the cut's forecast is scored
   ``ln(predicted / true tokens)``;
2. the live replay: a fresh :class:`tracker_plugin.live.LiveForecast` for that target, given
   the whole planned lr as a scheduler gives it (the finished run's logged lr,
   ``logged_plan``, or the record's schedule for a speedrun log that logs none), the same
   analysis settings as the backtest's cut, no background thread and no forecast before it
   is asked for; fed the run's rows in order (step, loss, tokens, lr, and the run's clock
   where it has one, else the wall clock of the replay) up to the backtest's cut row,
   then asked for one forecast, scored against the same truth.

The live forecast of the rows so far is the analysis of the cut, so the two should agree to
rounding. A speedrun log whose record has no row in the plans table gets no plan on either
side (what the logged rows show, as in ``bench_calibration.py``).

Printed, per f: the cases; per side (backtest / live) the cases with no forecast (failed:
the fit failed, or the live forecast still waited), those forecast never to be reached,
the median and p90 ``|ln|`` (a forecast of never counted as an infinite miss) and the
share of 80% intervals holding the truth, as ``tracker_plugin.core.cross_family.figures``
reads them for the calibration report; the cases whose status differs between the sides,
and the largest ``|ln(live / backtest)|`` of the point forecasts and the 80% intervals' ends
over the cases both forecast. With ``--per-run``, the table per run and f before it; with
``--json``, every case and the figures as JSON. Then the wall time: about 100 s of CPU for
the 53 visible runs (35 in ``runs``, 18 in ``runs-time``), each cut analysed twice (once
per side); 1.5-2 min on 2 cores, so no ``--limit``.

``figures`` counts a case whose target the cut had already reached (status ``reached``, its
tokens the truth's, so ``|ln|`` 0) as outside its interval: a reached target has no draws.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from bench_calibration import members, speedrun_plans
from harness import RUNS, RUNS_TIME, csv_logs, fewer, number
from harness import parser as options

from tracker_plugin.core.backtest import BacktestCase, backtest_run, logged_plan
from tracker_plugin.core.cross_family import SPARSE_ROWS, Scored, figures
from tracker_plugin.core.status import Status
from tracker_plugin.jobs.cross_family import Member
from tracker_plugin.live import LiveForecast
from tracker_plugin.report.tables import text_table

FRACTIONS = (0.25, 0.5, 0.75)
QUANTILE = 0.8
LEVEL = 0.8
SIDES = ("backtest", "live")


def one_run(member: Member) -> list[dict[str, Any]]:
    """Every f of one run: the backtest's plan-given case and the live replay's, side by side."""
    history = member.history
    # As bench_calibration's plan-given cases (cross_family.run_cases): a run that logs no
    # lr gets its record's plan as the config's schedule, which backtest_run falls back to.
    config = replace(member.config, lr_schedule=member.given or member.config.lr_schedule)
    plan = logged_plan(history) or config.lr_schedule
    constant = bool(np.all(history.batch == history.batch[0]))
    out = []
    for f in FRACTIONS:
        (case,) = backtest_run(history, config, fit_fractions=(f,), target_quantiles=(QUANTILE,), models=("auto",),
                               plan="log")
        rows = int(np.searchsorted(history.tokens, f * history.last_tokens, side="right"))
        # The settings of the backtest's cut (backtest._cut); the live forecast sets the
        # targets and the plan itself.
        live = LiveForecast([case.target], plan=plan, config=replace(config, model="auto", stability_sweep=False),
                            tokens_per_step=float(history.batch[0]) if constant else None, background=False,
                            every_logs=10**12, every_seconds=0, min_rows=2, name=history.run)
        for i in range(rows):
            live.update(int(history.step[i]), float(history.loss[i]), tokens=float(history.tokens[i]),
                        lr=None if history.lr is None else float(history.lr[i]),
                        time=None if history.time is None else float(history.time[i]))
        result = live.forecast()
        scoring = (history.run, "live", f, QUANTILE, case.target, case.true_tokens)
        if result is None:  # still waiting, or the forecast failed: the status says which
            live_case = BacktestCase(*scoring, Status.NOT_ENOUGH_DATA, note=live.status, rows=rows)
        else:
            target = result.analysis.targets[0]
            live_case = BacktestCase(*scoring, target.status, tokens=target.tokens, interval=target.tokens_interval,
                                     note=target.note, p_reach=target.p_reach_within_plan, draws=target.tokens_draws,
                                     rows=result.rows)
        out.append({"family": member.family, "backtest": case, "live": live_case})
    return out


def scored(case: BacktestCase, family: str) -> Scored:
    """A case as the calibration report scores it (no rule replayed: the case's own draws)."""
    tokens = case.tokens if case.forecast else None
    return Scored(case, family, tokens, np.array(case.draws, float), case.rows <= SPARSE_ROWS, case.p_reach)


def gap(pair: dict[str, Any]) -> float | None:
    """The largest |ln(live / backtest)| of the point and the interval's ends, where both
    sides forecast a place for the target."""
    a, b = pair["backtest"], pair["live"]
    if not (a.forecast and b.forecast):
        return None
    ends = [(a.tokens, b.tokens)]
    if a.interval is not None and b.interval is not None:
        ends += list(zip(a.interval, b.interval))
    logs = [abs(math.log(y / x)) for x, y in ends if x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
    return max(logs) if logs else None


def summary(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for f in FRACTIONS:
        group = [p for p in pairs if p["backtest"].fit_fraction == f]
        row: dict[str, Any] = {"f": f, "q": QUANTILE, "cases": len(group)}
        for side in SIDES:
            row[side] = figures([scored(p[side], p["family"]) for p in group])
        row["status_differs"] = sum(1 for p in group if p["backtest"].status != p["live"].status)
        gaps = [g for p in group if (g := gap(p)) is not None]
        row["max_ln_live_over_backtest"] = max(gaps) if gaps else None
        out.append(row)
    return out


def _pair(row: dict[str, Any], key: str, spec: str = ".3f") -> str:
    return " / ".join(number(row[side][key], spec) for side in SIDES)


def show_summary(rows: list[dict[str, Any]]) -> None:
    header = ("f", "cases", "failed", "never", "median |ln|", "p90 |ln|", f"{LEVEL:.0%} cover", "status differs",
              "max |ln live/bt|")
    lines = [
        (f"{r['f']:g}", str(r["cases"]), _pair(r, "failed", ".0f"), _pair(r, "never", ".0f"), _pair(r, "median"),
         _pair(r, "p90"), _pair(r, f"cov{LEVEL:.0%}", ".2f"), str(r["status_differs"]),
         number(r["max_ln_live_over_backtest"], ".1e"))
        for r in rows
    ]
    print("\n".join(text_table(header, lines, align=">" * len(header))))


def _abs_error(s: Scored) -> str:
    error = s.error
    return "-" if error is None else number(abs(error))


def show_per_run(pairs: list[dict[str, Any]]) -> None:
    header = ("run", "f", "backtest", "live", "backtest |ln|", "live |ln|", "in 80% bt", "in 80% live")
    lines = []
    for p in pairs:
        a, b = scored(p["backtest"], p["family"]), scored(p["live"], p["family"])
        inside = [{None: "-", True: "yes", False: "no"}[s.covered(LEVEL)] for s in (a, b)]
        lines.append((Path(p["backtest"].run).stem, f"{p['backtest'].fit_fraction:g}", str(a.case.status),
                      str(b.case.status), _abs_error(a), _abs_error(b), *inside))
    print("\n".join(text_table(header, lines, align="<<<<>>>>")))


def _json_case(case: BacktestCase, family: str) -> dict[str, Any]:
    s = scored(case, family)
    error = s.error
    return {
        "status": str(case.status), "tokens": case.tokens, "interval": case.interval, "rows": case.rows,
        "ln": None if error is None or math.isinf(error) else error, "covered": s.covered(LEVEL), "note": case.note,
    }


def _finite(value: Any) -> Any:
    """JSON has no infinity: an infinite figure (a median past every finite error) as null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def main() -> int:
    parser = options(__doc__, quick="three runs of each family", workers=min(os.cpu_count() or 2, 2))
    parser.add_argument("--runs", type=Path, default=RUNS, help="the visible runs (default: %(default)s)")
    parser.add_argument("--runs-time", type=Path, default=RUNS_TIME, help="the visible speedrun logs (default: %(default)s)")
    parser.add_argument("--per-run", action="store_true", help="also print each run's |ln| per f, both sides")
    parser.add_argument("--json", action="store_true", help="print every case and the figures as JSON")
    args = parser.parse_args()
    start = time.perf_counter()
    files = csv_logs(args.runs, args.runs_time)
    files = fewer(files) if args.quick else files
    if not files:
        print(f"no runs in {args.runs} or {args.runs_time}", file=sys.stderr)
        return 2
    runs = members(files, speedrun_plans())
    runs.sort(key=lambda m: -len(m.history))  # the longest logs first, so the pool does not end waiting on one
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            found = list(pool.map(one_run, runs))
    else:
        found = [one_run(m) for m in runs]
    order = sorted(range(len(runs)), key=lambda k: runs[k].history.run)
    pairs = [p for k in order for p in found[k]]
    figures_by_f = summary(pairs)
    if args.json:
        cases = [{"run": Path(p["backtest"].run).stem, "family": p["family"], "f": p["backtest"].fit_fraction,
                  "q": QUANTILE, "target": p["backtest"].target, "true_tokens": p["backtest"].true_tokens,
                  **{side: _json_case(p[side], p["family"]) for side in SIDES}, "ln_live_over_backtest": gap(p)}
                 for p in pairs]
        print(json.dumps({"cases": cases, "summary": [_finite(r) for r in figures_by_f],
                          "seconds": time.perf_counter() - start}, indent=2))
        return 0
    without = sum(1 for m in runs if m.history.lr is None and m.given is None)
    print(f"{len(runs)} visible runs ({args.runs}, {args.runs_time}); target at q={QUANTILE:g} of the tokens, "
          f"cut at f={', '.join(f'{f:g}' for f in FRACTIONS)}; the whole plan given (the logged lr or the record's "
          f"schedule; {without} speedrun log(s) without one)\n")
    if args.per_run:
        show_per_run(pairs)
        print()
    print("backtest / live, auto, plan given:")
    show_summary(figures_by_f)
    print(f"\nwall time {time.perf_counter() - start:.0f} s ({args.workers} worker(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
