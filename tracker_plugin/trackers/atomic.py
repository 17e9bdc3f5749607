"""Files replaced in one step: a reader sees the old file or the new one, never half of one.

Every file a source writes goes through here: a CSV run's ``loss_eta.json`` and
``loss_eta.png``, an offline W&B run's ``files/`` and its rewritten ``.wandb`` file, and
the history cache's entries. The new bytes go to a temporary file of a name of its own
beside the target (so concurrent writers never share one), are flushed to disk, and the
temporary file is renamed over the target; on any error it is removed and the target is
left as it was.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["replacing", "write_atomic"]

_NAME_KEPT = 200  # bytes of the target's name in its temporary file's name


@contextmanager
def replacing(
    path: str | os.PathLike[str],
    *,
    check: Callable[[Path], None] | None = None,
    mode_of: str | os.PathLike[str] | None = None,
) -> Iterator[BinaryIO]:
    """A binary file whose content replaces ``path`` when the block ends without an error.

    ``check`` is called with the finished temporary file before it replaces ``path``; if
    it raises, ``path`` is left as it was. ``mode_of`` names a file whose permissions the
    new file takes (the file it replaces, say); otherwise a new file gets the permissions
    any new file gets (the umask's).
    """
    target = Path(path)
    # The target's name, cut to leave room in the file system's name limit (255 bytes) for
    # the marks around it: a target whose name fits must not fail on its temporary name.
    kept = os.fsencode(target.name)[:_NAME_KEPT].decode("utf-8", "ignore")
    tmp = target.with_name(f".{kept}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        if check is not None:
            check(tmp)
        if mode_of is not None:
            shutil.copymode(mode_of, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step."""
    with replacing(path) as out:
        out.write(data)
