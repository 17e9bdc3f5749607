"""Local CSV logs: one row per logged step, one column per key."""

from __future__ import annotations

import csv
import errno
import io
import json
import lzma
import os
import re
import tarfile
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.errors import ConfigError, DataError, RunNotFound, SourceError
from tracker_plugin.frame.history import (
    Columns,
    History,
    batch_from_name,
    build_history,
    eval_loss_alone,
    eval_loss_note,
)
from tracker_plugin.keys import ARTIFACT_JSON, ARTIFACT_PNG, JSON_PATH, PNG_DIGEST, report_digest
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.trackers.atomic import write_atomic
from tracker_plugin.trackers.base import Annotation, Previous, RunInfo, Source, png_text
from tracker_plugin.trackers.options import ReadOptions
from tracker_plugin.trackers.trainer_files import (
    TRAINER_STATE,
    is_trainer_state,
    read_frame_as_trainer,
    read_trainer_state,
    sibling_hparams,
    trainer_detected,
)

__all__ = ["CsvSource", "read_csv", "read_lr_schedule"]

# Blank cells and these spellings mean "not logged"; "nan" and "inf" are logged values,
# which build_history drops and counts.
_MISSING = ["", "NA", "N/A", "n/a", "null", "NULL", "None", "<NA>"]
_WIDE = 3
# What pandas raises for a compressed file (by its suffix) that is not one, is cut short
# or has data after its end: the standard library's decompressors' own errors.
_UNPACKING = (EOFError, zipfile.BadZipFile, tarfile.TarError, zlib.error, lzma.LZMAError)
# The delimiters a log is sniffed for, in the order a tie goes; the lines sniffed.
_DELIMITERS = (",", "\t", ";", "|")
_SNIFF_LINES = 20
# Cells split by runs of spaces (pandas' whitespace separator), for a log whose header
# and rows hold no other delimiter.
_SPACES = r"\s+"
_NAMES = {",": "','", "\t": "tabs", ";": "';'", "|": "'|'", " ": "spaces", _SPACES: "spaces"}
# ``run.tsv``, also compressed (``run.tsv.gz``): tab-separated, whatever the lines hold.
_TSV = re.compile(r"\.tsv(?:\.(?:gz|bz2|xz|zip|zst|tar))?$", re.IGNORECASE)
# A number with a decimal comma (``3,25``, ``-1,5e-3``), as European spreadsheets export
# beside ``;``; and one with a decimal point, which says the commas are no decimal mark.
_DECIMAL_COMMA = re.compile(r"[+-]?\d*,\d+(?:[eE][+-]?\d+)?")
_DECIMAL_POINT = re.compile(r"[+-]?(?:\d*\.\d+|\d+\.)(?:[eE][+-]?\d+)?")


@dataclass(frozen=True)
class _Dialect:
    """How a log's text splits into cells: its delimiter and decimal mark."""

    sep: str = ","
    decimal: str = "."

    def noted(self, history: History) -> History:
        """The history, with a note where a number's reading rests on the sniffed decimal mark."""
        if self.decimal == ".":
            return history
        note = "read ',' as the decimal mark: the file is ';'-separated and writes its numbers like '3,25'"
        return replace(history, notes=(note, *history.notes))


def read_csv(
    path: str | os.PathLike[str],
    *,
    columns: Columns | None = None,
    batch_size: float | None = None,
    options: ReadOptions | None = None,
) -> History:
    """Read a CSV training log into a :class:`~tracker_plugin.History`.

    The delimiter (comma, tab, ``;`` or ``|``; tab for a ``.tsv``) is sniffed from the
    header and first rows, and a ``;``-separated file whose numbers are written ``3,25``
    is read with the decimal comma, which a note says.

    A trainer's own log (Lightning ``CSVLogger``'s ``metrics.csv``: ``lr-<Optimizer>``,
    ``*_step``/``*_epoch`` keys) is read by its trainer's conventions, with
    ``hparams.yaml`` beside it as the config (:mod:`.trainer_files`). Only the columns named in ``columns`` (candidates included) are parsed, which keeps
    a wide export with hundreds of keys fast to read.

    Raises
    ------
    RunNotFound
        The file does not exist.
    DataError
        The file is empty, is not CSV, or its data fails validation (see
        :func:`~tracker_plugin.frame.history.build_history`).
    """
    run = os.fspath(path)
    if not os.path.isfile(run):
        raise RunNotFound("no such file" if not os.path.isdir(run) else "is a directory, not a CSV file", run=run)
    with _csv_errors(run):
        dialect = _dialect(run)
    history = dialect.noted(_read_csv(run, dialect, columns or Columns(), batch_size, options))
    return _noting_short_rows(history, run, dialect)


