"""Wall-clock forecasts on real speedrun logs, beside a naive baseline.

    python benchmarks/bench_eta.py [--quick] [--runs-time DIR ...] [--plans none|given|total] [--json]

Each set of logs (``--runs-time``, repeatable; by default the 18 visible ``runs-time``
logs, the held-out 2025 ones in ``benchmarks/data/heldout-time`` and the held-out GPT-2
medium records in ``benchmarks/data/heldout``) is scored apart.

The protocol (issue 12): each of the 18 modded-nanogpt speedrun logs (``runs-time``, with
``train_time`` as the run's clock) is read on steps (``batch_size=1``, the val loss,
``ema_token_window=250``). It is cut at half its steps; the target is the full run's
smoothed val loss at 80% of its steps, and the truth is where (in steps and in seconds)
the full run's smoothed val loss first reaches it. Scored per case:

- ``|ln(seconds_pred / seconds_true)|`` and ``|ln(steps_pred / steps_true)|``, seconds
  counted from the first analysed row, steps as logged;
- whether the 80% seconds interval holds the true seconds.

Printed: cases without a seconds answer (must be 0), the median over cases of
(|ln| seconds - |ln| steps) (must be <= 0.01), the seconds-interval coverage (must be
70-90%), and the same figures for the baseline: the step forecast converted with the mean
seconds per step of the last 20% of the cut (no pauses told apart, no interval).

Beside them, what the interval's width rests on: the median half-width of the 80% seconds
interval (in ln seconds) against the 80th percentile of the errors, and the run's own track
record, the inner forecasts of the selection (cuts at 60-80% of the log forecasting its
end): how many cases had any, and their error per unit of log horizon, which the interval
shrinks towards the error prior (``forecast.ERROR_PRIOR_SCALE``, worth
``ERROR_PRIOR_WEIGHT`` forecasts). ``--plans given`` hands each log its record's planned lr
(``data/speedrun_plans.csv``, as ``bench_calibration.py`` does; a log without one is left
out), to tell the width the unknown ending adds from the rest; ``--plans total`` hands it
the record's planned last step alone (``--total-steps``: what a log's ``step:N/T`` lines
tell its reader).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
from bench_calibration import speedrun_plans
from harness import DATA, RUNS_TIME, median_of, number
from harness import parser as options

import tracker_plugin as tp
from tracker_plugin.core import forecast
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.core.status import Status

CUT, QUANTILE, WINDOW, LEVEL = 0.5, 0.8, 250.0, 0.8
HELDOUT = DATA / "heldout-time"
# The held-out GPT-2-medium records (track 2) carry the same clock.
HELDOUT_MEDIUM = DATA / "heldout"
COLUMNS = tp.Columns().with_overrides(loss="val_loss")


def case(path: Path, plan: tp.LrSchedule | None = None) -> dict[str, object]:
    """One log: the forecast from the cut (on ``plan`` when given), the truth from the full
    log, the baseline."""
    full = tp.load_csv(path, columns=COLUMNS, batch_size=1)
    smoothed = token_window_ema(full.loss, full.step, full.batch, WINDOW)
    at = int(np.searchsorted(full.step, QUANTILE * full.last_step, side="right")) - 1
    target = float(smoothed[at])
    truth = run_analysis(full, AnalysisConfig(targets=(target,), ema_token_window=WINDOW))
    true_result, true_time = truth.targets[0], truth.timing.targets[0]  # type: ignore[union-attr]
    assert true_result.status == Status.REACHED and true_time.seconds is not None
    rows = int(np.searchsorted(full.step, CUT * full.last_step, side="right"))
    cut = full.head(rows)
    config = AnalysisConfig(targets=(target,), ema_token_window=WINDOW, interval=LEVEL, lr_schedule=plan)
    found = run_analysis(cut, config)
    result, when = found.targets[0], found.timing.targets[0]  # type: ignore[union-attr]
    row: dict[str, object] = {"run": path.stem, "status": str(result.status), "target": target}
    row["true_step"], row["true_seconds"] = true_result.step, true_time.seconds
    row["step"], row["seconds"] = result.step, when.seconds
    row["seconds_interval"] = when.seconds_interval
    row["step_interval"] = result.step_interval
    row["baseline_seconds"] = _baseline(cut, result.step)
    throughput = found.timing.throughput  # type: ignore[union-attr]
    row["throughput_spread"] = None if throughput is None else throughput.spread
    row["inner_forecasts"], row["inner_error"] = _own_record(found.selection)
    return row


def _own_record(selection: forecast.Selection | None) -> tuple[int, float | None]:
    """The selection's inner forecasts: how many, and their root-mean-square error per unit
    of log horizon, undone from the scale law_selection._error_scale shrank towards the prior."""
    if selection is None or selection.error_scale is None:
        return 0, None
    scale, count = selection.error_scale, selection.error_count
    inner = count - int(forecast.ERROR_PRIOR_WEIGHT)
    if inner <= 0:
        return 0, None
    squares = scale**2 * count - forecast.ERROR_PRIOR_WEIGHT * forecast.ERROR_PRIOR_SCALE**2
    return inner, math.sqrt(max(squares, 0.0) / inner)


def _baseline(cut: tp.History, step: float | None) -> float | None:
    """The step forecast x the mean seconds per step of the last 20% of the cut."""
    if step is None or cut.time is None:
        return None
    first = int(np.searchsorted(cut.step, cut.step[0] + 0.8 * (cut.last_step - cut.step[0])))
    first = min(first, len(cut) - 2)
    per_step = (cut.time[-1] - cut.time[first]) / (cut.step[-1] - cut.step[first])
    start = cut.time[0] if cut.time_start is None else cut.time_start
    return float(cut.time[-1] - start + (step - cut.last_step) * per_step)


def _ln(pred: object, true: object) -> float | None:
    if not isinstance(pred, float) or not isinstance(true, float) or pred <= 0 or true <= 0:
        return None
    return abs(math.log(pred / true))


def summary(rows: list[dict[str, object]]) -> dict[str, float | int | None]:
    missing = sum(1 for r in rows if r["seconds"] is None)
    ln_steps = [_ln(r["step"], r["true_step"]) for r in rows]
    ln_sec = [_ln(r["seconds"], r["true_seconds"]) for r in rows]
    ln_base = [_ln(r["baseline_seconds"], r["true_seconds"]) for r in rows]
    diff = [s - k for s, k in zip(ln_sec, ln_steps) if s is not None and k is not None]
    diff_base = [s - k for s, k in zip(ln_base, ln_steps) if s is not None and k is not None]
    covered = []
    for r in rows:
        iv = r["seconds_interval"]
        if iv is not None:
            low, high = iv  # type: ignore[misc]
            covered.append(low <= r["true_seconds"] <= high)  # type: ignore[operator]
    steps_covered = [
        r["step_interval"][0] <= r["true_step"] <= r["step_interval"][1]  # type: ignore[index,operator]
        for r in rows
        if r["step_interval"] is not None
    ]
    half_widths = [
        math.log(iv[1] / iv[0]) / 2  # type: ignore[index,operator]
        for r in rows
        if (iv := r["seconds_interval"]) is not None and iv[0] > 0 and iv[1] is not None  # type: ignore[index,operator]
    ]
    inner = [r["inner_error"] for r in rows if r["inner_error"] is not None]
    return {
        "cases": len(rows),
        "without_step": sum(1 for r in rows if r["step"] is None),
        "step_coverage_80": float(np.mean(steps_covered)) if steps_covered else None,
        "without_seconds": missing,
        "median_ln_seconds": median_of([v for v in ln_sec if v is not None]),
        "median_ln_steps": median_of([v for v in ln_steps if v is not None]),
        "median_ln_seconds_minus_steps": median_of(diff),
        "coverage_80": float(np.mean(covered)) if covered else None,
        "intervals": len(covered),
        "late_step_forecasts": sum(1 for r in rows if r["step"] is not None and r["step"] > r["true_step"]),  # type: ignore[operator]
        "median_throughput_spread": median_of([r["throughput_spread"] for r in rows if r["throughput_spread"] is not None]),  # type: ignore[misc]
        "baseline_median_ln_seconds": median_of([v for v in ln_base if v is not None]),
        "baseline_median_ln_seconds_minus_steps": median_of(diff_base),
        "median_half_width_80": median_of(half_widths),
        "p80_ln_seconds": float(np.quantile(known, 0.8)) if (known := [v for v in ln_sec if v is not None]) else None,
        "with_track_record": len(inner),
        "median_inner_error": median_of(inner),  # type: ignore[arg-type]
    }


def main() -> int:
    parser = options(__doc__, quick="three logs of each set")
    parser.add_argument("--runs-time", "--runs", dest="sets", type=Path, action="append",
                        help="a directory of CSV logs with a clock (repeatable); default: the visible and the two held-out sets")
    parser.add_argument("--plans", choices=("none", "given", "total"), default="none",
                        help="none: the issue's protocol (no plan); given: each log's record plan; total: its planned "
                        "last step alone (--total-steps); a log without a record plan is left out of the last two")
    parser.add_argument("--json", action="store_true", help="print the per-case rows and the summary as JSON")
    args = parser.parse_args()
    sets = args.sets or [RUNS_TIME, HELDOUT, HELDOUT_MEDIUM]
    plans = speedrun_plans() if args.plans != "none" else {}
    if args.plans == "total":
        plans = {name: tp.LrSchedule.steps_only(plan.total_steps or 0, "num_iterations") for name, plan in plans.items()}
    found = {}
    for folder in sets:
        paths = sorted(p for p in folder.glob("*.csv") if args.plans == "none" or p.stem in plans)[:3 if args.quick else None]
        if not paths:
            print(f"no CSV logs in {folder}" + (" with a record plan" if plans else ""), file=sys.stderr)
            return 2
        rows = [case(p, plans.get(p.stem)) for p in paths]
        found[str(folder)] = {"rows": rows, "summary": summary(rows)}
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for folder, scored in found.items():
        print(f"== {folder}")
        _print(scored["rows"], scored["summary"])
        print()
    return 0


def _print(rows: list[dict[str, object]], figures: dict[str, float | int | None]) -> None:
    print(f"{'run':<48} {'status':<13} {'ln steps':>9} {'ln sec':>9} {'ln base':>9} {'in 80%':>7}")
    for r in rows:
        iv = r["seconds_interval"]
        inside = "-" if iv is None else ("yes" if iv[0] <= r["true_seconds"] <= iv[1] else "no")  # type: ignore[index,operator]
        print(
            f"{r['run']:<48} {r['status']:<13} {_fmt(_ln(r['step'], r['true_step']))} "
            f"{_fmt(_ln(r['seconds'], r['true_seconds']))} {_fmt(_ln(r['baseline_seconds'], r['true_seconds']))} {inside:>7}"
        )
    print()
    print(
        f"cases: {figures['cases']}, without a seconds answer: {figures['without_seconds']} (must be 0); "
        f"without a step forecast: {figures['without_step']}"
    )
    print(
        f"median |ln| seconds - |ln| steps: {_fmt(figures['median_ln_seconds_minus_steps'])} (must be <= 0.01); "
        f"baseline: {_fmt(figures['baseline_median_ln_seconds_minus_steps'])}"
    )
    print(
        f"median |ln| seconds: {_fmt(figures['median_ln_seconds'])}, baseline {_fmt(figures['baseline_median_ln_seconds'])}; "
        f"median |ln| steps: {_fmt(figures['median_ln_steps'])}"
    )
    cov = figures["coverage_80"]
    print(
        f"80% seconds intervals cover: {'-' if cov is None else f'{cov:.0%}'} of {figures['intervals']} (must be 70-90%); "
        "baseline: no interval"
    )
    step_cov = figures["step_coverage_80"]
    print(
        f"80% step intervals cover: {'-' if step_cov is None else f'{step_cov:.0%}'}; "
        f"step forecasts late: {figures['late_step_forecasts']} of {figures['cases'] - figures['without_step']}"  # type: ignore[operator]
    )
    print(f"median throughput spread (sd of ln s/token between blocks): {_fmt(figures['median_throughput_spread']).strip()}")
    print(
        f"median half-width of the 80% seconds intervals (ln): {_fmt(figures['median_half_width_80']).strip()}; "
        f"80th percentile of |ln| seconds: {_fmt(figures['p80_ln_seconds']).strip()}"
    )
    print(
        f"the runs' own track record: {figures['with_track_record']} of {figures['cases']} cases have inner forecasts, "
        f"median error per unit log horizon {_fmt(figures['median_inner_error']).strip()} "
        f"(the error prior: {forecast.ERROR_PRIOR_SCALE:g}, worth {forecast.ERROR_PRIOR_WEIGHT:g} forecasts)"
    )


def _fmt(value: object) -> str:
    return number(value if isinstance(value, float) else None, ".4f", 9)


if __name__ == "__main__":
    sys.exit(main())
