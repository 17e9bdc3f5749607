"""No performance cliff on long logs: each figure beside ``import pandas; pandas.read_csv`` of the same file.

    python benchmarks/bench_integrity.py [--quick] [--repeat 1]

Prints, for synthetic runs with an lr column (``tracker_plugin.testing.synthetic_run``)
written to a temporary directory:
  1. one forecast (a target beyond the log) of a 1,000,000-row CSV: wall time, beside the
     pandas read (target: within 2x);
  2. the same forecast of a 5,000,000-row CSV with ``--plot``: peak RSS, beside the pandas
     read's (target: under 1.2 GB);
  3. ``--stability-sweep`` on the 1,000,000-row CSV: wall time and peak RSS, beside the
     pandas read (target: under 10 s).
Each figure is the best of ``--repeat`` fresh processes; ours and the pandas read take
turns, so a machine that slows down slows both.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from harness import MB, Figure, compile_package, floor, in_turns, parser, print_figures

from tracker_plugin.testing import synthetic_run

OURS = [sys.executable, "-m", "tracker_plugin", "analyze"]
TARGET = "2.4"  # beyond the synthetic logs' last smoothed loss (about 2.46 at 1M rows)


def main() -> None:
    options = parser(__doc__, quick="logs of 200,000 and 1,000,000 rows (the targets are for the full sizes)", repeat=1)
    options.sized("--rows", 1_000_000, 200_000, "rows of the long log", type=int)
    options.sized("--plot-rows", 5_000_000, 1_000_000, "rows of the plotted log", type=int)
    args = options.parse_args()
    rows, plot_rows = args.rows, args.plot_rows
    compile_package()

    with tempfile.TemporaryDirectory() as tmp:
        big, huge, png = Path(tmp) / "big.csv", Path(tmp) / "huge.csv", Path(tmp) / "huge.png"
        synthetic_run(rows, seed=0).to_csv(big, index=False)
        synthetic_run(plot_rows, seed=0).to_csv(huge, index=False)
        print(f"files: {rows:,} rows ({big.stat().st_size / 1e6:.0f} MB), {plot_rows:,} rows "
              f"({huge.stat().st_size / 1e6:.0f} MB), both with an lr column; wall seconds, best of {args.repeat}")

        forecast, read_big = in_turns([[*OURS, str(big), "--target", TARGET], floor("pandas", big)], args.repeat)
        plotted, read_huge = in_turns([[*OURS, str(huge), "--target", TARGET, "--plot", str(png)], floor("pandas", huge)],
                                      args.repeat)
        (sweep,) = in_turns([[*OURS, str(big), "--target", TARGET, "--stability-sweep"]], args.repeat)

    print_figures([
        Figure(f"forecast, {rows:,} rows with lr", f"{forecast.wall:.2f} s", f"{read_big.wall:.2f} s",
               f"{forecast.wall / read_big.wall:.2f}x", "within 2x", forecast.wall <= 2 * read_big.wall),
        Figure(f"forecast + --plot, {plot_rows:,} rows: peak RSS", f"{plotted.rss / MB:.0f} MB", f"{read_huge.rss / MB:.0f} MB",
               f"{plotted.rss / read_huge.rss:.2f}x", "< 1200 MB", plotted.rss < 1200 * MB),
        Figure(f"forecast + --plot, {plot_rows:,} rows: time", f"{plotted.wall:.2f} s", f"{read_huge.wall:.2f} s",
               f"{plotted.wall / read_huge.wall:.2f}x"),
        Figure(f"--stability-sweep, {rows:,} rows: time", f"{sweep.wall:.2f} s", f"{read_big.wall:.2f} s",
               f"{sweep.wall / read_big.wall:.2f}x", "< 10 s", sweep.wall < 10),
        Figure(f"--stability-sweep, {rows:,} rows: peak RSS", f"{sweep.rss / MB:.0f} MB", f"{read_big.rss / MB:.0f} MB",
               f"{sweep.rss / read_big.rss:.2f}x"),
    ], baseline="pandas.read_csv (same run)", comparison="ratio")


if __name__ == "__main__":
    main()
