"""Hostile runs of a later round, through the command line: rolled-back attempts, a run
resumed into several W&B directories, and the inputs that ended in a traceback, a silent
answer or an unclear error before.

- a log whose run was restarted from an earlier checkpoint (or from step 0) and has logged
  less than the abandoned attempt had (CSV, W&B offline): the later attempt's rows, noted;
- one W&B run resumed into directories under two working directories, read from the
  folder holding both: one run, its attempts joined;
- a ``.zst`` log without the ``zstandard`` package, a W&B history value that is not JSON,
  a dangling ``run-*.wandb`` link, a run string holding a newline, ``annotate`` on one run
  that fails (a gzip cut short, a name too long for its sidecars), another key's row at
  step 2**63-1, negative MLflow steps;
- a log split by spaces, a row with fewer fields than its header, naive local dates across
  a daylight-saving fall-back.

Each ends in a clear error (one line naming the run, exit 1 or 2) or a right, noted result;
the outcomes are counted with the other hostile files' and printed at the session's end.
"""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from .test_fuzz_files import _SETTINGS, _analyze, _cli, _count, _judge_error, logs
from .test_fuzz_shapes import _offline_run


def _doc(out: str) -> dict:
    return json.loads(out)


def _notes(doc: dict) -> str:
    return "\n".join(doc["notes"])


