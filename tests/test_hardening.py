"""Malformed and adversarial logs end in a clear error or a valid result, never a traceback.

Hypothesis writes CSV logs with empty files, single rows, NaN/inf, negative or decreasing
tokens, duplicate steps, huge values, text in numeric columns, and odd run names, and
runs the command line on them in-process: any exception escaping ``main`` fails the test.
The number of generated cases is printed at the end of the test session.
"""

from __future__ import annotations

import csv
import io
import json
import math
import string

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracker_plugin as tp
from tracker_plugin.cli import main

from .conftest import CASES, examples

STATUSES = {"reached", "forecast", "forecast_beyond_plan", "not_reached", "unreachable", "not_enough_data"}

_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-10, max_value=20),
    st.sampled_from([0.0, -1.0, 1e308, -1e308, 5e-324, 1e15, 3.3]),
)
_cells = st.one_of(
    _numbers.map(repr),
    st.integers(-5, 10**6).map(str),
    st.sampled_from(["", "nan", "NaN", "inf", "-inf", "None", "NA", "abc", "1e999", "3,5", " 4 ", "0x10", "true"]),
)


@st.composite
def csv_logs(draw):
    """Half plausible runs with a few bad cells (so every analysis path runs), half noise."""
    plausible = draw(st.integers(0, 3)) > 0
    if plausible:
        columns = ["step", "train_loss", "global_batch"] + draw(
            st.lists(st.sampled_from(["tokens", "lr", "val_loss"]), unique=True, max_size=3)
        )
    else:
        columns = ["step", "train_loss"] + draw(
            st.lists(st.sampled_from(["tokens", "global_batch", "lr", "val_loss", "note"]), unique=True, max_size=4)
        )
        if draw(st.booleans()):
            columns.remove(draw(st.sampled_from(columns)))  # a required column may be missing
    n = draw(st.integers(0, 60))
    every = draw(st.sampled_from([1, 1, 7, 100]))
    decay = draw(st.floats(0.0, 0.2))
    rows = []
    for i in range(n):
        if plausible:
            row = {"step": str(i * every), "train_loss": repr(5.0 - decay * i ** 0.5), "tokens": repr(1000.0 * i * every),
                   "global_batch": "1000", "lr": repr(min(1.0, (i + 1) / 5) * 1e-3), "val_loss": ""}
            if draw(st.integers(0, 9)) == 0:
                row[draw(st.sampled_from(columns))] = draw(_cells)
        else:
            row = {c: draw(_cells) for c in columns}
        rows.append([row.get(c, "") for c in columns])
    if draw(st.integers(0, 4)) == 0 and rows:
        rows.insert(draw(st.integers(0, len(rows))), list(draw(st.sampled_from(rows))))  # duplicate step
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if n or draw(st.booleans()):
        writer.writerow(columns)
    writer.writerows(rows)
    return buffer.getvalue()


_names = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "-_.= +@ü中😀", min_size=1, max_size=30),
    st.sampled_from(["=1+1", "+cmd", "-rf", "@SUM(A1)", "..", "con", "a b", "ÿ", "%2e%2e", "run_1Mbs"]),
).filter(lambda s: s not in {".", ".."} and "/" not in s and "\x00" not in s)


def _check_cli(code: int, out: str, err: str, path: str) -> None:
    assert code in (0, 1, 2)
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ")


@pytest.mark.filterwarnings("error::RuntimeWarning")
@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(text=csv_logs(), name=_names, targets=st.lists(_numbers.filter(math.isfinite), min_size=1, max_size=3))
def test_analyze_never_tracebacks(tmp_path_factory, capsys, text, name, targets):
    CASES["analyze"] += 1
    path = tmp_path_factory.mktemp("h") / f"{name}.csv"
    path.write_text(text, encoding="utf-8")
    code = main(["analyze", str(path), "--json", "--target", *map(repr, targets)])
    out, err = capsys.readouterr()
    _check_cli(code, out, err, str(path))
    if code == 0:
        doc = json.loads(out)
        assert doc["run"] == str(path)
        for target in doc["targets"]:
            assert target["status"] in STATUSES
            for key in ("tokens", "step"):
                assert target[key] is None or math.isfinite(target[key])


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(names=st.lists(_names, min_size=1, max_size=4, unique_by=str.lower), fmt=st.sampled_from(["--csv", "--markdown", "--json"]))
def test_compare_output_is_safe_for_any_run_name(tmp_path_factory, capsys, data_dir, names, fmt):
    CASES["compare"] += 1
    folder = tmp_path_factory.mktemp("c")
    source = (data_dir / "parity_fixed.csv").read_text()
    for name in names:
        (folder / f"{name}.csv").write_text(source)
    code = main(["compare", str(folder), "-t", "4.5", "--model", "power-law", fmt])  # names, not models, are tested
    out, err = capsys.readouterr()
    _check_cli(code, out, err, str(folder))
    assert code == 0
    if fmt == "--csv":
        for row in csv.reader(io.StringIO(out)):
            for cell in row:
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    elif fmt == "--json":
        assert {r["run"] for g in json.loads(out) for r in g["rows"]} == set(names)


_frames = st.integers(0, 30).flatmap(
    lambda n: st.fixed_dictionaries(
        {
            "step": st.lists(st.one_of(st.integers(-3, 60), st.floats(allow_nan=True)), min_size=n, max_size=n),
            "train_loss": st.lists(_numbers, min_size=n, max_size=n),
            "tokens": st.lists(_numbers, min_size=n, max_size=n),
            "global_batch": st.lists(_numbers, min_size=n, max_size=n),
        }
    )
)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@settings(max_examples=examples(300), deadline=None)
@given(columns=_frames, keep=st.sets(st.sampled_from(["tokens", "global_batch"])))
def test_the_common_frame_is_valid_or_refused(columns, keep):
    """build_history returns a frame that keeps its invariants, or raises DataError."""
    CASES["frame"] += 1
    frame = pd.DataFrame({k: v for k, v in columns.items() if k in {"step", "train_loss", *keep}})
    try:
        history = tp.build_history(frame, run="h", batch_size=1000)
    except tp.DataError as exc:
        assert str(exc).startswith("h: ")
        return
    assert len(history) >= 2
    assert np.all(np.diff(history.step) > 0) and history.step[0] >= 0
    assert np.all(np.isfinite(history.loss))
    assert np.all(np.isfinite(history.tokens)) and np.all(np.diff(history.tokens) >= 0)
    assert np.all(history.batch > 0)
    analysis = tp.analyze(history, [3.0])
    assert analysis.targets[0].status in STATUSES
