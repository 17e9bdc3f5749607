"""``plan`` end to end: each run of a family planned before its start from the others.

    python benchmarks/bench_plan.py [--quick]

What ``tracker-plugin plan`` does, through its Python API (``plan_run``): the siblings read
from their CSVs into their evidence (each one's own early-log backtest included), their
law fitted and confirmed leave-one-out, the run's plan (its logged lr, to its last step)
forecast before its first row. Each run of the MPL 25M family (nine lr schedules, 24k and
72k steps, ``../shared/data/runs``; with the MPL 100M family too unless ``--quick``) is
planned from the other runs of its family, never itself. Its targets are the smoothed loss
it had at 60% and 80% of its tokens, as the backtest makes them; the error is
``ln(predicted / true tokens)``, and the loss at the plan's end against the smoothed loss
it ended at. Printed: per run the errors, then per family the median and p90 of |ln|, the
targets called ``unlikely`` that the run reached within its plan, the 80% coverage of the
tokens and of the end loss, the median |error| of the end loss, and the seconds a plan
took (reading and fitting its siblings: what the command costs, most of it the siblings'
own backtests, which a project's cache would keep).

``benchmarks/bench_law.py`` scores the project's law leave-one-family-out on every family
and cut, its rules chosen without the family scored; this is the command's own path on
the families that share a law.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from harness import RUNS, parser

import tracker_plugin as tp
from tracker_plugin.core.analysis import _crossing
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.jobs.plan import siblings_evidence
from tracker_plugin.jobs.siblings_read import SiblingsRead
from tracker_plugin.trackers import ReadOptions, SourceOptions, open_source

WINDOW = 1000  # steps, at one token a step (the family logs no batch)
QUANTILES = (0.6, 0.8)
OPTIONS = SourceOptions(read=ReadOptions(batch_size=1))


def truth(path: Path) -> tuple[tp.History, list[tuple[float, float]], float]:
    source = open_source(str(path), OPTIONS)
    try:
        history = source.read(source.runs()[0])
    finally:
        source.close()
    smoothed = token_window_ema(history.loss, history.step, history.batch, WINDOW)
    targets = []
    for q in QUANTILES:
        target = float(np.interp(q * history.last_tokens, history.tokens, smoothed))
        crossed = _crossing(history, smoothed, target)
        assert crossed is not None
        targets.append((target, crossed[1]))
    return history, targets, float(smoothed[-1])


def family(paths: list[Path]) -> dict[str, list[float]]:
    config = tp.AnalysisConfig(targets=(1.0,), ema_token_window=WINDOW)
    started = time.perf_counter()
    read = siblings_evidence([str(p) for p in paths], config, OPTIONS)
    reading = time.perf_counter() - started
    out: dict[str, list[float]] = {"errors": [], "covered": [], "unlikely": [], "end": [], "end_covered": [], "seconds": []}
    for path in paths:
        history, targets, end = truth(path)
        plan = tp.LrSchedule.from_table(history.step.tolist(), history.lr.tolist(), source="file")
        others = SiblingsRead(tuple(e for e in read.evidence if e.run != history.run), (), "family")
        started = time.perf_counter()
        try:
            planned = tp.plan_run(others, plan, [t for t, _ in targets], batch=1,
                                  config=tp.AnalysisConfig(targets=(1.0,), ema_token_window=WINDOW), run=history.run)
        except tp.NoSharedLaw as exc:
            print(f"  {path.stem}: no shared law ({exc.project.reason})")
            continue
        out["seconds"].append(time.perf_counter() - started + reading / len(paths))
        row = []
        for (_, true_tokens), found in zip(targets, planned.targets, strict=True):
            if found.tokens is None:
                out["unlikely"].append(1.0)
                row.append("never")
                continue
            error = math.log(found.tokens / true_tokens)
            out["errors"].append(error)
            out["unlikely"].append(float(found.status == tp.Status.UNLIKELY))
            low, high = found.tokens_interval or (math.nan, math.nan)
            out["covered"].append(float(low <= true_tokens <= high))
            row.append(f"{error:+.3f}")
        loss = planned.plan_end
        out["end"].append(loss.loss - end)
        if loss.loss_interval is not None:
            out["end_covered"].append(float(loss.loss_interval[0] <= end <= loss.loss_interval[1]))
        print(f"  {path.stem:<32} ln T {' '.join(row):<16} end loss {loss.loss - end:+.4f}  "
              f"({len(planned.project.siblings)} siblings, {planned.project.pooled.law if planned.project.pooled else '-'})")
    return out


def main() -> int:
    options = parser(__doc__, quick="the MPL 25M family only").parse_args()
    families = ["mpl-25M"] if options.quick else ["mpl-25M", "mpl-100M"]
    for name in families:
        paths = sorted(RUNS.glob(f"{name}-*.csv"))
        print(f"{name}: {len(paths)} runs, each planned from the others")
        found = family(paths)
        errors = np.abs(found["errors"])
        print(f"{name}: median |ln T| {np.median(errors):.3f}, p90 {np.quantile(errors, 0.9):.3f} "
              f"({len(errors)} targets); reached in the run but called unlikely: {int(sum(found['unlikely']))}; "
              f"80% coverage {np.mean(found['covered']):.0%}; end loss median |error| "
              f"{np.median(np.abs(found['end'])):.4f}, 80% coverage {np.mean(found['end_covered']):.0%}; "
              f"{np.median(found['seconds']):.1f} s a plan")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
