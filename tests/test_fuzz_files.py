"""Hostile files the failure-shape fuzz suite does not generate, through the command line.

Each shape is a file (or a pair of files) damaged the way real ones are, or built to hurt
a reader: a ``.zip`` that is not a zip, a gzip cut short or with data after its end, a
clock in Unix micro- or nanoseconds, a row with one field more than the header, a
Lightning ``hparams.yaml`` that loops, explodes ("billion laughs"), nests 100,000 deep or
is not UTF-8, a ``trainer_state.json`` nested 100,000 deep, a ``.wandb`` file whose last
record's length points past its end, a CSV whose annotation files' names exceed the file
system's limit, an annotation killed between its two files, a tokens count that gives no
tokens per step, runs whose failures the comparison must say in flags, and a log in
another dialect (tab, ``;`` with decimal commas, ``|``, ``.tsv``) with a clock of dates or
of text.

Every case runs ``tracker_plugin.cli.main`` in-process under a timer, and must end in a
clear error (exit 1 or 2, one line on stderr, naming the file, in the command line's
words, no traceback) or a result that says what it did (a note). The outcomes per shape
(errors / noted results / tracebacks / hangs / silent / unclear errors) are printed at the
end of the session; anything but a clear error or a noted result fails its test.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import struct
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracker_plugin.cli import main
from tracker_plugin.cli.words import in_flags
from tracker_plugin.trackers.wandb_log import read_log

from .conftest import FILES
from .test_fuzz_shapes import _offline_run

# A case that takes more CPU time than this is a hang: every reader here is bounded. CPU
# time, not the clock's, so that a loaded machine (the suite shares its cores) is no hang;
# the clock's limit, far above it, catches a case that waits forever.
_CASE_SECONDS = 5.0
_CASE_WALL_SECONDS = 60.0
_SETTINGS = settings(
    max_examples=int(8 * float(os.environ.get("HARDENING_SCALE", "1"))) or 1,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
OUTCOMES = ("errors", "noted results", "tracebacks", "hangs", "silent", "unclear")


class _Hang(BaseException):
    """Raised by the timer; a BaseException, so no per-run ``except Exception`` eats it."""


@contextmanager
def _timer(cpu_seconds: float, wall_seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise _Hang

    timers = ((signal.SIGPROF, signal.ITIMER_PROF, cpu_seconds), (signal.SIGALRM, signal.ITIMER_REAL, wall_seconds))
    previous = [signal.signal(sig, expire) for sig, _, _ in timers]
    for _, timer, seconds in timers:
        signal.setitimer(timer, seconds)
    try:
        yield
    finally:
        for (sig, timer, _), handler in zip(timers, previous):
            signal.setitimer(timer, 0)
            signal.signal(sig, handler)


def _cli(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int | str, str, str]:
    """Exit code (or "traceback" / "hang"), stdout, stderr of one in-process run."""
    capsys.readouterr()
    try:
        with _timer(_CASE_SECONDS, _CASE_WALL_SECONDS):
            code: int | str = main(args)
    except _Hang:
        code = "hang"
    except Exception as exc:  # noqa: BLE001 - what escapes main is the failure counted
        code = "traceback"
        print(f"{type(exc).__name__}: {exc}")
    out, err = capsys.readouterr()
    return code, out, err


def _count(shape: str, outcome: str) -> None:
    counts = FILES.setdefault(shape, dict.fromkeys(OUTCOMES, 0))
    counts[outcome] += 1
    assert outcome in ("errors", "noted results"), f"{shape}: {outcome}"


def _clear_error(code: int | str, err: str, names: str) -> bool:
    """Exit 1 or 2 with one line naming ``names``, said in flags, no internal column."""
    line = err.strip()
    return (
        code in (1, 2) and line.count("\n") == 0 and line.startswith("error: ") and names in line
        and "__" not in line and in_flags(line) == line and "Traceback" not in err
    )  # fmt: skip


def _judge_error(shape: str, code: int | str, err: str, names: str) -> None:
    """A case that must end in a clear error: anything else is a traceback, a hang or silent."""
    if code in ("traceback", "hang"):
        _count(shape, "tracebacks" if code == "traceback" else "hangs")
    elif _clear_error(code, err, names):
        _count(shape, "errors")
    else:
        print(err)
        _count(shape, "silent" if code == 0 else "unclear")


def _analyze(path: Path | str, *extra: str) -> list[str]:
    return ["analyze", str(path), "-t", "4.2", "--json", "--model", "power-law", *extra]


# -- a plausible log, the material every shape bends ------------------------------------------
@st.composite
def logs(draw: st.DrawFn, *, extra_columns: int = 0) -> pd.DataFrame:
    n = draw(st.integers(12, 80))
    every = draw(st.sampled_from([1, 10]))
    step = np.arange(n) * every
    frame = pd.DataFrame({
        "step": step,
        "train_loss": 5.0 - np.log1p(step) / draw(st.floats(3.0, 8.0)),
        "tokens": step * 1000.0,
        "global_batch": 1000.0,
        "lr": 1e-3,
    })
    for k in range(extra_columns):  # a wide export: many keys the analysis does not read
        frame[f"other/{k}"] = float(k)
    return frame


def _csv_bytes(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


# -- compressed files that are not what their suffix says -------------------------------------
@st.composite
def not_zips(draw: st.DrawFn) -> bytes:
    text = _csv_bytes(draw(logs()))
    kind = draw(st.sampled_from(["plain text", "random bytes", "zip cut short", "empty zip", "two members"]))
    if kind == "plain text":
        return text
    if kind == "random bytes":
        return draw(st.binary(min_size=1, max_size=400))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        if kind != "empty zip":
            archive.writestr("run.csv", text)
        if kind == "two members":
            archive.writestr("other.csv", text)
    data = buffer.getvalue()
    return data[: draw(st.integers(1, len(data) - 1))] if kind == "zip cut short" else data


@_SETTINGS
@given(data=not_zips())
def test_a_zip_that_is_not_one(tmp_path_factory, capsys, data):
    path = tmp_path_factory.mktemp("z") / "run.csv.zip"
    path.write_bytes(data)
    code, _, err = _cli(capsys, _analyze(path))
    _judge_error("zip that is not one", code, err, "run.csv.zip")


@_SETTINGS
@given(frame=logs(), garbage=st.binary(min_size=1, max_size=64).filter(any))
def test_a_gzip_with_data_after_its_end(tmp_path_factory, capsys, frame, garbage):
    path = tmp_path_factory.mktemp("g") / "run.csv.gz"
    path.write_bytes(gzip.compress(_csv_bytes(frame)) + garbage)
    code, _, err = _cli(capsys, _analyze(path))
    _judge_error("gzip with trailing data", code, err, "run.csv.gz")


@_SETTINGS
@given(frame=logs(), share=st.floats(0.0, 1.0, exclude_max=True))
def test_a_gzip_cut_short(tmp_path_factory, capsys, frame, share):
    data = gzip.compress(_csv_bytes(frame))
    path = tmp_path_factory.mktemp("g") / "run.csv.gz"
    path.write_bytes(data[: max(1, int(share * len(data)))])
    code, _, err = _cli(capsys, _analyze(path))
    assert code != 130  # SIGINT's code: a damaged file is no interrupt
    _judge_error("gzip cut short", code, err, "run.csv.gz")


# -- clocks in micro- and nanoseconds ---------------------------------------------------------
_UNITS = {"seconds": 1.0, "milliseconds": 1e3, "microseconds": 1e6, "nanoseconds": 1e9}


@pytest.mark.parametrize("unit", ["microseconds", "nanoseconds"])
def test_a_unix_clock_in_micro_or_nanoseconds(tmp_path_factory, capsys, unit):
    @_SETTINGS
    @given(frame=logs(), start=st.datetimes(datetime(2001, 9, 10), datetime(2150, 1, 1)),
           seconds_per_row=st.floats(0.2, 900.0))
    def case(frame: pd.DataFrame, start: datetime, seconds_per_row: float) -> None:
        _clock_case(tmp_path_factory, capsys, frame, unit, start, seconds_per_row)

    case()


def _clock_case(tmp_path_factory, capsys, frame: pd.DataFrame, unit: str, start: datetime,
                seconds_per_row: float) -> None:
    """Read in its unit: the run's span and its start date right, and a note says the unit."""
    unix = start.replace(tzinfo=timezone.utc).timestamp()
    frame["_timestamp"] = (unix + np.arange(len(frame)) * seconds_per_row) * _UNITS[unit]
    path = tmp_path_factory.mktemp("t") / "run.csv"
    path.write_text(frame.to_csv(index=False))
    code, out, err = _cli(capsys, _analyze(path))
    if code in ("traceback", "hang") or code != 0:
        _judge_error(f"unix {unit}", code, err, "run.csv")
        return
    doc = json.loads(out)
    span = (len(frame) - 1) * seconds_per_row
    right = doc["observed"]["seconds"] == pytest.approx(span, rel=1e-3) and doc["throughput"]["start"].startswith(
        str(start.year)
    )
    noted = any(f"read as Unix {unit}" in note for note in doc["notes"])
    _count(f"unix {unit}", "noted results" if right and noted else "silent")


