"""CPU of one analysis of a small run, and of larger ones, beside the import floor.

    python benchmarks/bench_small_runs.py [--quick] [--repeat 3]

A user who analyses a short run (a few hundred evals, say) waits for the fits, not for the
log: issue 33 saw 3.7 s of CPU for a 96-row ``analyze``, 112 ``least_squares`` fits. The
target: one analysis of a 100-row run costs at most 0.3 s of CPU beyond the import floor
(``python -c "import pandas"``, which every command pays before it reads anything).

Prints, for the bundled OLMo run (``examples/runs/olmo-ladder-370M-5xC.csv``, target 3.1) as
it stood at 80% of its 96 rows (past the log, the plan inferred, so the law is chosen,
fitted and bootstrapped over the plausible plans; the whole run, which ended above 3.1,
fits no law: its row shows that too) and synthetic cosine runs of 100, 1,000 and 100,000
rows (a target past the log, the plan inferred):
  - the CPU of ``run_analysis`` on a loaded History, in process (``time.process_time``,
    scipy.optimize already imported; the best of ``--repeat``), with the fits it makes
    (``least_squares`` and ``minimize_scalar`` calls);
  - the CPU of the whole ``tracker-plugin analyze`` process for the run at 80%, and the
    import floor's, measured in the same run (each the best of ``--repeat``, in turns).
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import scipy.optimize
from harness import ROOT, cpu_of, floor, in_turns, parser

import tracker_plugin as tp
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.report.tables import text_table
from tracker_plugin.testing import synthetic_run

SMALL_RUN = ROOT / "examples" / "runs" / "olmo-ladder-370M-5xC.csv"
SMALL_TARGET = 3.1
RUNNING = 0.8  # the share of the small run's rows logged when it is forecast
TARGET_CPU = 0.3  # seconds beyond the import floor, for a 100-row run
SIZES = (100, 1_000, 100_000)
LOG_EVERY = 20  # steps between logged rows of the synthetic runs (an eval cadence)


def counting(calls: Counter[str]) -> None:
    """Count SciPy's solver calls: the fits import them from scipy.optimize when they run."""

    def wrap(name: str, solver: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return solver(*args, **kwargs)

        return counted

    for name in ("least_squares", "minimize_scalar"):
        setattr(scipy.optimize, name, wrap(name, getattr(scipy.optimize, name)))


def analysis_cpu(history: tp.History, config: AnalysisConfig, repeat: int, calls: Counter[str]) -> tuple[float, Counter[str]]:
    """The best CPU seconds of one analysis, and the solver calls one analysis makes."""

    def once() -> None:
        calls.clear()
        run_analysis(history, config)

    return cpu_of(once, repeat), Counter(calls)


def synthetic(rows: int, directory: Path) -> tuple[tp.History, float]:
    """A cosine run of ``rows`` logged rows, halfway through its plan, and a target past it."""
    steps = rows * LOG_EVERY
    spec = f"cosine:warmup={max(steps // 50, 1)},total={2 * steps},final=0.1"
    frame = synthetic_run(steps, log_every=LOG_EVERY, lr_schedule=spec, anneal_gain=0.1, noise=0.01,
                          noise_correlation=0.5, seed=rows)
    path = directory / f"synthetic-{rows}.csv"
    frame.drop(columns=["global_batch"]).to_csv(path, index=False)  # the plan is inferred from the lr
    history = tp.load_csv(path)
    return history, float(history.loss[-1]) - 0.05


def main() -> None:
    args = parser(__doc__, quick="the synthetic runs of 100 and 1,000 rows only", repeat=3).parse_args()
    calls: Counter[str] = Counter()
    counting(calls)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        finished = tp.load_csv(SMALL_RUN)
        running = Path(tmp) / SMALL_RUN.name
        frame = pd.read_csv(SMALL_RUN)
        frame.head(round(RUNNING * len(frame))).to_csv(running, index=False)
        cli = [sys.executable, "-m", "tracker_plugin", "analyze", str(running), "--target", str(SMALL_TARGET)]
        import_floor, process = in_turns([floor("pandas"), cli], args.repeat)
        floor_cpu, whole = import_floor.cpu, process.cpu
        for label, history in ((f"at {RUNNING:.0%}", tp.load_csv(running)), ("finished, no law fitted", finished)):
            cpu, fits = analysis_cpu(history, AnalysisConfig(targets=(SMALL_TARGET,)), args.repeat, calls)
            rows.append((f"{SMALL_RUN.name} {label} ({len(history.step)} rows)", cpu, fits, True))
        for size in SIZES[:2] if args.quick else SIZES:
            history, target = synthetic(size, Path(tmp))
            cpu, fits = analysis_cpu(history, AnalysisConfig(targets=(target,)), args.repeat, calls)
            rows.append((f"synthetic cosine, {size:,} rows", cpu, fits, size <= SIZES[0]))

    print(f"import floor (python -c 'import pandas'): {floor_cpu:.2f} s CPU; best of {args.repeat}, in turns")
    print(f"target: a 100-row analysis within {TARGET_CPU} s of CPU beyond the import floor")
    header = ("analysis", "CPU (in process)", "least_squares", "minimize_scalar", "within target")
    table = [
        (label, f"{cpu:.3f} s", str(fits["least_squares"]), str(fits["minimize_scalar"]),
         ("yes" if cpu <= TARGET_CPU else "NO") if small else "-")
        for label, cpu, fits, small in rows
    ]
    print("\n".join(text_table(header, table)))
    beyond = whole - floor_cpu
    print(f"tracker-plugin analyze {SMALL_RUN.name} (at {RUNNING:.0%}) --target {SMALL_TARGET}: {whole:.2f} s CPU, "
          f"{beyond:.2f} s beyond the import floor (the CLI's own imports included)")


if __name__ == "__main__":
    main()
