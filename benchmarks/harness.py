"""What the benchmark scripts share: their options, timing beside floors measured in the same run, the table.

Every script is run as ``python benchmarks/NAME.py [--quick] [...]``, from anywhere;
``benchmarks/`` is then on the path, and importing this module puts the checkout's root
first on it (this checkout's package and its test doubles, ``tests/doubles``).

- :func:`parser`: the options every script has (``--quick``, and ``--repeat`` and
  ``--workers`` where the script asks for them), with the script's docstring as help, and
  :meth:`Options.sized` for a size whose default ``--quick`` makes smaller;
  the public logs' folders (:data:`RUNS`, :data:`RUNS_TIME`, :data:`DATA`),
  :func:`csv_logs` and :func:`fewer` (what ``--quick`` keeps of them).
- Processes: :func:`run` one command in a fresh process and get its CPU (user + system),
  wall time and peak RSS (:class:`Process`); :func:`in_turns` runs several commands in
  turns, so a machine that slows down slows each of them alike, and keeps the best (or
  the median) of each; :func:`floor` is the command of a floor (``python -c "import
  pandas; pandas.read_csv(...)"``), measured beside the figure it bounds.
- In this process: :func:`cpu_of` (the best CPU seconds of a call), :func:`timed` (wall
  seconds and the result), :func:`group_cpu` (a server's process group),
  :func:`machine_cpu`.
- The table: :class:`Figure` (a figure, its baseline measured in the same run, the
  comparison, the target and whether it is met) and :func:`print_figures`; :func:`number`
  formats an optional figure the same way in every script.
"""

from __future__ import annotations

import argparse
import compileall
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The real public logs (../shared/data/runs and runs-time, see their READMEs), found above
# the checkout wherever it sits.
SHARED = next((p / "shared" / "data" for p in ROOT.parents if (p / "shared" / "data" / "runs").is_dir()),
              ROOT.parent / "shared" / "data")
RUNS, RUNS_TIME = SHARED / "runs", SHARED / "runs-time"
DATA = ROOT / "benchmarks" / "data"  # the held-out logs (data/heldout, data/heldout-time) and the speedrun plans
REFERENCE = SHARED.parent / "reference" / "find_target_loss.py"
# ``tracker-plugin ...`` as a user runs it: the console script where installed.
_SCRIPT = Path(sys.executable).with_name("tracker-plugin")
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "tracker_plugin"]
MB = 2**20

T = TypeVar("T")

__all__ = [
    "COMMAND", "DATA", "MB", "REFERENCE", "ROOT", "RUNS", "RUNS_TIME", "SHARED", "Figure", "Options", "Process",
    "best", "child_env", "compile_package", "cpu_of", "csv_logs", "fewer", "floor", "group_cpu", "in_turns", "machine_cpu", "median_of", "number",
    "median", "parser", "print_figures", "run", "share_of", "timed",
]


class Options(argparse.ArgumentParser):
    """A script's options: ``--quick`` and the sizes it sets (:meth:`sized`)."""

    def __init__(self, doc: str | None, quick: str) -> None:
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        self.add_argument("--quick", action="store_true", help=quick)
        self.sizes: list[tuple[str, Any, Any]] = []

    def sized(self, flag: str, full: Any, quick: Any, what: str, **more: Any) -> None:
        """An option whose default is ``full``, or ``quick`` with ``--quick``."""
        action = self.add_argument(flag, default=None, help=f"{what} [default: {_shown(full)}; {_shown(quick)} with --quick]",
                                   **more)
        self.sizes.append((action.dest, full, quick))

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed = super().parse_args(args, namespace)
        for dest, full, quick in self.sizes:
            if getattr(parsed, dest) is None:
                setattr(parsed, dest, quick if parsed.quick else full)
        return parsed


