"""Speed and memory of one-shot analyses and stability sweeps, beside their baselines measured in the same run.

    python benchmarks/bench_analysis.py [--quick] [--repeat 3] [--reference ../shared/reference/find_target_loss.py]

Synthetic fixed-batch runs with an lr column (warmup, then the peak held) are written to a
temporary directory, and each figure is printed beside its baseline:
  1. ``--stability-sweep`` on a 100,000-row log for a target just beyond it (``--quick``: 20,000
     rows, and the table says so): our CPU seconds, with ``--model power-law`` (the original script's model) and with
     the default model, against the original script's on the same file (target: >= 100x), for
     the whole process and for the sweep alone (the process less the same analysis without
     ``--stability-sweep``, for both programs: a figure whose own floor is no sweep at all);
     the import-and-read floor of that log (``import tracker_plugin, scipy.optimize, pandas``
     and ``read_csv``), which bounds the whole-process ratio any such program can reach;
     and how far our power-law sweep's forecasts lie from the script's, row by row (ours are
     each window's least-squares optimum; the script's curve_fit stops once a step gains
     less than 1e-8 of the cost, which near the asymptote moves a forecast by more than 1e-4);
  2. a sweep of a 1,000,000-row log against one analysis of the same log (target: <= 10x);
  3. one analysis of that log (a target beyond it: the law fitted, chosen and bootstrapped)
     against the import-and-read floor, ``import tracker_plugin, scipy.optimize;
     pandas.read_csv(...)`` (target: <= 1.5x; a forecast fits with scipy.optimize, whose
     import is part of fitting; the floor without it is printed too), and its peak memory
     (RSS) beside the floor's (target: <= 300 MB);
  4. one analysis of a 5,000,000-row log with ``--plot`` (``--quick``: 2,000,000): CPU
     seconds beside the floor, and peak memory (RSS; target: <= 1.5 GB).
Times are CPU seconds (user + system) of a fresh process, the best of ``--repeat`` (the
reference's sweep runs once): the machine may be shared, and CPU time is what a run costs.
An analysis and its baselines take turns, so a machine that slows down slows each alike
(benchmarks/harness.py). The package's bytecode is compiled first, as ``pip install`` does.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from harness import MB, REFERENCE, Figure, compile_package, floor, in_turns, parser, print_figures, run

from tracker_plugin.testing import synthetic_run

OURS = [sys.executable, "-m", "tracker_plugin", "analyze"]
GB = 1024 * MB


_REFERENCE_ROW = re.compile(r"^\s*(\d+)\s+[\d,]+\s+([\d,]+)\s")


def sweep_difference(ours_json: str, reference_text: str) -> tuple[int, int, float]:
    """Rows of the same window, rows whose forecast tokens agree within 1e-4, and the largest
    relative difference, between our power-law sweep (JSON) and the reference's table."""
    reference = {int(m.group(1)): float(m.group(2).replace(",", ""))
                 for m in map(_REFERENCE_ROW.match, reference_text.splitlines()) if m}
    ours = {int(row["max_step"]): row["tokens"] for row in json.loads(ours_json)["targets"][0]["sweep"]["rows"]}
    both = [(ours[k], reference[k]) for k in ours if k in reference and ours[k] is not None]
    differences = [abs(a / b - 1.0) for a, b in both]
    return len(both), sum(d <= 1e-4 for d in differences), max(differences, default=float("nan"))


def write_runs(directory: Path, rows: dict[str, int]) -> dict[str, Path]:
    paths = {}
    for name, count in rows.items():
        paths[name] = directory / f"{name}.csv"
        synthetic_run(count, seed=0).to_csv(paths[name], index=False)
    return paths


