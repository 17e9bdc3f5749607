"""Lines a live forecast says while the run trains: above the trainer's progress bar."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["say_lines"]


def say_lines(lines: Sequence[str]) -> None:
    """Each line above the progress bar (``tqdm.write``, which both trainers' bars use),
    else on stderr."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - both trainers install tqdm
        print(*lines, sep="\n", file=sys.stderr)
        return
    for line in lines:
        tqdm.write(line, file=sys.stderr)
