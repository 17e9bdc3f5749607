"""A night's bulk annotation on a real ``mlflow server``: cost per run, reruns, fan-out.

    python benchmarks/bench_bulk.py [--quick] [--runs 1000] [--server-workers 2] [--workers 1 2 4]
                                    [--executors threads processes dask] [--data-dir DIR] [--only olmo]

Starts a local ``mlflow server`` (sqlite, 127.0.0.1), logs ``--runs`` finished runs of
2,000 to 20,000 steps (loss, tokens, lr; a seeded draw) into one experiment, then prints:
  1. the first ``annotate`` of the experiment (one run at a time, so that each part's CPU
     is measured whole; history cache off): the client's CPU per run (target: <= 120 ms),
     split into reading, the analysis, the plot and the write-back, the wall time per run,
     and the failures (target: 0), each failure's reason; beside them, MLflow's own client
     fetching the same histories, and the floor of the plot (plot_floor.py: a bare
     matplotlib figure of the plot's size, axes and lines, saved to PNG); the smoothed series' share of the write-back (building it, reading
     what the run holds, its rows) and the metric rows per run with and without it;
  2. an unchanged rerun, one run at a time too: its wall time as a share of the first's
     (target: <= 5%), how many runs it left unchanged and how many history reads it sent
     (target: 0); then ``annotate --force --no-plot``: the client's CPU per run without
     the plot, beside the first's;
  3. real finished runs: the OLMo ladder's 15 logs (../shared/data/runs, 1,278 rows in
     all, val_loss), logged ``--runs`` times in turn into two experiments, annotated for
     3.3 and 3.1 (where the runs stand settled: reached, or the run ended above it) with
     the plot in one and ``--no-plot`` in the other: the client's CPU per new run, split
     as above, beside the floor of the plot (targets: <= 250 ms with the plot, <= 100 ms
     without; the imports paid once for the job, as a nightly pass pays them);
  4. ``annotate --force`` with threads, processes and a Dask ``LocalCluster`` at each of
     ``--workers``: wall time and the speed-up over the same executor at the first count
     (and over threads at 1, the baseline, measured in the same run);
  5. the arithmetic for 10,000 runs on a 2-core machine, from the figures above.
``--only olmo`` runs part 3 alone (it logs its own runs). The server's CPU is printed
beside the client's: on 2 cores they share the machine.
``--data-dir`` keeps the server's store, so the runs are logged once.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
from harness import RUNS, group_cpu, parser

from tests.doubles.mlflow_runs import log_run
from tests.doubles.mlflow_server import MlflowServer
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.frame.history import Columns
from tracker_plugin.jobs import annotation as annotation_module
from tracker_plugin.jobs import runner
from tracker_plugin.jobs.annotate import annotate_runs
from tracker_plugin.jobs.fanout import make_executor
from tracker_plugin.keys import SERIES, is_series
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions
from tracker_plugin.trackers.mlflow_runs import MlflowSource

EXPERIMENT = "bench-bulk"
KEYS = ["train_loss", "tokens", "lr"]
CONFIG = AnalysisConfig(targets=(3.2, 2.9))
TARGET_CPU_MS = 120.0
TARGET_RERUN = 0.05
# The OLMo ladder's finished runs, as the issue measured a nightly pass over them.
OLMO = sorted(RUNS.glob("olmo-ladder-*xC.csv"))
OLMO_CONFIG = AnalysisConfig(targets=(3.3, 3.1))
OLMO_COLUMNS = Columns().with_overrides(loss="val_loss")
TARGET_SETTLED_MS = {True: 250.0, False: 100.0}  # with the plot, without


def ensure_runs(uri: str, runs: int, store: Path | None = None) -> str:
    """The experiment's id, with ``runs`` finished runs logged (those an earlier call left are kept).

    With ``store`` (the server's sqlite file), each run is created and ended through the
    REST API and its points are inserted in bulk, in the rows MLflow's own ``log_batch``
    writes: logging 30M points through the API takes about an hour here.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    name = f"{EXPERIMENT}-{runs}"
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
    have = len(client.search_runs([experiment_id], max_results=50_000))
    steps = np.random.default_rng(0).integers(2_000, 20_001, size=runs)
    started = time.perf_counter()
    for k in range(have, runs):
        frame = synthetic_run(int(steps[k]), seed=k, log_every=1)
        if k == 0 or store is None:  # the first through the REST API: the rows the rest copy
            log_run(client, experiment_id, frame, name=f"run-{k:05d}", keys=KEYS, workers=4)
        else:
            run_id = client.create_run(experiment_id, run_name=f"run-{k:05d}").info.run_id
            store_points(store, run_id, frame)
            client.set_terminated(run_id)
    if runs > have:
        points = int(steps[have:].sum()) * len(KEYS)
        print(f"setup: logged {runs - have} runs, {points:,} points, in {time.perf_counter() - started:.0f} s")
    print(f"{runs} runs of {int(steps.min()):,}-{int(steps.max()):,} steps (mean {steps.mean():,.0f}), keys {KEYS}")
    return str(experiment_id)


def store_points(store: Path, run_id: str, frame) -> None:
    """Insert ``frame``'s ``KEYS`` as ``log_frame`` logs them (row ``i`` at ``start + i`` ms)
    into the store's ``metrics`` and ``latest_metrics`` tables."""
    import sqlite3

    start = int(time.time() * 1000)
    stamps = start + np.arange(len(frame), dtype=np.int64)
    steps = frame["step"].to_numpy(dtype=np.int64)
    rows, latest = [], []
    for key in KEYS:
        values = frame[key].to_numpy(dtype=float)
        rows += zip([key] * len(frame), values.tolist(), stamps.tolist(), [run_id] * len(frame), steps.tolist(), [0] * len(frame))
        last = int(np.argmax(steps))  # MLflow's latest: the largest step, then the latest time
        latest.append((key, float(values[last]), int(stamps[last]), int(steps[last]), 0, run_id))
    with sqlite3.connect(store, timeout=60) as db:
        db.executemany("INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?, ?, ?, ?, ?, ?)", rows)
        db.executemany("INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) VALUES (?, ?, ?, ?, ?, ?)", latest)


class Parts:
    """CPU seconds of this process during each part of a run's work, summed over runs: a
    serial pass, so the threads a part starts (a read's key fetches) are counted in it."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.lock = threading.Lock()

    def timed(self, part: str, func: Callable) -> Callable:
        def call(*args, **kwargs):
            start = time.process_time()
            try:
                return func(*args, **kwargs)
            finally:
                with self.lock:
                    self.cpu[part] += time.process_time() - start

        return call


@contextmanager
def measured_parts() -> Iterator[Parts]:
    """Count the CPU of reading, analysis, plot and write-back (the plot is drawn inside the
    write and taken out of it)."""
    parts = Parts()
    saved = (MlflowSource.read, runner.run_analysis, annotation_module._plot_png, MlflowSource.write,
             annotation_module.smoothed_series, MlflowSource._series_rows)  # fmt: skip
    MlflowSource.read = parts.timed("reading", saved[0])
    runner.run_analysis = parts.timed("analysis", saved[1])
    annotation_module._plot_png = parts.timed("plot", saved[2])
    MlflowSource.write = parts.timed("write-back (with the plot)", saved[3])
    annotation_module.smoothed_series = parts.timed("series: built", saved[4])
    MlflowSource._series_rows = parts.timed("series: held read, rows", saved[5])
    try:
        yield parts
    finally:
        (MlflowSource.read, runner.run_analysis, annotation_module._plot_png, MlflowSource.write,
         annotation_module.smoothed_series, MlflowSource._series_rows) = saved  # fmt: skip


def options(uri: str, workers: int, columns: Columns | None = None) -> SourceOptions:
    read = ReadOptions(workers=workers, use_cache=False, columns=columns or Columns())
    return SourceOptions(read, MlflowOptions(tracking_uri=uri))


def one_pass(uri: str, spec: str, workers: int, *, force: bool = False, executor=None, plot: bool = True,
             series: bool = True, config: AnalysisConfig = CONFIG,
             columns: Columns | None = None) -> tuple[float, float, list]:
    """Wall and this process's CPU seconds of one annotate, and its outcomes."""
    wall, cpu = time.perf_counter(), time.process_time()
    outcomes = annotate_runs([spec], options(uri, workers, columns), config, force=force, executor=executor, plot=plot,
                             series=series)
    return time.perf_counter() - wall, time.process_time() - cpu, outcomes


def read_only(uri: str, spec: str, sample: int) -> None:
    """The first ``sample`` runs read and analysed, nothing written: what the server spends
    on the reads."""
    from tracker_plugin.jobs.runner import process_runs
    from tracker_plugin.trackers import open_source

    source = open_source(spec, options(uri, 1))
    try:
        process_runs(source, list(source.runs())[:sample], CONFIG, write=False, workers=1, progress=False)
    finally:
        source.close()


def baselines(uri: str, spec: str, sample: int) -> None:
    """Baselines measured here: MLflow's own client fetching the same histories, and a
    matplotlib figure of the plot's size with only the parts every run plot has (one line on a log token axis, its grid, a title, axis labels,
    a legend outside the axes, the constrained layout that keeps them in the figure)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([spec.rsplit("/", 1)[1]], max_results=sample)
    start = time.process_time()
    for run in runs:
        for key in KEYS:
            client.get_metric_history(run.info.run_id, key)
    read = (time.process_time() - start) / len(runs)
    print(f"     reading's baseline: MLflow's get_metric_history of the {len(KEYS)} keys, {1000 * read:.0f} ms per run "
          f"(the first {len(runs)} runs)")  # fmt: skip
    print(f"     floor of the plot: a bare figure of its size, axes and lines, {1000 * plot_floor(synthetic_analysis()):.0f} ms")


def plot_floor(analysis, count: int = 10) -> float:
    """CPU seconds of the bare figure of ``analysis``'s plot (plot_floor.py: its size,
    dpi, axes and lines on the same scales, saved to PNG by Agg), the median of ``count``."""
    from plot_floor import bare_png, in_turns_cpu

    from tracker_plugin.report.plot import analysis_figure

    return in_turns_cpu({"floor": bare_png(analysis_figure(analysis))}, count)["floor"]


def synthetic_analysis():
    """The analysis of a run like the benchmark's own (10,000 steps), for its plot's floor."""
    import tracker_plugin as tp

    return tp.analyze(synthetic_run(10_000, seed=0, log_every=1), CONFIG.targets, run="run")


def olmo_analysis():
    """The analysis of the OLMo ladder's 370M 5xC log, for its plot's floor."""
    import tracker_plugin as tp

    path = next(p for p in OLMO if "370M-5xC" in p.name)
    return tp.analyze(pd.read_csv(path), OLMO_CONFIG.targets, run=path.stem, columns=OLMO_COLUMNS)


def without_series(server: MlflowServer, spec: str, n: int, first: dict[str, float], server_first: float,
                   rows: dict[str, int]) -> None:
    """The same runs annotated again without the series (``--no-series --force``): the
    write-back as it was before there were series, measured in this run beside the first's."""
    before, server_cpu = own_rows(server), group_cpu(server.pid)
    with measured_parts() as parts:
        one_pass(server.uri, spec, 1, force=True, series=False)
    server_cpu = group_cpu(server.pid) - server_cpu
    written = sum(own_rows(server).values()) - sum(before.values())

    def write(cpu: dict[str, float]) -> float:
        return 1000 * (cpu.get("write-back (with the plot)", 0.0) - cpu.get("plot", 0.0)) / n

    print(f"   the same runs again without the series (--no-series --force): write-back {write(parts.cpu):.1f} ms "
          f"client CPU per run and {written / n:,.1f} metric rows, against {write(first):.1f} ms and "
          f"{sum(rows.values()) / n:,.0f} rows with them; server CPU per run {1000 * server_cpu / n:.0f} ms "
          f"against {1000 * server_first / n:.0f} ms for the first pass (which read the histories too)")  # fmt: skip


