"""No performance cliff on long logs: each figure beside ``import pandas; pandas.read_csv`` of the same file.

    python benchmarks/bench_integrity.py [--repeat 1]

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

import argparse
import compileall
import sys
import tempfile
from pathlib import Path

from bench_analysis import alternate  # benchmarks/ is on the path when run as a script

from tracker_plugin.report.tables import text_table
from tracker_plugin.testing import synthetic_run

ROOT = Path(__file__).resolve().parents[1]
OURS = [sys.executable, "-m", "tracker_plugin", "analyze"]
TARGET = "2.4"  # beyond the synthetic logs' last smoothed loss (about 2.46 at 1M rows)



def pandas_read(path: Path) -> list[str]:
    return [sys.executable, "-c", f"import pandas; pandas.read_csv({str(path)!r})"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--plot-rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "tracker_plugin", quiet=1)

    with tempfile.TemporaryDirectory() as tmp:
        big, huge, png = Path(tmp) / "big.csv", Path(tmp) / "huge.csv", Path(tmp) / "huge.png"
        synthetic_run(args.rows, seed=0).to_csv(big, index=False)
        synthetic_run(args.plot_rows, seed=0).to_csv(huge, index=False)
        print(f"files: {args.rows:,} rows ({big.stat().st_size / 1e6:.0f} MB), {args.plot_rows:,} rows "
              f"({huge.stat().st_size / 1e6:.0f} MB), both with an lr column; best of {args.repeat}")

        forecast, read_big = alternate([*OURS, str(big), "--target", TARGET], pandas_read(big), args.repeat)
        plotted, read_huge = alternate([*OURS, str(huge), "--target", TARGET, "--plot", str(png)], pandas_read(huge),
                                       args.repeat)
        sweep, _ = alternate([*OURS, str(big), "--target", TARGET, "--stability-sweep"], pandas_read(big), args.repeat)

    rows = [
        (f"forecast, {args.rows:,} rows with lr", f"{forecast[0]:.2f} s", f"{read_big[0]:.2f} s",
         f"{forecast[0] / read_big[0]:.2f}x", "within 2x", _yes(forecast[0] <= 2 * read_big[0])),
        (f"forecast + --plot, {args.plot_rows:,} rows: peak RSS", f"{plotted[1]:.0f} MB", f"{read_huge[1]:.0f} MB",
         f"{plotted[1] / read_huge[1]:.2f}x", "< 1200 MB", _yes(plotted[1] < 1200)),
        (f"forecast + --plot, {args.plot_rows:,} rows: time", f"{plotted[0]:.2f} s", f"{read_huge[0]:.2f} s",
         f"{plotted[0] / read_huge[0]:.2f}x", "(report)", "-"),
        (f"--stability-sweep, {args.rows:,} rows: time", f"{sweep[0]:.2f} s", f"{read_big[0]:.2f} s",
         f"{sweep[0] / read_big[0]:.2f}x", "< 10 s", _yes(sweep[0] < 10)),
        (f"--stability-sweep, {args.rows:,} rows: peak RSS", f"{sweep[1]:.0f} MB", f"{read_big[1]:.0f} MB",
         f"{sweep[1] / read_big[1]:.2f}x", "(report)", "-"),
    ]
    print()
    print("\n".join(text_table(("figure", "ours", "pandas.read_csv", "ratio", "target", "meets it"), rows)))


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


if __name__ == "__main__":
    main()
