"""A run resumed offline, its attempts joined into one log.

A resumed run (``WANDB_RUN_ID`` and ``WANDB_RESUME`` set again after a preemption) is
written into a second ``offline-run-*-<id>`` directory with the same run id, its
``_step`` counted from 0 again. The attempts are joined in the order they started, each
attempt's ``_step`` numbered on from the last, and a note says how many were joined and
which steps were redone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tracker_plugin.frame.history import History
from tracker_plugin.frame.resume import late_start
from tracker_plugin.trackers.wandb_data import (
    ROW_KEY,
    KeyColumn,
)
from tracker_plugin.trackers.wandb_offline_read import OfflineRun

__all__ = []


def _attempts_of(runs: list[OfflineRun]) -> list[list[OfflineRun]]:
    """The runs grouped by run id (a run resumed offline writes a directory per attempt),
    each group in the order its attempts started; groups in the order they were found."""
    groups: dict[str, list[OfflineRun]] = {}
    for run in runs:
        groups.setdefault(run.run_id or str(run.path), []).append(run)
    return [sorted(group, key=_started) for group in groups.values()]


def _started(run: OfflineRun) -> tuple[float, str]:
    # The run record's start time, then the directory's name (offline-run-YYYYMMDD_HHMMSS-id).
    return (run.start_time if run.start_time is not None else float("inf"), run.path.parent.name)


def _offsets(attempts: list[OfflineRun]) -> list[int]:
    """What each attempt's ``_step`` is moved by so the joined rows keep their order: an
    attempt that counts ``_step`` from 0 again goes on after the one before it."""
    offsets, top = [], -1
    for run in attempts:
        first = min((steps[0] for steps, _ in run.data.values() if steps), default=0)
        shift = top + 1 - first if first <= top else 0
        offsets.append(shift)
        last = max((steps[-1] for steps, _ in run.data.values() if steps), default=run.last_step or 0)
        top = max(top, last + shift)
    return offsets


def _joined_last_step(attempts: list[OfflineRun]) -> int:
    return _offsets(attempts)[-1] + (attempts[-1].last_step or 0)


def _joined_data(attempts: list[OfflineRun], keys: list[str]) -> dict[str, KeyColumn]:
    """Each key's rows of every attempt, in order, ``_step`` numbered on (see :func:`_offsets`)."""
    data: dict[str, tuple[list[int], list[Any]]] = {}
    for run, shift in zip(attempts, _offsets(attempts)):
        for key in keys:
            if key in run.data:
                steps, values = run.data[key]
                column = data.setdefault(key, ([], []))
                column[0].extend(step + shift for step in steps)
                column[1].extend(values)
    return dict(data)


def _joined_config(attempts: list[OfflineRun]) -> dict[str, Any]:
    """The config as the last attempt left it: each attempt's keys over the earlier ones'."""
    config: dict[str, Any] = {}
    for run in attempts:
        config.update(run.config)
    return config


def _join_note(attempts: list[OfflineRun], step_key: str) -> str:
    """Which attempts were joined, and the steps each resumed attempt logged again."""
    names = ", ".join(run.path.parent.name for run in attempts)
    note = f"joined {len(attempts)} attempts of W&B run {attempts[-1].run_id}, resumed offline ({names})"
    redone = [_redone(attempts[:k], run, step_key) for k, run in enumerate(attempts) if k]
    said = [f"attempt {k} {text}" for k, text in enumerate(redone, 2) if text]
    return note + (": " + "; ".join(said) if said else "")


def _redone(before: list[OfflineRun], run: OfflineRun, step_key: str) -> str | None:
    """'resumed at step S, and its rows replaced steps A-B (N rows) ...', or None when the
    attempt logged no step the earlier ones had reached."""
    if step_key == ROW_KEY or step_key not in run.data or not run.data[step_key][1]:
        return None
    first = run.data[step_key][1][0]
    earlier = [v for r in before if step_key in r.data for v in r.data[step_key][1]]
    again = sorted(v for v in earlier if isinstance(v, (int, float)) and v >= first)
    if not again:
        return None
    span = f"{again[0]:g}" if again[0] == again[-1] else f"{again[0]:g}-{again[-1]:g}"
    rows = f"{len(again)} row{'s' if len(again) > 1 else ''}"
    return f"resumed at {step_key} {first:g}: its rows replaced those of steps {span} ({rows}) the attempts before had logged"


def _noting_a_resume(history: History, run: OfflineRun) -> History:
    """The history with a note when it starts far from step 0: one attempt of a resumed
    run, whose earlier attempts are in other offline directories."""
    late = late_start(history.step)
    if late is None:
        return history
    marked = " (its run record is marked resume: WANDB_RESUME was set)" if run.resume else ""
    note = (
        f"the history starts at step {history.step[0]:,}, {late:.0f} logging intervals after step 0{marked}: "
        f"it resumes an earlier attempt whose rows are not in {run.path.parent.name}; read the folder "
        f"holding every offline-run-*-{run.run_id or '<id>'} directory (the job's wandb/ folder) for the whole run"
    )
    return replace(history, notes=(*history.notes, note))
