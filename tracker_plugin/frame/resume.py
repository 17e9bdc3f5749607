"""Whether a history starts far from step 0: a resumed attempt's log, or a piece of a run.

A trainer's first logged step is within a logging interval or so of step 0 (HF logs at
``logging_steps``, Lightning at ``log_every_n_steps - 1``, torchtitan at 1). A log whose
first row is many intervals in holds only the end of a run: a resumed attempt written
into a directory of its own (W&B offline), or an export of part of a log. What the run
did before its first row, a crossing among it, is not in it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LATE_INTERVALS", "late_start"]

# A first row more logging intervals than this after step 0 starts late.
LATE_INTERVALS = 3.0
# The logging interval is the median of the first gaps, so a gap later on does not count.
_FIRST_GAPS = 16


def late_start(step: np.ndarray) -> float | None:
    """How many logging intervals the first row is after step 0, when it is more than
    :data:`LATE_INTERVALS` of them; None for a log that starts near 0 (or has too few rows
    to tell its interval)."""
    step = np.asarray(step, float)
    if len(step) < 3 or step[0] <= 0:
        return None
    interval = float(np.median(np.diff(step[: _FIRST_GAPS + 1])))
    if interval <= 0:
        return None
    intervals = float(step[0]) / interval
    return intervals if intervals > LATE_INTERVALS else None
