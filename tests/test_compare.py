"""compare: the table per target, its formats, the overlay plot, and spreadsheet safety."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest

from tracker_plugin.cli import main
from tracker_plugin.report.compare import spreadsheet_safe


@pytest.fixture
def arms(tmp_path, data_dir):
    """Three runs at different batch sizes: fixed 524k, three stages 262k->1M, and 786k."""
    for name in ("parity_fixed.csv", "parity_dynamic.csv"):
        shutil.copy(data_dir / name, tmp_path / name)
    (tmp_path / "olmo.csv").write_text(
        (data_dir / "olmo-ladder-370M-5xC.csv").read_text().replace("val_loss", "train_loss")
    )
    return tmp_path


def _compare(capsys, *args):
    code = main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_is_sorted_by_tokens_with_the_best_run_first(capsys, arms):
    code, out, _ = _compare(capsys, arms, "-t", "4.2", "3.5")
    assert code == 0
    blocks = out.split("\n\n")
    assert blocks[0].startswith("target 4.2") and blocks[1].startswith("target 3.5")
    lines = blocks[0].splitlines()
    assert lines[1].split()[:4] == ["run", "batch", "status", "tokens"]
    assert lines[2].split()[0] == "olmo" and lines[2].rstrip().endswith("best")
    assert "dynamic 262,144->1,048,576" in blocks[0]


def test_json_rows_carry_numbers_and_ratios(capsys, arms):
    code, out, _ = _compare(capsys, arms, "-t", "4.2", "--json")
    groups = json.loads(out)
    rows = groups[0]["rows"]
    tokens = [r["tokens"] for r in rows if r["tokens"] is not None]
    assert len(tokens) >= 2 and tokens == sorted(tokens)
    assert all(r["tokens"] is None for r in rows[len(tokens):])  # runs without an answer go last
    assert rows[0]["vs_best"] == 1.0
    assert rows[1]["vs_best"] == pytest.approx(tokens[1] / tokens[0])
    dynamic = next(r for r in rows if r["run"] == "parity_dynamic")
    assert dynamic["dynamic"] is True and dynamic["batch_first"] == 262144 and dynamic["batch_last"] == 1048576


def test_markdown_and_csv(capsys, arms):
    _, md, _ = _compare(capsys, arms, "-t", "4.2", "--markdown")
    assert md.startswith("### target 4.2") and "| run | batch | status |" in md
    _, text, _ = _compare(capsys, arms, "-t", "4.2", "--csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {r["run"] for r in rows} == {"parity_fixed", "parity_dynamic", "olmo"}
    assert float(rows[0]["tokens"]) > 0


def test_overlay_plot(capsys, arms, tmp_path):
    png = tmp_path / "overlay.png"
    code, _, _ = _compare(capsys, arms, "-t", "4.2", "3.5", "--plot", png)
    assert code == 0 and png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 30_000


def test_a_run_that_fails_is_listed_and_sets_exit_code_1(capsys, arms):
    (arms / "broken.csv").write_text("step,train_loss,global_batch\n0,5,8\n1,four,8\n")  # a loss that is no number
    code, out, err = _compare(capsys, arms, "-t", "4.2")
    assert code == 1
    broken = next(line for line in out.splitlines() if line.startswith("broken"))
    assert "failed" in broken
    assert "Traceback" not in err


@pytest.mark.parametrize("name", ["=cmd|' /C calc'!A0", "+1+1", "-2", "@SUM(A1)", "\t=1", "safe"])
def test_spreadsheet_formulas_are_neutralised(name):
    cell = spreadsheet_safe(name)
    assert cell == name if name == "safe" else cell == "'" + name


def test_csv_output_escapes_formula_like_run_names(capsys, arms):
    shutil.copy(arms / "parity_fixed.csv", arms / "=HYPERLINK(1).csv")
    _, text, _ = _compare(capsys, arms, "-t", "4.2", "--csv")
    names = [r["run"] for r in csv.DictReader(io.StringIO(text))]
    assert "'=HYPERLINK(1)" in names
    assert not any(n.startswith(("=", "+", "-", "@")) for n in names)
