"""The common frame: one validated history per run, whatever tracker it came from.

Every source turns its raw table (a CSV, an MLflow metric history, a W&B scan) into a
:class:`History` through :func:`build_history`. That is the one place where steps are
deduplicated, tokens accumulated, the batch inferred and the data checked, so the
analysis never sees an unchecked value: the steps in :mod:`.steps`, the tokens and
the batch in :mod:`.logged_tokens`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracker_plugin.errors import ConfigError, DataError
from tracker_plugin.frame.time import LoggedTimes, logged_times, read_clock

if TYPE_CHECKING:
    from tracker_plugin.plan.schedule import LrSchedule

from tracker_plugin.frame.logged_tokens import _batch, _tokens, batch_from_name
from tracker_plugin.frame.steps import RESTART_NOTE, _integer_steps, _resolve_steps, _valid_steps

__all__ = ["EVAL_LOSSES", "RESTART_NOTE", "BatchStage", "Columns", "History", "batch_from_name", "batch_stages", "build_history",
           "eval_loss_alone", "eval_loss_note"]

# Eval losses as trainers and people name them: read as the loss when a log has no other.
EVAL_LOSSES = ("val_loss", "eval_loss", "eval/loss", "val/loss", "validation/loss", "valid/loss", "validation_loss")


@dataclass(frozen=True)
class Columns:
    """Which source column holds each canonical key.

    Each field is a tuple of candidate names; the first one present in the data is used.
    :meth:`with_overrides` pins a field to one name the user gave, which then must exist.
    The defaults start with the names the CSV logs of the original script use and go on
    to the names common in W&B and MLflow logs.
    """

    step: tuple[str, ...] = ("step", "_step", "global_step", "trainer/global_step")
    loss: tuple[str, ...] = ("train_loss", "train/loss", "loss", "train/CrossEntropyLoss")
    tokens: tuple[str, ...] = ("tokens", "throughput/total_tokens", "train/tokens", "total_tokens")
    batch: tuple[str, ...] = ("global_batch", "batch_size_in_tokens", "train/global_batch")
    lr: tuple[str, ...] = ("lr", "learning_rate", "optim/learning_rate_group0", "train/lr")
    # The run's clock: W&B's absolute ``_timestamp`` before its relative ``_runtime``.
    time: tuple[str, ...] = (
        "time", "timestamp", "wall_time", "_timestamp", "_runtime", "train_time", "elapsed", "elapsed_time",
    )

    def with_overrides(self, **names: str | Sequence[str] | None) -> Columns:
        """Return a copy where each given (non-None) field is pinned to the names given."""
        unknown = set(names) - {"step", "loss", "tokens", "batch", "lr", "time"}
        if unknown:
            raise ConfigError(f"unknown column field(s): {', '.join(sorted(unknown))}")
        pinned = {
            key: (value,) if isinstance(value, str) else tuple(value)
            for key, value in names.items()
            if value is not None
        }
        return replace(self, **pinned)

    def keys(self) -> tuple[str, ...]:
        """Every candidate name, for sources that can fetch only the keys they need."""
        return self.step + self.loss + self.tokens + self.batch + self.lr + self.time


@dataclass(frozen=True)
class BatchStage:
    """A run of logged rows with one batch size."""

    first_step: int
    last_step: int
    first_tokens: float
    last_tokens: float
    batch: float


@dataclass(frozen=True, eq=False)
class History:
    """A run's validated per-step history: the input of the analysis.

    Rows are the steps where the loss was logged with a finite value, in increasing step
    order. ``tokens`` counts the tokens consumed *before* each step; ``batch`` is tokens
    per step; ``lr`` (None when the run logged no learning rate) is interpolated on step
    where it was logged at other steps than the loss.
    """

    run: str
    loss_key: str
    step: np.ndarray
    tokens: np.ndarray
    batch: np.ndarray
    loss: np.ndarray
    lr: np.ndarray | None = None
    batch_source: str = "column"
    notes: tuple[str, ...] = field(default=())
    # The planned lr a source found in the run's own params or config
    # (``LrSchedule.from_params``); a plan given on the command line takes precedence.
    lr_plan: LrSchedule | None = None
    # The run's clock in seconds at each row (None when the run logged none); Unix time
    # when ``time_absolute``, else seconds since some start of the run's own.
    time: np.ndarray | None = None
    time_absolute: bool = False
    time_source: str | None = None
    # The first logged time on any row (rows without a loss too): where seconds count from.
    time_start: float | None = None
    # How each column was found: (role, description) pairs, "framework" among them
    # (see frame/conventions.py); empty for a frame built without a reading.
    read_as: tuple[tuple[str, str], ...] = ()
    # No tokens to be had: ``tokens`` counts steps (a batch of 1) and the EMA is in steps.
    on_steps: bool = False
    # The steps each logged loss is a mean over, ending at its row (HF Trainer's ``loss``,
    # Lightning's on_epoch means; see frame/conventions.py); None: a value at its step.
    loss_spans: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.step)

    @property
    def last_step(self) -> int:
        return int(self.step[-1])

    @property
    def last_tokens(self) -> float:
        return float(self.tokens[-1])

    @property
    def unit(self) -> str:
        """What ``tokens`` counts, as messages say it: "tokens", or "steps" on a run with none."""
        return "steps" if self.on_steps else "tokens"

    def frame(self) -> pd.DataFrame:
        """The history as the common dataframe: step, tokens, batch, lr, loss."""
        columns = {"step": self.step, "tokens": self.tokens, "batch": self.batch}
        if self.lr is not None:
            columns["lr"] = self.lr
        if self.time is not None:
            columns["time"] = self.time
        columns["loss"] = self.loss
        return pd.DataFrame(columns)

    def head(self, rows: int) -> History:
        """The first ``rows`` rows: the run as it stood when it had logged that far."""
        return self.take(slice(0, rows))

    def take(self, rows: slice | np.ndarray) -> History:
        """The history at ``rows`` only (a slice, or row indices in order)."""
        lr = None if self.lr is None else self.lr[rows]
        time = None if self.time is None else self.time[rows]
        spans = None if self.loss_spans is None else self.loss_spans[rows]
        return replace(
            self,
            loss_spans=spans,
            time=time,
            step=self.step[rows],
            tokens=self.tokens[rows],
            batch=self.batch[rows],
            loss=self.loss[rows],
            lr=lr,
        )


def eval_loss_alone(names: Sequence[str], columns: Columns) -> str | None:
    """The eval loss to read as the loss, when ``names`` hold none of the loss candidates and
    the user named none (a log whose only loss is ``val_loss``); else None."""
    present = set(map(str, names))
    if columns.loss != Columns().loss or any(name in present for name in columns.loss):
        return None
    return next((name for name in EVAL_LOSSES if name in present), None)


def eval_loss_note(name: str) -> str:
    return f"the only loss logged is the eval loss '{name}': it is the loss read (name another with columns.loss)"


def build_history(
    data: pd.DataFrame,
    *,
    run: str,
    columns: Columns | None = None,
    batch_size: float | None = None,
    logged_nan_loss: np.ndarray | None = None,
) -> History:
    """Validate a source's table and turn it into a :class:`History`.

    Parameters
    ----------
    data:
        One row per logged step (or several rows for a step, see below); NaN means the
        key was not logged at that row.
    run:
        The run's name, used in every message.
    columns:
        Where each canonical key lives; see :class:`Columns`.
    batch_size:
        Tokens per step, used when the data has no batch column. When it is None the
        run name is searched for ``_1Mbs``-style sizes.
    logged_nan_loss:
        Rows whose loss was *logged* as NaN (as opposed to not logged), when the source
        can tell; they are dropped and counted like infinite losses. In a text column,
        the spelling ``nan`` marks such a row too.

    Rows for the same step that follow each other are merged (the last value of each key
    wins); rows that a later restart re-logged (a resumed run going back to its
    checkpoint step) are replaced by the resumed rows.

    Raises
    ------
    DataError
        The loss or step column is missing, a column is not numeric, steps are negative
        or fractional, tokens decrease, the batch is unknown or not positive, or fewer
        than two finite losses remain.
    """
    columns = columns or Columns()
    if len(data.columns) == 0:
        raise DataError("the file is empty", run=run)
    _no_duplicate_columns(data, columns, run)
    step_key, loss_key = _pick(data, columns.step, "step", run), _pick(data, columns.loss, "loss", run)
    names = {
        "step": step_key,
        "loss": loss_key,
        **{role: _optional(data, columns, role, run) for role in ("tokens", "batch", "lr", "time")},
    }
    nan_loss = _spelled_nan(data[loss_key])
    if logged_nan_loss is not None:
        nan_loss = nan_loss | np.asarray(logged_nan_loss, bool)  # not in place: pandas hands out read-only arrays
    # The clock is read apart: dates count, and a column that is no clock is a note, not an error.
    times = logged_times(data[names["time"]], names["time"]) if names["time"] is not None else LoggedTimes(None)
    if times.values is None:
        names["time"] = None
    cols = {key: _numeric(data[name], name, run) for key, name in names.items() if name is not None and key != "time"}
    if times.values is not None:
        cols["time"] = times.values
    cols["nan_loss"] = nan_loss
    has_step = ~np.isnan(cols["step"])
    logged = ~np.isnan(cols["loss"]) | nan_loss
    if (logged & ~has_step).any():
        row = int(np.flatnonzero(logged & ~has_step)[0])
        raise DataError(f"has no value in row {row + 1} (every row needs a step)", run=run, column=step_key)
    stray = has_step & ~logged & ~_valid_steps(cols["step"])
    if stray.any():
        # Another key's row at a step no loss row could have (a user metric stamped at
        # 2**63-1, or at -1): it says nothing of the run's steps, so it goes, said.
        has_step &= ~stray
        count = int(stray.sum())
        early_notes = [f"dropped {count} {'row' if count == 1 else 'rows'} of other keys at steps no step can be "
                       f"({float(cols['step'][stray][0]):g}{', ...' if count > 1 else ''}): they log no loss"]
    else:
        early_notes = []
    if not has_step.all():  # blank rows
        cols = {key: values[has_step] for key, values in cols.items()}
    # What "all the rows" means for the 90% rule: the rows that logged a loss.
    logged_rows = int(np.count_nonzero(~np.isnan(cols["loss"]) | cols["nan_loss"]))
    cols, notes, resolved_away = _resolve_steps(cols)
    notes = early_notes + notes
    step = _integer_steps(cols["step"], step_key, run)

    loss = cols["loss"]
    finite = np.isfinite(loss)
    bad = (~finite & ~np.isnan(loss)) | cols["nan_loss"]
    keep = finite & ~cols["nan_loss"]
    kept = int(keep.sum())
    lost = _kept_note(kept, logged_rows, resolved_away, int(bad.sum()))
    if kept < 2:
        what = "no finite values" if not keep.any() else "only one finite value"
        raise DataError(f"has {what}; at least two logged steps are needed{_other_losses(data, columns, loss_key)}",
                        run=run, column=loss_key)
    if kept < _MIN_ROWS and lost:
        raise DataError(f"{lost}, too few to analyse (at least {_MIN_ROWS} are needed)", run=run, column=loss_key)
    if bad.any():
        notes.append(f"dropped {int(bad.sum())} rows whose loss was NaN or infinite")
    if lost:
        notes.append(lost)

    batch, batch_source = _batch(cols.get("batch"), names["batch"], step, batch_size, run)
    tokens = _tokens(cols.get("tokens"), names["tokens"], step, batch, run)
    _lr_not_negative(cols.get("lr"), names["lr"], step, run)
    lr = _lr_on_loss_rows(cols.get("lr"), step, keep)
    clock = read_clock(cols.get("time"), step, keep, names["time"], run, tokens, dates=times.dates, naive=times.naive)
    notes += (*times.notes, *clock.notes)
    if not keep.all():
        step, tokens, batch, loss = step[keep], tokens[keep], batch[keep], loss[keep]
    return History(
        run=run,
        loss_key=loss_key,
        step=step,
        tokens=tokens,
        batch=batch,
        loss=loss,
        lr=lr,
        batch_source=batch_source,
        notes=tuple(notes),
        time=clock.seconds,
        time_absolute=clock.absolute,
        time_source=clock.source,
        time_start=clock.start,
    )


def batch_stages(history: History) -> tuple[BatchStage, ...]:
    """Runs of consecutive rows with the same batch, in order."""
    b = history.batch
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    ends = np.r_[starts[1:] - 1, len(b) - 1]
    return tuple(
        BatchStage(
            first_step=int(history.step[s]),
            last_step=int(history.step[e]),
            first_tokens=float(history.tokens[s]),
            last_tokens=float(history.tokens[e]),
            batch=float(b[s]),
        )
        for s, e in zip(starts, ends)
    )


def _other_losses(data: pd.DataFrame, columns: Columns, chosen: str) -> str:
    """The other loss columns (the loss names, and any column named like a loss) the data
    has values in, as a hint for a loss column that has none (a CSV with an empty
    ``train_loss`` beside a logged ``val_loss``, say): not taken in its place, since which
    loss is meant is the user's to say."""
    named = [c for c in dict.fromkeys(data.columns) if str(c) != chosen and (str(c) in columns.loss or "loss" in str(c).lower())]
    others = [str(c) for c in named if isinstance(data[c], pd.Series) and int(pd.to_numeric(data[c], errors="coerce").notna().sum()) >= 2]
    if not others:
        return ""
    listed = ", ".join(f"'{name}'" for name in others)
    return f" ({listed} {'has' if len(others) == 1 else 'have'} values: choose with columns.loss)"


