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

The file is read in :mod:`.wandb_offline_read`, a resumed run's attempts joined in
:mod:`.wandb_offline_resume`, and the annotation's records made in
:mod:`.wandb_offline_write`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracker_plugin.errors import DataError, RunNotFound
from tracker_plugin.frame.history import RESTART_NOTE, History
from tracker_plugin.keys import ARTIFACT_JSON, ARTIFACT_PNG, JSON_PATH, PNG_PATH
from tracker_plugin.plan.params import flat_params
from tracker_plugin.trackers.atomic import write_atomic
from tracker_plugin.trackers.base import Annotation, RunInfo, Source
from tracker_plugin.trackers.options import ReadOptions
from tracker_plugin.trackers.wandb_data import (
    ROW_KEY,
    KeyColumn,
    build_wandb_history,
    wandb_progress,
    wandb_reading,
)
from tracker_plugin.trackers.wandb_log import LogCorrupt, LogRecord, read_log
from tracker_plugin.trackers.wandb_offline_read import _RUN_DIR_PREFIX, OfflineRun, _mapped, read_offline_run
from tracker_plugin.trackers.wandb_offline_resume import (
    _attempts_of,
    _join_note,
    _joined_config,
    _joined_data,
    _joined_last_step,
    _noting_a_resume,
)
from tracker_plugin.trackers.wandb_offline_write import (
    _check_writable,
    _exit_index,
    _insert,
    _os_errors,
    annotation_records,
)

__all__ = ["OfflineRun", "WandbOfflineSource", "read_offline_run"]


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

    def write_content(self, run: RunInfo, annotation: Annotation, held: Mapping[str, Any]) -> None:
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


def _identity(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _entries(data: bytes, wandb_file: Path, ref: str) -> list[LogRecord]:
    try:
        return list(read_log(data))
    except LogCorrupt as exc:
        raise DataError(f"{wandb_file.name}: {exc}", run=ref) from None


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


