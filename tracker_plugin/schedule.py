"""Planned schedules beyond the logged range: how tokens map to steps after the log ends."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError
from .history import History

__all__ = ["BatchSchedule", "tokens_to_step"]


@dataclass(frozen=True)
class BatchSchedule:
    """A dynamic-batch run's plan: from ``start_tokens`` on, steps take ``batch`` tokens."""

    stages: tuple[tuple[float, float], ...]

    @classmethod
    def parse(cls, pairs: Sequence[str] | str) -> BatchSchedule:
        """Parse ``TOKENS:BATCH`` pairs such as ``0:589824 2e9:786432``.

        Raises
        ------
        ConfigError
            A pair is not two numbers, or a batch is not positive.
        """
        items = pairs.split() if isinstance(pairs, str) else list(pairs)
        stages = []
        for item in items:
            try:
                start, batch = (float(part) for part in item.split(":"))
            except ValueError:
                raise ConfigError(
                    f"--batch-schedule takes TOKENS:BATCH pairs such as 0:589824, got {item!r}"
                ) from None
            if not (math.isfinite(start) and math.isfinite(batch)) or batch <= 0 or start < 0:
                raise ConfigError(f"--batch-schedule: {item!r} needs tokens >= 0 and a batch > 0")
            stages.append((start, batch))
        if not stages:
            raise ConfigError("--batch-schedule needs at least one TOKENS:BATCH pair")
        return cls(tuple(sorted(stages)))

    def __str__(self) -> str:
        return " ".join(f"{start:.6g}:{batch:.0f}" for start, batch in self.stages)


def tokens_to_step(tokens: float, history: History, schedule: BatchSchedule | None = None) -> float:
    """The step at which ``tokens`` tokens have been consumed.

    Inside the logged range it is interpolated from the log. Past it, steps are counted
    on from the last logged row at its batch, or at each later stage's batch once the
    schedule's stage starts (a trainer may round a stage's batch to a multiple of its
    micro-batch, so steps there are approximate).
    """
    if tokens <= history.tokens[-1]:
        return float(np.interp(tokens, history.tokens, history.step))
    step, consumed, batch = float(history.step[-1]), float(history.tokens[-1]), float(history.batch[-1])
    for start, next_batch in schedule.stages if schedule else ():
        if start <= consumed:
            continue
        steps_at_batch = math.ceil((start - consumed) / batch)
        if tokens <= consumed + steps_at_batch * batch:
            break
        step, consumed, batch = step + steps_at_batch, consumed + steps_at_batch * batch, next_batch
    return step + (tokens - consumed) / batch
