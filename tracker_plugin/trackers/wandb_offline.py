"""W&B offline run directories (``wandb/offline-run-*/run-*.wandb``), read without a server.

``wandb-offline:PATH`` names an offline run directory, a ``.wandb`` file, or a folder
holding offline runs (``offline-run-*`` directories, directly or in a ``wandb/``
folder). The history, config and summary are read from the ``.wandb`` file: a log of
``wandb.proto`` records (see :mod:`.wandb_log`), every checksum verified.

**Annotating an offline run** adds the annotation to the run itself, the way
``run.summary.update`` and ``wandb.save`` would have inside the training script: summary
records and a files record are inserted before the run's exit record, and
``loss_eta.json`` and ``loss_eta.png`` are put in the run's ``files/`` directory. A later
``wandb sync`` then brings the forecast to the W&B run with everything else, and the
summary keeps all its other keys (summary records only update the keys they name). The
bytes before the exit record are copied unchanged; the new file is written beside the old
one, read back and checked record by record, then moved into place. A run that has not
finished (no exit record) or that was already synced is not written: annotate the synced
run online with ``wandb:ENTITY/PROJECT/RUN_ID``.

**A resumed run** (``WANDB_RUN_ID`` and ``WANDB_RESUME`` set again after a preemption) is
written offline into a second ``offline-run-*-<id>`` directory with the same run id; its
``_step`` counts from 0 again, and its trainer's step goes back to the checkpoint. A folder
holding the attempts reads them as one run: joined in the order they started, each
attempt's ``_step`` numbered on from the last, so the frame replaces the steps a resumed
attempt did again (see :func:`~tracker_plugin.frame.history.build_history`); a note says
how many attempts were joined and which steps were redone. The run is the last attempt's
directory, where an annotation goes. One attempt's directory read alone is its own log: one
that starts far from step 0 says so, and names the folder to read instead.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracker_plugin.errors import DataError, MissingDependency, RunNotFound, SourceError
from tracker_plugin.frame.history import RESTART_NOTE, History
from tracker_plugin.frame.resume import late_start
from tracker_plugin.keys import ARTIFACT_JSON, ARTIFACT_PNG, JSON_PATH, MARKER, PNG_PATH, is_own
from tracker_plugin.plan.params import flat_params
from tracker_plugin.trackers.atomic import replacing, write_atomic
from tracker_plugin.trackers.base import Annotation, Previous, RunInfo, Source, previous_of
from tracker_plugin.trackers.options import ReadOptions
from tracker_plugin.trackers.wandb_data import (
    ROW_KEY,
    KeyColumn,
    NotJson,
    build_wandb_history,
    wandb_progress,
    wandb_reading,
    whole,
)
from tracker_plugin.trackers.wandb_log import LogCorrupt, LogRecord, LogTail, read_log, write_records

__all__ = ["OfflineRun", "WandbOfflineSource", "read_offline_run"]

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


class WandbOfflineSource(Source):
    """Offline W&B runs on disk; see the module docstring for how they are annotated."""

    scheme = "wandb-offline"

    def __init__(self, spec: str, options: ReadOptions | None = None) -> None:
        super().__init__(spec, options)
        self._parsed: dict[str, OfflineRun] = {}
        # ref -> the attempts of a run resumed into several offline directories, in order
        self._attempts: dict[str, list[OfflineRun]] = {}
        # .wandb file -> (its identity, its records), from write_content for write_markers
        self._checked: dict[str, tuple[tuple[int, int, int], list[LogRecord]]] = {}

    def runs(self) -> list[RunInfo]:
        parsed = [self._read(f, f"wandb-offline:{f.parent}") for f in _run_files(Path(self.spec), self.spec)]
        infos = []
        for attempts in _attempts_of(parsed):
            run = attempts[-1]  # the last attempt: its directory is the run's, and its state
            ref = f"wandb-offline:{run.path.parent}"
            self._parsed[ref] = run
            progress = run.progress
            if len(attempts) > 1:
                self._attempts[ref] = attempts
                rows = sum(a.rows for a in attempts)
                progress = wandb_progress(_joined_last_step(attempts), rows, run.summary.get("_timestamp"))
            infos.append(
                RunInfo(
                    ref=ref,
                    name=run.name or run.run_id or run.path.parent.name,
                    state=run.state,
                    progress=progress,
                    previous=run.previous,
                )
            )
        return infos

    def run_string(self, run: RunInfo) -> str | None:
        # A run resumed into several directories is read from all of them: no one string.
        return None if run.ref in self._attempts else run.ref

    def read(self, run: RunInfo) -> History:
        attempts = self._attempts.get(run.ref)
        if attempts is not None:
            return self._read_attempts(run, attempts)
        parsed = self._parsed.get(run.ref) or self._read(_wandb_file(run.ref), run.ref)
        config = flat_params(parsed.config)
        reading = wandb_reading(parsed.keys, config, self.options)
        keys = [ROW_KEY, *reading.keys()]
        parsed = _with_keys(parsed, keys, run.ref)
        data: dict[str, KeyColumn] = {k: parsed.data[k] for k in keys if k in parsed.data}
        history = build_wandb_history(
            data,
            run=run.ref,
            config=config,
            all_keys=parsed.keys,
            reading=reading,
            finished=parsed.state == "finished",
        )
        unread = _unread_tail(parsed)
        if unread is not None:
            history = replace(history, notes=(*history.notes, unread))
        return _noting_a_resume(history, parsed)


    def _read_attempts(self, run: RunInfo, attempts: list[OfflineRun]) -> History:
        """One run from the attempts it was resumed in: their histories joined in order."""
        config = flat_params(_joined_config(attempts))
        all_keys = set().union(*(a.keys for a in attempts))
        reading = wandb_reading(all_keys, config, self.options)
        keys = [ROW_KEY, *reading.keys()]
        attempts = [_with_keys(a, keys, run.ref) for a in attempts]
        data = _joined_data(attempts, keys)
        history = build_wandb_history(
            data,
            run=run.ref,
            config=config,
            all_keys=all_keys,
            reading=reading,
            finished=attempts[-1].state == "finished",
        )
        step_key = next((k for k in reading.columns.step if k in data), ROW_KEY)
        # The join note names the steps each resumed attempt replaced: the frame's own
        # restart notes would say it again, with attempts numbered alike.
        kept = tuple(note for note in history.notes if not note.startswith(RESTART_NOTE))
        return replace(history, notes=(*kept, _join_note(attempts, step_key)))

    def _read(self, wandb_file: Path, ref: str) -> OfflineRun:
        return read_offline_run(wandb_file, self.options.columns.keys(), ref=ref)

    # -- writing -------------------------------------------------------------------------
    def held(self, run: RunInfo) -> dict[str, Any]:
        return self._read(_wandb_file(run.ref), run.ref).own

    reads_plot = True

    def stored_artifact(self, run: RunInfo, path: str) -> bytes | None:
        """One of our artifacts in the run's ``files/``; None when it is not there."""
        try:
            return (_wandb_file(run.ref).parent / "files" / path).read_bytes()
        except OSError:
            return None

    shared = False  # the summary and the marker go in one atomic rewrite of the file

    def write_content(self, run: RunInfo, annotation: Annotation) -> None:
        """The artifacts, into the run's ``files/``, once the run is known to be writable."""
        wandb_file = _wandb_file(run.ref)
        _check_writable(wandb_file, run.ref)
        with _os_errors(wandb_file, run.ref), _mapped(wandb_file) as data:
            entries = _entries(data, wandb_file, run.ref)
            _exit_index(entries, run.ref)
            # write_markers takes these records again unless the file has changed since.
            self._checked[str(wandb_file)] = (_identity(wandb_file), entries)
            files_dir = wandb_file.parent / "files"
            files_dir.mkdir(parents=True, exist_ok=True)
            for name, content in (
                (ARTIFACT_JSON, annotation.report_bytes()),
                (ARTIFACT_PNG, annotation.plot_bytes()),
            ):
                write_atomic(files_dir / name, content)

    def write_markers(self, run: RunInfo, annotation: Annotation) -> None:
        """The summary, files and marker records, in one rewrite of the ``.wandb`` file: the
        metrics and the markers are committed together."""
        wandb_file = _wandb_file(run.ref)
        checked = self._checked.pop(str(wandb_file), None)
        with _os_errors(wandb_file, run.ref), _mapped(wandb_file) as data:
            same = checked is not None and checked[0] == _identity(wandb_file)
            entries = checked[1] if checked is not None and same else _entries(data, wandb_file, run.ref)
            _insert(wandb_file, data, entries, _exit_index(entries, run.ref), annotation_records(annotation), run.ref)

    def describe_write(self, run: RunInfo, annotation: Annotation) -> list[str]:
        wandb_file = _wandb_file(run.ref)
        return [
            f"to: a summary record and a files record before the exit record of {wandb_file}",
            f"to: {JSON_PATH} and {PNG_PATH} in {wandb_file.parent / 'files'}",
        ]


