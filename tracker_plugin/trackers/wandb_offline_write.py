"""The records an annotation adds to an offline run, inserted before its exit record.

Summary records and a files record go in as ``run.summary.update`` and ``wandb.save``
would have put them; a run that has not finished, or was already synced, or whose folder
cannot be written, is refused with a one-line reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracker_plugin.errors import SourceError
from tracker_plugin.keys import JSON_PATH, MARKER, PNG_PATH
from tracker_plugin.trackers.atomic import replacing
from tracker_plugin.trackers.base import Annotation
from tracker_plugin.trackers.wandb_log import LogCorrupt, LogRecord, read_log, write_records
from tracker_plugin.trackers.wandb_offline_read import _RUN_DIR_PREFIX, _mapped, _proto

__all__ = ["annotation_records"]


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
