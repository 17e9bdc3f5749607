"""Draw the plots docs/forecasting.md shows: the bundled runs and synthetic runs of three sizes.

    python benchmarks/make_doc_plots.py [--quick] [--out docs/plots]

Each bundled run (examples/runs/*.csv) is drawn with a target it reached and one below
its best smoothed loss (a finished run: ``not_reached``). The synthetic runs (30, 300 and
30,000 logged rows, tracker_plugin.testing.synthetic) fall from about 10 to about 3 nats as
a language model's loss does, are cut at 60% of a planned cosine run, with a clock, and
are drawn on tokens and on their clock, with round targets: one reached, one forecast
within the plan and one the plan ends before. The same cases are checked by
tests/test_plot_layout.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from harness import ROOT, parser

import tracker_plugin as tp
from tracker_plugin.core.analysis import Analysis
from tracker_plugin.report.plot import plot_analysis
from tracker_plugin.testing.synthetic import synthetic_run

RUNS = sorted((ROOT / "examples" / "runs").glob("*.csv"))
SIZES = (30, 300, 30_000)
# Each synthetic run as a person would log it: optimizer steps per logged row and seconds
# per step. 30 rows of a speedrun-like run (every 50 steps, 0.1 s a step: minutes), 300 of
# a small model's run (every 10 steps, 3 s a step: hours), 30,000 logged at every step.
STEPS_PER_ROW = {30: 50, 300: 10, 30_000: 1}
SECONDS_PER_STEP = {30: 0.1, 300: 3.0, 30_000: 1.2}
BATCH = 524_288.0  # tokens per step, 0.5M as in GPT-2-sized runs
# The loss law: L = 2.5 + 0.8 (T / 1e9) ** -0.3 nats over the lr-weighted tokens T, so the
# runs fall from about 10 to about 3 as a language model's does, never above ln(50,257):
# a freshly initialized model's loss over a GPT-2 vocabulary.
LAW = {"l0": 2.5, "a": 0.8, "alpha": 0.3}
START = float(np.log(50_257))


def bundled(path: Path) -> Analysis:
    """A bundled run with a target it reached and one below its best smoothed loss."""
    history = tp.load_csv(path)  # the bundled OLMo logs hold only an eval loss: read as the CLI reads them
    history = replace(history, run=str(path.relative_to(ROOT)))  # titled as on any machine
    first = tp.analyze(history, [1.0])
    smoothed = first.smoothed[first.history.step >= first.fit_start_step]
    reached = round(float(np.quantile(smoothed, 0.3)), 2)
    below = round(float(np.min(smoothed)) - 0.03, 2)
    return tp.analyze(history, [reached, below])


def _round_down(value: float, to: float) -> float:
    return round(float(np.floor(value / to + 1e-9) * to), 2)


def _round_up(value: float, to: float) -> float:
    return round(float(np.ceil(value / to - 1e-9) * to), 2)


def synthetic(rows: int) -> Analysis:
    """A synthetic run of ``rows`` logged rows, 60% through its planned cosine run, with a
    clock; targets as a person picks them, round: one it reached, one forecast within the
    plan, one the plan ends before (``unlikely``, the run not having reached its end)."""
    every = STEPS_PER_ROW[rows]
    steps = rows * every
    total = steps * 10 // 6
    spec = f"cosine:warmup={total // 20},total={total},final=0.1"
    frame = synthetic_run(steps, lr_schedule=spec, anneal_gain=0.2, noise=0.02, seed=rows, batch=BATCH,
                          log_every=every, **LAW)
    frame["train_loss"] = np.minimum(frame["train_loss"], START)
    frame["time"] = 1.7e9 + SECONDS_PER_STEP[rows] * frame["step"]
    run = f"synthetic-{rows}"
    now = tp.analyze(frame, [1.0], run=run, lr_schedule=spec)
    after = now.smoothed[now.history.step >= now.fit_start_step]
    # A milestone the smoothed loss passed midway (4.0, 3.5), else a tenth (3.4).
    mid = float(np.quantile(after, 0.5))
    reached = next(r for r in (_round_up(mid, 0.5), _round_up(mid, 0.1)) if r < float(np.max(after)))
    # The round values below the last smoothed loss: the highest the plan reaches (forecast)
    # and the highest it does not (unlikely).
    below = [round(_round_down(float(after[-1]), 0.05) - 0.05 * k, 2) for k in range(1, 30)]
    probe = tp.analyze(frame, below, run=run, lr_schedule=spec)
    within = next(t.target for t in probe.targets if t.status == tp.Status.FORECAST)
    missed = next(t.target for t in probe.targets if t.status == tp.Status.UNLIKELY)
    # A tenth (3.2 rather than 3.25): lower still, so the plan ends before it too.
    return tp.analyze(frame, [reached, within, _round_down(missed, 0.1)], run=run, lr_schedule=spec)


def cases(sizes: tuple[int, ...] = SIZES) -> list[tuple[str, Analysis, str]]:
    """(file name, analysis, x axis) of every plot drawn: the bundled runs', and the
    synthetic runs' of these sizes."""
    out = [(f"{path.stem}.png", bundled(path), "tokens") for path in RUNS]
    for rows in sizes:
        analysis = synthetic(rows)
        out += [(f"synthetic-{rows}.png", analysis, "tokens"), (f"synthetic-{rows}-time.png", analysis, "time")]
    return out


def main() -> None:
    options = parser(__doc__, quick="the bundled runs only")
    options.add_argument("--out", type=Path, default=ROOT / "docs" / "plots")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, analysis, x in cases(() if args.quick else SIZES):
        plot_analysis(analysis, args.out / name, x=x)
        print(args.out / name, ", ".join(f"{t.target:g} {t.status}" for t in analysis.targets))


if __name__ == "__main__":
    main()