def _unread_tail(run: OfflineRun) -> str | None:
    """A note on the end of the file that holds no whole record: a writer still running, or
    a file cut short or damaged there (a length that points past the end); either way the
    steps it held, if any, are not in the history."""
    if run.incomplete_at is None:
        return None
    left = run.path.stat().st_size - run.incomplete_at
    return (
        f"{run.path.name}: its last {left:,} bytes (from byte {run.incomplete_at:,}) are no whole record, "
        "not read: a run still writing, or a file cut short or damaged there; any steps they held are left out"
    )


def _with_keys(run: OfflineRun, keys: list[str], ref: str) -> OfflineRun:
    """The run with ``keys`` parsed: read again when the trainer's keys were not among
    those first parsed."""
    if any(k in run.keys and k not in run.data for k in keys):
        return read_offline_run(run.path, keys, ref=ref)
    return run


def _attempts_of(runs: list[OfflineRun]) -> list[list[OfflineRun]]:
    """The runs grouped by run id (a run resumed offline writes a directory per attempt),
    each group in the order its attempts started; groups in the order they were found."""
    groups: dict[str, list[OfflineRun]] = {}
    for run in runs:
        groups.setdefault(run.run_id or str(run.path), []).append(run)
    return [sorted(group, key=_started) for group in groups.values()]


