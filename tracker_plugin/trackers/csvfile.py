"""Local CSV logs: one row per logged step, one column per key."""

from __future__ import annotations

import errno
import json
import lzma
import os
import tarfile
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

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
from tracker_plugin.keys import ARTIFACT_JSON, ARTIFACT_PNG, JSON_PATH, REPORT_DIGEST, report_digest
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


def read_csv(
    path: str | os.PathLike[str],
    *,
    columns: Columns | None = None,
    batch_size: float | None = None,
    options: ReadOptions | None = None,
) -> History:
    """Read a CSV training log into a :class:`~tracker_plugin.History`.

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
    columns = columns or Columns()
    if not os.path.isfile(run):
        raise RunNotFound("no such file" if not os.path.isdir(run) else "is a directory, not a CSV file", run=run)
    try:
        header = pd.read_csv(run, nrows=0).columns
        _no_duplicate_columns(run, header, columns)
        alone = eval_loss_alone(list(map(str, header)), columns)
        if alone is not None:  # the only loss logged is an eval loss: read it, and say so
            pinned = None if options is None else replace(options, columns=options.columns.with_overrides(loss=alone))
            history = read_csv(path, columns=columns.with_overrides(loss=alone), batch_size=batch_size, options=pinned)
            return replace(history, notes=(*history.notes, eval_loss_note(alone)))
        if trainer_detected(header):
            options = options or ReadOptions(columns=columns, batch_size=batch_size)
            data = _read_rows(run)
            config = sibling_hparams(Path(run))
            return read_frame_as_trainer(data, config, options, run=run, native_step="step", finished=True)
        wanted = [c for c in header if c in set(columns.keys())]
        if not any(c in wanted for c in columns.loss) or not any(c in wanted for c in columns.step):
            return build_history(pd.DataFrame(columns=header), run=run, columns=columns, batch_size=batch_size)
        # Selecting columns slows the parser down by half; it pays only on wide exports.
        wide = len(header) > _WIDE * len(wanted) and _rows_fit_header(run, len(header))
        data = _read_rows(run, wanted if wide else None)
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
    except OSError as exc:
        if exc.errno is None:  # gzip's and bz2's own errors for a stream that is no such stream
            raise _undecompressed(run, exc) from None
        raise SourceError(f"cannot be read ({exc.strerror})", run=run) from None
    if batch_size is None and batch_from_name(run) is None and not any(c in data.columns for c in columns.batch):
        # No batch anywhere: tokens per step from a tokens column, else the analysis is on
        # steps; read as any run is (conventions.read_as), which says so and never refuses.
        options = options or ReadOptions(columns=columns)
        return read_frame_as_trainer(data, {}, options, run=run, native_step="step", finished=True)
    return build_history(data, run=run, columns=columns, batch_size=batch_size)


def _undecompressed(run: str, exc: Exception) -> DataError:
    return DataError(
        f"cannot be decompressed ({_first_line(exc)}): the file is damaged, cut short, has data after "
        "its end, or is not of the kind its suffix says",
        run=run,
    )


def _read_rows(run: str, usecols: list[str] | None = None) -> pd.DataFrame:
    """The file's rows, as text where a cell is not a number.

    Raises ``pd.errors.ParserWarning`` where the first row has more fields than the header:
    pandas would otherwise take its first column as the index and shift every column left
    (its steps read as tokens, say). A later row with more fields is a ``ParserError``.
    """
    with warnings.catch_warnings():
        # Mixed types in a column: build_history names the bad value itself.
        warnings.simplefilter("ignore", pd.errors.DtypeWarning)
        warnings.simplefilter("error", pd.errors.ParserWarning)
        return pd.read_csv(run, usecols=usecols, index_col=False, keep_default_na=False, na_values=_MISSING)


def _rows_fit_header(run: str, fields: int) -> bool:
    """Can the file be read by selected columns: is it plain text with no row wider than
    its header? pandas drops a wider row's extra fields unseen when it reads selected
    columns, where a whole read refuses the row. A file that is compressed, or quotes a
    field (which may hold a comma or a line break), is read whole."""
    with open(run, "rb") as lines:
        if lines.readline().count(b",") != fields - 1:
            return False  # compressed, or a quoted header
        return not any(b'"' in line or line.count(b",") >= fields for line in lines)


def read_lr_schedule(path: str | os.PathLike[str]) -> LrSchedule:
    """A planned lr schedule from a CSV with columns ``step`` and ``lr`` (``--lr-schedule``).

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
        data = pd.read_csv(name)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot be read as CSV ({_first_line(exc)})") from None
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


def _no_duplicate_columns(run: str, header: pd.Index, columns: Columns) -> None:
    """Two columns of one name the read would use: pandas renames the second ``name.1``
    and the first would silently win."""
    if not any(str(c).rsplit(".", 1)[-1].isdigit() for c in header):
        return  # no renamed duplicate: skip reading the header row again
    first = pd.read_csv(run, nrows=1, header=None, dtype=str, keep_default_na=False)
    names = [str(c) for c in first.iloc[0]] if len(first) else []
    wanted = set(columns.keys())
    duplicated = sorted({n for n in names if names.count(n) > 1} & wanted)
    if duplicated:
        listed = ", ".join(f"'{name}'" for name in duplicated)
        raise DataError(f"has more than one column named {listed}; rename or remove the extra ones", run=run)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class CsvSource(Source):
    """CSV logs: a file, or a directory of ``*.csv`` files (one run each).

    Annotating a CSV run writes its artifacts beside it: ``run.loss_eta.json`` and
    ``run.loss_eta.png`` for ``run.csv``. The file itself is never changed.
    """

    scheme = "csv"

    def runs(self) -> list[RunInfo]:
        path = Path(self.spec)
        if path.is_dir():
            files = sorted(p for p in [*path.glob("*.csv"), *path.glob(TRAINER_STATE)] if p.is_file())
            if not files:
                raise RunNotFound(f"the directory holds no *.csv or {TRAINER_STATE} files", run=self.spec)
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

    def write_content(self, run: RunInfo, annotation: Annotation) -> None:
        json_path, png_path = _sidecars(Path(run.ref))
        _check_name(json_path, run.ref)  # before the plot is drawn
        _write(png_path, annotation.plot_bytes, run.ref)

    def write_markers(self, run: RunInfo, annotation: Annotation) -> None:
        # The report is the marker, written last: the plot beside it carries its digest.
        json_path, _ = _sidecars(Path(run.ref))
        _write(json_path, annotation.report_bytes, run.ref)

    def intact(self, run: RunInfo) -> bool:
        return True  # the listing read both files (see _previous): a mix is not complete

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
        return [f"write {path}" for path in _sidecars(Path(run.ref))]


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
        drawn_for = png_text(png_path.read_bytes()).get(REPORT_DIGEST) if png_path.is_file() else None
        return Previous(
            report.get("settings_hash"), report.get("progress"), marker=report_digest(data), holds=drawn_for,
            report=report_digest(data), plot=report.get("plot_sha256"),
        )
    except (OSError, ValueError, AttributeError):
        return None