@_SETTINGS
@given(frame=logs(), biggest=st.sampled_from([3e11, 5e14, 3e17, 1e21, 1e300]))
def test_a_clock_of_no_unit(tmp_path_factory, capsys, frame, biggest):
    """Values that are no date in any unit and too long for a run: no clock, with a note."""
    frame["time"] = np.linspace(0.0, biggest, len(frame))
    path = tmp_path_factory.mktemp("t") / "run.csv"
    path.write_text(frame.to_csv(index=False))
    code, out, err = _cli(capsys, _analyze(path))
    if code != 0:
        _judge_error("clock of no unit", code, err, "run.csv")
        return
    doc = json.loads(out)
    noted = doc["observed"]["seconds"] is None and any("no clock read from it" in n for n in doc["notes"])
    _count("clock of no unit", "noted results" if noted else "silent")


# -- other dialects, and clocks written as dates ----------------------------------------------
_CLOCKS: dict[str, Callable[[pd.Series], pd.Series] | None] = {
    "none": None,
    "Z": lambda t: t.dt.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z",
    "offset": lambda t: t.dt.tz_convert("Asia/Kolkata").dt.strftime("%Y-%m-%d %H:%M:%S.%f%z"),
    "naive": lambda t: t.dt.strftime("%Y-%m-%dT%H:%M:%S.%f"),
    "text": lambda t: pd.Series(["after lunch"] * len(t)),
}