def _find(data: pd.DataFrame, candidates: tuple[str, ...]) -> str | None:
    """The first of ``candidates`` the data has, or None."""
    return next((name for name in candidates if name in data.columns), None)


def _optional(data: pd.DataFrame, columns: Columns, role: str, run: str) -> str | None:
    """A column the analysis can do without: the first of its candidates the data has. A
    name the user chose in place of the defaults must be there: reading on without it
    would give another answer than the one asked for, silently. (Readers that add a
    trainer's own names keep the defaults among the candidates.)"""
    candidates: tuple[str, ...] = getattr(columns, role)
    if not candidates or set(getattr(_DEFAULT_COLUMNS, role)) <= set(candidates):
        return _find(data, candidates)
    if candidates == ("none",) and "none" not in data.columns:
        return None  # --time-col none: read no clock
    return _pick(data, candidates, role, run)


def _pick(data: pd.DataFrame, candidates: tuple[str, ...], role: str, run: str) -> str:
    """The first of ``candidates`` the data has; a column the analysis cannot do without."""
    found = _find(data, candidates)
    if found is not None:
        return found
    wanted = candidates[0] if len(candidates) == 1 else " or ".join(f"'{c}'" for c in candidates)
    wanted = f"'{wanted}'" if len(candidates) == 1 else wanted
    raise DataError(
        f"no {role} column {wanted}; columns are {list(map(str, data.columns))} (choose one with columns.{role})",
        run=run,
    )


