"""The PNG of one run's plot beside matplotlib's bare-figure floor, measured in the same run.

    python benchmarks/bench_plot.py [--quick] [--repeat 15]

For three runs: a finished run (the OLMo ladder's 370M 5xC log, ../shared/data/runs, 96
rows, val_loss, targets 3.3 reached and 3.1 not reached: the nightly pass's usual run),
a forecast run (a synthetic 30,000-row log cut at 60% of its planned cosine run, with a
target reached, one forecast with its interval band and one the plan ends before; see
make_doc_plots.py) and a sparse log (the same at 30 rows, its raw loss drawn as points).
Prints the CPU of writing each run's ``loss_eta.png`` as ``annotate`` does
(``plot_analysis`` to a buffer, the analysis done), and beside it, taking turns with it,
the floor (plot_floor.py): a bare figure of the same size, dpi, axes and lines, on the
same scales, saved to PNG by Agg with matplotlib's defaults (target: the plot <= 1.1x
the floor), and the same bare figure on linear axes (reported). Medians of ``--repeat``
rounds; the machine's load average is printed beside them.
"""

from __future__ import annotations

import io
import os

import make_doc_plots as doc
import pandas as pd
from harness import RUNS, Figure, parser, print_figures
from plot_floor import bare_png, in_turns_cpu, linear_png

import tracker_plugin as tp
from tracker_plugin.core.analysis import Analysis
from tracker_plugin.frame.history import Columns
from tracker_plugin.report.plot import analysis_figure, plot_analysis

FINISHED = RUNS / "olmo-ladder-370M-5xC.csv"
TARGET = 1.1


def finished() -> Analysis:
    columns = Columns().with_overrides(loss="val_loss")
    return tp.analyze(pd.read_csv(FINISHED), [3.3, 3.1], run=FINISHED.stem, columns=columns)


def cases() -> list[tuple[str, Analysis]]:
    return [("finished run (OLMo 370M 5xC, 96 rows)", finished()),
            ("forecast run (synthetic, 30,000 rows)", doc.synthetic(30_000)),
            ("sparse log (synthetic, 30 rows)", doc.synthetic(30))]


def png(analysis: Analysis) -> bytes:
    buffer = io.BytesIO()
    plot_analysis(analysis, buffer, name=analysis.run)
    return buffer.getvalue()


def main() -> None:
    options = parser(__doc__, quick="5 rounds", repeat=15)
    args = options.parse_args()
    repeat = 5 if args.quick else args.repeat
    figures = []
    for label, analysis in cases():
        fig = analysis_figure(analysis, name=analysis.run)
        cpu = in_turns_cpu({"plot": lambda a=analysis: png(a), "floor": bare_png(fig), "linear": linear_png(fig)}, repeat)
        ratio = cpu["plot"] / cpu["floor"]
        figures.append(Figure(label, f"{1000 * cpu['plot']:.0f} ms", f"{1000 * cpu['floor']:.0f} ms",
                              f"{ratio:.2f}x; {cpu['plot'] / cpu['linear']:.2f}x of linear axes' {1000 * cpu['linear']:.0f} ms",
                              f"<= {TARGET}x", ratio <= TARGET))
    print(f"the PNG's CPU, median of {repeat} rounds in turns; load average {os.getloadavg()[0]:.1f}")
    print_figures(figures, baseline="bare figure (same scales)", comparison="plot / floor")


if __name__ == "__main__":
    main()
