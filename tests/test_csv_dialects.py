"""Files as people have them: CSV logs in other dialects, and clocks written as dates.

- The delimiter is sniffed (comma, tab, ``;``, ``|``; a ``.tsv`` is tab): each dialect of
  one log gives the comma file's analysis.
- A ``;`` file writing ``3,25`` is read with the decimal comma, and a note says so.
- An ISO 8601 / RFC 3339 time column is the clock in Unix seconds (a date with no zone
  is UTC, noted); cells that are no date are counted, as blanks are.
- A time column that is neither numbers nor dates is skipped with a note naming it and
  ``--time-col none``; ``--step-time`` then gives the hours.
- The command line's messages name the flag that fixes the problem, and only that one.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.cli import main
from tracker_plugin.errors import ConfigError
from tracker_plugin.trackers.csvfile import read_csv, read_lr_schedule

DATA = Path(__file__).parent / "data"
ROWS = 3000
START = pd.Timestamp("2024-05-01T12:00:00Z")
SECONDS_PER_STEP = 0.25


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    """The first 3,000 rows of the nanoGPT log: a sparse val_loss (blank cells) beside the train loss."""
    return pd.read_csv(DATA / "nanogpt-124M-adamw-llmc.csv", nrows=ROWS)


def _analyze(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, dict | None, str]:
    capsys.readouterr()
    code = main(["analyze", str(path), "-t", "4.0", "3.6", "--model", "power-law", "--json", *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


_DIALECTS = {
    "tab": ("run.csv", {"sep": "\t"}),
    "semicolon, decimal commas": ("run.csv", {"sep": ";", "decimal": ","}),
    "semicolon, decimal points": ("run.csv", {"sep": ";"}),
    "pipe": ("run.csv", {"sep": "|"}),
    ".tsv suffix": ("run.tsv", {"sep": "\t"}),
}


@pytest.mark.parametrize("dialect", list(_DIALECTS))
def test_each_dialect_gives_the_comma_files_analysis(log, tmp_path, capsys, dialect):
    name, how = _DIALECTS[dialect]
    comma = tmp_path / "comma.csv"
    log.to_csv(comma, index=False)
    path = tmp_path / name
    log.to_csv(path, index=False, **how)
    if how.get("decimal") == ",":
        assert "4,8" in path.read_text()  # the file really writes decimal commas
    _, want, _ = _analyze(capsys, comma)
    code, got, err = _analyze(capsys, path)
    assert code == 0, err
    assert got["observed"] == want["observed"]
    assert got["fit_start_step"] == want["fit_start_step"]
    assert [t["status"] for t in want["targets"]] == ["reached", "forecast_beyond_plan"]
    for g, w in zip(got["targets"], want["targets"], strict=True):
        assert g["status"] == w["status"]
        assert g["tokens"] == pytest.approx(w["tokens"], rel=1e-9)
        assert g["step"] == pytest.approx(w["step"], rel=1e-9)
    noted = [n for n in got["notes"] if "decimal mark" in n]
    assert len(noted) == (1 if how.get("decimal") == "," else 0)


def test_a_compressed_tsv_is_tab_separated(log, tmp_path):
    path = tmp_path / "run.tsv.gz"
    path.write_bytes(gzip.compress(log.to_csv(index=False, sep="\t").encode()))
    history = tp.load_csv(path)
    assert len(history) == ROWS and history.loss[0] == pytest.approx(10.965596)


def test_a_directory_lists_tsv_logs(log, tmp_path, capsys):
    log.to_csv(tmp_path / "a.csv", index=False)
    log.to_csv(tmp_path / "b.tsv", index=False, sep="\t")
    capsys.readouterr()
    assert main(["compare", str(tmp_path), "-t", "4.0", "--model", "power-law", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    text = json.dumps(rows)
    assert "a.csv" in text and "b.tsv" in text


def test_a_quoted_header_with_commas_in_a_tab_file(tmp_path):
    """A comma inside a quoted column name is no delimiter: the tab is."""
    step = np.arange(50)
    frame = pd.DataFrame({"step": step, "train_loss": 5 - np.log1p(step) / 4, "global_batch": 1000,
                          "note, free text": "a, b"})
    path = tmp_path / "run.csv"
    frame.to_csv(path, index=False, sep="\t")
    history = tp.load_csv(path)
    assert len(history) == 50 and history.batch[0] == 1000


def test_mixed_decimal_marks_in_a_semicolon_file_are_a_clear_error(tmp_path, capsys):
    """``3,25`` beside ``3.25``: no one decimal mark reads the file; the cell it fails on is named."""
    lines = ["step;train_loss;global_batch"] + [f"{s};{5 - s / 100:.2f};1000" for s in range(30)]
    lines[10] = lines[10].replace(".", ",")
    path = tmp_path / "run.csv"
    path.write_text("\n".join(lines) + "\n")
    code, _, err = _analyze(capsys, path)
    assert code == 2 and err.count("\n") == 1 and "non-numeric value '4,91'" in err and "train_loss" in err


@pytest.mark.parametrize("row_sep", ["\t", " ", "   "])
def test_a_log_split_by_spaces_is_read_as_such(tmp_path, capsys, row_sep):
    """A header split by spaces over rows split by spaces (aligned, or not) or tabs: the
    cells are split on runs of whitespace, and the log reads as the comma-separated one."""
    path = tmp_path / "run.csv"
    rows = "".join(row_sep.join([str(s), str(5 - s / 100), "1000"]) + "\n" for s in range(30))
    path.write_text("step train_loss global_batch\n" + rows)
    history = read_csv(path)
    assert history.step.tolist() == list(range(30))
    np.testing.assert_allclose(history.loss, 5 - np.arange(30) / 100, rtol=1e-12)


def test_a_one_column_header_over_split_rows_says_the_delimiter_was_not_recognised(tmp_path, capsys):
    """A header the sniffer cannot split over rows that are: no one-column read, whose 'no
    step column' would send the user to --step-col."""
    path = tmp_path / "run.csv"
    rows = "".join(";".join([str(s), str(5 - s / 100), "1000"]) + "\n" for s in range(30))
    path.write_text("step\n" + rows)
    code, _, err = _analyze(capsys, path)
    assert code == 2 and err.count("\n") == 1
    assert "delimiter was not recognised" in err and "rows hold ';'" in err
    assert "--step-col" not in err and "--loss-col" not in err


