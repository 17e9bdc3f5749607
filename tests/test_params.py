"""What a run's params say about its batch and planned LR schedule."""

from __future__ import annotations

import pytest

from tracker_plugin import DataError
from tracker_plugin.sources.params import batch_from_params, planned_lr_from_params


def test_planned_lr_reads_the_documented_names():
    planned = planned_lr_from_params(
        {"scheduler": " WSD ", "learning_rate": "0.001", "final_lr_ratio": "0.1", "num_warmup_steps": "2000",
         "total_steps": "24000.0", "cooldown_steps": "4000", "batch_size": "256"}
    )
    assert (planned.shape, planned.peak_lr, planned.final_lr_ratio) == ("wsd", 0.001, 0.1)
    assert (planned.warmup_steps, planned.total_steps, planned.decay_steps) == (2000, 24000, 4000)
    assert planned.final_lr is None and "batch_size" not in planned.params


def test_planned_lr_prefers_exact_names_and_keeps_what_does_not_parse():
    planned = planned_lr_from_params({"optimizer/lr": "1e-3", "lr": "3e-4", "max_steps": "10000ba", "warmup_steps": "-5"})
    assert planned.peak_lr == 3e-4 and planned.params["lr"] == "3e-4"
    assert planned.total_steps is None and planned.params["max_steps"] == "10000ba"
    assert planned.warmup_steps is None


def test_no_schedule_params():
    assert planned_lr_from_params({"seed": 1, "model": "gpt"}) is None


def test_batch_from_params():
    names = ("global_batch_size", "batch_size")
    assert batch_from_params({"batch_size": "32", "global_batch_size": "524288"}, names, run="r") == (
        "global_batch_size", 524288.0,
    )
    assert batch_from_params({"seed": "1"}, names, run="r") is None
    with pytest.raises(DataError, match=r"^r: param 'batch_size' = '-1' is not a positive number"):
        batch_from_params({"batch_size": "-1"}, names, run="r")