def _read_csv(
    run: str, dialect: _Dialect, columns: Columns, batch_size: float | None, options: ReadOptions | None
) -> History:
    with _csv_errors(run):
        header = pd.read_csv(run, nrows=0, sep=dialect.sep, decimal=dialect.decimal).columns
        _no_duplicate_columns(run, header, columns, dialect)
        # A trainer's own file names its training loss its own way (Lightning's
        # ``train_loss_step``): its convention picks the loss, an eval loss only when alone.
        trainer = trainer_detected(header)
        alone = None if trainer else eval_loss_alone(list(map(str, header)), columns)
        if alone is not None:  # the only loss logged is an eval loss: read it, and say so
            pinned = None if options is None else replace(options, columns=options.columns.with_overrides(loss=alone))
            history = _read_csv(run, dialect, columns.with_overrides(loss=alone), batch_size, pinned)
            return replace(history, notes=(*history.notes, eval_loss_note(alone)))
        if trainer:
            options = options or ReadOptions(columns=columns, batch_size=batch_size)
            data = _read_rows(run, dialect)
            config = sibling_hparams(Path(run))
            return read_frame_as_trainer(data, config, options, run=run, native_step="step", finished=True)
        wanted = [c for c in header if c in set(columns.keys())]
        if not any(c in wanted for c in columns.loss) or not any(c in wanted for c in columns.step):
            return build_history(pd.DataFrame(columns=header), run=run, columns=columns, batch_size=batch_size)
        # Selecting columns slows the parser down by half; it pays only on wide exports.
        wide = len(header) > _WIDE * len(wanted) and _rows_fit_header(run, len(header), dialect.sep)
        data = _read_rows(run, dialect, wanted if wide else None)
    if batch_size is None and batch_from_name(run) is None and not any(c in data.columns for c in columns.batch):
        # No batch anywhere: tokens per step from a tokens column, else the analysis is on
        # steps; read as any run is (conventions.read_as), which says so and never refuses.
        options = options or ReadOptions(columns=columns)
        return read_frame_as_trainer(data, {}, options, run=run, native_step="step", finished=True)
    return build_history(data, run=run, columns=columns, batch_size=batch_size)


@contextmanager
def _csv_errors(run: str) -> Iterator[None]:
    """A read's failures as one line naming the file: pandas', the decompressors' and the OS's."""
    try:
        yield
    except pd.errors.EmptyDataError:
        raise DataError("the file is empty", run=run) from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"cannot be read as CSV ({_first_line(exc)})", run=run) from None
    except pd.errors.ParserWarning:
        raise DataError(
            "its first row has more fields than the header has columns: a stray separator would shift "
            "the columns; fix or remove that row",
            run=run,
        ) from None
    except _UNPACKING as exc:
        raise _undecompressed(run, exc) from None
    except ImportError as exc:  # pandas decompresses .zst with the zstandard package, optional
        package = "zstandard" if "zstandard" in str(exc) else (exc.name or "its decompressor")
        raise SourceError(
            f"cannot be decompressed: reading it needs the {package} package, which is not installed; install it "
            f"with: pip install {package} (or decompress the file first)",
            run=run,
        ) from None
    except OSError as exc:
        if exc.errno is None:  # gzip's and bz2's own errors for a stream that is no such stream
            raise _undecompressed(run, exc) from None
        raise SourceError(f"cannot be read ({exc.strerror})", run=run) from None


def _dialect(run: str) -> _Dialect:
    """The log's delimiter (``.tsv``: tab; else sniffed from its first lines) and its
    decimal mark (a comma only in a ``;``-separated file whose numbers are written so)."""
    lines = _first_lines(run)
    sep = "\t" if _TSV.search(run) else _delimiter(lines, run)
    return _Dialect(sep, "," if sep == ";" and _decimal_commas(lines) else ".")


def _first_lines(run: str) -> list[str]:
    """The file's first lines as text, decompressed as its read will be: pandas reads each
    line as one cell (a separator no text log holds; quotes kept as they are)."""
    lines = pd.read_csv(
        run, header=None, nrows=_SNIFF_LINES, sep="\x1e", quoting=csv.QUOTE_NONE, dtype=str, na_filter=False
    )
    return [str(line) for line in lines.iloc[:, 0]] if lines.shape[1] else []