def test_a_row_with_fewer_fields_than_the_header_is_noted(tmp_path):
    """pandas reads a short row's missing cells as blank: a guess, said in a note."""
    lines = ["step,train_loss,global_batch"] + [f"{s},{5 - s / 100},1000" for s in range(30)]
    lines[12] = "11,4.89"
    path = tmp_path / "run.csv"
    path.write_text("\n".join(lines) + "\n")
    history = read_csv(path)
    assert len(history) == 30
    assert "1 row has fewer fields than the header (the first on line 13): the missing cells were read as blank" \
        in history.notes


def test_a_one_column_log_still_names_the_missing_column(tmp_path, capsys):
    path = tmp_path / "run.csv"
    path.write_text("step\n" + "".join(f"{s}\n" for s in range(30)))
    code, _, err = _analyze(capsys, path)
    assert code == 2 and "--loss-col" in err and "delimiter" not in err


def test_a_tab_file_without_a_step_column_names_step_col(log, tmp_path, capsys):
    """The columns were split right: the missing step is the user's to name."""
    path = tmp_path / "run.tsv"
    log.rename(columns={"step": "iteration"}).to_csv(path, index=False, sep="\t")
    code, _, err = _analyze(capsys, path)
    assert code == 2 and "--step-col" in err and "'iteration'" in err and "delimiter" not in err


def test_an_lr_schedule_file_in_another_dialect(tmp_path):
    path = tmp_path / "plan.csv"
    path.write_text("step;lr\n0;0,001\n1000;0,0001\n")
    schedule = read_lr_schedule(path)
    assert list(schedule.steps) == [0, 1000] and schedule.lr[1] == pytest.approx(1e-4)
    path.write_text("step\n0\t1\n")
    with pytest.raises(ConfigError, match="delimiter was not recognised"):
        read_lr_schedule(path)


# -- clocks written as dates ------------------------------------------------------------------
def _clocked(tmp_path: Path, stamps: list[str] | pd.Series, rows: int = 200) -> Path:
    step = np.arange(rows) * 10
    frame = pd.DataFrame({"step": step, "train_loss": 5 - np.log1p(step) / 5, "global_batch": 1000,
                          "timestamp": list(stamps)[:rows]})
    path = tmp_path / "run.csv"
    frame.to_csv(path, index=False)
    return path


def _instants(rows: int = 200) -> pd.DatetimeIndex:
    return START + pd.to_timedelta(np.arange(rows) * 10 * SECONDS_PER_STEP, unit="s")