# -- rolled-back attempts ------------------------------------------------------------------
@st.composite
def rolled_back(draw: st.DrawFn) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the whole log, the rows the run keeps): an attempt logged to k, the next went back
    to c < k and has logged to j < k so far (c = 0: a run started again)."""
    frame = draw(logs())
    n = len(frame)
    k = draw(st.integers(4, n - 1))
    c = draw(st.sampled_from([0, draw(st.integers(0, k - 3))]))
    j = draw(st.integers(c + 2, k - 1))  # two rows again at least: a restart, not a stray row
    again = frame.iloc[c:j + 1].copy()
    again["train_loss"] -= draw(st.floats(0.01, 0.3))
    kept = pd.concat([frame.iloc[:c], again]).reset_index(drop=True)
    return pd.concat([frame.iloc[:k + 1], again]).reset_index(drop=True), kept


def _judge_rolled_back(shape: str, code, out: str, err: str, kept: pd.DataFrame, name: str) -> None:
    if code != 0:
        _judge_error(shape, code, err, name)  # too few rows left is a clear error
        return
    doc = _doc(out)
    right = doc["observed"]["step"] == float(kept["step"].iloc[-1])
    noted = "the log restarts at step" in _notes(doc) or "joined" in _notes(doc)
    _count(shape, "noted results" if right and noted else "silent")


@_SETTINGS
@given(case=rolled_back())
def test_a_csv_with_a_rolled_back_attempt(tmp_path_factory, capsys, case):
    frame, kept = case
    path = tmp_path_factory.mktemp("r") / "run.csv"
    frame.to_csv(path, index=False)
    code, out, err = _cli(capsys, _analyze(path))
    _judge_rolled_back("rolled-back attempt (csv)", code, out, err, kept, "run.csv")


@_SETTINGS
@given(case=rolled_back())
def test_a_wandb_history_with_a_rolled_back_attempt(tmp_path_factory, capsys, case):
    frame, kept = case
    folder = tmp_path_factory.mktemp("w") / "offline-run-20250101_000000-abcd1234"
    _offline_run(folder, frame)
    code, out, err = _cli(capsys, _analyze(f"wandb-offline:{folder}"))
    _judge_rolled_back("rolled-back attempt (W&B)", code, out, err, kept, folder.name)


def test_a_wandb_run_resumed_from_two_working_directories(tmp_path, capsys):
    """Each attempt under its own working directory's wandb/: the folder holding both
    reads one run (no run read alone, half its rows missing)."""
    from .framework_runs import FRAMEWORKS

    first, second = sorted((FRAMEWORKS / "wandb" / "hf-resumed").glob("offline-run-*"))
    for attempt, name in ((first, "a"), (second, "b")):
        shutil.copytree(attempt, tmp_path / name / "wandb" / attempt.name)
    code, out, err = _cli(capsys, ["annotate", f"wandb-offline:{tmp_path}", "-t", "4.5", "--dry-run", "--json"])
    rows = json.loads(out) if code == 0 else []
    joined = len(rows) == 1 and rows[0]["run"] == "hf-resumed"
    _count("W&B attempts in two folders", "noted results" if joined else "silent")


# -- inputs that ended in a traceback -------------------------------------------------------
def test_a_zst_log_without_its_package(tmp_path, capsys):
    frame = pd.DataFrame({"step": range(40), "train_loss": np.linspace(5, 3, 40), "global_batch": 1000})
    path = tmp_path / "run.csv.zst"
    try:
        import zstandard
    except ImportError:
        path.write_bytes(b"(\xb5/\xfd" + bytes(64))  # a zstd frame's magic: read as one by its suffix
        code, _, err = _cli(capsys, _analyze(path))
        _judge_error("zst without zstandard", code, err, "run.csv.zst")
        assert "pip install zstandard" in err
        return
    path.write_bytes(zstandard.ZstdCompressor().compress(frame.to_csv(index=False).encode()))
    code, out, err = _cli(capsys, _analyze(path))
    _count("zst without zstandard", "noted results" if code == 0 else "unclear")


@_SETTINGS
@given(frame=logs(), bad=st.sampled_from(["{", "[1,", "nan?", '"3.1', "\\x00"]), data=st.data())
def test_a_wandb_value_that_is_not_json(tmp_path_factory, capsys, frame, bad, data):
    row = data.draw(st.integers(0, len(frame) - 1))
    folder = tmp_path_factory.mktemp("j") / "offline-run-20250101_000000-abcd1234"
    _offline_run(folder, frame, raw={(row, "train_loss"): bad})
    code, out, err = _cli(capsys, _analyze(f"wandb-offline:{folder}"))
    if code != 0:
        _judge_error("W&B value not JSON", code, err, folder.name)
        return
    _count("W&B value not JSON", "noted results" if "not valid JSON" in _notes(_doc(out)) else "silent")


# -- inputs that ended in an unclear error --------------------------------------------------
def test_a_dangling_wandb_file_link(tmp_path, capsys):
    folder = tmp_path / "offline-run-20250101_000000-abcd1234"
    folder.mkdir()
    (folder / "run-abcd1234.wandb").symlink_to(tmp_path / "gone" / "run-abcd1234.wandb")
    code, _, err = _cli(capsys, _analyze(f"wandb-offline:{tmp_path}"))
    _judge_error("dangling .wandb link", code, err, "run-abcd1234.wandb")
    assert "a link to" in err


@pytest.mark.parametrize("spec", ["run\n.csv", "mlflow:abc\ndef", "wandb-offline:x\ry"])
def test_a_run_string_holding_a_control_character(tmp_path, capsys, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)  # a relative run string names nothing here
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    if spec.startswith("mlflow"):
        from mlflow.tracking import MlflowClient

        MlflowClient(uri).create_experiment("e", artifact_location=(tmp_path / "a").as_uri())  # a store, no such run
    code, _, err = _cli(capsys, _analyze(spec, "--tracking-uri", uri) if spec.startswith("mlflow") else _analyze(spec))
    _judge_error("run string with a newline", code, err, spec.split("\n")[0].split("\r")[0])


@_SETTINGS
@given(frame=logs(), kind=st.sampled_from(["gzip cut short", "name too long"]), share=st.floats(0.05, 0.95))
def test_annotate_on_one_run_that_fails(tmp_path_factory, capsys, frame, kind, share):
    folder = tmp_path_factory.mktemp("a")
    if kind == "gzip cut short":
        data = gzip.compress(frame.to_csv(index=False).encode())
        path = folder / "run.csv.gz"
        path.write_bytes(data[: max(1, int(share * len(data)))])
    else:
        path = folder / f"{'r' * 247}.csv"
        frame.to_csv(path, index=False)
    code, _, err = _cli(capsys, ["annotate", str(path), "-t", "4.2", "--model", "power-law"])
    _judge_error(f"annotate: {kind}", code, err, path.name)


def test_another_keys_row_at_the_largest_step(tmp_path, capsys):
    """A user metric stamped at step 2**63-1 (a W&B history row logging no loss): dropped,
    said, and the run still analysed."""
    frame = pd.DataFrame({"step": np.arange(60.0), "train_loss": np.linspace(5, 3, 60), "global_batch": 1000.0})
    frame = pd.concat([frame, pd.DataFrame({"step": [2.0**63 - 1], "other": [1.0]})], ignore_index=True)
    folder = tmp_path / "offline-run-20250101_000000-abcd1234"
    _offline_run(folder, frame)
    code, out, err = _cli(capsys, _analyze(f"wandb-offline:{folder}"))
    if code != 0:
        _judge_error("a row at step 2**63-1", code, err, folder.name)
        return
    doc = _doc(out)
    noted = "rows of other keys at steps no step can be" in _notes(doc) or "row of other keys" in _notes(doc)
    _count("a row at step 2**63-1", "noted results" if noted and doc["observed"]["step"] == 59 else "silent")


def test_negative_mlflow_steps(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from tests.doubles.mlflow_runs import log_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("neg", artifact_location=(tmp_path / "a").as_uri())
    frame = pd.DataFrame({"step": np.arange(-20, 40), "train_loss": np.linspace(5, 3, 60), "global_batch": 1000.0})
    run_id = log_run(client, experiment, frame, name="neg", workers=1)
    code, _, err = _cli(capsys, _analyze(f"mlflow:{run_id}", "--tracking-uri", uri, "--no-cache"))
    _judge_error("negative MLflow steps", code, err, run_id)
    assert "_mlflow_step" not in err and "MLflow metric step" in err


# -- left from before: spaces, short rows, a daylight-saving fall-back ------------------------
@_SETTINGS
@given(frame=logs(), aligned=st.booleans())
def test_a_log_split_by_spaces(tmp_path_factory, capsys, frame, aligned):
    folder = tmp_path_factory.mktemp("s")
    frame.to_csv(folder / "comma.csv", index=False)
    # Every digit kept: to_string rounds to 6 decimals, and a short log's forecast can move
    # by more than the comparison's tolerance on that alone.
    text = frame.to_string(index=False, float_format=lambda v: repr(float(v))) if aligned else frame.to_csv(index=False, sep=" ")
    (folder / "run.csv").write_text(text + "\n")
    _, want, _ = _cli(capsys, _analyze(folder / "comma.csv"))
    code, out, err = _cli(capsys, _analyze(folder / "run.csv"))
    if code != 0:
        _judge_error("split by spaces", code, err, "run.csv")
        return
    same = [g["tokens"] == pytest.approx(w["tokens"], rel=1e-6) if w["tokens"] else g["tokens"] == w["tokens"]
            for g, w in zip(_doc(out)["targets"], _doc(want)["targets"])]
    _count("split by spaces", "noted results" if all(same) else "silent")


@_SETTINGS
@given(frame=logs(), data=st.data())
def test_a_row_with_fewer_fields_than_the_header(tmp_path_factory, capsys, frame, data):
    lines = frame.to_csv(index=False).splitlines()
    row = data.draw(st.integers(1, len(lines) - 1))
    lines[row] = ",".join(lines[row].split(",")[: data.draw(st.integers(2, 4))])
    path = tmp_path_factory.mktemp("f") / "run.csv"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = _cli(capsys, _analyze(path))
    if code != 0:
        _judge_error("fewer fields than the header", code, err, "run.csv")
        return
    noted = "fewer fields than the header" in _notes(_doc(out))
    _count("fewer fields than the header", "noted results" if noted else "silent")


@_SETTINGS
@given(frame=logs(), zone=st.sampled_from(["America/New_York", "Europe/Berlin", "Australia/Sydney"]),
       seconds_per_row=st.floats(20.0, 200.0))
def test_naive_local_dates_across_a_fall_back(tmp_path_factory, capsys, frame, zone, seconds_per_row):
    ends = {"America/New_York": "2024-11-03 06:00", "Europe/Berlin": "2024-10-27 01:00",
            "Australia/Sydney": "2024-04-06 16:00"}  # the UTC instant each zone falls back
    middle = pd.Timestamp(ends[zone], tz="UTC")
    utc = middle + pd.to_timedelta((np.arange(len(frame)) - len(frame) // 2) * seconds_per_row, "s")
    frame["time"] = pd.DatetimeIndex(utc).tz_convert(zone).tz_localize(None).strftime("%Y-%m-%d %H:%M:%S")
    path = tmp_path_factory.mktemp("t") / "run.csv"
    frame.to_csv(path, index=False)
    code, out, err = _cli(capsys, _analyze(path))
    if code != 0:
        _judge_error("naive dates across a fall-back", code, err, "run.csv")
        return
    doc = _doc(out)
    right = doc["observed"]["seconds"] == pytest.approx((len(frame) - 1) * seconds_per_row, abs=1.0)
    noted = "daylight-saving" in _notes(doc)  # the middle row is the first after the fall-back
    _count("naive dates across a fall-back", "noted results" if right and noted else "silent")