@_SETTINGS
@given(frame=logs(), sep=st.sampled_from([",", "\t", ";", "|"]), decimal_comma=st.booleans(), tsv=st.booleans(),
       clock=st.sampled_from(sorted(_CLOCKS)), start=st.datetimes(datetime(2001, 9, 10), datetime(2100, 1, 1)),
       seconds_per_row=st.floats(0.5, 600.0))
def test_a_log_in_another_dialect(tmp_path_factory, capsys, frame, sep, decimal_comma, tsv, clock, start,
                                  seconds_per_row):
    """Tab, ``;`` (with decimal commas or points), ``|``, a ``.tsv``, with a clock of dates or
    text: the comma file's crossings, and the clock's seconds or a note saying there is none."""
    write = _CLOCKS[clock]
    instants = pd.Series(pd.Timestamp(start, tz="UTC") + pd.to_timedelta(np.arange(len(frame)) * seconds_per_row, "s"))
    if write is not None:
        frame["timestamp"] = write(instants)
    folder = tmp_path_factory.mktemp("d")
    frame.to_csv(folder / "comma.csv", index=False)
    sep, name = ("\t", "run.tsv") if tsv else (sep, "run.csv")
    frame.to_csv(folder / name, index=False, sep=sep, decimal="," if sep == ";" and decimal_comma else ".")
    _, want, _ = _cli(capsys, _analyze(folder / "comma.csv"))
    code, out, err = _cli(capsys, _analyze(folder / name))
    if code != 0:
        _judge_error("dialect", code, err, name)  # no dialect of a readable log is an error
        return
    got, want = json.loads(out), json.loads(want)
    same = [g["tokens"] == pytest.approx(w["tokens"], rel=1e-9) if w["tokens"] else g["tokens"] == w["tokens"]
            for g, w in zip(got["targets"], want["targets"])]
    seconds = got["observed"]["seconds"]
    if clock == "text":
        timed = seconds is None and any("--time-col none" in note for note in in_flags("\n".join(got["notes"])).split("\n"))
    elif clock == "none":
        timed = seconds is None
    else:
        naive = any("no time zone: read as UTC" in note for note in got["notes"])
        timed = seconds == pytest.approx((len(frame) - 1) * seconds_per_row, rel=1e-6) and naive == (clock == "naive")
    _count("dialect", "noted results" if all(same) and timed else "silent")


