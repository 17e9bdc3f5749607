"""The local files trainers write: HF ``trainer_state.json`` and Lightning ``metrics.csv``.

Both are read as their trainer logs them (:mod:`tracker_plugin.frame.conventions`):

- ``trainer_state.json`` (in every HF checkpoint): its ``log_history`` is one entry per
  ``on_log`` call, with ``step`` the global (optimizer) step; its top-level fields
  (``max_steps``, ``global_step``, ``train_batch_size``, ``logging_steps``) are the config.
  Gradient accumulation is not recorded there, so tokens per step need ``batch_size``
  unless the run logged ``num_input_tokens_seen``. The clock is ``train_runtime``, which
  the Trainer adds to every entry only with ``include_num_input_tokens_seen`` (otherwise
  once, at the end: no clock, and the analysis says there is no time in the log).
- Lightning ``CSVLogger``'s ``metrics.csv``: a row per ``log_metrics`` call, ``step`` the
  global step; ``hparams.yaml`` beside it is the config (read when PyYAML is installed).
  Its rows hold no time of their own; a time the user logs (``self.log("time", ...)``) is
  found by the common time names.

Both files are read with bounds, so that a damaged or hostile one ends in an error naming
it rather than a crash or a hang: JSON nested deeper than any trainer writes is refused
before it is parsed (the parser recurses once per level), and YAML is read by
``safe_load``'s loader with a limit on nesting, on the size its aliases expand to (a
"billion laughs" document) and no alias to a node that contains it (a loop): see
:mod:`.yaml_config`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.errors import DataError
from tracker_plugin.frame.conventions import build_read_history, detect, finish_reading
from tracker_plugin.frame.from_params import with_planned_lr
from tracker_plugin.frame.history import History
from tracker_plugin.trackers.options import ReadOptions
from tracker_plugin.trackers.yaml_config import DEEPEST, yaml_file

__all__ = ["TRAINER_STATE", "is_trainer_state", "read_frame_as_trainer", "read_trainer_state", "sibling_hparams"]

TRAINER_STATE = "trainer_state.json"
# A JSON string, whose brackets are text: skipped when counting how deep the file nests.
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"')


def is_trainer_state(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() == ".json"


def read_trainer_state(path: str | os.PathLike[str], options: ReadOptions) -> History:
    """An HF ``trainer_state.json`` as a :class:`History`.

    Raises
    ------
    DataError
        The file is not JSON or has no ``log_history`` list.
    """
    run = os.fspath(path)
    try:
        text = Path(run).read_text()
        if _json_depth(text) > DEEPEST:
            raise DataError(f"nests deeper than {DEEPEST} levels: not an HF trainer_state.json", run=run)
        state = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"cannot be read as a trainer_state.json ({type(exc).__name__})", run=run) from None
    log = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(log, list) or not all(isinstance(row, dict) for row in log):
        raise DataError("has no 'log_history' list: not an HF trainer_state.json", run=run)
    config = {k: v for k, v in state.items() if k != "log_history" and not isinstance(v, (dict, list))}
    frame = pd.DataFrame(log)
    return read_frame_as_trainer(frame, config, options, run=run, native_step="step", finished=True)


def _json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest, outside its strings."""
    marks = np.frombuffer(_JSON_STRING.sub("", text).encode(), np.uint8)
    if not len(marks):
        return 0
    depth = np.cumsum(((marks == ord("[")) | (marks == ord("{"))).astype(np.int64))
    depth -= np.cumsum(((marks == ord("]")) | (marks == ord("}"))).astype(np.int64))
    return int(depth.max())


def sibling_hparams(path: Path) -> dict[str, Any]:
    """Lightning's ``hparams.yaml`` beside a ``metrics.csv``, flattened, with LightningCLI's
    ``config.yaml`` there too (SaveConfigCallback writes the parsed config, the Trainer's
    arguments such as ``trainer.accumulate_grad_batches`` among them, into the first logger's
    log_dir); the hparams win a name both hold. Empty without either (or without PyYAML).

    Raises
    ------
    DataError
        A file cannot be read as YAML text, nests too deep, loops, or its aliases expand
        past any config's size; the error names the file.
    """
    config: dict[str, Any] = {}
    for name in ("hparams.yaml", "config.yaml"):
        for key, value in yaml_file(path.with_name(name)).items():
            config.setdefault(key, value)
    return config


def read_frame_as_trainer(
    frame: pd.DataFrame,
    config: Mapping[str, Any],
    options: ReadOptions,
    *,
    run: str,
    native_step: str,
    finished: bool,
) -> History:
    """A local file's table, read by its trainer's conventions."""
    reading = options.reading(frame.columns, config, native_step=native_step)
    history = build_read_history(frame, reading, run=run, logged=set(map(str, frame.columns)))
    return with_planned_lr(finish_reading(history, reading, finished=finished), config)



def trainer_detected(columns: Any) -> bool:
    """Does a CSV's header look like a trainer's own log (Lightning's metrics.csv)?"""
    return detect({str(c) for c in columns}) is not None