def _delimiter(lines: list[str], run: str) -> str:
    """The delimiter that splits the header into the most columns that the first rows keep
    (the most rows of the header's width, then the most columns, then the order of
    ``_DELIMITERS``): a decimal comma in a ``;`` file splits no header."""
    best, score = ",", (0, 0)
    for sep in _DELIMITERS:
        rows = _split(lines, sep)
        if len(rows[0]) < 2:
            continue
        fits = (sum(len(row) == len(rows[0]) for row in rows[1:]), len(rows[0]))
        if fits > score:
            best, score = sep, fits
    if score == (0, 0) and lines and _split_on_spaces(lines):
        return _SPACES
    if score == (0, 0) and lines:
        _one_column(lines, run)
    return best


def _split_on_spaces(lines: list[str]) -> bool:
    """Do the header and the first rows split on runs of spaces into one width (a log
    written with spaces between its cells, aligned or not)?"""
    widths = {len(line.split()) for line in lines if line.strip()}
    return len(widths) == 1 and widths.pop() >= 2 and not any('"' in line for line in lines)


def _one_column(lines: list[str], run: str) -> None:
    """Refuse a header of one column over rows that hold a delimiter (spaces too, where
    the header holds them): a one-column read would name the wrong fix (--step-col)."""
    held = [sep for sep in (*_DELIMITERS[1:], " ") if any(sep in line.strip() for line in lines[1:])]
    held = [sep for sep in held if sep != " " or " " in lines[0].strip()]
    if held:
        raise DataError(
            f"its header is one column while its rows hold {_NAMES[held[0]]}: the delimiter was not "
            "recognised (a log's header and rows are split by one of ',', tab, ';' or '|')",
            run=run,
        )


def _split(lines: list[str], sep: str) -> list[list[str]]:
    try:
        return list(csv.reader(io.StringIO("\n".join(lines)), delimiter=sep)) or [[]]
    except csv.Error:  # a quoted cell the sniffed lines cut short
        return [[]]


def _decimal_commas(lines: list[str]) -> bool:
    """Do the first rows write numbers with a decimal comma, and none with a point?"""
    cells = [cell.strip() for row in _split(lines[1:], ";") for cell in row]
    return any(_DECIMAL_COMMA.fullmatch(c) for c in cells) and not any(_DECIMAL_POINT.fullmatch(c) for c in cells)


def _undecompressed(run: str, exc: Exception) -> DataError:
    return DataError(
        f"cannot be decompressed ({_first_line(exc)}): the file is damaged, cut short, has data after "
        "its end, or is not of the kind its suffix says",
        run=run,
    )


def _read_rows(run: str, dialect: _Dialect, usecols: list[str] | None = None) -> pd.DataFrame:
    """The file's rows, as text where a cell is not a number.

    Raises ``pd.errors.ParserWarning`` where the first row has more fields than the header:
    pandas would otherwise take its first column as the index and shift every column left
    (its steps read as tokens, say). A later row with more fields is a ``ParserError``.
    """
    with warnings.catch_warnings():
        # Mixed types in a column: build_history names the bad value itself.
        warnings.simplefilter("ignore", pd.errors.DtypeWarning)
        warnings.simplefilter("error", pd.errors.ParserWarning)
        return pd.read_csv(
            run, sep=dialect.sep, decimal=dialect.decimal, usecols=usecols, index_col=False, keep_default_na=False,
            na_values=_MISSING,
        )


def _noting_short_rows(history: History, run: str, dialect: _Dialect) -> History:
    """The history with a note when rows of a plain-text log hold fewer fields than its
    header: pandas reads their missing cells as blank, which is a guess worth a line."""
    short = _short_rows(run, dialect.sep)
    if short is None:
        return history
    count, line = short
    note = (f"{count} {'row has' if count == 1 else 'rows have'} fewer fields than the header (the first on line "
            f"{line}): the missing cells were read as blank")
    return replace(history, notes=(*history.notes, note))


# Plain logs up to this size are checked for short rows (a count of separators, then lines).
_SHORT_ROWS_BYTES = 256 << 20


