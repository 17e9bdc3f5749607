"""A run's config (W&B) or params (MLflow): flattened one way, and what they say about its batch.

Configs are free-form. :func:`flat_params` turns any of them into one flat mapping of
dotted names (``{"trainer": {"global_batch_size": ...}}`` becomes
``trainer.global_batch_size``), which every tracker adapter and
:meth:`tracker_plugin.LrSchedule.from_params` read. :func:`batch_from_config` reads the
names training frameworks commonly use and reports which key it took the value from.
Nothing here imports ``wandb`` or ``mlflow``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["FEW_TOKENS", "as_float", "batch_from_config", "config_value", "flat_params", "param_paths", "planned_steps"]

# A batch read from a config below this many tokens per step is more likely a count of
# sequences (a global batch of 512, a per-device batch of 8) than of tokens.
FEW_TOKENS = 65_536


# W&B's own bookkeeping in a run's config, not a setting of the run.
_WANDB_SECTION = "_wandb"


def param_paths(config: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf of a nested config as (path of keys, value), in the config's order.

    W&B's ``{"value": ..., "desc": ...}`` wrappers (raw configs, offline runs) are
    unwrapped and its ``_wandb`` section is left out. An empty section has no leaves.
    """
    for key, value in config.items():
        if key == _WANDB_SECTION:
            continue
        yield from _paths((str(key),), value)


def _paths(path: tuple[str, ...], value: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    value = _unwrap(value)
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _paths((*path, str(key)), inner)
    else:
        yield path, value


def flat_params(config: Mapping[str, Any], *, text_numbers: bool = False) -> dict[str, Any]:
    """A run's config or params as one flat mapping: nested keys joined with ``.``.

    See :func:`param_paths` for what is unwrapped and left out; the first value for a
    name wins. With ``text_numbers`` (MLflow keeps every param as text), text that spells
    a number is read as the number: ``"512"`` as 512, ``"3e-4"`` as 0.0003.
    """
    flat: dict[str, Any] = {}
    for path, value in param_paths(config):
        flat.setdefault(".".join(path), _from_text(value) if text_numbers else value)
    return flat


def _from_text(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


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


def as_float(value: Any) -> float | None:
    """A param's value as a finite number (a number or numeric text); None for anything
    else, a bool included (True is no count of anything)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def planned_steps(value: Any) -> float | None:
    """A planned length in optimizer steps: a positive number, or Composer's batches
    ("4800ba"). Durations in tokens ("2e12T", "1tok") or epochs ("1ep") are not steps."""
    if isinstance(value, str) and value.strip().endswith("ba"):
        value = value.strip()[:-2]
    number = as_float(value)
    # HF's max_steps is -1 when the run is planned in epochs (num_train_epochs): no step count.
    return number if number is not None and number > 0 else None
