"""Tables: one way to show an interval and a missing value in every report and table,
columns that line up by display width, a watch's final table with numbers, and failures
named on stderr with exit code 1 (issue 33)."""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
from wcwidth import wcswidth

import tracker_plugin as tp
from tracker_plugin.cli import main
from tracker_plugin.core.compare import ComparisonRow
from tracker_plugin.core.status import Status
from tracker_plugin.report.compare import render_markdown, render_text
from tracker_plugin.report.render import format_tokens, to_text
from tracker_plugin.report.runs import RunRow, held_rows, runs_table
from tracker_plugin.report.tables import (
    ASCII,
    MISSING,
    UNICODE,
    display_width,
    glyphs,
    glyphs_for,
    interval,
    text_table,
    using_glyphs,
)

OPEN = (99.19e9, math.inf)  # a forecast interval with no upper bound
# A status with a place on the token axis that is not a crossing in the log: a forecast,
# whatever the vocabulary calls it.
FORECAST = next(s for s in Status if s.located and s is not Status.REACHED)


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# -- one formatter -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("chosen", "pair", "shown"),
    [
        (UNICODE, OPEN, "99.19B\u2013\u221e"),
        (ASCII, OPEN, "99.19B-inf"),
        (UNICODE, (4.92e9, 6.1e9), "4.92B\u20136.10B"),
        (ASCII, (4.92e9, 6.1e9), "4.92B-6.10B"),
        (UNICODE, (99.19e9, None), "99.19B\u2013\u221e"),  # the JSON's null end is an open one
        (UNICODE, None, MISSING),
        (ASCII, (None, None), MISSING),
    ],
)
def test_an_interval_reads_one_way(chosen, pair, shown):
    with using_glyphs(chosen):
        assert interval(pair, format_tokens) == shown


@pytest.mark.parametrize(
    ("encoding", "chosen"),
    [("utf-8", UNICODE), ("UTF-8", UNICODE), ("utf-16", UNICODE), (None, UNICODE),
     ("latin-1", ASCII), ("cp1252", ASCII), ("ascii", ASCII), ("no-such-codec", ASCII)],
)  # fmt: skip
def test_glyphs_are_those_the_output_can_write(encoding, chosen):
    assert glyphs_for(encoding) == chosen


def test_glyphs_follow_stdout_unless_chosen(monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="latin-1"))
    assert glyphs() == ASCII
    with using_glyphs(UNICODE):
        assert glyphs() == UNICODE
    assert glyphs() == ASCII


def _analysis_with_an_open_interval(data_dir):
    analysis = tp.analyze(tp.load_csv(data_dir / "parity_fixed.csv"), [4.2], model="power-law")
    forecast = replace(
        analysis.targets[0], status=FORECAST, tokens=1.5e11, step=286_102.0, tokens_interval=OPEN,
        step_interval=(189_190.0, math.inf), extrapolation_factor=9.0, note=None,
    )
    return replace(analysis, targets=(forecast,))


@pytest.mark.parametrize("chosen", [UNICODE, ASCII])
def test_an_open_interval_is_the_same_in_the_report_the_summary_and_the_comparison(data_dir, chosen):
    analysis = _analysis_with_an_open_interval(data_dir)
    summary = RunRow("a", "a.csv", "annotated", 4.2, FORECAST, 1.5e11, 286_102.0, OPEN)
    compared = ComparisonRow(4.2, "a", "a.csv", 524288.0, 524288.0, False, FORECAST, 1.5e11, 286_102.0,
                             OPEN[0], OPEN[1], 1.0, None)
    with using_glyphs(chosen):
        shown = interval(OPEN, format_tokens)
        report, table, comparison = to_text(analysis), runs_table([summary]), render_text([compared])
        markdown = render_markdown([compared])
    assert shown == f"99.19B{chosen.to}{chosen.infinity}"
    assert f"tokens={shown} steps=189,190{chosen.to}{chosen.infinity}" in report
    for text in (table, comparison, markdown):
        assert shown in text
    assert "--" not in comparison and "[" not in report.split("interval:")[1].split("(")[0]


