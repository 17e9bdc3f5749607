"""CPU time of the command line where it should be instant, and of small analyses.

    python benchmarks/bench_cli_startup.py [--quick] [--repeat 5]

Prints, each the median over ``--repeat`` fresh processes of the CPU time (user + sys)
the process used, beside its target:
  1. ``tracker-plugin --help``, ``analyze --help`` and a bad argument (``--interval 5``):
     answered without loading the analysis, pandas or scipy (target: <= 0.25 s each);
  2. the import floor, ``python -c "import pandas"``: what any analysis pays first; and
     beside it the floor of an analysis that fits (``import pandas, scipy.optimize``: SciPy's
     solvers, which a forecast needs and an analysis whose targets are all reached does not
     import), so the part of each analysis beyond both is plain;
  3. ``analyze`` of synthetic CSVs of 100, 1,000 and 100,000 rows, for a target 3% below
     the run's last loss (so the laws are fitted and a forecast made), each above both
     floors; the 100-row run's target is 0.3 s above the import floor.
The package's bytecode is compiled first, as ``pip install`` does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import COMMAND, Figure, compile_package, floor, in_turns, median, parser, print_figures

from tracker_plugin.testing import synthetic_run

ANSWERED = 0.25  # seconds: --help and a bad argument
SMALL = 0.3  # seconds above the import floor: a 100-row analysis


def _csv(folder: Path, rows: int) -> tuple[Path, str]:
    """A synthetic run of ``rows`` rows, and a target 3% below its last logged losses."""
    frame = synthetic_run(rows, seed=0, warmup=min(100, rows // 10))
    path = folder / f"run_{rows}.csv"
    frame.to_csv(path, index=False)
    return path, f"{frame['train_loss'].tail(10).mean() * 0.97:.4f}"


def main() -> None:
    options = parser(__doc__, quick="the 100- and 1,000-row analyses only", repeat=5)
    args = options.parse_args()
    compile_package()
    answered = [("--help", ["--help"], 0), ("analyze --help", ["analyze", "--help"], 0),
                ("a bad argument (--interval 5)", ["analyze", "run.csv", "-t", "3", "--interval", "5"], 2)]
    with tempfile.TemporaryDirectory() as tmp:
        sizes = (100, 1_000) if args.quick else (100, 1_000, 100_000)
        runs = [(size, *_csv(Path(tmp), size)) for size in sizes]
        commands = [floor("pandas"), floor("pandas, scipy.optimize"), *(COMMAND + extra for _, extra, _ in answered),
                    *([*COMMAND, "analyze", str(path), "-t", target] for _, path, target in runs)]
        codes = [0, 0, *(code for _, _, code in answered), *(0 for _ in runs)]
        measured = in_turns(commands, args.repeat, pick=median, expect=codes)
    pandas_floor, solver, rest = measured[0].cpu, measured[1].cpu, measured[2:]
    floors = f"pandas {pandas_floor:.2f} s, solvers {solver:.2f} s"
    figures = [Figure(label, f"{p.cpu:.3f} s", "", "", f"<= {ANSWERED} s", p.cpu <= ANSWERED)
               for (label, _, _), p in zip(answered, rest)]
    figures += [Figure('import floor: python -c "import pandas"', f"{pandas_floor:.3f} s"),
                Figure('with the solvers: "import pandas, scipy.optimize"', f"{solver:.3f} s", "", f"floor + {solver - pandas_floor:.2f}")]
    for (size, _, _), p in zip(runs, rest[len(answered):]):
        small = size == 100
        figures.append(Figure(f"analyze, {size:,} rows", f"{p.cpu:.3f} s", floors,
                              f"floor + {p.cpu - pandas_floor:.2f}, solvers + {p.cpu - solver:.2f}",
                              f"<= floor + {SMALL} s ({pandas_floor + SMALL:.2f} s)" if small else "(reported)",
                              p.cpu <= pandas_floor + SMALL if small else None))
    print(f"CPU seconds (user + sys), median of {args.repeat} processes, in turns; {' '.join(COMMAND)}")
    print_figures(figures, baseline="floors (same run)", comparison="above the floors")


if __name__ == "__main__":
    main()
