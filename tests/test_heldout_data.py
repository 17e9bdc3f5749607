"""The speedrun plan table and the held-out runs the calibration benchmark scores with it.

Every row of ``benchmarks/data/speedrun_plans.csv`` must parse into the schedule it
describes, and every held-out run must load and find its plan row, whose planned length is
the run's own: a row mistyped or a plan given to the wrong run would score the held-out
runs with a plan they did not have, with no error.
"""

from __future__ import annotations

import csv
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TABLE = BENCHMARKS / "data" / "speedrun_plans.csv"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """``bench_calibration``, imported as the script runs (its folder on the path)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))
        yield importlib.import_module("bench_calibration")


def _rows() -> list[dict[str, str]]:
    with TABLE.open(newline="") as f:
        return list(csv.DictReader(f))


def test_every_plan_row_parses_into_the_schedule_it_describes(bench: ModuleType) -> None:
    rows = _rows()
    plans = bench.speedrun_plans()
    names = [row["run"] for row in rows]
    assert len(set(names)) == len(names), "a run has two plan rows"
    assert set(plans) == set(names)
    for row in rows:
        total, warmup, warmdown = int(row["num_iterations"]), int(row["warmup_iters"]), int(row["warmdown_iters"])
        final = float(row["final_lr_fraction"])
        assert 0 <= warmup < total - warmdown < total, row["run"]
        assert re.fullmatch(r"[0-9a-f]{40}", row["commit"]), row["run"]
        assert row["source_path"].startswith("records/"), row["run"]
        plan = plans[row["run"]]
        assert plan.total_steps == pytest.approx(total)
        # Peak from the warmup's end to the decay's start, then linear down to the final fraction.
        start = total - warmdown
        at = plan.at(np.array([warmup, start, start + warmdown / 2, total], float)) / plan.peak
        np.testing.assert_allclose(at, [1.0, 1.0, (1.0 + final) / 2, final], atol=1e-9, err_msg=row["run"])


def test_every_held_out_run_loads_and_gets_its_own_plan(bench: ModuleType) -> None:
    files = bench.csv_logs(*bench.HELD_OUT)
    plans = bench.speedrun_plans()
    assert len(files) >= 13
    members = bench.members(files, plans)
    for path, member in zip(files, members):
        name = Path(path).stem
        assert name in plans, f"{name}: no row in speedrun_plans.csv"
        # The runs log no lr: the plan row is the one the plan-given forecast gets.
        assert member.history.lr is None and member.given is plans[name]
        assert member.history.last_step == pytest.approx(plans[name].total_steps), name
        assert len(member.history) >= 10 and np.all(np.isfinite(member.history.loss)), name


def test_the_held_out_folders_are_scored_together_by_default(bench: ModuleType) -> None:
    folders = {Path(p).parent.name for p in bench.csv_logs(*bench.HELD_OUT)}
    assert folders == {"heldout", "heldout-time"}