def _started(run: OfflineRun) -> tuple[float, str]:
    # The run record's start time, then the directory's name (offline-run-YYYYMMDD_HHMMSS-id).
    return (run.start_time if run.start_time is not None else float("inf"), run.path.parent.name)


def _offsets(attempts: list[OfflineRun]) -> list[int]:
    """What each attempt's ``_step`` is moved by so the joined rows keep their order: an
    attempt that counts ``_step`` from 0 again goes on after the one before it."""
    offsets, top = [], -1
    for run in attempts:
        first = min((steps[0] for steps, _ in run.data.values() if steps), default=0)
        shift = top + 1 - first if first <= top else 0
        offsets.append(shift)
        last = max((steps[-1] for steps, _ in run.data.values() if steps), default=run.last_step or 0)
        top = max(top, last + shift)
    return offsets


def _joined_last_step(attempts: list[OfflineRun]) -> int:
    return _offsets(attempts)[-1] + (attempts[-1].last_step or 0)


def _joined_data(attempts: list[OfflineRun], keys: list[str]) -> dict[str, KeyColumn]:
    """Each key's rows of every attempt, in order, ``_step`` numbered on (see :func:`_offsets`)."""
    data: dict[str, tuple[list[int], list[Any]]] = {}
    for run, shift in zip(attempts, _offsets(attempts)):
        for key in keys:
            if key in run.data:
                steps, values = run.data[key]
                column = data.setdefault(key, ([], []))
                column[0].extend(step + shift for step in steps)
                column[1].extend(values)
    return dict(data)


