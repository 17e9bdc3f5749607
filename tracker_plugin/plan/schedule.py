"""Planned schedules beyond the logged range.

- :class:`BatchSchedule`: how the batch changes after the log ends.
- :class:`LrSchedule`: the planned learning rate, from a ``step,lr`` table (a file), a spec
  (``cosine:warmup=2000,total=50000,final=0.1``), a run's hyperparameters
  (:meth:`LrSchedule.from_params`, for tracker adapters), or inferred from the logged lr
  (:func:`infer_lr_schedule`).

The lr plan and its reading live in :mod:`.lr_schedule`, its inference from the logged lr
in :mod:`.lr_inference`; this module is their public home.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tracker_plugin.errors import ConfigError
from tracker_plugin.plan.lr_inference import PLAN_DRAWS, Plan, infer_lr_schedule, plausible_schedules
from tracker_plugin.plan.lr_schedule import STEPS_ONLY, LrSchedule, read_planned_lr

__all__ = ["BatchSchedule", "LrSchedule", "PLAN_DRAWS", "Plan", "STEPS_ONLY", "infer_lr_schedule", "plausible_schedules", "read_planned_lr"]


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
                    f"batch_schedule takes TOKENS:BATCH pairs such as 0:589824, got {item!r}"
                ) from None
            if not (math.isfinite(start) and math.isfinite(batch)) or batch <= 0 or start < 0:
                raise ConfigError(f"batch_schedule pair {item!r} needs tokens >= 0 and a batch > 0")
            stages.append((start, batch))
        if not stages:
            raise ConfigError("batch_schedule needs at least one TOKENS:BATCH pair")
        return cls(tuple(sorted(stages)))

    def __str__(self) -> str:
        return " ".join(f"{start:.6g}:{batch:.0f}" for start, batch in self.stages)
