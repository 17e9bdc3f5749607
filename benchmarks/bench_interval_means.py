"""The interval-mean setups of ``bench_trainers.py``: held-out runs whose logged loss is a
mean over the logging interval, or an estimate at an eval cadence, against the same
training's per-step loss (see ``bench_trainers.py``'s docstring and
``benchmarks/make_interval_runs.py``, which wrote them)."""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracker_plugin.core.analysis import AnalysisConfig, run_analysis  # noqa: E402
from tracker_plugin.frame.history import History, build_history  # noqa: E402
from tracker_plugin.trackers import ReadOptions  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "interval"
WINDOW_STEPS = 300  # the EMA window, in steps (in tokens: times the run's tokens per step)
SHARES = (1 / 3, 1 / 2, 2 / 3)  # the targets: these shares of the way down the smoothed fall
DENSE_EVERY, DENSE_TOLERANCE, SPARSE_TOLERANCE = 50, 0.01, 0.02


@dataclass(frozen=True)
class IntervalSetup:
    name: str
    read: Callable[[Path], History]  # the run, read with no flags (MLflow stores unpacked into the folder)
    truth: str  # the per-step loss of the same training
    every: int  # steps between logged values


def _mlflow(store: str, run_name: str) -> Callable[[Path], History]:
    def read(folder: Path) -> History:
        from mlflow import MlflowClient

        from tracker_plugin.trackers.mlflow_runs import MlflowSource
        from tracker_plugin.trackers.options import MlflowOptions

        path = folder / store.removesuffix(".gz")
        if not path.exists():
            with gzip.open(DATA / store, "rb") as raw, path.open("wb") as out:
                shutil.copyfileobj(raw, out)
        uri = f"sqlite:///{path}"
        client = MlflowClient(uri)
        (run_id,) = [r.info.run_id for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
                     if r.info.run_name == run_name]
        source = MlflowSource(run_id, ReadOptions(use_cache=False), MlflowOptions(tracking_uri=uri))
        (run,) = source.runs()
        return source.read(run)

    return read


def _wandb(name: str) -> Callable[[Path], History]:
    def read(folder: Path) -> History:
        from tracker_plugin.trackers.wandb_offline import WandbOfflineSource

        source = WandbOfflineSource(str(DATA / "wandb" / name), ReadOptions(use_cache=False))
        (run,) = source.runs()
        return source.read(run)

    return read


SETUPS = (
    *(IntervalSetup(f"HF logging_steps {n} -> MLflow", _mlflow("hf.db.gz", f"hf-{n}"), "hf", n) for n in (10, 50, 500)),
    *(IntervalSetup(f"nanoGPT eval_interval {n} -> W&B", _wandb(f"nanogpt-{n}"), f"nanogpt-{n}", n)
      for n in (100, 250, 500)),
    IntervalSetup("Lightning on_epoch -> MLflow", _mlflow("lightning.db.gz", "lightning-epoch"), "lightning-epoch", 40),
    IntervalSetup("Lightning on_epoch -> W&B", _wandb("lightning-epoch"), "lightning-epoch", 40),
)


def crossings(history: History, targets: tuple[float, ...], per_step: float) -> list[float | None]:
    window = {"ema_steps": WINDOW_STEPS} if history.on_steps else {"ema_token_window": WINDOW_STEPS * per_step}
    analysis = run_analysis(history, AnalysisConfig(targets=targets, model="power-law", **window))
    return [t.step if t.status == "reached" else None for t in analysis.targets]


def truth_and_targets(name: str, per_step: float) -> tuple[History, tuple[float, ...]]:
    frame = pd.read_csv(DATA / f"{name}.truth.csv.gz")
    truth = build_history(frame, run=name, batch_size=per_step)
    smoothed = frame["loss"].ewm(span=WINDOW_STEPS, adjust=False).mean().to_numpy()
    top, bottom = float(smoothed[WINDOW_STEPS]), float(np.min(smoothed))
    return truth, tuple(top - share * (top - bottom) for share in SHARES)


def interval_table() -> int:
    rows = [("setup", "every", "read as", "truth steps", "errors", "verdict")]
    wrong = 0
    with tempfile.TemporaryDirectory() as tmp:
        for setup in SETUPS:
            history = setup.read(Path(tmp))
            per_step = 1.0 if history.on_steps else float(np.median(history.batch))
            truth, targets = truth_and_targets(setup.truth, per_step)
            want, got = crossings(truth, targets, per_step), crossings(history, targets, per_step)
            errors = [None if w is None or g is None else abs(g - w) / w for w, g in zip(want, got)]
            tolerance = DENSE_TOLERANCE if setup.every <= DENSE_EVERY else SPARSE_TOLERANCE
            bad = any(e is None or e > tolerance for e in errors)
            wrong += bad
            read = "interval means" if history.loss_spans is not None else "values at their steps"
            rows.append((setup.name, str(setup.every), read, " ".join(f"{w:,.0f}" if w else "-" for w in want),
                         " ".join("-" if e is None else f"{e:.1%}" for e in errors),
                         f"{'WRONG' if bad else 'right'} (within {tolerance:.0%})"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print()
    for row in rows:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    print(f"\n{len(SETUPS)} interval-mean setups, {len(SETUPS) * len(SHARES)} crossings; {wrong} WRONG")
    return wrong


if __name__ == "__main__":
    interval_table()
