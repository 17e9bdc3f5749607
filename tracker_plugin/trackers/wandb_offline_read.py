"""An offline run's ``.wandb`` file read into an :class:`OfflineRun`: its history, config,
summary and state.

The file is a log of ``wandb.proto`` records (see :mod:`.wandb_log`), every checksum
verified; history records become the history's rows, config and summary records are
applied in order (a summary update only changes the keys it names), and the exit record
says how the run ended.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracker_plugin.errors import DataError, MissingDependency, RunNotFound
from tracker_plugin.keys import is_own
from tracker_plugin.trackers.base import Previous, previous_of
from tracker_plugin.trackers.wandb_data import (
    ROW_KEY,
    NotJson,
    wandb_progress,
    whole,
)
from tracker_plugin.trackers.wandb_log import LogCorrupt, LogTail, read_log

__all__ = ["OfflineRun", "read_offline_run"]

_RUN_DIR_PREFIX = "offline-run-"


def _proto() -> Any:
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError:
        raise MissingDependency("wandb", "wandb") from None
    return wandb_internal_pb2


@dataclass
class OfflineRun:
    """What a ``.wandb`` file holds, as far as the analysis needs it."""

    path: Path  # the .wandb file
    run_id: str = ""
    name: str = ""
    project: str = ""
    entity: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)  # every history key logged
    data: dict[str, tuple[list[int], list[Any]]] = field(default_factory=dict)  # wanted keys only
    last_step: int | None = None
    rows: int = 0  # history records
    exit_code: int | None = None  # None: no exit record
    incomplete_at: int | None = None  # an unfinished last record starts here
    # The run record's start time (Unix seconds; None: not recorded) and its resume flag:
    # the SDK was told to resume the run id if it exists (WANDB_RESUME allow or must).
    start_time: float | None = None
    resume: bool = False

    @property
    def state(self) -> str:
        if self.exit_code is None:
            return "unknown"
        return "finished" if self.exit_code == 0 else "failed"

    @property
    def progress(self) -> str | None:
        return wandb_progress(self.summary.get(ROW_KEY, self.last_step), self.rows, self.summary.get("_timestamp"))

    @property
    def own(self) -> dict[str, Any]:
        """The summary's keys of ours."""
        return {k: v for k, v in self.summary.items() if is_own(k)}

    @property
    def previous(self) -> Previous | None:
        return previous_of(self.own)


def read_offline_run(path: Path, wanted: Iterable[str], *, ref: str) -> OfflineRun:
    """Read a ``.wandb`` file: run record, config, summary, and the history of ``wanted``.

    Raises
    ------
    DataError
        The file is damaged or is not a ``.wandb`` file (the message says where).
    """
    pb = _proto()
    wanted = set(wanted) | {ROW_KEY}
    run = OfflineRun(path=path)
    summary = _SummaryLog()
    tail = LogTail()
    try:
        with _mapped(path) as data:
            for entry in read_log(data, tail):
                record = pb.Record()
                try:
                    record.ParseFromString(entry.data)
                except Exception:  # noqa: BLE001 - protobuf's DecodeError differs between versions
                    raise LogCorrupt(f"record at byte {entry.offset} is not a W&B record") from None
                _apply(run, summary, record, wanted)
    except OSError as exc:
        if path.is_symlink() and not path.exists():
            raise RunNotFound(f"cannot read {path.name}: it is a link to {os.readlink(path)}, which does not exist; "
                              "point the link at the run's .wandb file, or read the run where that file is",
                              run=ref) from None
        raise RunNotFound(f"cannot read {path.name}: {exc.strerror}", run=ref) from None
    except LogCorrupt as exc:
        raise DataError(f"{path.name}: {exc}", run=ref) from None
    run.incomplete_at = tail.incomplete_at
    run.summary = summary.replay()
    return run