def _shown(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def parser(doc: str | None, *, quick: str, repeat: int | None = None, workers: int | None = None) -> Options:
    """The script's options: ``--quick`` (``quick`` says what it leaves out), and
    ``--repeat`` and ``--workers`` with these defaults where given."""
    options = Options(doc, quick)
    if repeat is not None:
        options.add_argument("--repeat", type=int, default=repeat,
                             help="fresh processes (or calls) per figure; the best or median is kept [default: %(default)s]")
    if workers is not None:
        options.add_argument("--workers", type=int, default=workers, help="processes [default: %(default)s]")
    return options


def csv_logs(*folders: Path) -> list[str]:
    """The CSV logs of these folders, sorted (a W&B export's copy of a run left out)."""
    return sorted(str(p) for d in folders if d.is_dir() for p in d.glob("*.csv") if not p.name.endswith(".wandb-export.csv"))


def fewer(files: Sequence[str], per_family: int = 3) -> list[str]:
    """What ``--quick`` runs of a set of logs: the first ``per_family`` of each family (the
    run name's part before its first '-'), in the order given."""
    seen: dict[str, int] = {}
    kept = []
    for path in files:
        family = Path(path).name.split("-")[0]
        seen[family] = seen.get(family, 0) + 1
        if seen[family] <= per_family:
            kept.append(path)
    return kept


def compile_package() -> None:
    """The package's bytecode, compiled first as ``pip install`` does, so that no figure
    pays for compiling it."""
    compileall.compile_dir(ROOT / "tracker_plugin", quiet=1)


@dataclass(frozen=True)
class Process:
    """One process: CPU seconds (user + system), wall seconds, peak RSS in bytes, its output."""

    cpu: float
    wall: float
    rss: float
    output: str = ""


def run(command: Sequence[str], *, expect: int = 0, keep_output: bool = False, env: dict[str, str] | None = None) -> Process:
    """``command`` in a fresh process that imports this checkout's package (its root first
    on ``PYTHONPATH``); stops the benchmark if it exits other than ``expect``."""
    start = time.perf_counter()
    process = subprocess.Popen(list(command), stdout=subprocess.PIPE if keep_output else subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=child_env(env))
    output = process.stdout.read().decode() if keep_output and process.stdout else ""
    errors = process.stderr.read().decode() if process.stderr else ""
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != expect:
        raise SystemExit(f"exit code {os.waitstatus_to_exitcode(status)} from {' '.join(command)}\n{errors[-3000:]}")
    return Process(usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss * 1024.0, output)


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process (default: this one's), with the checkout's root
    first on ``PYTHONPATH``, so that it measures this checkout whatever is installed."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    return env


def best(processes: Sequence[Process]) -> Process:
    """The least CPU, wall time and peak memory of several runs of one command."""
    return Process(min(p.cpu for p in processes), min(p.wall for p in processes), min(p.rss for p in processes),
                   processes[0].output)


def median(processes: Sequence[Process]) -> Process:
    """The median CPU, wall time and peak memory of several runs of one command."""
    return Process(statistics.median(p.cpu for p in processes), statistics.median(p.wall for p in processes),
                   statistics.median(p.rss for p in processes), processes[0].output)


def in_turns(commands: Sequence[Sequence[str]], repeat: int, *, pick: Callable[[Sequence[Process]], Process] = best,
             expect: Sequence[int] | None = None) -> list[Process]:
    """Each command run ``repeat`` times, the commands taking turns (a machine that slows
    down slows each alike); the best (or ``pick``) of each command's runs."""
    codes = list(expect) if expect is not None else [0] * len(commands)
    runs: list[list[Process]] = [[] for _ in commands]
    for _ in range(max(1, repeat)):
        for k, command in enumerate(commands):
            runs[k].append(run(command, expect=codes[k]))
    return [pick(each) for each in runs]


def floor(imports: str = "pandas", read: Path | None = None) -> list[str]:
    """A floor's command: ``python -c "import IMPORTS; pandas.read_csv(READ)"``, what any
    program that imports these (and reads that log with pandas) spends first."""
    code = f"import {imports}"
    if read is not None:
        code += ("" if "pandas" in imports.replace(" ", "").split(",") else ", pandas") + f"; pandas.read_csv({str(read)!r})"
    return [sys.executable, "-c", code]


def cpu_of(call: Callable[[], Any], repeat: int = 1) -> float:
    """The least CPU seconds of this process over ``repeat`` calls."""
    fastest = math.inf
    for _ in range(max(1, repeat)):
        start = time.process_time()
        call()
        fastest = min(fastest, time.process_time() - start)
    return fastest


def timed(call: Callable[[], T]) -> tuple[float, T]:
    """Wall seconds of one call, and its result."""
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def group_cpu(pgid: int | None) -> float:
    """CPU seconds used so far by the processes of a process group (a server and its workers)."""
    if pgid is None:
        return 0.0
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def machine_cpu() -> tuple[int, int]:
    """Busy and total jiffies of the whole machine so far (all its CPUs, /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def median_of(values: Iterable[float]) -> float | None:
    """The median, None for no values."""
    found = list(values)
    return float(statistics.median(found)) if found else None


def share_of(flags: Iterable[bool]) -> float | None:
    """The share of true flags, None for none."""
    found = list(flags)
    return sum(found) / len(found) if found else None


def number(value: float | None, spec: str = ".3f", width: int = 0) -> str:
    """An optional figure as every script prints it: ``-`` for none, ``inf`` for an
    unbounded one, an int as it is, else ``format(value, spec)``; right-aligned in ``width``."""
    if value is None:
        text = "-"
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif math.isinf(value):
        text = "inf" if value > 0 else "-inf"
    else:
        text = format(value, spec)
    return f"{text:>{width}}"


@dataclass(frozen=True)
class Figure:
    """One row of a script's table: a figure beside its baseline measured in the same run."""

    label: str
    ours: str
    baseline: str = ""
    comparison: str = ""
    target: str = "(reported)"
    met: bool | None = None


def print_figures(figures: Sequence[Figure], baseline: str = "baseline (same run)", comparison: str = "comparison") -> None:
    """The table every timing script ends with: figure, ours, baseline, comparison, target, met."""
    from tracker_plugin.report.tables import text_table

    verdict = {True: "yes", False: "NO", None: ""}
    rows = [(f.label, f.ours, f.baseline, f.comparison, f.target, verdict[f.met]) for f in figures]
    print("\n".join(text_table(("figure", "ours", baseline, comparison, "target", "met"), rows)))