_FORMATS = {
    "Z": lambda t: t.dt.strftime("%Y-%m-%dT%H:%M:%S.%f").str[:-3] + "Z",
    "offset +02:00, space": lambda t: t.dt.tz_convert("Europe/Berlin").dt.strftime("%Y-%m-%d %H:%M:%S.%f%z")
    .str.replace(r"(\d{2})(\d{2})$", r"\1:\2", regex=True),
    "offset -0500": lambda t: t.dt.tz_convert("America/New_York").dt.strftime("%Y-%m-%dT%H:%M:%S.%f%z"),
    # 2.5 s a row: every other row's half second is cut
    "whole seconds, Z": lambda t: t.dt.floor("s").dt.strftime("%Y-%m-%dT%H:%M:%SZ"),
    "naive": lambda t: t.dt.strftime("%Y-%m-%dT%H:%M:%S.%f"),
}


@pytest.mark.parametrize("fmt", list(_FORMATS))
def test_iso_dates_are_the_clock(tmp_path, fmt):
    rows = 200
    stamps = _FORMATS[fmt](pd.Series(_instants(rows)))
    assert "+02:00" in stamps[0] or fmt != "offset +02:00, space"
    history = tp.load_csv(_clocked(tmp_path, stamps, rows))
    assert history.time is not None and history.time_absolute
    assert history.time_source == "column 'timestamp' (ISO 8601 dates, Unix time)"
    assert history.time[0] == START.timestamp()
    per_step = np.diff(history.time) / np.diff(history.step)
    tolerance = 0.05 if fmt == "whole seconds, Z" else 1e-9
    assert per_step.mean() == pytest.approx(SECONDS_PER_STEP, abs=tolerance)
    if fmt != "whole seconds, Z":
        assert np.allclose(per_step, SECONDS_PER_STEP, rtol=0, atol=1e-6)
    naive = [n for n in history.notes if "no time zone" in n]
    assert naive == (["the dates in 'timestamp' name no time zone: read as UTC"] if fmt == "naive" else [])


@pytest.mark.parametrize(("cell", "zoned"), [
    ("2024-05-01t14:00:03.5+02:00", True),  # RFC 3339 allows a lower-case t and z
    ("2024-05-01t12:00:03.5z", True),
    ("20240501T120003.5Z", True),  # ISO 8601's basic format
    ("2024-05-01T07:00:03.5-0500", True),
    ("2024-05-01 12:00:03.5", False),
])
def test_iso_spellings_read_as_one_instant(cell, zoned):
    from tracker_plugin.frame.time import logged_times

    times = logged_times(pd.Series([cell, cell], dtype=object), "timestamp")
    assert times.dates and times.values is not None
    assert times.values[0] == START.timestamp() + 3.5
    assert bool(times.notes) is not zoned  # only a date naming no zone is noted (as UTC)


def test_dates_in_mixed_zones_are_one_clock(tmp_path):
    """Each row says its own zone (a run moved between machines): the instants are what count."""
    instants = pd.Series(_instants())
    zoned = [t.tz_convert("Asia/Tokyo").isoformat() if i % 2 else t.isoformat().replace("+00:00", "Z")
             for i, t in enumerate(instants)]
    zoned[4] = zoned[4].replace("Z", "")  # one naive date: UTC, and counted
    history = tp.load_csv(_clocked(tmp_path, zoned))
    assert np.allclose(np.diff(history.time), 10 * SECONDS_PER_STEP, atol=1e-6)
    assert "1 of the 200 dates in 'timestamp' name no time zone: read as UTC" in history.notes


def test_dates_with_unreadable_cells_are_counted_like_blanks(tmp_path):
    stamps = list(_FORMATS["Z"](pd.Series(_instants())))
    for row in (3, 50, 51):
        stamps[row] = "n/a (rebooted)"
    stamps[7] = ""
    history = tp.load_csv(_clocked(tmp_path, stamps))
    # The rows without a time take it interpolated on step: the clock is as if whole.
    assert np.allclose(history.time - START.timestamp(), history.step * SECONDS_PER_STEP, atol=1e-6)
    (note,) = [n for n in history.notes if "neither numbers nor ISO 8601 dates" in n]
    assert note.startswith("3 of 199 times in 'timestamp'") and "'n/a (rebooted)' in row 4" in note