def test_a_missing_value_is_the_same_everywhere():
    row = RunRow("a", "a.csv", "failed", note="no such file")
    compared = ComparisonRow(4.2, "a", "a.csv", None, None, False, FORECAST, None, None, None, None, None, "x")
    cells = runs_table([row]).splitlines()[1].split()
    assert cells[:7] == ["a", "failed", MISSING, MISSING, MISSING, MISSING, MISSING]
    assert re.split(r"\s{2,}", render_text([compared]).splitlines()[2])[1:] == [MISSING, str(FORECAST)] + [MISSING] * 4


# -- display width -------------------------------------------------------------------------
NAMES = ("plain-run", "日本語モデル-370M", "🚀-launch", "👩\u200d🔬-lab", "café-e\u0301")


def _column_starts(lines: list[str], word_of_row: list[str]) -> set[int]:
    """Where, in terminal columns, the given cell of each line starts."""
    return {wcswidth(line[: line.index(word)]) for line, word in zip(lines, word_of_row)}


def test_wide_names_keep_the_summary_columns_straight():
    rows = [RunRow(name, name, "annotated", 3.3, Status.REACHED, 4.92e9 * (k + 1), 9385.0) for k, name in enumerate(NAMES)]
    lines = runs_table(rows).splitlines()
    assert _column_starts(lines, ["action"] + ["annotated"] * len(NAMES)) == {max(map(wcswidth, NAMES)) + 2}
    tokens = ["tokens"] + [format_tokens(r.tokens) for r in rows]
    assert len(_column_starts(lines, tokens)) == 1
    assert len({wcswidth(line) for line in lines[1:]}) == 1  # every row as wide on the screen


def test_wide_names_keep_the_comparison_columns_straight():
    rows = [ComparisonRow(3.3, name, name, 524288.0, 524288.0, False, Status.REACHED, 4.92e9, 9385.0, None, None, 1.0,
                          None) for name in NAMES]
    lines = render_text(rows).splitlines()[1:]
    assert _column_starts(lines, ["batch"] + ["524,288"] * len(NAMES)) == {max(map(wcswidth, NAMES)) + 2}


def test_display_width_counts_terminal_columns():
    assert [display_width(t) for t in ("abc", "日本", "🚀", "e\u0301", "👩\u200d🔬")] == [3, 4, 2, 1, 2]
    # A right-aligned column pads by the same count.
    assert text_table(("n",), [("日本",), ("abcde",)], align=(">",)) == ["    n", " 日本", "abcde"]


def test_a_control_character_in_a_name_is_escaped_not_measured():
    lines = text_table(("run", "Z"), [("a\x1b[31mred", "P"), ("b", "Q")])
    assert "\x1b" not in "".join(lines) and len({line.index(c) for line, c in zip(lines, "ZPQ")}) == 1


def test_help_does_not_load_wcwidth():
    code = "import sys, tracker_plugin.cli; print('wcwidth' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# -- annotate and watch: unchanged runs show their numbers ---------------------------------
@pytest.fixture
def runs_dir(tmp_path, data_dir):
    for name in ("parity_fixed.csv", "parity_dynamic.csv"):
        shutil.copy(data_dir / name, tmp_path / name)
    return tmp_path


FIGURES = ("target", "status", "tokens", "step", "tokens_interval", "note")


def test_an_unchanged_run_shows_the_numbers_of_its_annotation(capsys, runs_dir):
    code, out, _ = _cli(capsys, "annotate", runs_dir, "-t", "4.2", "3.5", "--json")
    assert code == 0
    annotated = json.loads(out)
    code, out, err = _cli(capsys, "watch", runs_dir, "-t", "4.2", "3.5", "--json")
    assert code == 0 and "pass 1: 2 unchanged" in err
    watched = json.loads(out)
    assert [r["action"] for r in watched] == ["unchanged"] * len(annotated)
    assert [{k: r[k] for k in FIGURES} for r in watched] == [{k: r[k] for k in FIGURES} for r in annotated]
    assert any(r["tokens"] is not None for r in watched)


def test_watch_final_table_has_the_numbers_with_unchanged_as_the_action(capsys, runs_dir):
    _cli(capsys, "annotate", runs_dir, "-t", "4.2")
    _, annotated, _ = _cli(capsys, "annotate", runs_dir, "-t", "4.2", "--force")
    code, out, _ = _cli(capsys, "watch", runs_dir, "-t", "4.2")
    assert code == 0
    header, *rows = out.splitlines()
    assert re.split(r"\s{2,}", header)[:4] == ["run", "action", "target", "status"]
    assert [re.split(r"\s{2,}", r)[1] for r in rows] == ["unchanged"] * 2
    # The same numbers as the pass that wrote them, the action aside.
    assert [line.replace("unchanged", "annotated") for line in rows] == annotated.splitlines()[1:]


