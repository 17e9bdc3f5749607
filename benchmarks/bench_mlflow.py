"""Reading a long MLflow run: ours against plain sequential ``MlflowClient.get_metric_history``.

    python benchmarks/bench_mlflow.py [--quick] [--steps 100000] [--server-workers 2] [--data-dir DIR]

Starts a local ``mlflow server`` (sqlite backend, ``--server-workers`` workers), logs one
finished run of ``--steps`` steps x 4 keys into it with ``log_batch`` (MLflow's largest
batches, several at once), then prints:
  1. the seconds to read the 4 keys' full histories with plain sequential
     ``MlflowClient.get_metric_history`` (the baseline), and with ``MlflowSource.read``
     (fetch + alignment + validation; cache off), and the speed-up (target: >= 2x);
  2. the same two figures on the server's sqlite store read directly (no server);
  3. a cached re-analysis: the seconds of ``read`` on a warm cache, and how many
     ``get-history`` requests it made (from the server's access log; target: 0).
Baseline and ours alternate ``--repeat`` times; each figure is the median. The client's
and the server's CPU seconds are printed too, with how many of the machine's CPUs were busy
and how many of those were this benchmark's: on a machine shared with other work, the
wall times move with the load, the CPU seconds do not.

``--data-dir`` keeps the server's store between runs, so the run is logged only once.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness import group_cpu, machine_cpu, parser, timed

from tests.doubles.mlflow_runs import log_frame
from tests.doubles.mlflow_server import MlflowServer
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions, open_source

KEYS = ["train_loss", "tokens", "global_batch", "lr"]


def measured(func: Callable[[], object], pgid: int | None) -> tuple[float, float, float, float, object]:
    """Wall seconds, this process's and the server's CPU seconds, the machine's busy CPUs, the result."""
    cpu, server, machine = time.process_time(), group_cpu(pgid), machine_cpu()
    elapsed, result = timed(func)
    busy, total = (after - before for after, before in zip(machine_cpu(), machine))
    return (
        elapsed,
        time.process_time() - cpu,
        group_cpu(pgid) - server,
        (os.cpu_count() or 1) * busy / max(total, 1),
        result,
    )


def ensure_run(client, steps: int) -> str:
    """The benchmark run, logged now unless an earlier benchmark left it in the store."""
    name = f"bench-{steps}"
    experiment = client.get_experiment_by_name("bench") or client.get_experiment(
        client.create_experiment("bench")
    )
    found = client.search_runs([experiment.experiment_id], filter_string=f"attributes.run_name = '{name}'")
    if found and found[0].info.status == "FINISHED":
        return found[0].info.run_id
    frame = synthetic_run(steps, seed=0)
    run_id = client.create_run(experiment.experiment_id, run_name=name).info.run_id
    elapsed, points = timed(lambda: log_frame(client, run_id, frame, keys=KEYS, workers=8))
    client.set_terminated(run_id)
    print(
        f"setup: logged {points:,} points with log_batch in {elapsed:.1f} s ({points / elapsed:,.0f} points/s)"
    )
    return run_id


def compare(label: str, uri: str, run_id: str, repeat: int, pgid: int | None) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)

    def sequential() -> int:
        return sum(len(client.get_metric_history(run_id, key)) for key in KEYS)

    def ours() -> int:
        source = open_source(f"mlflow:{run_id}", SourceOptions(ReadOptions(use_cache=False), MlflowOptions(tracking_uri=uri)))
        try:
            return 4 * len(source.read(source.runs()[0]))
        finally:
            source.close()

    base, mine = [], []
    for _ in range(repeat):  # alternate, so a busy moment hurts both
        base.append(measured(sequential, pgid))
        mine.append(measured(ours, pgid))
    b, m = (statistics.median(t[0] for t in runs) for runs in (base, mine))
    points = base[0][4]
    print(
        f"{label}: {points:,} points; sequential get_metric_history {b:.2f} s, ours {m:.2f} s, speed-up {b / m:.2f}x"
    )
    for name, runs in (("sequential", base), ("ours", mine)):
        client, server = (statistics.median(t[i] for t in runs) for i in (1, 2))
        ours_cpus = statistics.median((t[1] + t[2]) / t[0] for t in runs)
        print(
            f"    {name:>10}: wall {', '.join(f'{t[0]:.1f}' for t in runs)} s; medians: client CPU {client:.1f} s"
            + (f", server CPU {server:.1f} s" if pgid else "")
            + f"; the machine's CPUs busy {statistics.median(t[3] for t in runs):.2f}, {ours_cpus:.2f} of them ours"
        )


def cached(server: MlflowServer, run_id: str, cache_dir: str) -> None:
    options = SourceOptions(ReadOptions(cache_dir=cache_dir), MlflowOptions(tracking_uri=server.uri))
    source = open_source(f"mlflow:{run_id}", options)
    run = source.runs()[0]
    cold, _ = timed(lambda: source.read(run))
    mark = server.mark()
    warm, history = timed(lambda: source.read(run))
    requests = server.requests_since(mark, "/metrics/get-history")
    source.close()
    print(f"cached re-analysis: cold read {cold:.2f} s, cached read {warm:.3f} s of {len(history):,} rows, "
          f"{requests} get-history requests to the server")  # fmt: skip


def main() -> None:
    options = parser(__doc__, quick="a run of 20,000 steps, one repeat", repeat=3)
    options.sized("--steps", 100_000, 20_000, "steps of the run", type=int)
    options.add_argument("--server-workers", type=int, default=2)
    options.add_argument("--data-dir", type=Path, help="keep the server's store here (default: a temporary dir)")
    args = options.parse_args()
    args.repeat = 1 if args.quick else args.repeat

    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as tmp:
        root = args.data_dir or Path(tmp) / "server"
        with MlflowServer(root, workers=args.server_workers) as server:
            print(f"mlflow server at {server.uri}, {args.server_workers} workers, store {server.store_uri}")
            print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before the figures")
            run_id = ensure_run(MlflowClient(server.uri), args.steps)
            pgid = server.pid
            compare("server", server.uri, run_id, args.repeat, pgid)
            compare("sqlite", server.store_uri, run_id, args.repeat, None)
            cached(server, run_id, str(Path(tmp) / "cache"))
            print(f"load average {os.getloadavg()[0]:.1f} after the figures")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
