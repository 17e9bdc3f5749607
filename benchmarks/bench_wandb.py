"""Figures for the W&B sources: reading a long offline run, and a long online run through
the real wandb client against the local test server.

    .venv/bin/python benchmarks/bench_wandb.py [--quick] [--steps 100000]

Offline: a ``.wandb`` file with one history and one summary record per step, as the SDK
writes them (``_step``, ``train/loss``, ``_runtime``, ``_timestamp``, and ``lr`` every 10
steps), is listed and read; then annotated. Online: the same history served by
:class:`~tests.doubles.wandb_server.WandbServer` on 127.0.0.1 (no network
latency: this measures the client, wandb-core and the plugin), read dense (every key in
every row: one scan) and sparse (one scan per key).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
from harness import parser
from harness import timed as wall

from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.frame.history import Columns
from tracker_plugin.jobs.annotation import build_annotation, settings_of
from tracker_plugin.trackers import SourceOptions, open_source
from tracker_plugin.trackers.wandb_log import FILE_HEADER, write_records


def curve(steps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    tokens = (np.arange(steps) + 1) * 524_288.0
    loss = 2.0 + 3.0 * (tokens / 1e9) ** -0.3 + rng.normal(0, 0.02, steps)
    lr = np.full(steps, 3e-4)
    return loss, lr


def offline_file(path: Path, steps: int) -> None:
    from wandb.proto import wandb_internal_pb2 as pb

    loss, lr = curve(steps)
    records = []
    run = pb.Record()
    run.run.run_id, run.run.project, run.run.display_name = "bench123", "bench", "bench-run"
    run.run.config.update.add(key="global_batch_size", value_json="524288")
    records.append(run.SerializeToString())
    for step in range(steps):
        history = pb.Record()
        items = {
            "_step": step,
            "train/loss": float(loss[step]),
            "_runtime": step * 0.1,
            "_timestamp": 1.7e9 + step,
        }
        if step % 10 == 0:
            items["lr"] = float(lr[step])
        for key, value in items.items():
            history.history.item.add(nested_key=[key], value_json=json.dumps(value))
        history.history.step.num = step
        summary = pb.Record()
        for key, value in items.items():
            summary.summary.update.add(nested_key=[key], value_json=json.dumps(value))
        records += [summary.SerializeToString(), history.SerializeToString()]
    exit_record = pb.Record()
    exit_record.exit.exit_code = 0
    records.append(exit_record.SerializeToString())
    with open(path, "wb") as out:
        out.write(FILE_HEADER)
        write_records(out, records, len(FILE_HEADER))


def timed(label: str, func):
    elapsed, result = wall(func)
    print(f"  {label:<44} {elapsed:7.2f} s")
    return result


def bench_offline(steps: int, tmp: Path) -> None:
    run_dir = tmp / "wandb" / "offline-run-20240101_000000-bench123"
    run_dir.mkdir(parents=True)
    wandb_file = run_dir / "run-bench123.wandb"
    offline_file(wandb_file, steps)
    size = wandb_file.stat().st_size / 1e6
    print(f"offline: {steps:,} steps, {size:.1f} MB .wandb file")
    source = open_source(f"wandb-offline:{tmp}", SourceOptions())
    runs = timed("list (parse the whole file)", source.runs)
    history = timed("read (frame from the parsed keys)", lambda: source.read(runs[0]))
    config = AnalysisConfig(targets=(4.0,))
    analysis = run_analysis(history, config)
    annotation = build_annotation(analysis, settings_of(config, Columns(), None), progress=runs[0].progress)
    timed("annotate (render, insert records, verify)", lambda: source.write(runs[0], annotation))
    print(f"  rows read: {len(history):,}")


def bench_online(steps: int, tmp: Path) -> None:
    from tests.doubles.wandb_server import WandbServer

    loss, lr = curve(steps)
    dense = [{"train/loss": float(loss[s]), "lr": float(lr[s])} for s in range(steps)]
    sparse = [
        {"train/loss": float(loss[s]), **({"lr": float(lr[s])} if s % 10 == 0 else {})} for s in range(steps)
    ]
    with WandbServer() as server:
        os.environ.update(
            server.env(),
            WANDB_DIR=str(tmp),
            WANDB_CONFIG_DIR=str(tmp / "c"),
            WANDB_CACHE_DIR=str(tmp / "cc"),
            WANDB_SILENT="true",
        )
        for run_id, rows in (("dense", dense), ("sparse", sparse)):
            server.add_run("bench", "bench", run_id, history=rows, config={"global_batch_size": 524288})
        print(f"online (local test server): {steps:,} steps")
        source = open_source("wandb:bench/bench", SourceOptions())
        runs = timed("list (fresh wandb.Api, one Runs page)", source.runs)
        for info in runs:
            before = len(server.requests)
            label = "one scan" if info.name == "dense" else "one scan per key"
            history = timed(f"read {info.name} ({label})", lambda info=info: source.read(info))
            print(f"    {len(history):,} rows, {len(server.requests) - before} HTTP requests")


def main() -> None:
    options = parser(__doc__, quick="runs of 20,000 steps")
    options.sized("--steps", 100_000, 20_000, "steps of the runs", type=int)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench_offline(args.steps, Path(tmp, "offline"))
        bench_online(args.steps, Path(tmp, "online"))


if __name__ == "__main__":
    main()