# -- a row with one field more than the header ------------------------------------------------
@_SETTINGS
@given(frame=logs(extra_columns=0) | logs(extra_columns=20), data=st.data())
def test_a_row_with_one_field_too_many(tmp_path_factory, capsys, frame, data):
    lines = frame.to_csv(index=False).splitlines()
    row = data.draw(st.integers(1, len(lines) - 1))
    fields = lines[row].split(",")
    fields.insert(data.draw(st.integers(0, len(fields))), str(data.draw(st.integers(1, 10**6))))
    lines[row] = ",".join(fields)
    path = tmp_path_factory.mktemp("x") / "run.csv"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = _cli(capsys, _analyze(path))
    if code == 0:  # only a result that left the row out, and said so, is right
        doc = json.loads(out)
        noted = any("field" in note for note in doc["notes"])
        _count("one field too many", "noted results" if noted else "silent")
        return
    _judge_error("one field too many", code, err, "run.csv")


# -- Lightning's hparams.yaml: loops, alias bombs, deep nesting, not UTF-8 ---------------------
def _lightning_run(folder: Path, frame: pd.DataFrame) -> Path:
    metrics = pd.DataFrame({"step": frame["step"], "epoch": 0, "train_loss_step": frame["train_loss"],
                            "lr-AdamW": frame["lr"]})
    folder.mkdir(parents=True, exist_ok=True)
    metrics.to_csv(folder / "metrics.csv", index=False)
    return folder / "metrics.csv"


@st.composite
def looping_yaml(draw: st.DrawFn) -> str:
    """An alias inside the node its anchor names, ``levels`` down (mapping or list style)."""
    levels = draw(st.integers(0, 6))
    flow = draw(st.booleans())
    inner = "*x"
    for k in range(levels):
        inner = f"[1, {inner}]" if flow else f"{{k{k}: {inner}}}"
    anchored = f"&x [{inner}, 2]" if flow else f"&x {{loop: {inner}, batch_size: 8}}"
    return f"model: {anchored}\nmax_steps: 100\n"


@st.composite
def alias_bombs(draw: st.DrawFn) -> str:
    # At least 8**7 (two million) values expanded: far past any config.
    width, depth = draw(st.integers(8, 12)), draw(st.integers(7, 12))
    mapping = draw(st.booleans())
    lines = [f"l0: &l0 {['lol'] * width}".replace("'", '"')]
    for level in range(1, depth):
        if mapping:
            items = ", ".join(f"k{j}: *l{level - 1}" for j in range(width))
            lines.append(f"l{level}: &l{level} {{{items}}}")
        else:
            lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


@st.composite
def deep_yaml(draw: st.DrawFn) -> str:
    depth = draw(st.sampled_from([101, 1_000, 10_000, 100_000]))
    if draw(st.booleans()):
        return "a: " + "[" * depth + "]" * depth + "\n"
    depth = min(depth, 1_000)  # block style: each level is a line, indented one deeper
    return "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v: 1\n"


@st.composite
def not_utf8_yaml(draw: st.DrawFn) -> bytes:
    text = b"batch_size: 8\nmax_steps: 100\nname: run\n"
    at = draw(st.integers(0, len(text)))
    return text[:at] + draw(st.sampled_from([b"\xff", b"\xfe\xfe", b"\xc3(", b"\x80", b"\xed\xa0\x80"])) + text[at:]


_HPARAMS = {
    "hparams loop": looping_yaml().map(str.encode),
    "hparams alias bomb": alias_bombs().map(str.encode),
    "hparams nested deep": deep_yaml().map(str.encode),
    "hparams not UTF-8": not_utf8_yaml(),
}


@pytest.mark.parametrize("shape", list(_HPARAMS))
def test_a_hostile_hparams_yaml(tmp_path_factory, capsys, shape):
    @_SETTINGS
    @given(frame=logs(), content=_HPARAMS[shape])
    def case(frame: pd.DataFrame, content: bytes) -> None:
        _hparams_case(tmp_path_factory, capsys, shape, frame, content)

    case()