def _joined_config(attempts: list[OfflineRun]) -> dict[str, Any]:
    """The config as the last attempt left it: each attempt's keys over the earlier ones'."""
    config: dict[str, Any] = {}
    for run in attempts:
        config.update(run.config)
    return config


def _join_note(attempts: list[OfflineRun], step_key: str) -> str:
    """Which attempts were joined, and the steps each resumed attempt logged again."""
    names = ", ".join(run.path.parent.name for run in attempts)
    note = f"joined {len(attempts)} attempts of W&B run {attempts[-1].run_id}, resumed offline ({names})"
    redone = [_redone(attempts[:k], run, step_key) for k, run in enumerate(attempts) if k]
    said = [f"attempt {k} {text}" for k, text in enumerate(redone, 2) if text]
    return note + (": " + "; ".join(said) if said else "")


def _redone(before: list[OfflineRun], run: OfflineRun, step_key: str) -> str | None:
    """'resumed at step S, and its rows replaced steps A-B (N rows) ...', or None when the
    attempt logged no step the earlier ones had reached."""
    if step_key == ROW_KEY or step_key not in run.data or not run.data[step_key][1]:
        return None
    first = run.data[step_key][1][0]
    earlier = [v for r in before if step_key in r.data for v in r.data[step_key][1]]
    again = sorted(v for v in earlier if isinstance(v, (int, float)) and v >= first)
    if not again:
        return None
    span = f"{again[0]:g}" if again[0] == again[-1] else f"{again[0]:g}-{again[-1]:g}"
    rows = f"{len(again)} row{'s' if len(again) > 1 else ''}"
    return f"resumed at {step_key} {first:g}: its rows replaced those of steps {span} ({rows}) the attempts before had logged"


def _noting_a_resume(history: History, run: OfflineRun) -> History:
    """The history with a note when it starts far from step 0: one attempt of a resumed
    run, whose earlier attempts are in other offline directories."""
    late = late_start(history.step)
    if late is None:
        return history
    marked = " (its run record is marked resume: WANDB_RESUME was set)" if run.resume else ""
    note = (
        f"the history starts at step {history.step[0]:,}, {late:.0f} logging intervals after step 0{marked}: "
        f"it resumes an earlier attempt whose rows are not in {run.path.parent.name}; read the folder "
        f"holding every offline-run-*-{run.run_id or '<id>'} directory (the job's wandb/ folder) for the whole run"
    )
    return replace(history, notes=(*history.notes, note))


def _check_writable(wandb_file: Path, ref: str) -> None:
    if not wandb_file.parent.name.startswith(_RUN_DIR_PREFIX):
        raise SourceError(
            "is not an offline run (it was synced live); annotate it with wandb:ENTITY/PROJECT/RUN_ID",
            run=ref,
        )
    for marker in (".synced", ".syncstate"):
        if wandb_file.with_name(wandb_file.name + marker).exists():
            raise SourceError(
                "was synced to W&B already, so `wandb sync` would not send an annotation; "
                "annotate the synced run with wandb:ENTITY/PROJECT/RUN_ID",
                run=ref,
            )


