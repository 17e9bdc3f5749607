"""What ``annotate --dry-run`` says of a run: the action, why, and each key that would change.

Read from what the run holds now (:meth:`~tracker_plugin.trackers.base.Source.held`), so
it shows what a write would change, and only that::

    would redo: targets +3.1 −3.6
      to: metrics at step 0, tags and artifacts loss_eta.json, loss_eta.png of mlflow:3f2a...
      when_3p1         (none) → '✗ best 3.296 · not_reached · the run ended at 5.00B tok, step 9,535'
      when_3p6         '✓ 1.62B tok · reached · step 3,097' → stale
      when_3p6_Btok    1.623 → cleared
      loss_eta         settings 6b1c2d3e → bc70254e; progress step 9,535 → step 9,535
      stale: target 3.6 (its numbers cleared, its text set to stale)
      4 keys unchanged

The provenance tag is said by what changed in it, not as its JSON text; ``--json`` gives
every key's old and new value whole (:func:`planned_changes`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from tracker_plugin.keys import MARKER, PROVENANCE, STALE, is_series
from tracker_plugin.trackers.base import Annotation, RunInfo, Source

__all__ = ["planned_changes", "planned_lines"]

_WIDTH = 16  # the key column


def planned_changes(source: Source, run: RunInfo, annotation: Annotation) -> tuple[dict[str, dict[str, Any]], int]:
    """Each key the write would change, ``{key: {"old": ..., "new": ...}}`` (None: no value),
    and how many keys it would write as they are."""
    held = source.held(run)
    full = annotation.clearing(held)
    written = {**full.metrics, **full.labels, MARKER: full.marker()}
    changes = {
        key: {"old": _plain(held.get(key)), "new": _plain(value)}
        for key, value in sorted(written.items())
        if not is_series(key) and not _same(held.get(key), value)
    }
    return changes, len(written) - len(changes)


def planned_lines(action: str, where: list[str], changes: dict[str, dict[str, Any]], unchanged: int) -> list[str]:
    """The dry run's text for one run: ``would <action>``, where it writes, each key's change."""
    lines = [f"would {action}", *(f"  {line}" for line in where)]
    stale = []
    for key, change in changes.items():
        if key == MARKER:
            continue
        old, new = change["old"], change["new"]
        if key == PROVENANCE:
            lines.append(f"  {key:<{_WIDTH}} {_provenance_change(old, new)}")
            continue
        if new == STALE:
            stale.append(key)
        lines.append(f"  {key:<{_WIDTH}} {_show(old)} → {'cleared' if new is None and old is not None else _show(new)}")
    if stale:
        targets = ", ".join(key.removeprefix("when_").replace("p", ".").replace("m", "-", 1) for key in stale)
        many = len(stale) > 1
        lines.append(f"  stale: target{'s' if many else ''} {targets} "
                     f"({'their' if many else 'its'} numbers cleared, {'their texts' if many else 'its text'} set to {STALE})")
    if unchanged:
        lines.append(f"  {unchanged} key{'s' if unchanged != 1 else ''} unchanged")
    return lines


def _provenance_change(old: Any, new: Any) -> str:
    """What changed in the provenance tag: its settings' hash and the history's progress."""
    was, now = _fields(old), _fields(new)
    if not was:
        return f"written: settings {now.get('settings_hash')}, progress {now.get('progress')}"
    parts = []
    for name, label in (("settings_hash", "settings"), ("progress", "progress"), ("report_sha256", "report")):
        if was.get(name) != now.get(name):
            parts.append(f"{label} {was.get(name)} → {now.get(name)}")
    return "; ".join(parts) or "the same settings and progress, other details"


def _fields(value: Any) -> dict[str, Any]:
    try:
        found = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _same(held: Any, new: Any) -> bool:
    if _missing(held) and _missing(new):
        return True
    if isinstance(held, (int, float)) and isinstance(new, (int, float)) and not isinstance(new, bool):
        return float(held) == float(new)
    return held == new


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value: Any) -> Any:
    return None if _missing(value) else value


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() and abs(value) >= 1000 else f"{value:.10g}"
    return repr(value)
