"""A local cache of run histories, so re-analysing a finished run reads nothing from a tracker.

Entries are sets of named numpy arrays (a source's raw table before validation), stored
one ``.npz`` file per entry under ``cache_dir/histories``. The key is a tuple of strings
that a source chooses so that anything that could change the data changes the key: for a
finished MLflow run, the tracker's redacted URI (its host, never a credential: see
:func:`tracker_plugin.redact.redact_uri`), the run id, the keys read and each key's last
step. A source should only cache runs that can no longer change (finished ones). The key
is stored in its entry too, so it is redacted here once more, whatever a source passes.

Entries written by an earlier layout (``_FORMAT``) are never read, and the first store
into a directory deletes them: a layout before 2 kept a tracking URI's credentials.

Safe to share between processes: each entry is written to a temporary file and renamed
into place, so a reader sees a whole entry or none; a file that cannot be read (cut
short, corrupt, written by another version) is a miss, and the next store replaces it.
An entry that reads but does not hold what the source expects (arrays missing or of the
wrong shape) is the source's to check: it is discarded (:meth:`~HistoryCache.discard`).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tracker_plugin.redact import redact
from tracker_plugin.trackers.atomic import replacing

__all__ = ["HistoryCache", "default_cache_dir"]

_FORMAT = "2"  # bump when the layout of an entry changes: old entries then miss, and go
_PREFIX = f"v{_FORMAT}-"
_KEY_FIELD = "__key__"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tracker_plugin``, else ``~/.cache/tracker_plugin``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracker_plugin"


class HistoryCache:
    """Named arrays stored under a key; ``None`` directory means :func:`default_cache_dir`.

    >>> cache = HistoryCache(tmp_dir)                                   # doctest: +SKIP
    >>> cache.store(("mlflow", uri, run_id, "loss@1000"), {"step": s, "loss": l})  # doctest: +SKIP
    >>> cache.load(("mlflow", uri, run_id, "loss@1000"))["loss"]       # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        root = Path(directory) if directory is not None else default_cache_dir()
        self.directory = root / "histories"
        self._purged = False

    def path(self, key: Sequence[str]) -> Path:
        return self.directory / f"{_PREFIX}{_digest(key)}.npz"

    def load(self, key: Sequence[str]) -> dict[str, np.ndarray] | None:
        """The arrays stored under ``key``, or None (never stored, or unreadable)."""
        try:
            with np.load(self.path(key), allow_pickle=False) as entry:
                arrays = {name: entry[name] for name in entry.files}
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
            return None
        stored_key = arrays.pop(_KEY_FIELD, None)
        # The full key is stored too: a digest collision or a stray file is a miss.
        if stored_key is None or str(stored_key) != _canonical(key):
            return None
        return arrays

    def discard(self, key: Sequence[str]) -> None:
        """Drop the entry under ``key`` (one a source found damaged), if there is one."""
        try:
            self.path(key).unlink()
        except OSError:
            pass

    def store(self, key: Sequence[str], arrays: Mapping[str, np.ndarray]) -> None:
        """Store ``arrays`` under ``key``; a failure to write is not an error (just no cache)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._purge_other_layouts()
            entry: dict[str, Any] = {_KEY_FIELD: np.array(_canonical(key)), **arrays}
            with replacing(self.path(key)) as out:
                np.savez(out, **entry)
        except OSError:
            pass

    def _purge_other_layouts(self) -> None:
        """Delete the entries of other layouts (once per cache): they are never read, and
        those of layout 1 may hold a credential."""
        if self._purged:
            return
        self._purged = True
        for path in self.directory.glob("*.npz"):
            if not path.name.startswith(_PREFIX):
                try:
                    path.unlink()
                except OSError:
                    pass


def _canonical(key: Sequence[str]) -> str:
    return json.dumps([_FORMAT, *(redact(str(part)) for part in key)], separators=(",", ":"))


def _digest(key: Sequence[str]) -> str:
    return hashlib.sha256(_canonical(key).encode()).hexdigest()[:32]
