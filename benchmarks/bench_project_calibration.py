"""What forecasting a project's running runs by its law costs a nightly ``annotate``.

    python benchmarks/bench_project_calibration.py [--quick] [--finished 20] [--running 4] [--rows 300]

Logs ``--finished`` finished and ``--running`` running runs of one recipe (a cosine plan in
their params, ``--rows`` logged rows each) into a local MLflow sqlite store (the embedded
default), then times four ``annotate`` passes over the experiment, counting the histories
read (``MlflowSource.read`` calls) and the client's CPU seconds:

1. the baseline, ``--no-siblings``, on a copy of the store: every run analysed once;
2. the first pass by the law: each finished run's evidence is taken once (kept in its
   ``loss_eta`` tag), the running runs forecast by the law of the finished ones;
3. a rerun with nothing new (target: every run unchanged, 0 histories read);
4. a pass after one more run finished (target: 1 + ``--running`` histories read: the new
   run's and the running runs', which are redone on the new book).

The first pass's extra CPU per finished run is its evidence's one-off cost.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness import parser

from tests.doubles.mlflow_runs import log_run
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.jobs.annotate import annotate_runs
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions
from tracker_plugin.trackers.mlflow_runs import MlflowSource

SPEC = "cosine:warmup=100,total=3000,final=0.1"
PARAMS = {"lr_scheduler_type": "cosine", "max_steps": 3000, "warmup_steps": 100, "learning_rate": 1e-3}


def log(client: object, experiment: str, seed: int, rows: int, status: str = "FINISHED", share: float = 1.0) -> None:
    frame = synthetic_run(3000, batch=131072.0, noise=0.01, lr_schedule=SPEC, anneal_gain=0.1,
                          log_every=max(1, 3000 // rows), seed=seed)
    log_run(client, experiment, frame[frame.step < 3000 * share], name=f"run{seed}", params=PARAMS, status=status)


class Counted:
    """``MlflowSource.read``, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.original: Callable[..., object] = MlflowSource.read

    def __enter__(self) -> Counted:
        counter = self

        def read(source: MlflowSource, run: object) -> object:
            counter.calls += 1
            return counter.original(source, run)

        MlflowSource.read = read  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        MlflowSource.read = self.original  # type: ignore[method-assign]


def annotate(uri: str, calibrate: bool) -> tuple[float, float, int, dict[str, int]]:
    """One pass: wall and CPU seconds, histories read, actions counted."""
    options = SourceOptions(read=ReadOptions(workers=1), mlflow=MlflowOptions(tracking_uri=uri))
    config = AnalysisConfig(targets=(6.79,), ema_token_window=2.5e7)
    wall, cpu = time.perf_counter(), time.process_time()
    with Counted() as counted:
        outcomes = annotate_runs(["mlflow:experiment/project"], options, config, siblings=calibrate)
    actions: dict[str, int] = {}
    for outcome in outcomes:
        actions[str(outcome.action)] = actions.get(str(outcome.action), 0) + 1
    return time.perf_counter() - wall, time.process_time() - cpu, counted.calls, actions


def main() -> None:
    options = parser(__doc__, quick="6 finished and 2 running runs")
    options.sized("--finished", 20, 6, "finished runs", type=int)
    options.sized("--running", 4, 2, "running runs", type=int)
    options.add_argument("--rows", type=int, default=300)
    args = options.parse_args()
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory() as root:
        store = Path(root) / "calibrated"
        store.mkdir()
        uri = f"sqlite:///{store / 'mlflow.db'}"
        client = MlflowClient(uri)
        experiment = client.create_experiment("project", artifact_location=(store / "artifacts").as_uri())
        for seed in range(args.finished):
            log(client, experiment, seed + 1, args.rows)
        for k in range(args.running):
            log(client, experiment, 1000 + k, args.rows, status="RUNNING", share=0.5)
        baseline = Path(root) / "baseline"
        shutil.copytree(store, baseline)
        base_uri = f"sqlite:///{baseline / 'mlflow.db'}"
        print(f"{args.finished} finished and {args.running} running runs of {args.rows} rows, local sqlite store, 1 worker")
        print(f"{'pass':<42} {'wall s':>8} {'CPU s':>8} {'read':>5}  actions")
        rows = [("baseline: --no-siblings", annotate(base_uri, False)),
                ("first pass by the law", annotate(uri, True)),
                ("rerun, nothing new (target: 0 read)", annotate(uri, True))]
        log(client, experiment, 999, args.rows)
        rows.append((f"one more finished (target: {1 + args.running} read)", annotate(uri, True)))
        for label, (wall, cpu, read, actions) in rows:
            said = ", ".join(f"{v} {k}" for k, v in sorted(actions.items()))
            print(f"{label:<42} {wall:8.1f} {cpu:8.1f} {read:5d}  {said}")
        extra = (rows[1][1][1] - rows[0][1][1]) / args.finished
        print(f"the record's one-off cost: {extra:.2f} CPU s per finished run "
              f"(first pass by the law minus the baseline, over {args.finished} finished runs)")


if __name__ == "__main__":
    main()
