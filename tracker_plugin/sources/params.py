"""What a run's logged params (MLflow params, W&B config) say about its batch and LR schedule.

Trackers keep a run's hyperparameters as a flat map of names to values (MLflow params are
strings). Two things the analysis can use are read from there:

- **the batch** (tokens per step), from the first of ``SourceOptions.batch_params``
  that the run logged (``global_batch_size``, ``batch_size_in_tokens``,
  ``tokens_per_step``, ``batch_size`` by default);
- **the planned LR schedule**, as a :class:`PlannedLr`, from these names (the first one
  present wins, matched case-insensitively; a dotted or slashed prefix such as
  ``optimizer.lr`` or ``scheduler/warmup_steps`` is ignored):

  ==============  ===============================================================
  field           params read
  ==============  ===============================================================
  shape           ``lr_schedule``, ``lr_scheduler``, ``lr_scheduler_type``,
                  ``scheduler``, ``schedule``, ``decay_type``
  peak_lr         ``max_lr``, ``peak_lr``, ``lr``, ``learning_rate``
  final_lr        ``min_lr``, ``final_lr``, ``end_lr``, ``lr_min``
  final_lr_ratio  ``min_lr_ratio``, ``final_lr_ratio``, ``alpha_f``
  warmup_steps    ``warmup_steps``, ``lr_warmup_steps``, ``num_warmup_steps``,
                  ``t_warmup``
  total_steps     ``max_steps``, ``total_steps``, ``num_training_steps``,
                  ``train_steps``, ``max_duration``
  decay_steps     ``decay_steps``, ``cooldown_steps``, ``lr_decay_steps``,
                  ``t_decay``
  ==============  ===============================================================

  Only what was logged is reported, as logged: no schedule is inferred or modelled here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import DataError

__all__ = ["LR_SCHEDULE_PARAMS", "PlannedLr", "batch_from_params", "planned_lr_from_params"]

LR_SCHEDULE_PARAMS: dict[str, tuple[str, ...]] = {
    "shape": ("lr_schedule", "lr_scheduler", "lr_scheduler_type", "scheduler", "schedule", "decay_type"),
    "peak_lr": ("max_lr", "peak_lr", "lr", "learning_rate"),
    "final_lr": ("min_lr", "final_lr", "end_lr", "lr_min"),
    "final_lr_ratio": ("min_lr_ratio", "final_lr_ratio", "alpha_f"),
    "warmup_steps": ("warmup_steps", "lr_warmup_steps", "num_warmup_steps", "t_warmup"),
    "total_steps": ("max_steps", "total_steps", "num_training_steps", "train_steps", "max_duration"),
    "decay_steps": ("decay_steps", "cooldown_steps", "lr_decay_steps", "t_decay"),
}
_NUMBERS = ("peak_lr", "final_lr", "final_lr_ratio")
_STEPS = ("warmup_steps", "total_steps", "decay_steps")


@dataclass(frozen=True)
class PlannedLr:
    """The LR schedule a run's params describe; each field is None where nothing was logged.

    ``params`` holds the params that were read, by their logged names and as logged, so
    a report can say where each value came from. Values that do not parse (``"1e3ba"``,
    ``"auto"``) stay in ``params`` and leave their field None.
    """

    shape: str | None = None
    peak_lr: float | None = None
    final_lr: float | None = None
    final_lr_ratio: float | None = None
    warmup_steps: int | None = None
    total_steps: int | None = None
    decay_steps: int | None = None
    params: dict[str, str] = field(default_factory=dict)


def planned_lr_from_params(params: Mapping[str, Any]) -> PlannedLr | None:
    """The :class:`PlannedLr` in ``params``, or None when no schedule param was logged."""
    by_name = _by_short_name(params)
    found: dict[str, Any] = {}
    read: dict[str, str] = {}
    for name, candidates in LR_SCHEDULE_PARAMS.items():
        for candidate in candidates:
            if candidate in by_name:
                logged_name, value = by_name[candidate]
                read[logged_name] = str(value)
                found[name] = _parse(name, value)
                break
    if not read:
        return None
    return PlannedLr(**found, params=read)


def batch_from_params(
    params: Mapping[str, Any], names: Sequence[str], *, run: str
) -> tuple[str, float] | None:
    """The first of ``names`` that ``params`` holds, with its value as tokens per step.

    Raises
    ------
    DataError
        The param is there but is not a positive number.
    """
    for name in names:
        if name in params:
            value = _number(params[name])
            if value is None or value <= 0:
                raise DataError(
                    f"param '{name}' = {str(params[name])[:40]!r} is not a positive number of tokens per step "
                    "(name another with --batch-param, or pass --batch-size)",
                    run=run,
                )
            return name, value
    return None


def _by_short_name(params: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """``{'lr': ('optimizer.lr', '3e-4'), ...}``: names lower-cased, prefixes dropped.

    An exact (unprefixed) name wins over a prefixed one.
    """
    out: dict[str, tuple[str, Any]] = {}
    for name in sorted(params, key=lambda n: (n.count(".") + n.count("/"), n)):
        short = name.replace("/", ".").rsplit(".", 1)[-1].lower()
        out.setdefault(short, (name, params[name]))
    return out


def _parse(name: str, value: Any) -> Any:
    if name == "shape":
        return str(value).strip().lower() or None
    number = _number(value)
    if number is None:
        return None
    if name in _STEPS:
        return int(number) if number >= 0 and number == int(number) else None
    return number


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
