"""The interval-mean setups of ``bench_trainers.py``: held-out runs whose logged loss is a
mean over the logging interval, or an estimate at an eval cadence, against the same
training's per-step loss (see ``bench_trainers.py``'s docstring and
``benchmarks/make_interval_runs.py``, which wrote them).

One table per EMA window: the window the command line gives the run when none is set
(``default``: 100 steps for a run read on steps, a quarter of the logged tokens for these
short runs with tokens), and 100 and 300 steps. Each crossing's error is against the
per-step loss's crossing at the same window, beside the floor: the error of the best
reading the log allows, the per-step loss's trend known exactly and its noise only as the
log holds it (each interval's mean for a log of means, none for values at their steps).
With a window as short as two logging intervals, the per-step loss's own noise moves its
first crossing early by about 1% (its trend alone crosses 0.7-1.0% later), and no reading of
a log of 50-step means can follow it. A setup is ``right`` with every error within the
tolerance, ``at the floor`` when an error past it is within a quarter of the tolerance of
its floor, ``WRONG`` otherwise.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.signal import savgol_filter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracker_plugin.core.analysis import AnalysisConfig, run_analysis  # noqa: E402
from tracker_plugin.frame.history import History, build_history  # noqa: E402
from tracker_plugin.trackers import ReadOptions  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "interval"
TARGET_WINDOW = 300  # the window (steps) of the per-step curve whose fall places the targets
WINDOWS = (None, 100, 300)  # the EMA windows, in steps (None: the command line's default)
TREND_STEPS = 301  # the Savitzky-Golay window of the per-step loss's trend (the floor's)
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


def crossings(history: History, targets: tuple[float, ...], window: float | None) -> tuple[list[float | None], float]:
    """The steps where ``history`` crosses ``targets`` with an EMA of ``window`` (in the
    run's unit, tokens or steps; None: the default), and the window it was smoothed over."""
    config = AnalysisConfig(targets=targets, model="power-law")
    if window is not None:
        config = replace(config, ema_token_window=window, ema_steps=window)
    analysis = run_analysis(history, config)
    return [t.step if t.status == "reached" else None for t in analysis.targets], analysis.config.ema_token_window


def truth_and_targets(name: str, per_step: float) -> tuple[pd.DataFrame, History, tuple[float, ...]]:
    frame = pd.read_csv(DATA / f"{name}.truth.csv.gz")
    truth = build_history(frame, run=name, batch_size=per_step)
    smoothed = frame["loss"].ewm(span=TARGET_WINDOW, adjust=False).mean().to_numpy()
    top, bottom = float(smoothed[TARGET_WINDOW]), float(np.min(smoothed))
    return frame, truth, tuple(top - share * (top - bottom) for share in SHARES)


def best_reading(frame: pd.DataFrame, history: History, per_step: float) -> History:
    """The per-step loss as the best reading of ``history`` could know it: its trend, and
    its noise as the mean over each logged interval (a log of means), or not at all."""
    step = frame["step"].to_numpy()
    loss = frame["loss"].to_numpy(float)
    trend = savgol_filter(loss, TREND_STEPS, 3)
    known = trend
    if history.loss_spans is not None:  # each step's logged interval: the first logged row at or after it
        row = np.searchsorted(history.step, step)
        inside = (row < len(history.step)) & (step > history.step[np.minimum(row, len(history.step) - 1)]
                                               - history.loss_spans[np.minimum(row, len(history.step) - 1)])
        noise = pd.Series(loss - trend).groupby(np.where(inside, row, -1 - np.arange(len(step)))).transform("mean")
        known = trend + np.where(inside, noise.to_numpy(), 0.0)
    return build_history(pd.DataFrame({"step": step, "loss": known}), run="best reading", batch_size=per_step)


def _errors(want: list[float | None], got: list[float | None]) -> list[float | None]:
    return [None if w is None or g is None else (g - w) / w for w, g in zip(want, got)]


def _verdict(errors: list[float | None], floors: list[float | None], tolerance: float) -> str:
    if all(e is not None and abs(e) <= tolerance for e in errors):
        return "right"
    near = all(e is not None and (abs(e) <= tolerance or (f is not None and abs(e - f) <= tolerance / 4))
               for e, f in zip(errors, floors))
    return "at the floor" if near else "WRONG"


def _percent(values: list[float | None]) -> str:
    return " ".join("-" if v is None else f"{v:+.1%}" for v in values)


def interval_table(window_steps: float | None) -> tuple[int, int]:
    """The table at one window (steps; None: the default): (setups WRONG, at the floor)."""
    rows = [("setup", "every", "read as", "window", "truth steps", "errors", "floor", "verdict")]
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        for setup in SETUPS:
            history = setup.read(Path(tmp))
            per_step = 1.0 if history.on_steps else float(np.median(history.batch))
            frame, truth, targets = truth_and_targets(setup.truth, per_step)
            got, window = crossings(history, targets, None if window_steps is None else window_steps * per_step)
            want, _ = crossings(truth, targets, window)
            best, _ = crossings(best_reading(frame, history, per_step), targets, window)
            errors, floors = _errors(want, got), _errors(want, best)
            tolerance = DENSE_TOLERANCE if setup.every <= DENSE_EVERY else SPARSE_TOLERANCE
            verdicts.append(_verdict(errors, floors, tolerance))
            read = "interval means" if history.loss_spans is not None else "values at their steps"
            rows.append((setup.name, str(setup.every), read, f"{window / per_step:,.0f}",
                         " ".join(f"{w:,.0f}" if w else "-" for w in want), _percent(errors), _percent(floors),
                         f"{verdicts[-1]} (within {tolerance:.0%})"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    title = "the default window" if window_steps is None else f"a {window_steps:,.0f}-step window"
    print(f"\nInterval-mean setups at {title} (window in steps; errors and floor against the per-step loss)")
    for row in rows:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    wrong, floor = verdicts.count("WRONG"), verdicts.count("at the floor")
    print(f"{len(SETUPS)} setups, {len(SETUPS) * len(SHARES)} crossings; {wrong} WRONG, {floor} at the floor")
    return wrong, floor


def interval_tables(windows: tuple[float | None, ...] = WINDOWS) -> int:
    """Every window's table; the setups WRONG in all of them."""
    return sum(interval_table(window)[0] for window in windows)


if __name__ == "__main__":
    interval_tables()