def main() -> None:
    options = parser(__doc__, quick="a 20,000-row log for the sweep against the reference (its sweep takes minutes "
                     "at 100,000) and a 2,000,000-row log for the plot", repeat=3)
    options.add_argument("--reference", type=Path, default=REFERENCE)
    options.sized("--sweep-rows", 100_000, 20_000, "rows of the sweep log", type=int)
    options.add_argument("--big-rows", type=int, default=1_000_000)
    options.sized("--huge-rows", 5_000_000, 2_000_000, "rows of the plotted log", type=int)
    args = options.parse_args()
    if not args.reference.is_file():
        raise SystemExit(f"reference script not found: {args.reference} (pass --reference)")
    sweep_rows, huge_rows = args.sweep_rows, args.huge_rows
    reference = [sys.executable, str(args.reference)]
    repeat = args.repeat
    compile_package()

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_runs(Path(tmp), {"sweep": sweep_rows, "big": args.big_rows, "huge": huge_rows})
        sizes = ", ".join(f"{name} {path.stat().st_size / 1e6:,.0f} MB" for name, path in paths.items())
        print(f"files: {sweep_rows:,} / {args.big_rows:,} / {huge_rows:,} rows ({sizes}); "
              f"CPU seconds, best of {repeat}" + (f" (--quick: the sweep log is {sweep_rows:,} rows, not 100,000)" if sweep_rows != 100_000 else ""))

        # 1. The sweep against the original script, on a target the log does not reach.
        # A target just beyond the log's end (2.85 at 100,000 rows), so every window forecasts it.
        beyond = 2.0 + 0.93 * 3.0 * (sweep_rows * 524_288 / 1e9) ** -0.3  # synthetic_run's law
        sweep_args = [str(paths["sweep"]), "--target", f"{beyond:.3g}", "--stability-sweep"]
        plain_args = sweep_args[:-1]  # the same analyses without the sweep: what the sweep itself adds
        power, default, power_plain, default_plain, ref_plain, sweep_floor = in_turns(
            [OURS + sweep_args + ["--model", "power-law"], OURS + sweep_args, OURS + plain_args + ["--model", "power-law"],
             OURS + plain_args, reference + plain_args, floor("tracker_plugin, scipy.optimize, pandas", paths["sweep"])],
            repeat)
        power_json = run(OURS + sweep_args + ["--model", "power-law", "--json"], keep_output=True)
        ref_sweep = run(reference + sweep_args, keep_output=True)
        windows, agreeing, largest = sweep_difference(power_json.output, ref_sweep.output)

        # 2-3. A 1M-row log: the sweep against one analysis; the analysis against the floor.
        target = ["--target", "2.4"]  # beyond the log: fitted, chosen, bootstrapped
        big = [str(paths["big"]), *target]
        analysis, big_floor, bare = in_turns(
            [OURS + big, floor("tracker_plugin, scipy.optimize, pandas", paths["big"]), floor("tracker_plugin, pandas", paths["big"])],
            repeat)
        big_sweep = run(OURS + big + ["--stability-sweep"])
        power_analysis = run(OURS + big + ["--model", "power-law"])
        power_sweep = run(OURS + big + ["--model", "power-law", "--stability-sweep"])

        # 4. A 5M-row log with its plot.
        plot = Path(tmp) / "huge.png"
        huge, huge_floor = in_turns([OURS + [str(paths["huge"]), *target, "--plot", str(plot)],
                                     floor("tracker_plugin, scipy.optimize, pandas", paths["huge"])], max(1, repeat - 1))
        if not plot.stat().st_size:
            raise SystemExit("the 5M-row analysis wrote no plot")

    ref_label = f"original script ({ref_sweep.cpu:.1f} s)"
    sweep_alone = ref_sweep.cpu - ref_plain.cpu
    figures = [
        Figure(f"sweep, {sweep_rows:,} rows, --model power-law", f"{power.cpu:.2f} s", ref_label,
               f"{ref_sweep.cpu / power.cpu:.0f}x faster", ">= 100x", ref_sweep.cpu / power.cpu >= 100),
        Figure(f"sweep, {sweep_rows:,} rows, default model", f"{default.cpu:.2f} s", ref_label,
               f"{ref_sweep.cpu / default.cpu:.0f}x faster", ">= 100x", ref_sweep.cpu / default.cpu >= 100),
        Figure("  the import-and-read floor of that log", f"{sweep_floor.cpu:.2f} s", ref_label,
               f"at most {ref_sweep.cpu / sweep_floor.cpu:.0f}x for any program that reads it with pandas and fits with scipy"),
        *(Figure(f"  the sweep alone (with it - without), {name}", f"{ours.cpu - plain.cpu:.2f} s",
                 f"the script's ({sweep_alone:.1f} s)", f"{sweep_alone / max(ours.cpu - plain.cpu, 0.01):.0f}x faster",
                 ">= 100x", sweep_alone / max(ours.cpu - plain.cpu, 0.01) >= 100)
          for name, ours, plain in (("power-law", power, power_plain), ("default", default, default_plain))),
        Figure("  power-law sweep rows within 1e-4 of the script's", f"{agreeing} of {windows}", "",
               f"largest difference {largest:.1e}"),
        Figure(f"sweep, {args.big_rows:,} rows, default model", f"{big_sweep.cpu:.2f} s", f"one analysis ({analysis.cpu:.2f} s)",
               f"{big_sweep.cpu / analysis.cpu:.1f}x", "<= 10x", big_sweep.cpu / analysis.cpu <= 10),
        Figure(f"sweep, {args.big_rows:,} rows, --model power-law", f"{power_sweep.cpu:.2f} s",
               f"one analysis ({power_analysis.cpu:.2f} s)", f"{power_sweep.cpu / power_analysis.cpu:.1f}x", "<= 10x",
               power_sweep.cpu / power_analysis.cpu <= 10),
        Figure(f"one analysis, {args.big_rows:,} rows with lr", f"{analysis.cpu:.2f} s", f"import and read ({big_floor.cpu:.2f} s)",
               f"{analysis.cpu / big_floor.cpu:.2f}x (without scipy.optimize: {analysis.cpu / bare.cpu:.2f}x of {bare.cpu:.2f} s)",
               "<= 1.5x", analysis.cpu / big_floor.cpu <= 1.5),
        Figure(f"peak memory, one analysis of {args.big_rows:,} rows", f"{analysis.rss / MB:.0f} MB",
               f"import and read ({big_floor.rss / MB:.0f} MB)", f"{analysis.rss / big_floor.rss:.2f}x", "<= 300 MB",
               analysis.rss <= 300 * MB),
        Figure(f"one analysis + plot, {huge_rows:,} rows", f"{huge.cpu:.2f} s", f"import and read ({huge_floor.cpu:.2f} s)",
               f"{huge.cpu / huge_floor.cpu:.2f}x"),
        Figure(f"peak memory, {huge_rows:,} rows + plot", f"{huge.rss / GB:.2f} GB", f"import and read ({huge_floor.rss / GB:.2f} GB)",
               f"{huge.rss / huge_floor.rss:.2f}x", "<= 1.5 GB", huge.rss <= 1.5 * GB),
        Figure(f"peak memory, sweep of {args.big_rows:,} rows", f"{big_sweep.rss / GB:.2f} GB", f"one analysis ({analysis.rss / GB:.2f} GB)",
               f"{big_sweep.rss / analysis.rss:.2f}x"),
    ]
    print_figures(figures)


if __name__ == "__main__":
    main()
