"""What a W&B run's config says about its batch and its planned learning-rate schedule.

Configs are free-form; these read the names training frameworks commonly use, at the top
level or nested (``trainer.global_batch_size`` or ``{"trainer": {"global_batch_size":
...}}``), and report which key they took each value from. Nothing here imports ``wandb``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConfigLrSchedule", "batch_from_config", "config_value", "lr_schedule_from_config"]


def config_value(config: Mapping[str, Any], name: str) -> Any:
    """``config[name]``, where ``name`` may be dotted into nested dicts; None when absent.

    W&B's ``{"value": ..., "desc": ...}`` wrappers (raw configs, offline runs) are unwrapped.
    """
    if name in config:
        return _unwrap(config[name])
    node: Any = config
    for part in name.split("."):
        node = _unwrap(node)
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return _unwrap(node)


def _unwrap(value: Any) -> Any:
    if isinstance(value, Mapping) and "value" in value and set(value) <= {"value", "desc"}:
        return value["value"]
    return value


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**63 else value


def batch_from_config(config: Mapping[str, Any], names: Sequence[str]) -> tuple[float, str] | None:
    """Tokens per step from the first of ``names`` the config holds as a positive number,
    with the name; None when it holds none of them."""
    for name in names:
        value = _number(config_value(config, name))
        if value is not None and value > 0:
            return float(value), name
    return None


# Common spellings, first match wins; dotted names reach into nested sections.
_PEAK = (
    "lr",
    "learning_rate",
    "max_lr",
    "optimizer.lr",
    "optim.lr",
    "optimizer.learning_rate",
    "optim.learning_rate",
)
_FINAL = (
    "min_lr",
    "lr_min",
    "final_lr",
    "end_lr",
    "eta_min",
    "scheduler.eta_min",
    "scheduler.min_lr",
    "min_learning_rate",
)
_WARMUP = (
    "warmup_steps",
    "lr_warmup_steps",
    "num_warmup_steps",
    "warmup_iters",
    "scheduler.warmup_steps",
    "scheduler.t_warmup",
)
_TOTAL = (
    "max_steps",
    "total_steps",
    "train_steps",
    "num_training_steps",
    "max_iters",
    "lr_decay_iters",
    "scheduler.t_max",
)
_DECAY = ("decay_steps", "cooldown_steps", "lr_decay_steps", "num_decay_steps", "scheduler.decay_steps")
_NAME = (
    "lr_scheduler_type",
    "lr_scheduler",
    "lr_schedule",
    "scheduler",
    "schedule",
    "scheduler.name",
    "decay_type",
)


@dataclass(frozen=True)
class ConfigLrSchedule:
    """The learning-rate schedule a run's config plans, as far as common names tell.

    Every field is None when the config does not say; ``keys`` names the config key each
    given field came from. ``final`` is an absolute lr (``min_lr``), not a ratio.
    ``decay_steps`` is the length of a WSD-style cooldown.
    """

    name: str | None = None
    peak: float | None = None
    final: float | None = None
    warmup_steps: int | None = None
    total_steps: int | None = None
    decay_steps: int | None = None
    keys: dict[str, str] = field(default_factory=dict)


def lr_schedule_from_config(config: Mapping[str, Any]) -> ConfigLrSchedule | None:
    """The planned lr schedule in ``config``; None when the config names none of it."""
    found: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for attr, names, want in (
        ("name", _NAME, "text"),
        ("peak", _PEAK, "positive"),
        ("final", _FINAL, "number"),
        ("warmup_steps", _WARMUP, "count"),
        ("total_steps", _TOTAL, "count"),
        ("decay_steps", _DECAY, "count"),
    ):
        for name in names:
            value = _typed(config_value(config, name), want)
            if value is not None:
                found[attr], keys[attr] = value, name
                break
    if not found:
        return None
    return ConfigLrSchedule(**found, keys=keys)


def _typed(value: Any, want: str) -> Any:
    if want == "text":
        return value if isinstance(value, str) and value else None
    number = _number(value)
    if number is None or number < 0 or (want == "positive" and number == 0):
        return None
    if want == "count":
        return number if isinstance(number, int) else None
    return float(number)
