"""What a run's config (W&B) or params (MLflow) say about its batch.

Configs are free-form; these read the names training frameworks commonly use, at the top
level or nested (``trainer.global_batch_size`` or ``{"trainer": {"global_batch_size":
...}}``), and report which key they took each value from. Nothing here imports ``wandb``.
The planned lr schedule is read by :meth:`tracker_plugin.LrSchedule.from_params`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FEW_TOKENS", "batch_from_config", "config_value"]

# A batch read from a config below this many tokens per step is more likely a count of
# sequences (a global batch of 512, a per-device batch of 8) than of tokens.
FEW_TOKENS = 65_536


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