def test_held_rows_read_a_hostile_report_for_what_it_should_hold():
    report = {"targets": [
        {"target": 3.3, "status": "reached", "tokens": 4.9e9, "step": 9385, "tokens_interval": None, "note": None},
        {"target": 3.1, "status": "no-such-word", "tokens": "1e9", "step": True, "tokens_interval": [5e9, None],
         "note": ["x"], "seconds_left": 7200, "eta": "2026-12-02T14:20:00Z"},
        {"target": "3.0"}, "junk",
    ]}
    first, second = held_rows("a", "a.csv", "unchanged", report)
    assert (first.status, first.tokens, first.step) == (Status.REACHED, 4.9e9, 9385.0)
    assert (second.status, second.tokens, second.step, second.note) == (None, None, None, None)
    assert second.tokens_interval == (5e9, math.inf) and second.hours_left == 2.0
    assert second.eta_unix == pytest.approx(1796221200.0)
    assert held_rows("a", "a.csv", "unchanged", None) == [] == held_rows("a", "a.csv", "unchanged", {"targets": 1})


# -- failures: named on stderr, exit code 1, stdout only the table -------------------------
def _broken(runs_dir):
    (runs_dir / "broken.csv").write_text("step,train_loss,global_batch\n0,5,8\n1,four,8\n")
    return runs_dir / "broken.csv"


def _failure_block(err: str, total: int) -> list[str]:
    lines = err.splitlines()
    start = lines.index(f"1 of {total} runs failed:")
    return lines[start + 1:]


@pytest.mark.parametrize("command", ["compare", "annotate", "watch"])
def test_a_failed_run_is_named_on_stderr_with_its_reason_and_exit_code_1(capsys, runs_dir, command):
    broken = _broken(runs_dir)
    once = ("--max-cycles", "1") if command == "watch" else ()  # a failed run is watched again
    code, out, err = _cli(capsys, command, runs_dir, "-t", "4.2", *once)
    assert code == 1
    failed = _failure_block(err, 3)
    assert len(failed) == 1 and failed[0].startswith(f"  broken ({broken}): ")
    assert "four" in failed[0] and "Traceback" not in err
    # stdout: only the table, every line of it with as many columns as its header
    assert "runs failed" not in out and " failed: " not in out
    table = [line for line in out.splitlines() if line and not line.startswith("target ")]
    columns = {len(re.split(r"\s{2,}", line.rstrip())) for line in table if not line.startswith(("run ", "broken"))}
    assert len(columns) == 1


def test_all_ok_is_exit_code_0_with_nothing_on_stderr_about_failures(capsys, runs_dir):
    code, _, err = _cli(capsys, "compare", runs_dir, "-t", "4.2")
    assert code == 0 and "failed" not in err


def test_a_reason_over_several_lines_stays_on_one(capsys, runs_dir):
    (runs_dir / "x\nrm -rf.csv").write_text("step,train_loss,global_batch\n0,5,8\n1,four,8\n")
    code, _, err = _cli(capsys, "compare", runs_dir, "-t", "4.2")
    assert code == 1
    (line,) = _failure_block(err, 3)
    assert "x\\nrm -rf" in line


def test_a_terminal_that_cannot_write_unicode_gets_ascii_and_no_crash(monkeypatch, runs_dir):
    """A latin-1 stdout: ``-`` and ``inf`` for the interval, a CJK name escaped (columns still
    straight), and no UnicodeEncodeError."""
    shutil.copy(runs_dir / "parity_fixed.csv", runs_dir / "日本語.csv")
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="latin-1"))
    code = main(["compare", str(runs_dir), "-t", "4.2"])
    sys.stdout.flush()
    lines = raw.getvalue().decode("latin-1").splitlines()[1:]
    assert code == 0
    name = "\\u65e5\\u672c\\u8a9e"
    assert any(line.startswith(name) for line in lines) and not any("\u2013" in line for line in lines)
    assert any(re.search(r"\d\.\d\dB-\d", line) for line in lines)  # a forecast's interval, in ASCII
    assert len({re.search(r"\S {2,}(\S)", line).start(1) for line in lines}) == 1  # the second column