_DEFAULT_COLUMNS = Columns()
_NAN_SPELLINGS = ("nan", "+nan", "-nan")
# A read keeping less than this share of the logged rows says why in one line; with fewer
# than _MIN_ROWS left it fails: no fit or crossing worth the name rests on so few rows.
_KEEP_SHARE = 0.9
_MIN_ROWS = 5  # the fewest rows any law is fitted on (MIN_LAW_ROWS in core)


def _no_duplicate_columns(data: pd.DataFrame, columns: Columns, run: str) -> None:
    """Refuse two columns of one name the read would use: which one is meant is a guess."""
    names = pd.Index(map(str, data.columns))
    duplicated = sorted(set(names[names.duplicated()]) & set(columns.keys()))
    if duplicated:
        listed = ", ".join(f"'{name}'" for name in duplicated)
        raise DataError(f"has more than one column named {listed}; rename or remove the extra ones", run=run)


def _kept_note(kept: int, logged: int, resolved_away: int, bad: int) -> str | None:
    """One line on a read that kept fewer than 90% of the logged rows, or None."""
    if logged == 0 or kept >= _KEEP_SHARE * logged:
        return None
    why = []
    if resolved_away:
        why.append(f"{resolved_away} re-logged or repeated steps")
    if bad:
        why.append(f"{bad} NaN or infinite losses")
    reason = f" ({' and '.join(why)} dropped)" if why else ""
    return f"kept {kept} of {logged} logged rows ({kept / logged:.0%}){reason}"