@contextmanager
def _os_errors(wandb_file: Path, ref: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise SourceError(f"cannot write {exc.filename or wandb_file}: {exc.strerror}", run=ref) from None


def _identity(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _entries(data: bytes, wandb_file: Path, ref: str) -> list[LogRecord]:
    try:
        return list(read_log(data))
    except LogCorrupt as exc:
        raise DataError(f"{wandb_file.name}: {exc}", run=ref) from None


def _exit_index(entries: list[LogRecord], ref: str) -> int:
    """The index of the exit record, searched from the end (where it is)."""
    pb = _proto()
    record = pb.Record()
    for index in range(len(entries) - 1, -1, -1):
        record.ParseFromString(entries[index].data)
        if record.WhichOneof("record_type") == "exit":
            return index
    raise SourceError(
        "has no exit record: the run is still running or was killed, and its file is not "
        "changed while it may be written to; annotate it once it has finished (or after "
        "`wandb sync`, online)",
        run=ref,
    )


def annotation_records(annotation: Annotation) -> list[bytes]:
    """The records that annotate an offline run, in order: the summary keys, the files
    record, then the markers that say the annotation is complete."""
    pb = _proto()
    values = {**annotation.metrics, **annotation.labels}
    first = {k: v for k, v in values.items() if k != MARKER}
    markers = {MARKER: annotation.marker()}
    files = pb.Record()
    for name in (JSON_PATH, PNG_PATH):
        files.files.files.add(path=name, policy=pb.FilesItem.PolicyType.NOW)
    return [_summary_record(pb, first), files.SerializeToString(), _summary_record(pb, markers)]


def _summary_record(pb: Any, values: Mapping[str, Any]) -> bytes:
    record = pb.Record()
    for key in sorted(values):
        if values[key] is None:
            record.summary.remove.add(key=key)
        else:
            record.summary.update.add(key=key, value_json=json.dumps(values[key]))
    return record.SerializeToString()


def _insert(
    wandb_file: Path, data: bytes, entries: list[LogRecord], exit_index: int, records: list[bytes], ref: str
) -> None:
    """Rewrite the file with ``records`` just before the exit record; the bytes before it
    are copied as they are, and the result is verified before it replaces the file."""
    before = [entry.data for entry in entries[max(0, exit_index - len(records)) : exit_index]]
    if before == records:
        return  # the same annotation is already the last thing before the exit record
    suffix = [entry.data for entry in entries[exit_index:]]
    expected = [entry.data for entry in entries[:exit_index]] + records + suffix
    at = entries[exit_index].offset

    def check(tmp: Path) -> None:
        if _records_of(tmp) != expected:
            raise SourceError(
                f"rewriting {wandb_file.name} did not read back as written; the file was left as it was",
                run=ref,
            )

    with replacing(wandb_file, check=check, mode_of=wandb_file) as out:
        out.write(memoryview(data)[:at])
        write_records(out, records + suffix, at)


def _records_of(path: Path) -> list[bytes] | None:
    """The records in a file; None when it does not read as a record log."""
    with _mapped(path) as data:
        try:
            return [entry.data for entry in read_log(data)]
        except LogCorrupt:
            return None


def _run_files(path: Path, spec: str) -> list[Path]:
    """The ``.wandb`` files a path names: a file, a run directory, or a folder of
    ``offline-run-*`` directories (directly or in ``wandb/``, its own or a subfolder's)."""
    if path.is_file():
        if path.suffix != ".wandb":
            raise RunNotFound("is not a .wandb file or an offline run directory", run=f"wandb-offline:{spec}")
        return [path]
    if not path.is_dir():
        raise RunNotFound("no such file or directory", run=f"wandb-offline:{spec}")
    own = sorted(path.glob("run-*.wandb"))
    if own:
        return own[-1:]
    found: dict[Path, Path] = {}
    # A folder holding several W&B directories (a run resumed from another working
    # directory writes its attempt into that one's wandb/): their runs too, so the
    # attempts of one run are joined rather than each read alone.
    below = [sub for sub in sorted(path.iterdir()) if sub.is_dir() and not sub.name.startswith(_RUN_DIR_PREFIX)]
    for folder in (path, path / "wandb", *below, *(sub / "wandb" for sub in below)):
        for run_dir in sorted(folder.glob(f"{_RUN_DIR_PREFIX}*")):
            if run_dir.is_dir() and not run_dir.is_symlink():
                files = sorted(run_dir.glob("run-*.wandb"))
                if files:
                    found.setdefault(files[-1].resolve(), files[-1])
    if not found:
        raise RunNotFound(
            "holds no offline W&B run (offline-run-*/run-*.wandb, or wandb/offline-run-*/)",
            run=f"wandb-offline:{spec}",
        )
    return list(found.values())


def _wandb_file(ref: str) -> Path:
    path = Path(ref.removeprefix("wandb-offline:"))
    if path.is_file():
        return path
    files = sorted(path.glob("run-*.wandb"))
    if not files:
        raise RunNotFound("holds no run-*.wandb file", run=ref)
    return files[-1]


