"""Hostile logs shaped like real failures, through the CSV, MLflow and W&B offline readers.

Each case is a plausible run (a decaying loss, tokens, batch, lr, a millisecond clock)
bent the way real logs go wrong: a resumed run re-logging steps, a stray row going back,
rows out of order, a shuffled or reversed file, a duplicated column, zero and huge values.
Every case must end in a clear error (a ``TrackerPluginError``) or a result; a result
computed on fewer than 90% of the logged rows must say so in a ``kept N of M`` note.
The counts per reader and per shape are printed at the end of the session.

``HARDENING_SCALE`` (default 1) multiplies the number of cases; the default runs
700 CSV, 150 MLflow and 150 W&B offline cases.
"""

from __future__ import annotations

import io
import json
import math
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracker_plugin as tp
from tracker_plugin.cli import main
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.jobs.runs import analyze_one
from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions

from .conftest import SHAPES

# Minutes long: left out of the default run, run with --all (CI runs it).
pytestmark = pytest.mark.slow

SCALE = float(os.environ.get("HARDENING_SCALE", "1"))
SHAPE_NAMES = ("clean", "restart", "stray", "out-of-order", "shuffled", "reversed", "zero", "huge", "duplicate-column")
_CONFIG = AnalysisConfig(targets=(3.0, 2.5), ema_token_window=2e6)


def _cases(n: int) -> int:
    return max(1, int(n * SCALE))


@st.composite
def shaped_logs(draw, *, text_cells: bool = True):
    """(shape, frame of strings, logged loss rows) for one bent run."""
    n = draw(st.integers(8, 120))
    every = draw(st.sampled_from([1, 1, 5, 10]))
    batch = draw(st.sampled_from([1000.0, 4096.0, 524288.0]))
    step = np.arange(n) * every
    tokens = step * batch
    loss = 2.0 + 3.0 * (np.maximum(tokens + batch, 1) / 1e6) ** -draw(st.floats(0.05, 0.6))
    loss += np.random.default_rng(draw(st.integers(0, 2**16))).normal(0, draw(st.sampled_from([0.0, 0.01, 0.1])), n)
    lr = 1e-3 * np.minimum(1.0, (np.arange(n) + 1) / 5)
    clock = 1.7e12 + np.arange(n) * draw(st.sampled_from([250.0, 1000.0, 60_000.0]))  # milliseconds
    frame = pd.DataFrame({"step": step, "train_loss": loss, "tokens": tokens, "global_batch": batch, "lr": lr,
                          "_timestamp": clock})
    shape = draw(st.sampled_from(SHAPE_NAMES[: len(SHAPE_NAMES) - (0 if text_cells else 1)]))
    if shape == "restart":  # crash at k, resume from the checkpoint at c < k with new values
        k = draw(st.integers(2, n - 1))
        c = draw(st.integers(0, k - 1))
        again = frame.iloc[c:].copy()
        again["train_loss"] -= draw(st.floats(0.0, 0.3))
        frame = pd.concat([frame.iloc[:k], again])
    elif shape == "stray":  # one row logged again out of place, or a step from nowhere
        row = frame.iloc[[draw(st.integers(0, n - 1))]].copy()
        if draw(st.booleans()):
            row["step"] = draw(st.integers(0, int(step[-1])))
        at = draw(st.integers(0, n))
        frame = pd.concat([frame.iloc[:at], row, frame.iloc[at:]])
    elif shape == "out-of-order":  # a few rows swapped with their neighbours
        order = np.arange(n)
        for i in draw(st.lists(st.integers(0, n - 2), min_size=1, max_size=5)):
            order[[i, i + 1]] = order[[i + 1, i]]
        frame = frame.iloc[order]
    elif shape == "shuffled":
        frame = frame.sample(frac=1.0, random_state=draw(st.integers(0, 1000)))
    elif shape == "reversed":
        frame = frame.iloc[::-1]
    frame = frame.reset_index(drop=True)
    cells = frame.astype(object)
    if shape == "zero":
        column = draw(st.sampled_from(["tokens", "global_batch", "train_loss", "lr", "step"]))
        rows = draw(st.sampled_from(["all", "one"]))
        index = slice(None) if rows == "all" else [draw(st.integers(0, len(cells) - 1))]
        cells.loc[index, column] = 0
    elif shape == "huge":
        column = draw(st.sampled_from(["tokens", "global_batch", "train_loss", "lr", "step"]))
        value = draw(st.sampled_from(["1e308", "-1e308", "1" + "0" * 400, "inf", "-inf"] if text_cells else
                                     ["1e308", "-1e308", "1e300"]))
        cells.loc[draw(st.integers(0, len(cells) - 1)), column] = value
    logged = int(len(cells))
    return shape, cells, logged


def _check(analysis: tp.Analysis, logged: int) -> None:
    """Not silently on a fraction: fewer than 90% of the logged rows kept means a note says so."""
    assert all(t.status in {"reached", "forecast", "forecast_beyond_plan", "not_reached", "unreachable", "not_enough_data"} for t in analysis.targets)
    for t in analysis.targets:
        assert t.tokens is None or math.isfinite(t.tokens)
    if len(analysis.history) < 0.9 * logged:
        assert any(note.startswith("kept ") for note in analysis.notes), (len(analysis.history), logged, analysis.notes)


def _outcome(reader: str, shape: str, read) -> bool:
    """Run ``read``, count it; True when it ended in a clear error. Anything else escaping fails."""
    counts = SHAPES.setdefault(reader, {})
    counts[shape] = counts.get(shape, 0) + 1
    try:
        read()
    except tp.TrackerPluginError as exc:
        assert str(exc).strip() and "\n" not in str(exc)
        counts["clear errors"] = counts.get("clear errors", 0) + 1
        return True
    return False


