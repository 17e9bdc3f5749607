"""CPU time of the command line where it should be instant, and of small analyses.

    python benchmarks/bench_cli_startup.py [--repeat 5]

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

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tracker_plugin.testing import synthetic_run

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = Path(sys.executable).with_name("tracker-plugin")
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "tracker_plugin"]


def cpu(command: list[str], expect: int = 0) -> float:
    """User + system CPU seconds of one process running ``command``."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    assert process.stderr is not None
    if os.waitstatus_to_exitcode(status) != expect:
        raise SystemExit(f"exit code {os.waitstatus_to_exitcode(status)} from {' '.join(command)}\n"
                         f"{process.stderr.read().decode()}")
    process.stderr.close()
    return usage.ru_utime + usage.ru_stime


def median_cpu(command: list[str], repeat: int, expect: int = 0) -> float:
    return statistics.median(cpu(command, expect) for _ in range(repeat))


def _csv(folder: Path, rows: int) -> tuple[Path, str]:
    """A synthetic run of ``rows`` rows, and a target 3% below its last logged losses."""
    frame = synthetic_run(rows, seed=0, warmup=min(100, rows // 10))
    path = folder / f"run_{rows}.csv"
    frame.to_csv(path, index=False)
    return path, f"{frame['train_loss'].tail(10).mean() * 0.97:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "tracker_plugin", quiet=1)
    floor = median_cpu([sys.executable, "-c", "import pandas"], args.repeat)
    solver = median_cpu([sys.executable, "-c", "import pandas, scipy.optimize"], args.repeat)
    rows: list[tuple[str, float, str, bool | None]] = []
    for label, extra, expect in (
        ("--help", ["--help"], 0),
        ("analyze --help", ["analyze", "--help"], 0),
        ("a bad argument (--interval 5)", ["analyze", "run.csv", "-t", "3", "--interval", "5"], 2),
    ):
        seconds = median_cpu(COMMAND + extra, args.repeat, expect)
        rows.append((label, seconds, "<= 0.25 s", seconds <= 0.25))
    rows.append(('import floor: python -c "import pandas"', floor, "", None))
    rows.append(('with the solvers: "import pandas, scipy.optimize"', solver, "", None))
    with tempfile.TemporaryDirectory() as tmp:
        for size in (100, 1_000, 100_000):
            path, target = _csv(Path(tmp), size)
            seconds = median_cpu([*COMMAND, "analyze", str(path), "-t", target], args.repeat)
            if size == 100:
                rows.append((f"analyze, {size:,} rows", seconds, f"<= floor + 0.3 s ({floor + 0.3:.2f} s)",
                             seconds <= floor + 0.3))
            else:
                rows.append((f"analyze, {size:,} rows", seconds, "", None))
    print(f"CPU seconds (user + sys), median of {args.repeat} processes; {' '.join(COMMAND)}")
    width = max(len(row[0]) for row in rows)
    for label, seconds, target, met in rows:
        verdict = "" if met is None else ("met" if met else "NOT MET")
        above = ""
        if label.startswith("analyze,"):
            above = f"(floor + {seconds - floor:.2f}, solvers + {seconds - solver:.2f})"
        elif label.startswith("with the solvers"):
            above = f"(floor + {solver - floor:.2f})"
        print(f"  {label:<{width}}  {seconds:6.3f} s {above:<34} {target:<32} {verdict}".rstrip())


if __name__ == "__main__":
    main()
