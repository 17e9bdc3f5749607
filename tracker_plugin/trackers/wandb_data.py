"""W&B run histories in the common frame: shared by the online and offline W&B sources.

A W&B run logs rows numbered by ``_step`` (unique and increasing), each holding the keys
logged together. Keys logged at different rows (a train loss every step, an eval loss
every 500, the lr every 10) are read one at a time and aligned here on ``_step``, so the
row order that :func:`~tracker_plugin.frame.history.build_history` needs to resolve resumed
runs is kept. Nothing here imports ``wandb``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from tracker_plugin.frame.align import KeyHistory, align_on_step
from tracker_plugin.frame.conventions import Reading, finish_reading
from tracker_plugin.frame.from_params import with_config_batch, with_planned_lr
from tracker_plugin.frame.history import Columns, History, build_history
from tracker_plugin.trackers.options import ReadOptions

__all__ = [
    "ROW_KEY",
    "KeyColumn",
    "NotJson",
    "NumberColumn",
    "build_wandb_history",
    "chosen_keys",
    "decode",
    "numbers_of",
    "wandb_progress",
    "wandb_reading",
    "whole",
]

ROW_KEY = "_step"  # W&B's own row number: unique, increasing, always logged

# How W&B writes the floats that strict JSON has no numbers for.
_NON_FINITE = {
    "NaN": math.nan,
    "nan": math.nan,
    "Infinity": math.inf,
    "-Infinity": -math.inf,
    "inf": math.inf,
    "-inf": -math.inf,
}

# One key's logged values: the ``_step`` of each row that has the key, and the values.
KeyColumn = tuple[Sequence[int], Sequence[Any]]


def decode(value: Any) -> Any:
    """A history value as logged: W&B's ``"NaN"``/``"Infinity"`` strings become floats."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    return value


def whole(value: Any) -> Any:
    """An integer that came back as a float (``1024.0``, from JSON or parquet) as an int."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def chosen_keys(available: Iterable[str], columns: Columns) -> list[str]:
    """The run's keys to read: for each canonical column the first candidate it logged
    (the choice :func:`build_history` makes again on the frame), plus ``_step``."""
    present = set(available)
    keys = [ROW_KEY]
    for candidates in (columns.step, columns.loss, columns.tokens, columns.batch, columns.lr, columns.time):
        key = next((c for c in candidates if c in present), None)
        if key is not None and key not in keys:
            keys.append(key)
    return keys


def wandb_reading(available: Iterable[str], config: Mapping[str, Any], options: ReadOptions) -> Reading:
    """Which of a W&B run's keys are what: the trainer's step key over ``_step`` (which
    counts ``log`` calls), its loss, lr and tokens (see :mod:`tracker_plugin.frame.conventions`)."""
    return options.reading(set(available) - {ROW_KEY}, config, native_step=ROW_KEY)


def wandb_progress(step: Any, rows: int | None = None, stamp: Any = None) -> str | None:
    """A fingerprint of a run's history, as the ``loss_eta`` tag's ``progress`` records it:
    ``_step N rows R t T`` (its last step, its number of history rows, the time of its
    last row), so that a run rewound and logged again up to the same step counts as
    changed. What is unknown is left out."""
    step = whole(decode(step))
    ok = isinstance(step, int) and not isinstance(step, bool) and step >= 0
    if not ok:
        return None
    parts = [f"{ROW_KEY} {step}"]
    if rows is not None:
        parts.append(f"rows {rows}")
    stamp = decode(stamp)
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and math.isfinite(stamp):
        parts.append(f"t {stamp!r}")
    return " ".join(parts)


def build_wandb_history(
    data: Mapping[str, KeyColumn],
    *,
    run: str,
    config: Mapping[str, Any],
    reading: Reading,
    all_keys: Iterable[str] = (),
    finished: bool = False,
) -> History:
    """The common frame from each chosen key's column, aligned on ``_step``, read as
    ``reading`` (the trainer's conventions, :func:`wandb_reading`) says.

    The planned lr schedule comes from the run's ``config`` (flattened by
    :func:`~tracker_plugin.plan.params.flat_params`; see
    :func:`~tracker_plugin.frame.from_params.with_planned_lr`).

    ``data`` maps each key (``_step`` aside, which is the row number) to its column.
    ``all_keys`` are every key the run logged, named in the error when the loss or step
    key is missing. A loss the run logged as NaN is passed on as such (dropped and
    counted), unlike a row that did not log the loss.
    """
    columns, batch_size = reading.columns, reading.batch_size
    logged = set(data) | {ROW_KEY}
    loss_key = next((c for c in columns.loss if c in logged), None)
    step_key = next((c for c in columns.step if c in logged), None)
    if loss_key is None or step_key is None:
        # build_history raises the error, naming the keys the run has.
        names = sorted(set(all_keys) | logged)
        return build_history(pd.DataFrame(columns=names), run=run, columns=columns, batch_size=batch_size)
    cleaned = {key: numbers_of(key, steps, values) for key, (steps, values) in data.items() if key != ROW_KEY}
    aligned = align_on_step({key: column.history for key, column in cleaned.items()}, step=ROW_KEY)
    frame, logged_nan = aligned.frame, aligned.logged_nan.get(loss_key)
    kept = reading.stepped_rows(frame)
    if kept is not None:  # a TensorBoard's global_step on rows of another axis (frame/conventions.py)
        frame = frame[kept].reset_index(drop=True)
        logged_nan = None if logged_nan is None else np.asarray(logged_nan, bool)[kept]
    history = build_history(
        reading.prepare(frame),
        run=run,
        columns=columns,
        batch_size=batch_size,
        logged_nan_loss=logged_nan,
    )
    history = reading.spans(history, frame)
    odd = tuple(note for column in cleaned.values() for note in column.notes)
    if odd:
        history = replace(history, notes=(*history.notes, *odd))
    if reading.batch_source is not None and reading.batch_source.startswith("param '"):
        history = with_config_batch(history, "config " + reading.batch_source.removeprefix("param "))
    return with_planned_lr(finish_reading(history, reading, finished=finished), config)


class NumberColumn(NamedTuple):
    """One key's history as numbers, and what was done to the values that were not."""

    history: KeyHistory
    notes: tuple[str, ...]