def _csv_text(cells: pd.DataFrame, duplicate: bool) -> str:
    if duplicate:  # a second column of one name, as a careless join writes
        cells = cells.copy()
        extra = cells["train_loss"].astype(float) + 1.0
        cells.insert(len(cells.columns), "train_loss_dup", extra)
        buffer = io.StringIO()
        cells.to_csv(buffer, index=False)
        return buffer.getvalue().replace("train_loss_dup", "train_loss", 1)
    buffer = io.StringIO()
    cells.to_csv(buffer, index=False)
    return buffer.getvalue()


@pytest.mark.filterwarnings("error::RuntimeWarning")
@settings(max_examples=_cases(700), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=shaped_logs())
def test_csv_logs_of_every_failure_shape(tmp_path_factory, case):
    shape, cells, logged = case
    path = tmp_path_factory.mktemp("s") / "run.csv"
    path.write_text(_csv_text(cells, shape == "duplicate-column"))

    def read() -> None:
        analysis = analyze_one(str(path), SourceOptions(), _CONFIG)
        _check(analysis, logged)

    refused = _outcome("csv", shape, read)
    assert refused or shape != "duplicate-column"


def test_the_command_line_says_the_same_in_one_line(tmp_path, capsys):
    """The CLI on a few shapes: exit 2 with one line, or 0 with a JSON document."""
    for k, text in enumerate(["step,train_loss,global_batch\n" + "".join(f"{s},{5 - s / 100},10\n" for s in range(50, 0, -1)),
                              "step,train_loss,train_loss,global_batch\n1,3,3,10\n2,2,2,10\n"]):
        path = tmp_path / f"r{k}.csv"
        path.write_text(text)
        code = main(["analyze", str(path), "-t", "4.8", "--json"])
        out, err = capsys.readouterr()
        if code == 0:
            assert "sorted the rows by step" in " ".join(json.loads(out)["notes"])
        else:
            assert code == 2 and err.count("\n") == 1 and "more than one column named 'train_loss'" in err


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory):
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    # The artifacts under the temp dir too: a local store puts them in ./mlruns unless told.
    return uri, client, client.create_experiment("fuzz", artifact_location=(root / "artifacts").as_uri())


@settings(max_examples=_cases(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=shaped_logs(text_cells=False))
def test_mlflow_runs_of_every_failure_shape(mlflow_store, case):
    from tests.doubles.mlflow_runs import log_run

    shape, cells, _ = case
    uri, client, experiment = mlflow_store
    frame = cells.apply(pd.to_numeric, errors="coerce")
    if not np.isfinite(frame["step"].to_numpy(float)).all() or (frame["step"] < 0).any() or (frame["step"] > 2**62).any():
        frame["step"] = np.arange(len(frame))  # MLflow itself refuses such steps
    run_id = log_run(client, experiment, frame, name=f"fuzz-{shape}", workers=1)
    # MLflow keeps one value per step: what counts as logged is the steps that logged a loss.
    logged = int(frame["step"].nunique())

    def read() -> None:
        analysis = analyze_one(f"mlflow:{run_id}", SourceOptions(read=ReadOptions(use_cache=False), mlflow=MlflowOptions(tracking_uri=uri)), _CONFIG)
        _check(analysis, logged)

    _outcome("mlflow", shape, read)


def _offline_run(folder, frame: pd.DataFrame, raw: dict[tuple[int, str], str] | None = None) -> None:
    """An offline run directory as the SDK leaves it: run record, history rows, exit record.
    ``raw`` gives cells (row, key) whose value is written as that text, JSON or not."""
    from wandb.proto import wandb_internal_pb2 as pb

    from tracker_plugin.trackers.wandb_log import FILE_HEADER, write_records

    records = []
    run = pb.Record()
    run.run.run_id, run.run.project, run.run.display_name = folder.name[-8:], "fuzz", "fuzz"
    records.append(run.SerializeToString())
    for row, values in enumerate(frame.itertuples(index=False)):
        record = pb.Record()
        record.history.step.num = row
        item = record.history.item.add()
        item.key, item.value_json = "_step", str(row)
        for key, value in zip(frame.columns, values):
            text = (raw or {}).get((row, key))
            if text is None and (value is None or (isinstance(value, float) and math.isnan(value))):
                continue
            item = record.history.item.add()
            item.key, item.value_json = key, json.dumps(float(value)) if text is None else text
        records.append(record.SerializeToString())
    done = pb.Record()
    done.exit.exit_code = 0
    records.append(done.SerializeToString())
    folder.mkdir(parents=True)
    with open(folder / f"run-{folder.name[-8:]}.wandb", "wb") as out:
        out.write(FILE_HEADER)
        write_records(out, records, len(FILE_HEADER))


@settings(max_examples=_cases(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=shaped_logs(text_cells=False))
def test_wandb_offline_runs_of_every_failure_shape(tmp_path_factory, case):
    shape, cells, logged = case
    frame = cells.apply(pd.to_numeric, errors="coerce")
    folder = tmp_path_factory.mktemp("w") / "offline-run-20250101_000000-abcd1234"
    _offline_run(folder, frame)

    def read() -> None:
        analysis = analyze_one(f"wandb-offline:{folder}", SourceOptions(), _CONFIG)
        _check(analysis, logged)

    _outcome("wandb-offline", shape, read)
