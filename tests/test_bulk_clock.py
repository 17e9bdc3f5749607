"""A clock must be the training's: a log written in one burst gives no hours and says why.

One run (the first 4,000 steps of the bundled nanoGPT log, 524,288 tokens per step) is put
in a local MLflow store three times, with the points' timestamps set explicitly:

- as a training loop logs it, 0.4 s per step with jitter: the hours follow that clock;
- as a backfill logs it, one row per millisecond (what ``log_batch`` after the fact
  gives): no hours, and a note that says the times are a bulk log's;
- with every point at one timestamp (``log_metrics`` of a whole history at once): the same.

The CSV reader gets the same rule, with a ``timestamp`` column in Unix seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.doubles.mlflow_runs import log_run
from tracker_plugin.cli import main
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.report.render import to_json
from tracker_plugin.trackers import MlflowOptions, SourceOptions, open_source

# Bulk logs in a local MLflow store, analysed end to end: with --all.
pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"
ROWS = 4000
SECONDS_PER_STEP = 0.4
START_MS = 1_764_000_000_000  # 2025-11-24 16:00 UTC
CONFIG = AnalysisConfig(targets=(3.8, 3.3), ema_token_window=2e7)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    log = pd.read_csv(DATA / "nanogpt-124M-adamw-llmc.csv", nrows=ROWS)
    return log.drop(columns=["val_loss"])


def _stamps(frame: pd.DataFrame, how: str) -> np.ndarray:
    rows = np.arange(len(frame))
    if how == "training":
        jitter = np.random.default_rng(0).uniform(-20, 20, len(frame))
        return np.round(START_MS + frame["step"].to_numpy() * SECONDS_PER_STEP * 1000 + jitter).astype(np.int64)
    if how == "backfill":
        return START_MS + rows
    return np.full(len(frame), START_MS, dtype=np.int64)


@pytest.fixture(scope="module")
def store(frame, tmp_path_factory) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("bulk")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("clocks", artifact_location=(root / "artifacts").as_uri())
    runs = {
        how: log_run(client, experiment, frame, name=how, stamps_ms=_stamps(frame, how).tolist())
        for how in ("training", "backfill", "one-stamp")
    }
    runs["uri"] = uri
    return runs


def _doc(store: dict[str, str], how: str) -> dict:
    source = open_source(
        f"mlflow:{store[how]}", SourceOptions(mlflow=MlflowOptions(tracking_uri=store["uri"]))
    )
    try:
        (run,) = source.runs()
        return to_json(run_analysis(source.read(run), CONFIG))
    finally:
        source.close()


@pytest.mark.slow
def test_a_training_loop_clock_gives_its_hours(store):
    doc = _doc(store, "training")
    assert doc["throughput"]["source"] == "clock"
    assert doc["throughput"]["seconds_per_step"] == pytest.approx(SECONDS_PER_STEP, rel=0.01)
    reached, forecast = doc["targets"]
    assert reached["status"] == "reached"
    # Seconds count from the first logged row (step 0): the crossing's step at 0.4 s per step.
    assert reached["seconds"] == pytest.approx(reached["step"] * SECONDS_PER_STEP, rel=0.01)
    assert forecast["seconds_left"] > 0
    assert not any("bulk log" in note for note in doc["notes"])


@pytest.mark.parametrize("how, why", [("backfill", "tokens per second"), ("one-stamp", "share the timestamp")])
def test_a_bulk_log_gives_no_hours_and_says_why(store, how, why):
    doc = _doc(store, how)
    assert doc["throughput"] is None
    assert all(target["seconds"] is None and target["seconds_left"] is None for target in doc["targets"])
    (note,) = [note for note in doc["notes"] if "bulk log" in note]
    assert why in note and "mlflow_timestamp" in note


def test_the_command_line_prints_the_reason_and_no_hours(store, capsys):
    code = main(["analyze", f"mlflow:{store['backfill']}", "--tracking-uri", store["uri"], "-t", "3.3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "bulk log" in out and "--step-time" in out
    assert "hours left" not in out and "0.00 h" not in out


def test_a_csv_timestamp_column_written_in_one_burst_is_no_clock(frame, tmp_path):
    burst = frame.assign(timestamp=START_MS / 1000 + np.arange(len(frame)) * 1e-4)
    burst.to_csv(tmp_path / "burst.csv", index=False)
    training = frame.assign(timestamp=_stamps(frame, "training") / 1000)
    training.to_csv(tmp_path / "training.csv", index=False)
    docs = {}
    for name in ("burst", "training"):
        source = open_source(str(tmp_path / f"{name}.csv"), SourceOptions())
        try:
            (run,) = source.runs()
            docs[name] = to_json(run_analysis(source.read(run), CONFIG))
        finally:
            source.close()
    assert docs["burst"]["throughput"] is None
    assert docs["training"]["throughput"]["seconds_per_step"] == pytest.approx(SECONDS_PER_STEP, rel=0.01)


def test_a_fast_tokens_rate_alone_marks_a_bulk_log(frame, tmp_path):
    """2 ms per step is a plausible step for a tiny model, but not at 524,288 tokens per step."""
    fast = frame.assign(timestamp=START_MS / 1000 + frame["step"] * 0.002)
    fast.to_csv(tmp_path / "fast.csv", index=False)
    source = open_source(str(tmp_path / "fast.csv"), SourceOptions())
    try:
        (run,) = source.runs()
        history = source.read(run)
    finally:
        source.close()
    assert history.time is None
    assert any("tokens per second" in note for note in history.notes)


def test_whole_second_stamps_on_sub_second_steps_are_a_clock(frame, tmp_path):
    """Integer Unix seconds at 0.4 s per step: steps share stamps by the clock's resolution."""
    coarse = frame.assign(timestamp=np.floor(START_MS / 1000 + frame["step"] * SECONDS_PER_STEP))
    coarse.to_csv(tmp_path / "coarse.csv", index=False)
    source = open_source(str(tmp_path / "coarse.csv"), SourceOptions())
    try:
        (run,) = source.runs()
        doc = to_json(run_analysis(source.read(run), CONFIG))
    finally:
        source.close()
    assert doc["throughput"]["seconds_per_step"] == pytest.approx(SECONDS_PER_STEP, rel=0.01)