def _hparams_case(tmp_path_factory, capsys, shape: str, frame: pd.DataFrame, content: bytes) -> None:
    metrics = _lightning_run(tmp_path_factory.mktemp("l") / "version_0", frame)
    (metrics.parent / "hparams.yaml").write_bytes(content)
    code, _, err = _cli(capsys, _analyze(metrics))
    _judge_error(shape, code, err, "hparams.yaml")  # the file at fault, not metrics.csv


# -- an HF trainer_state.json nested 100,000 deep --------------------------------------------
@_SETTINGS
@given(frame=logs(), depth=st.sampled_from([101, 999, 5_000, 100_000]), where=st.sampled_from(["top", "entry"]),
       objects=st.booleans())
def test_a_trainer_state_nested_deep(tmp_path_factory, capsys, frame, depth, where, objects):
    opened, closed = ('{"a": ', "}") if objects else ("[", "]")
    deep = opened * depth + "1" + closed * depth
    entries = [{"step": int(s), "loss": float(v)} for s, v in zip(frame["step"], frame["train_loss"])]
    log = json.dumps(entries)
    if where == "entry":
        log = log[:-1] + f', {{"step": 99999, "deep": {deep}}}]'
    text = f'{{"global_step": 10, "log_history": {log}' + ("}" if where == "entry" else f', "x": {deep}}}')
    path = tmp_path_factory.mktemp("s") / "trainer_state.json"
    path.write_text(text)
    code, _, err = _cli(capsys, _analyze(path))
    _judge_error("trainer_state nested deep", code, err, "trainer_state.json")


def test_brackets_inside_strings_are_not_nesting(tmp_path, capsys):
    """The depth check skips strings: a run named with brackets is read as any other."""
    entries = [{"step": s * 10, "loss": 5.0 - s / 50, "note": "[[[{{" * 60 + '\\"]'} for s in range(40)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 390, "run_name": "[" * 500, "log_history": entries}))
    code, out, err = _cli(capsys, _analyze(path, "--batch-size", "1000"))
    assert code == 0, err


# -- a .wandb file whose last record's length is damaged --------------------------------------
@_SETTINGS
@given(frame=logs(), data=st.data())
def test_a_wandb_file_with_a_damaged_last_length(tmp_path_factory, capsys, frame, data):
    folder = tmp_path_factory.mktemp("w") / "offline-run-20250101_000000-abcd1234"
    _offline_run(folder, frame)
    path = next(folder.glob("*.wandb"))
    raw = bytearray(path.read_bytes())
    records = list(read_log(bytes(raw)))
    offset = records[-data.draw(st.integers(1, 3))].offset  # the exit record or a last history row
    crc, length, kind = struct.unpack_from("<IHB", raw, offset)
    room = 32 * 1024 - offset % (32 * 1024) - 7
    struct.pack_into("<H", raw, offset + 4, data.draw(st.integers(0, room).filter(lambda n: n != length)))
    path.write_bytes(bytes(raw))
    code, out, err = _cli(capsys, _analyze(f"wandb-offline:{folder}"))
    if code != 0:
        _judge_error("wandb damaged last length", code, err, path.name)
        return
    noted = any(path.name in note and "bytes" in note for note in json.loads(out)["notes"])
    _count("wandb damaged last length", "noted results" if noted else "silent")


