"""Why a run's annotation is written again, in the words of what changed.

:meth:`~tracker_plugin.trackers.base.Previous.why_redone` says which check failed (the
settings, the history, the run's name ...); this says what changed, from what the last
annotation stored: ``redone: loss key val_loss → train_loss; targets +3.1``,
``redone: the history moved on, step 14,000 → 15,000``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from tracker_plugin.trackers.base import Previous

__all__ = ["why_redone"]

_OTHER_SETTINGS = "redone: the last annotation was made with other settings"
_MOVED_ON = "redone: the history moved on"
# Settings people change, in the words they know them by; any other is named as it is.
_NAMES = {"ema_token_window": "ema window", "model": "model", "interval": "interval", "clock": "clock",
          "fit_start_step": "fit start step", "batch_size": "batch size", "series": "series",
          "version": "version", "calibration": "calibration", "lr_schedule": "lr schedule"}  # fmt: skip


def why_redone(previous: Previous, settings: Mapping[str, Any], fingerprint: str, progress: str | None,
               plot: str, loss_key: str) -> str | None:
    """Why an annotation with these ``settings`` (their hash ``fingerprint``), from a history
    at ``progress``, read on ``loss_key``, replaces ``previous``; None where it does not."""
    why = previous.why_redone(fingerprint, progress, plot)
    if why is None:
        return None
    if why == _OTHER_SETTINGS:
        changes = _setting_changes(previous, settings, loss_key)
        return f"redone: {'; '.join(changes)}" if changes else "redone: settings an earlier version did not record"
    if why.startswith(_MOVED_ON):
        return f"{_MOVED_ON}, {_where(previous.progress)} → {_where(progress)}"
    return why


def _setting_changes(previous: Previous, settings: Mapping[str, Any], loss_key: str) -> list[str]:
    old = previous.settings if isinstance(previous.settings, Mapping) else {}
    changes = []
    if previous.loss_key is not None and previous.loss_key != loss_key:
        changes.append(f"loss key {previous.loss_key} → {loss_key}")
    before, after = _targets(old.get("targets")), _targets(settings.get("targets"))
    moved = [f"+{t:g}" for t in sorted(after - before)] + [f"−{t:g}" for t in sorted(before - after)]
    if moved:
        changes.append("targets " + " ".join(moved))
    for name in sorted(set(old) & set(settings)):  # a setting one side has no word of is not compared
        if name in ("targets", "columns") or _same(old.get(name), settings.get(name)):
            continue
        label = _NAMES.get(name, name.replace("_", " "))
        was, now = old.get(name), settings.get(name)
        changes.append(f"{label} {_short(was)} → {_short(now)}" if _plain(was) and _plain(now) else label)
    if "columns" in old and not _same(old["columns"], settings.get("columns")) and not (
        changes and changes[0].startswith("loss key")
    ):
        changes.append("columns")
    return changes


def _targets(value: Any) -> set[float]:
    try:
        return {float(t) for t in value or ()}
    except (TypeError, ValueError):
        return set()


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=list) == json.dumps(b, sort_keys=True, default=list)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _short(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _where(progress: str | None) -> str:
    """``step 14000 latest 3f2a`` -> ``step 14,000``: the progress a person reads."""
    found = re.match(r"step (\d+)", progress or "")
    return f"step {int(found.group(1)):,}" if found else (progress or "unknown")