def _short_rows(run: str, sep: str) -> tuple[int, int] | None:
    """(rows with fewer fields than the header, the first one's line number), for a plain
    text file that quotes no field; None when every row is full or it cannot be told."""
    if len(sep) != 1 or os.path.getsize(run) > _SHORT_ROWS_BYTES:
        return None
    with open(run, "rb") as f:
        data = f.read()
    mark = sep.encode()
    if b'"' in data or b"\0" in data or data[:2] == b"\x1f\x8b":
        return None
    lines = data.rstrip(b"\r\n").split(b"\n")
    fields = lines[0].count(mark)
    if data.count(mark) == fields * len(lines):  # every row as wide as the header: the fast path
        return None
    short = [k for k, line in enumerate(lines[1:], 2) if line.strip() and line.count(mark) < fields]
    return (len(short), short[0]) if short else None


def _rows_fit_header(run: str, fields: int, sep: str) -> bool:
    """Can the file be read by selected columns: is it plain text with no row wider than
    its header? pandas drops a wider row's extra fields unseen when it reads selected
    columns, where a whole read refuses the row. A file that is compressed, or quotes a
    field (which may hold a separator or a line break), is read whole."""
    mark = sep.encode()
    with open(run, "rb") as lines:
        if lines.readline().count(mark) != fields - 1:
            return False  # compressed, or a quoted header
        return not any(b'"' in line or line.count(mark) >= fields for line in lines)


def read_lr_schedule(path: str | os.PathLike[str]) -> LrSchedule:
    """A planned lr schedule from a CSV with columns ``step`` and ``lr`` (``--lr-schedule``),
    its delimiter sniffed as a log's is.

    ``learning_rate`` is taken for ``lr`` too; other columns are ignored.

    Raises
    ------
    ConfigError
        The file is missing or unreadable, a column is missing or not numeric, or the
        values do not make a schedule (see :meth:`LrSchedule.from_table`).
    """
    name = os.fspath(path)
    where = f"--lr-schedule {name}"
    if not os.path.isfile(name):
        raise ConfigError(f"{where}: no such file")
    try:
        dialect = _dialect(name)
        data = pd.read_csv(name, sep=dialect.sep, decimal=dialect.decimal)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot be read as CSV ({_first_line(exc)})") from None
    except DataError as exc:  # the sniffed delimiter: said about the flag's file
        raise ConfigError(f"{where}: {exc.problem}") from None
    lower = {str(c).strip().lower(): c for c in data.columns}
    step_col = lower.get("step")
    lr_col = lower.get("lr", lower.get("learning_rate"))
    if step_col is None or lr_col is None:
        raise ConfigError(f"{where}: needs columns step and lr; columns are {list(map(str, data.columns))}")
    numbers = {}
    for column in (step_col, lr_col):
        converted = pd.to_numeric(data[column], errors="coerce")
        bad = (converted.isna() & data[column].notna()).to_numpy()
        if bad.any():
            row = int(bad.nonzero()[0][0])
            value = str(data[column].iloc[row])[:40]
            raise ConfigError(f"{where}: column '{column}' holds a non-numeric value {value!r} in row {row + 1}")
        numbers[column] = converted.to_numpy(float)
    keep = ~(np.isnan(numbers[step_col]) | np.isnan(numbers[lr_col]))
    schedule = LrSchedule.from_table(numbers[step_col][keep], numbers[lr_col][keep], source="file", name=where)
    return replace(schedule, description=f"{where} ({len(schedule.steps)} rows, steps {schedule.steps[0]:,.0f} to {schedule.steps[-1]:,.0f})")


