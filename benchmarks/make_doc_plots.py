"""Draw the plots docs/forecasting.md shows: the bundled runs and synthetic runs of three sizes.

    python benchmarks/make_doc_plots.py [--out docs/plots]

Each bundled run (examples/runs/*.csv) is drawn with a target it reached and one below
its best smoothed loss (a finished run: ``not_reached``). The synthetic runs (30, 300 and
30,000 logged rows, tracker_plugin.testing.synthetic) are cut at 60% of a planned cosine
run, with a clock, and drawn on tokens and on their clock, with a target reached, one
forecast within the plan and one the plan ends before. The same cases are checked by
tests/test_plot_layout.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import tracker_plugin as tp
from tracker_plugin.core.analysis import Analysis
from tracker_plugin.report.plot import plot_analysis
from tracker_plugin.testing.synthetic import synthetic_run

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted((ROOT / "examples" / "runs").glob("*.csv"))
SIZES = (30, 300, 30_000)
# Seconds per logged row of the synthetic runs: the 30-row run lasts minutes, the others hours.
SECONDS_PER_ROW = {30: 6.0, 300: 30.0, 30_000: 1.2}


def bundled(path: Path) -> Analysis:
    """A bundled run with a target it reached and one below its best smoothed loss."""
    history = tp.load_csv(path)  # the bundled OLMo logs hold only an eval loss: read as the CLI reads them
    first = tp.analyze(history, [1.0])
    smoothed = first.smoothed[first.history.step >= first.fit_start_step]
    reached = round(float(np.quantile(smoothed, 0.3)), 2)
    below = round(float(np.min(smoothed)) - 0.03, 2)
    return tp.analyze(history, [reached, below])


def synthetic(rows: int) -> Analysis:
    """A synthetic run of ``rows`` logged rows, 60% through its planned cosine run, with a clock."""
    total = rows * 10 // 6
    spec = f"cosine:warmup={max(total // 20, 1)},total={total},final=0.1"
    frame = synthetic_run(rows, lr_schedule=spec, anneal_gain=0.3, noise=0.01, seed=rows, batch=65_536.0)
    frame["time"] = 1.7e9 + SECONDS_PER_ROW[rows] * frame["step"]
    window = max(4.0, rows / 20) * 65_536.0
    probe = tp.analyze(frame, [1.0], run=f"synthetic-{rows}", lr_schedule=spec, ema_token_window=window)
    now = float(probe.smoothed[-1])
    targets = [round(float(np.quantile(probe.smoothed, 0.5)), 3), round(now - 0.04, 3), round(now - 0.4, 3)]
    return tp.analyze(frame, targets, run=f"synthetic-{rows}", lr_schedule=spec, ema_token_window=window)


def cases() -> list[tuple[str, Analysis, str]]:
    """(file name, analysis, x axis) of every plot drawn."""
    out = [(f"{path.stem}.png", bundled(path), "tokens") for path in RUNS]
    for rows in SIZES:
        analysis = synthetic(rows)
        out += [(f"synthetic-{rows}.png", analysis, "tokens"), (f"synthetic-{rows}-time.png", analysis, "time")]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "plots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, analysis, x in cases():
        plot_analysis(analysis, args.out / name, x=x)
        print(args.out / name, ", ".join(f"{t.target:g} {t.status}" for t in analysis.targets))


if __name__ == "__main__":
    main()