@contextmanager
def _mapped(path: Path) -> Iterator[bytes]:
    """The file's bytes, memory-mapped: a long run's file is not copied into memory."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data  # type: ignore[misc]


def _apply(run: OfflineRun, summary: _SummaryLog, record: Any, wanted: set[str]) -> None:
    kind = record.WhichOneof("record_type")
    if kind == "history":
        _history(run, record.history, wanted)
    elif kind == "summary":
        summary.collect(record.summary.update, record.summary.remove)
    elif kind == "config":
        _update(run.config, record.config.update, record.config.remove)
    elif kind == "run":
        info = record.run
        run.run_id = info.run_id or run.run_id
        run.name = info.display_name or run.name
        run.project = info.project or run.project
        run.entity = info.entity or run.entity
        _update(run.config, info.config.update, info.config.remove)
        summary.collect(info.summary.update, info.summary.remove)
        run.resume = run.resume or bool(getattr(info, "resume", False))
        if info.HasField("start_time") and run.start_time is None:
            run.start_time = float(info.start_time.ToSeconds())
    elif kind == "exit" and run.exit_code is None:
        run.exit_code = int(record.exit.exit_code)


def _history(run: OfflineRun, history: Any, wanted: set[str]) -> None:
    values = {}
    keys = run.keys
    for item in history.item:
        nested = item.nested_key
        key = item.key or (nested[0] if len(nested) == 1 else ".".join(nested))
        keys.add(key)
        if key in wanted:
            values[key] = _item_value(item)
        elif len(nested) > 1 and nested[0] in wanted:
            # A media object (a histogram) logged under a wanted key: the SDK writes its
            # fields as nested keys. Kept as one object, so the read can say what it was.
            fields = values.setdefault(nested[0], {})
            if isinstance(fields, dict):
                fields[".".join(nested[1:])] = _item_value(item)
    step = whole(values.pop(ROW_KEY, None))
    if not isinstance(step, int):
        step = int(history.step.num)
    run.last_step = step
    run.rows += 1
    for key, value in values.items():
        steps, column = run.data.setdefault(key, ([], []))
        steps.append(step)
        column.append(value)


def _item_value(item: Any) -> Any:
    """A history or summary item's value: its JSON form, else its typed form."""
    if item.value_json:
        return _json_value(item.value_json)
    if "value" not in item.DESCRIPTOR.oneofs_by_name:
        return None
    which = item.WhichOneof("value")
    if which in (None, "none"):
        return None
    value = getattr(item, which)
    return _json_value(value) if which == "json" else value


def _json_value(text: str) -> Any:
    """``json.loads``, with a fast path for the plain numbers that most values are
    (``float`` also reads the ``NaN`` and ``Infinity`` W&B writes). A value that is not
    JSON (a writer's bug, a damaged record) is kept as :class:`NotJson`: a row holding no
    number, which the read counts in its notes."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return json.loads(text)
    except ValueError:  # json.JSONDecodeError, and text that is no UTF-8
        return NotJson(text)


class _SummaryLog:
    """A run's summary records, kept as each path's latest item and decoded once at the
    end (a run writes its summary every step)."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, ...], Any] = {}  # path -> item (None: removed), latest last
        self.parents: set[tuple[str, ...]] = set()  # paths that have had sub-paths

    def collect(self, updates: Iterable[Any], removes: Iterable[Any]) -> None:
        items, parents = self.items, self.parents
        for removed, group in ((False, updates), (True, removes)):
            for item in group:
                path = (item.key,) if item.key else tuple(item.nested_key)
                if path in parents:  # writing a path replaces what was under it
                    for old in [p for p in items if len(p) > len(path) and p[: len(path)] == path]:
                        del items[old]
                if len(path) > 1:
                    parents.update(path[:k] for k in range(1, len(path)))
                items.pop(path, None)
                items[path] = None if removed else item

    def replay(self) -> dict[str, Any]:
        """The summary the items make, applied in the order they were last written."""
        summary: dict[str, Any] = {}
        for path, item in self.items.items():
            node: Any = summary
            for part in path[:-1]:
                child = node.get(part)
                if not isinstance(child, dict):
                    if item is None:
                        break
                    child = node[part] = {}
                node = child
            else:
                if item is None:
                    node.pop(path[-1], None)
                else:
                    node[path[-1]] = _item_value(item)
        return summary


def _update(target: dict[str, Any], updates: Iterable[Any], removes: Iterable[Any]) -> None:
    """Apply config or summary items (``key``, or a ``nested_key`` path) to ``target``."""
    for item in updates:
        path = [item.key] if item.key else list(item.nested_key)
        node = target
        for part in path[:-1]:
            child = node.get(part)
            node = node.setdefault(part, {}) if not isinstance(child, dict) else child
            if not isinstance(node, dict):
                break
        else:
            node[path[-1]] = _item_value(item)
    for item in removes:
        path = [item.key] if item.key else list(item.nested_key)
        found: Any = target
        for part in path[:-1]:
            found = found.get(part) if isinstance(found, dict) else None
        if isinstance(found, dict):
            found.pop(path[-1], None)
