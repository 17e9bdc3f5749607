"""Local CSV logs: one row per logged step, one column per key."""

from __future__ import annotations

import os
import warnings

import pandas as pd

from ..errors import DataError, RunNotFound
from ..history import Columns, History, build_history

__all__ = ["read_csv"]

# Blank cells and these spellings mean "not logged"; "nan" and "inf" are logged values,
# which build_history drops and counts.
_MISSING = ["", "NA", "N/A", "n/a", "null", "NULL", "None", "<NA>"]
_WIDE = 3


def read_csv(path: str | os.PathLike[str], *, columns: Columns | None = None, batch_size: float | None = None) -> History:
    """Read a CSV training log into a :class:`~tracker_plugin.History`.

    Only the columns named in ``columns`` (candidates included) are parsed, which keeps
    a wide export with hundreds of keys fast to read.

    Raises
    ------
    RunNotFound
        The file does not exist.
    DataError
        The file is empty, is not CSV, or its data fails validation (see
        :func:`~tracker_plugin.history.build_history`).
    """
    run = os.fspath(path)
    columns = columns or Columns()
    if not os.path.isfile(run):
        raise RunNotFound("no such file" if not os.path.isdir(run) else "is a directory, not a CSV file", run=run)
    try:
        header = pd.read_csv(run, nrows=0).columns
        wanted = [c for c in header if c in set(columns.keys())]
        if not any(c in wanted for c in columns.loss) or not any(c in wanted for c in columns.step):
            return build_history(pd.DataFrame(columns=header), run=run, columns=columns, batch_size=batch_size)
        # Selecting columns slows the parser down by half; it pays only on wide exports.
        usecols = wanted if len(header) > _WIDE * len(wanted) else None
        with warnings.catch_warnings():
            # Mixed types in a column: build_history names the bad value itself.
            warnings.simplefilter("ignore", pd.errors.DtypeWarning)
            data = pd.read_csv(run, usecols=usecols, keep_default_na=False, na_values=_MISSING)
    except pd.errors.EmptyDataError:
        raise DataError("the file is empty", run=run) from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"cannot be read as CSV ({_first_line(exc)})", run=run) from None
    return build_history(data, run=run, columns=columns, batch_size=batch_size)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