def own_rows(server: MlflowServer) -> dict[str, int]:
    """Metric rows of our keys in the server's store, by key (the store's own count)."""
    import sqlite3

    with sqlite3.connect(server.root / "mlflow.db", timeout=60) as db:
        found = db.execute("SELECT key, COUNT(*) FROM metrics WHERE key LIKE 'loss_eta%' OR key LIKE 'when_%' GROUP BY key")
        return {key: int(count) for key, count in found.fetchall()}


def failures(outcomes: list) -> list[str]:
    return [f"{o.run.name}: {o.error}" for o in outcomes if o.failed]


def main() -> None:
    options = parser(__doc__, quick="60 runs, no fan-out passes")
    options.sized("--runs", 1000, 60, "runs in the experiment", type=int)
    options.add_argument("--server-workers", type=int, default=2)
    options.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    options.add_argument("--executors", nargs="*", default=None,
                         help="none given: no fan-out passes (measure them on fewer runs) [default: threads processes "
                              "dask; none with --quick]")
    options.add_argument("--data-dir", type=Path, help="keep the server's store here (default: a temporary dir)")
    options.add_argument("--only", choices=["olmo"], help="only this part: olmo, the OLMo ladder's finished runs (3.)")
    args = options.parse_args()
    if args.executors is None:
        args.executors = [] if args.quick else ["threads", "processes", "dask"]
    # The benchmark's own process: MLflow's progress bars and run links would bury the figures.
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"

    with tempfile.TemporaryDirectory(prefix="bench-bulk-") as tmp:
        root = args.data_dir or Path(tmp) / "server"
        with MlflowServer(root, workers=args.server_workers) as server:
            print(f"mlflow server at {server.uri}, {args.server_workers} workers; {os.cpu_count()} CPUs, "
                  f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
            n = args.runs
            if args.only == "olmo":
                olmo_passes(server, n, plot_floor(olmo_analysis()))
                return
            spec = f"mlflow:experiment/{ensure_runs(server.uri, args.runs, root / 'mlflow.db')}"
            figures = first_and_rerun(server, spec, n)
            olmo_passes(server, n, plot_floor(olmo_analysis()))
            walls = fan_out(server.uri, spec, n, args.executors, args.workers) if args.executors else {}
            arithmetic(figures, walls, n)
            print(f"load average {os.getloadavg()[0]:.1f} after the figures")
    sys.stdout.flush()


def first_and_rerun(server: MlflowServer, spec: str, n: int) -> dict[str, float]:
    pgid = server.pid
    server_cpu = group_cpu(pgid)
    rows_before = own_rows(server)
    mark = server.mark()
    with measured_parts() as first:
        wall, cpu, outcomes = one_pass(server.uri, spec, 1, force=True)
    server_cpu = group_cpu(pgid) - server_cpu
    series_reads = server.requests_since(mark, "/metrics/get-history") - n * len(KEYS)  # beyond the histories read
    rows = {key: count - rows_before.get(key, 0) for key, count in own_rows(server).items()}
    failed = failures(outcomes)
    cpu_ms = 1000 * cpu / n
    print(f"\n1. first annotate, one run at a time, {n} runs: {Counter(str(o.action) for o in outcomes)}")
    print(f"   client CPU per run {cpu_ms:.0f} ms (target <= {TARGET_CPU_MS:.0f} ms: "
          f"{'met' if cpu_ms <= TARGET_CPU_MS else 'missed'}); server CPU per run {1000 * server_cpu / n:.0f} ms")  # fmt: skip
    show_parts(first, n)
    plot = first.cpu.get("plot", 0.0)
    print(f"     {'write-back without the plot':<28} {1000 * (first.cpu.get('write-back (with the plot)', 0) - plot) / n:7.1f} ms per run")
    series_rows = sum(count for key, count in rows.items() if is_series(key))
    print(f"   metric rows written per run: {series_rows / n:,.0f} of the series ({', '.join(SERIES)}), "
          f"{(sum(rows.values()) - series_rows) / n:,.1f} of the numbers; {series_reads / n:.1f} history reads "
          f"per run to find the series points a run holds")  # fmt: skip
    baselines(server.uri, spec, min(n, 50))
    print(f"   wall per run {1000 * wall / n:.0f} ms ({wall:.1f} s in all)")
    print(f"   failures: {len(failed)} (target 0)")
    for line in failed[:10]:
        print(f"     {line}")

    sample = min(n, 100)
    server_read, client_read = group_cpu(pgid), time.process_time()
    read_only(server.uri, spec, sample)
    server_read, client_read = group_cpu(pgid) - server_read, time.process_time() - client_read
    print(f"   of which reading the histories alone (the first {sample} runs read and analysed, nothing written): "
          f"server CPU {1000 * server_read / sample:.0f} ms per run, client CPU {1000 * client_read / sample:.0f} ms with the analysis")  # fmt: skip

    mark = server.mark()
    rewall, recpu, again = one_pass(server.uri, spec, 1)
    reads = server.requests_since(mark, "/metrics/get-history")
    unchanged = sum(str(o.action) == "unchanged" for o in again)
    share = rewall / wall
    print(f"\n2. unchanged rerun: {rewall:.2f} s wall, {100 * share:.1f}% of the first (target <= "
          f"{100 * TARGET_RERUN:.0f}%: {'met' if share <= TARGET_RERUN else 'missed'}); client CPU {1000 * recpu / n:.1f} ms "
          f"per run; {unchanged} of {n} unchanged; {reads} history reads (target 0)")  # fmt: skip
    with measured_parts() as parts:
        _, bare_cpu, outcomes = one_pass(server.uri, spec, 1, force=True, plot=False)
    print(f"   annotate --force --no-plot: client CPU per run {1000 * bare_cpu / n:.0f} ms (with the plot: {cpu_ms:.0f} ms); "
          f"failures {len(failures(outcomes))}")
    show_parts(parts, n)
    without_series(server, spec, n, first.cpu, server_cpu, rows)
    return {"cpu": cpu / n, "server_cpu": server_cpu / n, "wall": wall / n, "rerun": rewall / n, "no_plot": bare_cpu / n}


def show_parts(parts: Parts, n: int) -> None:
    for part, seconds in parts.cpu.items():
        print(f"     {part:<28} {1000 * seconds / n:7.1f} ms per run")


def ensure_olmo(uri: str, runs: int, name: str) -> str:
    """An experiment of ``runs`` finished runs, the OLMo ladder's logs in turn, each logged
    as its CSV holds it (an earlier call's runs are kept)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
    have = len(client.search_runs([experiment_id], max_results=50_000))
    for k in range(have, runs):
        path = OLMO[k % len(OLMO)]
        log_run(client, experiment_id, pd.read_csv(path), name=f"{path.stem}-{k:04d}", workers=4)
    return str(experiment_id)


def olmo_passes(server: MlflowServer, n: int, floor: float) -> dict[bool, float]:
    """The first annotate of ``n`` finished OLMo ladder runs, with and without the plot:
    the client's CPU per run."""
    if not OLMO:
        print(f"\n3. no OLMo ladder logs in {RUNS}: skipped")
        return {}
    print(f"\n3. the OLMo ladder's {len(OLMO)} finished runs ({sum(len(pd.read_csv(p)) for p in OLMO):,} rows), "
          f"{n} runs, targets {', '.join(f'{t:g}' for t in OLMO_CONFIG.targets)} on val_loss, one run at a time; "
          f"floor of the plot {1000 * floor:.0f} ms")
    found: dict[bool, float] = {}
    for plot in (True, False):
        name = f"olmo-ladder-{n}-{'plot' if plot else 'no-plot'}"
        spec = f"mlflow:experiment/{ensure_olmo(server.uri, n, name)}"
        with measured_parts() as parts:
            _, cpu, outcomes = one_pass(server.uri, spec, 1, force=True, plot=plot, config=OLMO_CONFIG,
                                        columns=OLMO_COLUMNS)
        found[plot] = cpu / n
        statuses = Counter(str(t.status) for o in outcomes if o.analysis for t in o.analysis.targets)
        settled = all(s in ("reached", "not_reached") for s in statuses)
        target = TARGET_SETTLED_MS[plot]
        print(f"   {'with the plot' if plot else 'with --no-plot':<15} client CPU per run {1000 * cpu / n:.0f} ms "
              f"(target <= {target:.0f} ms: {'met' if 1000 * cpu / n <= target else 'missed'}); failures "
              f"{len(failures(outcomes))}; answers {dict(statuses)}{'' if settled else ' (NOT all settled)'}")
        show_parts(parts, n)
    return found


def fan_out(uri: str, spec: str, n: int, executors: list[str], counts: list[int]) -> dict[tuple[str, int], float]:
    print(f"\n4. annotate --force of the {n} runs, wall seconds (speed-up over the same executor at "
          f"{counts[0]} worker(s); over threads at {counts[0]}):")  # fmt: skip
    walls: dict[tuple[str, int], float] = {}
    for kind in executors:
        for workers in counts:
            with make_executor(kind, workers) as executor:
                if executor is not None:  # start-up: workers spawned and importing before the clock starts
                    list(executor.map(abs, range(workers)))
                wall, _, outcomes = one_pass(uri, spec, workers, force=True, executor=executor)
            walls[kind, workers] = wall
            base, threads = walls[kind, counts[0]], walls.get(("threads", counts[0]), wall)
            print(f"   {kind:<9} {workers} worker(s): {wall:7.1f} s, {1000 * wall / n:5.0f} ms per run, "
                  f"x{base / wall:.2f}, x{threads / wall:.2f} over threads; failures {len(failures(outcomes))}")  # fmt: skip
    return walls


def arithmetic(figures: dict[str, float], walls: dict[tuple[str, int], float], n: int) -> None:
    """10,000 runs on a 2-core machine: the client's and the server's CPU share the 2 cores."""
    runs = 10_000
    cpu = figures["cpu"] + figures["server_cpu"]
    best = min(walls.items(), key=lambda item: item[1]) if walls else None
    print("\n5. 10,000 runs on a 2-core machine (client and server on it):")
    print(f"   CPU-bound floor: ({1000 * figures['cpu']:.0f} ms client + {1000 * figures['server_cpu']:.0f} ms server) "
          f"x {runs:,} / 2 cores = {runs * cpu / 2 / 60:.0f} min; with --no-plot "
          f"({1000 * figures['no_plot']:.0f} ms client) {runs * (figures['no_plot'] + figures['server_cpu']) / 2 / 60:.0f} min")  # fmt: skip
    print(f"   measured first pass, one run at a time: {1000 * figures['wall']:.0f} ms x {runs:,} = {runs * figures['wall'] / 60:.0f} min")
    if best is not None:
        (kind, workers), wall = best
        print(f"   best fan-out measured ({kind}, {workers}): {1000 * wall / n:.0f} ms x {runs:,} = {runs * wall / n / 60:.0f} min")
    print(f"   a night with nothing changed: {1000 * figures['rerun']:.1f} ms x {runs:,} = {runs * figures['rerun'] / 60:.1f} min")


if __name__ == "__main__":
    main()