def test_a_date_clock_written_in_one_burst_gives_no_hours(tmp_path, capsys):
    """The bulk-log rule holds for dates: every row at one second is the import's clock."""
    path = _clocked(tmp_path, ["2024-05-01T12:00:00Z"] * 200)
    code, doc, err = _analyze(capsys, path)
    assert code == 0, err
    assert doc["observed"]["seconds"] is None and any("bulk log" in n for n in doc["notes"])


def test_dates_give_an_eta_in_utc(tmp_path, capsys):
    code, doc, err = _analyze(capsys, _clocked(tmp_path, _FORMATS["offset +02:00, space"](pd.Series(_instants()))))
    assert code == 0, err
    assert doc["throughput"]["clock_absolute"] is True
    assert doc["throughput"]["seconds_per_step"] == pytest.approx(SECONDS_PER_STEP, rel=1e-6)
    assert doc["throughput"]["start"].startswith("2024-05-01T12:00:00")
    assert doc["read_as"]["time"] == "column 'timestamp' (ISO 8601 dates, Unix time)"


_UNREADABLE = {
    "words": lambda rows: ["hello"] * rows,
    "mixed garbage": lambda rows: [["x1", "2024-05-01T12:00:00Z", "17", "-", "later"][i % 5] for i in range(rows)],
    "true/false": lambda rows: [True, False] * (rows // 2),
}


@pytest.mark.parametrize("kind", list(_UNREADABLE))
def test_an_unreadable_time_column_is_skipped_with_a_note(tmp_path, capsys, kind):
    path = _clocked(tmp_path, _UNREADABLE[kind](200))
    code, doc, err = _analyze(capsys, path)
    assert code == 0, err
    (note,) = [n for n in doc["notes"] if "time column 'timestamp'" in n]
    assert "no clock read from it" in note and doc["observed"]["seconds"] is None
    # The command line names the way out in its flags.
    capsys.readouterr()
    assert main(["analyze", str(path), "-t", "4.0", "--model", "power-law"]) == 0
    out = capsys.readouterr().out
    assert "--time-col none" in out and "--step-time" in out and "columns.time" not in out
    code, doc, err = _analyze(capsys, path, "--step-time", "2")
    assert code == 0, err
    assert doc["throughput"]["source"] == "step_time" and doc["throughput"]["seconds_per_step"] == 2
    assert doc["targets"][0]["seconds"] is not None
    code, doc, err = _analyze(capsys, path, "--time-col", "none")
    assert code == 0, err
    assert not [n for n in doc["notes"] if "timestamp" in n]


def test_numbers_with_a_stray_word_keep_their_clock(tmp_path):
    """A Unix clock with one cell of text: the rest is still the clock, and the cell is counted."""
    stamps = [f"{START.timestamp() + i * 2.5:.1f}" for i in range(200)]
    stamps[20] = "crashed"
    history = tp.load_csv(_clocked(tmp_path, stamps))
    assert history.time_source == "column 'timestamp' (Unix time)"
    assert np.allclose(np.diff(history.time), 2.5)
    assert any(n.startswith("1 of 200 times in 'timestamp'") for n in history.notes)


def test_time_col_help_names_none(capsys):
    capsys.readouterr()
    assert main(["analyze", "--help-all"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "ISO 8601" in help_text and "--time-col none reads no clock" in help_text


@pytest.mark.parametrize("flag", ["--lr-col", "--time-col", "--tokens-col", "--batch-col"])
def test_a_column_the_user_names_must_be_there(capsys, tmp_path, flag):
    """A named column that is not in the file is an error that names it, not a reading
    without it: --lr-col lrate on a log of 'lr' would otherwise forecast with no lr at all."""
    path = tmp_path / "run.csv"
    path.write_text("step,tokens,global_batch,lr,time,train_loss\n" + "".join(
        f"{s},{s * 1000},1000,0.001,{1.7e9 + s},{4.5 - s / 1000}\n" for s in range(1, 200)))
    code, doc, err = _analyze(capsys, path, flag, "no_such_column")
    assert code == 2 and doc is None and "Traceback" not in err
    assert f"no {flag[2:-4]} column 'no_such_column'" in err and str(path) in err and "'lr'" in err
    assert flag in err  # the flag that fixes it
    # the way to read none of it is still there
    code, doc, _ = _analyze(capsys, path, flag, "none") if flag in ("--lr-col", "--time-col") else (0, {}, "")
    assert code == 0
