"""The real clocks: one speedrun log, put in each tracker as a training loop logs it, gives
the same seconds and ETA as its CSV.

- CSV: a ``timestamp`` column in Unix seconds.
- MLflow (local sqlite store and a real ``mlflow server``): each loss point's own
  timestamp (milliseconds, as MLflow stores them).
- W&B offline: a run the real SDK writes in offline mode, with each row's ``_timestamp``
  (the field the SDK fills itself unless the row has one, as its TensorBoard sync does).
- W&B online: the real client against the test server, the same rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tests.doubles.wandb_offline_runs import log_offline_runs
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.report.render import to_json
from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions, open_source

DATA = Path(__file__).parent / "data"
START = 1_764_000_000.0  # 2025-11-24 16:00 UTC
ROWS = 875  # half the log: the last targets are forecast
CONFIG = AnalysisConfig(targets=(3.8, 3.4), ema_token_window=250.0, deadline="+0.05")
READ = ReadOptions(batch_size=1.0)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """The first half of the log, its clock (stitched at the restart) as Unix seconds, in ms."""
    log = tp.load_csv(DATA / "modded-short-2024-11-24_WindowWarmup.csv", columns=tp.Columns().with_overrides(loss="train_loss"), batch_size=1)
    rows = slice(0, ROWS)
    stamps = np.round((START + log.time[rows]) * 1000.0) / 1000.0
    return pd.DataFrame({"step": log.step[rows], "train_loss": log.loss[rows], "timestamp": stamps})


@pytest.fixture(scope="module")
def expected(frame, tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("time-csv") / "run.csv"
    frame.to_csv(path, index=False)
    return _timing(str(path), SourceOptions(READ))


def _timing(spec: str, options: SourceOptions) -> dict:
    source = open_source(spec, options)
    try:
        (run,) = source.runs()
        doc = to_json(run_analysis(source.read(run), CONFIG))
    finally:
        source.close()
    return doc


def _same(doc: dict, expected: dict) -> None:
    assert doc["throughput"]["clock_absolute"] is True
    assert doc["observed"]["seconds"] == pytest.approx(expected["observed"]["seconds"], abs=2e-3)
    assert doc["throughput"]["tokens_per_second"] == pytest.approx(expected["throughput"]["tokens_per_second"], rel=1e-4)
    assert [t["status"] for t in doc["targets"]] == ["reached", "forecast_beyond_plan"]
    for got, want in zip(doc["targets"], expected["targets"]):
        assert got["seconds"] == pytest.approx(want["seconds"], rel=1e-4, abs=2e-3)
        assert got["seconds_left"] == pytest.approx(want["seconds_left"], rel=1e-4, abs=2e-3)
        assert pd.Timestamp(got["eta"]) == pd.Timestamp(want["eta"])  # to the second
        assert got["p_by_deadline"] == pytest.approx(want["p_by_deadline"], abs=1e-3)


def test_csv_clock_is_read_as_unix_time(expected):
    assert expected["read_as"]["time"] == "column 'timestamp' (Unix time)"
    reached, forecast = expected["targets"]
    assert reached["eta"].startswith("2025-11-24T16:0")
    assert forecast["seconds"] > expected["observed"]["seconds"] > reached["seconds"] > 0


@pytest.mark.parametrize("where", ["sqlite", "server"])
def test_mlflow_point_timestamps_give_the_csv_seconds(request, frame, expected, tmp_path, where):
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    uri = request.getfixturevalue("sqlite_store") if where == "sqlite" else request.getfixturevalue("mlflow_server").uri
    client = MlflowClient(uri)
    experiment = client.create_experiment(f"time-{where}-{tmp_path.name}")
    run_id = client.create_run(experiment, run_name="speedrun").info.run_id
    metrics = [
        Metric("train_loss", float(loss), int(round(stamp * 1000)), int(step))
        for step, loss, stamp in frame[["step", "train_loss", "timestamp"]].itertuples(index=False)
    ]
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i : i + 1000])
    client.set_terminated(run_id)
    options = SourceOptions(ReadOptions(batch_size=1.0, cache_dir=str(tmp_path / "cache")), MlflowOptions(tracking_uri=uri))
    doc = _timing(f"mlflow:{run_id}", options)
    assert doc["read_as"]["time"].startswith("column 'mlflow_timestamp'")
    _same(doc, expected)


def _wandb_rows(frame: pd.DataFrame) -> list[dict]:
    return [
        {"step": int(step), "train_loss": float(loss), "_timestamp": float(stamp)}
        for step, loss, stamp in frame[["step", "train_loss", "timestamp"]].itertuples(index=False)
    ]


def test_wandb_offline_timestamps_give_the_csv_seconds(frame, expected, tmp_path):
    (run_dir,) = log_offline_runs(tmp_path, [{"name": "speedrun", "rows": _wandb_rows(frame)}]).values()
    doc = _timing(f"wandb-offline:{run_dir}", SourceOptions(READ))
    assert doc["read_as"]["time"] == "column '_timestamp' (Unix time)"
    _same(doc, expected)


def test_wandb_offline_run_without_timestamps_gets_the_sdks_clock(frame, tmp_path):
    rows = [{"step": r["step"], "train_loss": r["train_loss"]} for r in _wandb_rows(frame)[:200]]
    runs = log_offline_runs(
        tmp_path, [{"name": "plain", "rows": rows, "seconds_per_row": 0.005}, {"name": "burst", "rows": rows}]
    )
    source = open_source(f"wandb-offline:{runs['burst']}", SourceOptions(READ))
    (run,) = source.runs()
    # Rows logged back to back carry the times they were written at: no clock, and a note.
    burst = source.read(run)
    assert burst.time is None and any("bulk log" in note for note in burst.notes)
    source = open_source(f"wandb-offline:{runs['plain']}", SourceOptions(READ))
    (run,) = source.runs()
    history = source.read(run)
    # The SDK stamped each row with the wall clock as it logged it: now, and in order.
    assert history.time_absolute and history.time is not None
    assert abs(history.time[-1] - pd.Timestamp.now(tz="UTC").timestamp()) < 3600
    assert np.all(np.diff(history.time) >= 0)


def test_wandb_online_timestamps_give_the_csv_seconds(frame, expected, wandb_server):
    rows = []
    for row in _wandb_rows(frame):
        row["_step"] = row.pop("step")
        rows.append(row)
    wandb_server.add_run("ent", "time", "run1", name="speedrun", history=rows)
    doc = _timing("wandb:ent/time/run1", SourceOptions(READ))
    assert doc["read_as"]["time"] == "column '_timestamp' (Unix time)"
    _same(doc, expected)


def test_naive_local_dates_across_a_daylight_saving_fall_back_read_an_hour_later(tmp_path):
    """A local clock written without its zone repeats an hour when daylight saving ends:
    the fall-back is undone (the times from there on read an hour later), with a note,
    and the hours between two rows are the clock's, not an error."""
    utc = pd.date_range("2024-11-03 05:00", periods=300, freq="30s", tz="UTC")
    local = utc.tz_convert("America/New_York").tz_localize(None)  # 01:59:30 EDT -> 01:00:00 EST
    step = np.arange(300)
    frame = pd.DataFrame({"step": step, "train_loss": 5 - np.log1p(step) / 3, "global_batch": 1000,
                          "time": local.strftime("%Y-%m-%d %H:%M:%S")})
    history = tp.build_history(frame, run="dst")
    np.testing.assert_allclose(np.diff(history.time), 30.0)
    assert any("fall back about an hour at step 120 (a daylight-saving change" in note for note in history.notes)