def numbers_of(key: str, steps: Sequence[int], values: Sequence[Any]) -> NumberColumn:
    """A key's logged values as floats, each row that holds no number left out.

    A W&B history cell may hold anything ``run.log`` was given: ``None``, a bool, a
    string, a list, a media or histogram object. None of them is a loss, so the row is
    read as if the key was not logged there (a blank cell), and the read's notes count
    them. A string that spells a number (``"3.1"``) is taken as that number, with a note;
    W&B's own ``"NaN"`` and ``"Infinity"`` are the logged non-finite floats.
    """
    kept_steps: list[int] = []
    kept: list[float] = []
    blank: list[tuple[int, str]] = []
    text: list[tuple[int, str]] = []
    for step, raw in zip(steps, values):
        value = decode(raw)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and not isinstance(value, NotJson) and (parsed := _number_in(value)) is not None:
            number = parsed
            text.append((step, value))
        else:
            blank.append((step, _kind(value)))
            continue
        kept_steps.append(step)
        kept.append(number)
    notes = []
    if blank:
        first_step, first = blank[0]
        notes.append(
            f"key '{key}': {_count(len(blank), 'value')} that {'is' if len(blank) == 1 else 'are'} not a number "
            f"({first} at {ROW_KEY} {first_step}{', ...' if len(blank) > 1 else ''}) read as blank"
        )
    if text:
        first_step, first = text[0]
        notes.append(
            f"key '{key}': {_count(len(text), 'number')} logged as text ({first[:20]!r} at {ROW_KEY} {first_step}"
            f"{', ...' if len(text) > 1 else ''}) read as {'a number' if len(text) == 1 else 'numbers'}"
        )
    return NumberColumn(KeyHistory(np.asarray(kept_steps, np.int64), np.asarray(kept, float)), tuple(notes))


def _number_in(text: str) -> float | None:
    try:
        return float(text.strip())
    except (ValueError, OverflowError):
        return None


class NotJson(str):
    """A history value whose record held text that is not JSON, kept as that text."""


def _kind(value: Any) -> str:
    """What a value that is not a number is, in a few words."""
    if isinstance(value, NotJson):
        return f"a value that is not valid JSON ({str(value)[:20]!r})"
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"text {value[:20]!r}"
    if isinstance(value, Mapping):
        kind = value.get("_type")
        return f"a {kind} object" if isinstance(kind, str) else "a dict"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
