"""The framing of a ``.wandb`` run file: a LevelDB-style log of records.

The file starts with a 7-byte header (``:W&B``, a 2-byte magic ``0xBEE1``, a version byte
0), then is a sequence of 32 KiB blocks. Each record is stored as one or more fragments,
each with a 7-byte header: a CRC-32 (little endian), the data length (2 bytes) and the
fragment type (FULL, or FIRST, MIDDLE..., LAST when a record spans blocks). The CRC
covers the data and is seeded with the CRC of the type byte. A block with fewer than 7
bytes left is padded with zeros. Each record's data is a serialised ``wandb.proto``
``Record``; this module only deals in bytes.

``wandb`` 0.31 ships no reader for this format (its ``wandb-core`` process reads and writes
it); this is one, written from the format, and verified on files the real SDK writes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

__all__ = ["BLOCK", "FILE_HEADER", "LogCorrupt", "LogRecord", "LogTail", "read_log", "write_records"]

BLOCK = 32 * 1024
_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
FILE_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}


class LogCorrupt(ValueError):
    """The file is not a ``.wandb`` log, or a record in it is damaged; says where."""


class LogRecord(NamedTuple):
    """One record: its data, and the file offset where its first fragment starts."""

    offset: int
    data: bytes


@dataclass
class LogTail:
    """How the log ended: cleanly, or with an incomplete last record (a writer that is
    still running, or was killed mid-write) starting at ``incomplete_at``."""

    end: int = 0
    incomplete_at: int | None = None


def read_log(data: bytes, tail: LogTail | None = None) -> Iterator[LogRecord]:
    """The records in a ``.wandb`` file's bytes, checking every fragment's CRC.

    A record cut off by the end of the file ends the log (``tail`` says where); zero
    bytes after the last record are padding.

    Raises
    ------
    LogCorrupt
        The header is wrong, a checksum does not match, or fragments are out of order.
    """
    tail = tail if tail is not None else LogTail()
    if data[:4] != FILE_HEADER[:4]:
        raise LogCorrupt("not a .wandb file (no ':W&B' header)")
    if data[: len(FILE_HEADER)] != FILE_HEADER:
        _, magic, version = struct.unpack("<4sHB", data[:_HEADER])
        raise LogCorrupt(f"unknown .wandb file version (magic {magic:#06x}, version {version})")
    pos = tail.end = _HEADER
    size = len(data)
    pending: list[bytes] = []
    start = pos
    while pos < size:
        left = BLOCK - pos % BLOCK
        if left < _HEADER:
            pos += left  # block padding
            continue
        if pos + _HEADER > size:
            break  # a header cut off
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0 and length == 0 and crc == 0:
            if any(data[pos:]):
                raise LogCorrupt(f"zeroed region at byte {pos} before more records: the file is damaged")
            break  # zero fill after the last record
        if kind not in _TYPE_CRC or length > left - _HEADER:
            raise LogCorrupt(f"damaged record header at byte {pos} (type {kind}, length {length})")
        end = pos + _HEADER + length
        if end > size:
            break  # a fragment cut off
        chunk = data[pos + _HEADER : end]
        if zlib.crc32(chunk, _TYPE_CRC[kind]) != crc:
            raise LogCorrupt(f"record checksum mismatch at byte {pos}: the file is damaged")
        if kind == FULL and not pending:
            yield LogRecord(pos, chunk)
            pos = tail.end = end
            continue
        if kind in (FULL, FIRST):
            if pending:
                raise LogCorrupt(f"record at byte {start} is unfinished when another starts at byte {pos}")
            start = pos
        elif not pending:
            raise LogCorrupt(f"record fragment at byte {pos} continues no record")
        pending.append(chunk)
        pos = end
        if kind in (FULL, LAST):
            yield LogRecord(start, b"".join(pending))
            pending = []
            tail.end = pos
    if any(data[tail.end :]):
        tail.incomplete_at = start if pending else tail.end


def write_records(out: BinaryIO, records: Iterable[bytes], offset: int) -> int:
    """Frame ``records`` into ``out``, whose next byte is at file offset ``offset``
    (framing depends on the position in the 32 KiB block). Returns the new offset."""
    for data in records:
        first = True
        view = memoryview(data)
        while True:
            left = BLOCK - offset % BLOCK
            if left < _HEADER:
                out.write(b"\x00" * left)
                offset += left
                continue
            room = left - _HEADER
            chunk, view = view[:room], view[room:]
            last = len(view) == 0
            kind = FULL if first and last else FIRST if first else LAST if last else MIDDLE
            out.write(struct.pack("<IHB", zlib.crc32(chunk, _TYPE_CRC[kind]), len(chunk), kind))
            out.write(chunk)
            offset += _HEADER + len(chunk)
            first = False
            if last:
                break
    return offset
