"""A W&B history value that is not a number never crashes a read.

``run.log`` takes anything: ``None``, a bool, a string, a list, a histogram. Such a value in
the loss at one step is read as a blank cell there, and the read's notes say so; a string
that spells a number is taken, with a note. Offline runs are written by the real SDK, online
ones served by the test server to the real client; ``annotate`` over a project holding them
annotates every run.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.doubles.wandb_offline_runs import log_offline_runs
from tests.test_wandb_online import wandb_rows
from tracker_plugin.cli import main
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import ReadOptions, SourceOptions, open_source
from tracker_plugin.trackers.wandb_data import numbers_of

ODD_STEP = 400
STEPS = range(0, 1000, 20)  # 50 rows
# name -> (the value logged at ODD_STEP, rows read, what the note says)
ODD = {
    "none": (None, 49, "(None at _step 400) read as blank"),
    "text": ("abc", 49, "(text 'abc' at _step 400) read as blank"),
    "bool": (True, 49, "(true at _step 400) read as blank"),
    "list": ([1, 2], 49, "(a list at _step 400) read as blank"),
    "number-as-text": ("3.1", 50, "1 number logged as text ('3.1' at _step 400) read as a number"),
}
HISTOGRAM = {"__histogram__": [1.0, 2.0, 2.5, 3.0]}  # logged as a wandb.Histogram offline


def rows_with(value) -> list[dict]:
    rows = [{"step": s, "train/loss": 4.0 * (1 + s) ** -0.1, "tokens": s * 1000} for s in STEPS]
    rows[STEPS.index(ODD_STEP)]["train/loss"] = value
    return rows


def read(spec: str):
    source = open_source(spec, SourceOptions(ReadOptions()))
    (run,) = source.runs()
    return source.read(run)


@pytest.fixture(scope="module")
def offline_runs(tmp_path_factory):
    home = tmp_path_factory.mktemp("odd-values")
    specs = [{"name": name, "rows": rows_with(value)} for name, (value, _, _) in ODD.items()]
    specs.append({"name": "histogram", "rows": rows_with(HISTOGRAM)})
    return home, log_offline_runs(home, specs)


@pytest.mark.parametrize("name", [*ODD, "histogram"])
def test_offline_an_odd_value_at_one_step_is_a_blank_cell_with_a_note(offline_runs, name):
    _, dirs = offline_runs
    history = read(f"wandb-offline:{dirs[name]}")
    rows, said = (49, "(a histogram object at _step 400) read as blank") if name == "histogram" else ODD[name][1:]
    assert len(history) == rows
    assert any(said in note and "key 'train/loss'" in note for note in history.notes), history.notes
    assert (ODD_STEP in history.step) == (rows == 50)
    if name == "number-as-text":
        assert history.loss[list(history.step).index(ODD_STEP)] == pytest.approx(3.1, abs=1e-12)


def test_offline_annotate_over_a_folder_of_such_runs_annotates_every_one(offline_runs, capsys):
    home, dirs = offline_runs
    capsys.readouterr()
    code = main(["annotate", f"wandb-offline:{home / 'wandb'}", "-t", "3.3", "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    rows = json.loads(out)
    assert code == 0 and len({row["ref"] for row in rows}) == len(dirs)
    assert {row["action"] for row in rows} == {"annotated"}


@pytest.mark.parametrize(
    "value",
    [None, "abc", "3.1", True, [1, 2], {"_type": "histogram", "values": [1, 2], "bins": [0, 1, 2]}],
    ids=["none", "text", "number-as-text", "bool", "list", "histogram"],
)
def test_online_an_odd_value_at_one_step_reads_with_a_note(wandb_server, value):
    rows = wandb_rows(synthetic_run(300, seed=4))
    rows[100]["train_loss"] = value
    wandb_server.add_run("ent", "proj", "odd", history=rows)
    history = read("wandb:ent/proj/odd")
    taken = value == "3.1"
    assert len(history) == (300 if taken else 299)
    assert any("key 'train_loss'" in note and "at _step 100" in note for note in history.notes), history.notes


@pytest.mark.slow
def test_online_annotate_over_a_project_with_odd_values_annotates_the_others_too(wandb_server, capsys):
    for k, value in enumerate([None, "abc", [1], {"_type": "histogram"}, 3.5]):
        rows = wandb_rows(synthetic_run(300, seed=k))
        rows[50 + k]["train_loss"] = value
        wandb_server.add_run("ent", "proj", f"r{k}", history=rows)
    capsys.readouterr()
    code = main(["annotate", "wandb:ent/proj", "-t", "6", "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code == 0 and [row["action"] for row in json.loads(out)] == ["annotated"] * 5


def test_numbers_of_takes_numbers_and_w_and_b_non_finite_spellings():
    column = numbers_of("loss", [0, 1, 2, 3, 4], [1, 2.5, "NaN", "Infinity", None])
    assert list(column.history.step) == [0, 1, 2, 3]
    values = list(column.history.value)
    assert values[:2] == [1.0, 2.5] and math.isnan(values[2]) and values[3] == math.inf
    assert column.notes == ("key 'loss': 1 value that is not a number (None at _step 4) read as blank",)
    many = numbers_of("loss", [0, 1, 2], [None, False, "1e-3"])
    assert many.notes == (
        "key 'loss': 2 values that are not a number (None at _step 0, ...) read as blank",
        "key 'loss': 1 number logged as text ('1e-3' at _step 2) read as a number",
    )