def _no_duplicate_columns(run: str, header: pd.Index, columns: Columns, dialect: _Dialect) -> None:
    """Two columns of one name the read would use: pandas renames the second ``name.1``
    and the first would silently win."""
    if not any(str(c).rsplit(".", 1)[-1].isdigit() for c in header):
        return  # no renamed duplicate: skip reading the header row again
    first = pd.read_csv(run, nrows=1, header=None, dtype=str, keep_default_na=False, sep=dialect.sep)
    names = [str(c) for c in first.iloc[0]] if len(first) else []
    wanted = set(columns.keys())
    duplicated = sorted({n for n in names if names.count(n) > 1} & wanted)
    if duplicated:
        listed = ", ".join(f"'{name}'" for name in duplicated)
        raise DataError(f"has more than one column named {listed}; rename or remove the extra ones", run=run)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class CsvSource(Source):
    """CSV logs: a file, or a directory of ``*.csv`` and ``*.tsv`` files (one run each).

    Annotating a CSV run writes its artifacts beside it: ``run.loss_eta.json`` and
    ``run.loss_eta.png`` for ``run.csv``. The file itself is never changed.
    """

    scheme = "csv"

    def runs(self) -> list[RunInfo]:
        path = Path(self.spec)
        if path.is_dir():
            logs = [*path.glob("*.csv"), *path.glob("*.tsv"), *path.glob(TRAINER_STATE)]
            files = sorted(p for p in logs if p.is_file())
            if not files:
                raise RunNotFound(f"the directory holds no *.csv, *.tsv or {TRAINER_STATE} files", run=self.spec)
        elif path.is_file():
            files = [path]
        else:
            raise RunNotFound("no such file", run=self.spec)
        return [
            RunInfo(ref=str(f), name=f.stem, state="finished", progress=_progress(f), previous=_previous(f))
            for f in files
        ]

    def read(self, run: RunInfo) -> History:
        if is_trainer_state(run.ref):
            return read_trainer_state(run.ref, self.options)
        return read_csv(
            run.ref, columns=self.options.columns, batch_size=self.options.batch_size, options=self.options
        )

    def write_content(self, run: RunInfo, annotation: Annotation, held: Mapping[str, Any]) -> None:
        json_path, png_path = _sidecars(Path(run.ref))
        _check_name(json_path, run.ref)  # before the plot is drawn
        _write(png_path, annotation.plot_bytes, run.ref)

    def write_markers(self, run: RunInfo, annotation: Annotation) -> None:
        # The report is the marker, written last: the plot beside it carries its digest.
        json_path, _ = _sidecars(Path(run.ref))
        _write(json_path, annotation.report_bytes, run.ref)

    def intact_report(self, run: RunInfo) -> bytes | None:
        # The listing read both files (see _previous): a mix is not complete.
        return self.stored_report(run) or b""

    def stored_artifact(self, run: RunInfo, path: str) -> bytes | None:
        """The report beside the log (``NAME.loss_eta.json``), which the summary of a run left
        unchanged shows; the plot is the listing's to check (see :meth:`intact`)."""
        if path != JSON_PATH:
            return None
        try:
            return _sidecars(Path(run.ref))[0].read_bytes()
        except OSError:
            return None

    # Each file is replaced atomically; two writers may leave one's plot beside the other's
    # report, which the next run sees (the digests differ) and redoes.
    shared = False

    def describe_write(self, run: RunInfo, annotation: Annotation) -> list[str]:
        return [f"to: {path}" for path in _sidecars(Path(run.ref))]


def _sidecars(path: Path) -> tuple[Path, Path]:
    stem = path.with_suffix("")
    return (
        stem.with_name(f"{stem.name}.{ARTIFACT_JSON}"),
        stem.with_name(f"{stem.name}.{ARTIFACT_PNG}"),
    )


def _check_name(path: Path, ref: str) -> None:
    """A sidecar name longer than the file system takes: refused before anything is written."""
    try:
        longest = os.pathconf(path.parent, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        longest = 255
    if len(os.fsencode(path.name)) > longest:
        raise SourceError(
            f"cannot write {path.name} beside it: the name is {len(os.fsencode(path.name))} bytes, longer than "
            f"the file system's {longest}; rename the file to a shorter name",
            run=ref,
        )


def _write(path: Path, data: Callable[[], bytes], ref: str) -> None:
    try:
        write_atomic(path, data())
    except OSError as exc:
        name = "the name is too long" if exc.errno == errno.ENAMETOOLONG else exc.strerror
        raise SourceError(f"cannot write {path}: {name}", run=ref) from None


def _progress(path: Path) -> str:
    stat = path.stat()
    return f"size {stat.st_size} mtime {stat.st_mtime_ns}"


def _previous(path: Path) -> Previous | None:
    """The last annotation: complete when the plot beside the report carries the report's
    digest. Each file is replaced whole, the plot first: a write cut short between them
    (or two writers' files mixed) leaves a plot that names another report."""
    json_path, png_path = _sidecars(path)
    try:
        data = json_path.read_bytes()
        report = json.loads(data)
        drawn_for = png_text(png_path.read_bytes()).get(PNG_DIGEST) if png_path.is_file() else None
        return Previous(
            report.get("settings_hash"), report.get("progress"), marker=report_digest(data), holds=drawn_for,
            report=report_digest(data), plot=report.get("plot_sha256"), settings=_report_settings(report),
            loss_key=report.get("loss_key"),
        )
    except (OSError, ValueError, AttributeError):
        return None


def _report_settings(report: dict[str, Any]) -> dict[str, Any]:
    """The settings a report itself records (a CSV run's annotation is its report)."""
    targets = [t.get("target") for t in report.get("targets") or () if isinstance(t, dict)]
    return {"targets": targets, "ema_token_window": report.get("ema_token_window")}