def _spelled_nan(values: pd.Series) -> np.ndarray:
    """Rows of a text column that spell NaN: a logged value, unlike a blank cell."""
    if pd.api.types.is_numeric_dtype(values.dtype) or pd.api.types.is_bool_dtype(values.dtype):
        return np.zeros(len(values), bool)
    text = values.astype(str).str.strip().str.lower()
    return (text.isin(_NAN_SPELLINGS) & values.notna()).to_numpy(bool)


def _numeric(values: pd.Series, column: str, run: str) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values.dtype):
        raise DataError("holds true/false values, not numbers", run=run, column=column)
    if pd.api.types.is_numeric_dtype(values.dtype):
        return values.to_numpy(dtype=float, na_value=np.nan)
    text = values.where(values.isna(), values.astype(str).str.strip())  # " inf" like " nan"
    try:
        converted = pd.to_numeric(text, errors="coerce")
    except OverflowError:  # an integer past 1e308: as a float it is infinite, and so refused or dropped
        converted = pd.Series([_as_float(v) for v in text], index=values.index, dtype=float)
    bad = converted.isna().to_numpy() & values.notna().to_numpy() & ~_spelled_nan(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"holds a non-numeric value {str(values.iloc[row])[:40]!r} in row {row + 1}",
            run=run,
            column=column,
        )
    return converted.to_numpy(dtype=float, na_value=np.nan)


def _as_float(value: object) -> float:
    """One cell as a float (NaN when it is not a number); huge integers become infinite."""
    try:
        return float(str(value)) if value is not None and value == value else math.nan
    except ValueError:
        return math.nan


def _lr_not_negative(lr: np.ndarray | None, column: str | None, step: np.ndarray, run: str) -> None:
    if lr is None:
        return
    with np.errstate(invalid="ignore"):
        negative = np.flatnonzero(lr < 0)
    if len(negative):
        i = int(negative[0])
        raise DataError(f"a learning rate cannot be negative, found {float(lr[i]):g} at step {step[i]}", run=run, column=column)


def _lr_on_loss_rows(lr: np.ndarray | None, step: np.ndarray, keep: np.ndarray) -> np.ndarray | None:
    if lr is None:
        return None
    logged = np.isfinite(lr)
    if not logged.any():
        return None
    if logged[keep].all():
        return lr if keep.all() else lr[keep]
    return np.interp(step[keep], step[logged], lr[logged])