# -- annotate: sidecar names past the limit, a kill between the two files ---------------------
@_SETTINGS
@given(frame=logs(), length=st.integers(246, 255), wide=st.booleans())
def test_annotating_a_csv_whose_sidecar_name_is_too_long(tmp_path_factory, capsys, frame, length, wide):
    stem = ("é" * ((length - 4) // 2) + "r" * ((length - 4) % 2)) if wide else "r" * (length - 4)
    path = tmp_path_factory.mktemp("n") / f"{stem}.csv"
    path.write_text(frame.to_csv(index=False))
    code, out, err = _cli(capsys, ["annotate", str(path), "-t", "4.2", "--model", "power-law", "--json"])
    if code in ("traceback", "hang"):
        _count("sidecar name too long", "tracebacks" if code == "traceback" else "hangs")
        return
    (row,) = json.loads(out) if code == 1 else [{"action": "?"}]
    failed = row["action"] == "failed" and "longer than the file system's" in row["note"] and "Traceback" not in err
    _count("sidecar name too long", "errors" if failed and not list(path.parent.glob(".*tmp")) else "silent")


def _annotate(capsys: pytest.CaptureFixture[str], path: Path, target: str) -> tuple[int | str, list[dict]]:
    code, out, _ = _cli(capsys, ["annotate", str(path), "-t", target, "--model", "power-law", "--json"])
    return code, (json.loads(out) if isinstance(code, int) and out.strip() else [])


class _Killed(BaseException):
    pass


@pytest.mark.slow
@_SETTINGS
@given(frame=logs(), kill_at=st.integers(0, 2), targets=st.permutations(["4.2", "3.9"]))
def test_an_annotation_killed_between_its_files_is_redone(tmp_path_factory, capsys, monkeypatch, frame, kill_at,
                                                            targets):
    """Complete with one target, killed before file ``kill_at`` (0: the plot, 1: the report, 2:
    none) is replaced while annotating another, then annotated with the first again: the run
    is redone unless what it holds is still exactly the first annotation."""
    path = tmp_path_factory.mktemp("k") / "run.csv"
    path.write_text(frame.to_csv(index=False))
    first, second = targets
    assert _annotate(capsys, path, first)[0] == 0
    replaced = []
    real_replace = os.replace

    def replace_or_die(src: str, dst: str) -> None:
        if len(replaced) == kill_at:
            raise _Killed
        replaced.append(dst)
        real_replace(src, dst)

    with monkeypatch.context() as patch, pytest.raises(_Killed) if kill_at < 2 else nullcontext():
        patch.setattr(os, "replace", replace_or_die)
        _annotate(capsys, path, second)
    code, rows = _annotate(capsys, path, first)
    action = rows[0]["action"] if rows else code
    holds_first = kill_at == 0  # nothing of the second was put in place
    if action == "unchanged":
        _count("killed between sidecars", "noted results" if holds_first else "silent")
    elif action == "annotated" and (holds_first or "redone" in (rows[0]["note"] or "")):
        again, rows = _annotate(capsys, path, first)  # and the redone run is whole
        _count("killed between sidecars", "noted results" if rows[0]["action"] == "unchanged" else "silent")
    else:
        _count("killed between sidecars", "tracebacks" if code in ("traceback", "hang") else "silent")


# -- messages: no internal column, the command line's words -----------------------------------
_NO_TOKENS_PER_STEP: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "flat": lambda step: np.full(len(step), 1000.0),
    "negative": lambda step: -1000.0 * step,
    "blank": lambda step: np.full(len(step), np.nan),
    "infinite": lambda step: np.where(step > 0, np.inf, 0.0),
}


@_SETTINGS
@given(frame=logs(), kind=st.sampled_from(sorted(_NO_TOKENS_PER_STEP)), fmt=st.sampled_from(["text", "markdown"]))
def test_messages_name_logged_columns_and_flags(tmp_path_factory, capsys, frame, kind, fmt):
    """A tokens count that gives no tokens per step, analysed alone and in a comparison: no
    message names a column the reader made, and every one names flags, not settings."""
    folder = tmp_path_factory.mktemp("m")
    bad = frame.drop(columns="global_batch").assign(tokens=_NO_TOKENS_PER_STEP[kind](frame["step"].to_numpy()))
    bad.to_csv(folder / "bad.csv", index=False)
    frame.to_csv(folder / "good.csv", index=False)
    code, out, err = _cli(capsys, ["analyze", str(folder / "bad.csv"), "-t", "4.2", "--model", "power-law"])
    alone = code == 0 or _clear_error(code, err, "bad.csv")
    options = ["--markdown"] if fmt == "markdown" else []
    code, out, err = _cli(capsys, ["compare", str(folder), "-t", "4.2", "--model", "power-law", *options])
    words = [line for line in (out + err).splitlines() if "__" in line or in_flags(line) != line]
    if code in ("traceback", "hang"):
        _count("messages in flags", "tracebacks" if code == "traceback" else "hangs")
    elif not alone or words:
        print(words)
        _count("messages in flags", "unclear")
    else:
        _count("messages in flags", "errors" if code else "noted results")
