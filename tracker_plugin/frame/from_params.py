"""A frame completed with what its run's params or config say: the batch and the planned lr."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tracker_plugin.errors import ConfigError, DataError
from tracker_plugin.frame.history import History
from tracker_plugin.plan.params import FEW_TOKENS
from tracker_plugin.plan.schedule import read_planned_lr

__all__ = ["with_config_batch", "with_planned_lr"]


def with_config_batch(history: History, where: str) -> History:
    """``history`` with its batch's source named, and a note when the batch looks like a
    count of sequences: a config key's unit is not written down anywhere."""
    notes = history.notes
    if float(history.batch.min()) < FEW_TOKENS:
        note = (
            f"the batch {float(history.batch.min()):,.0f} from {where} is read as tokens per step; "
            "if it counts sequences, pass batch_size with the tokens per step (the token axis "
            "and the EMA window depend on it)"
        )
        notes += (note,)
    return replace(history, batch_source=where, notes=notes)


def with_planned_lr(history: History, params: Mapping[str, Any]) -> History:
    """``history`` with the lr schedule its run's params (MLflow) or config (W&B) plan.

    Read by :meth:`~tracker_plugin.plan.schedule.LrSchedule.from_params`, which lists the
    names it knows, as the trainer the frame was read as (``read_as`` "framework") plans it;
    no plan when the params name no schedule. What the reading noticed (values ignored,
    values that contradict each other) joins the notes, with a plan or without. A plan
    given on the command line still takes precedence.

    Raises
    ------
    DataError
        The params hold a schedule spec that does not parse.
    """
    trainer = dict(history.read_as).get("framework")
    try:
        plan, notes = read_planned_lr(params, trainer=trainer)
    except ConfigError as exc:
        raise DataError(f"the planned lr schedule in its params does not parse ({exc})", run=history.run) from None
    if plan is None:
        return replace(history, notes=history.notes + notes) if notes else history
    return replace(history, lr_plan=plan, notes=history.notes + notes)
