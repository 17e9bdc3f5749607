"""Words a person reads once: every note and message the bundled runs and the test
fixtures produce is flat (no bracket inside a bracket), free of the code's own terms, and
says steps as whole numbers.

The runs are analysed as a user would (the text report, as the command line words it,
and the runs-table texts), whole and cut at a quarter (a run still going), with targets
that one run reaches, one it nears and one it does not; then annotated twice with other
settings, for what a redone annotation says.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tracker_plugin.cli import main
from tracker_plugin.cli.words import in_flags
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.core.project_law import ProjectLaw
from tracker_plugin.errors import TrackerPluginError
from tracker_plugin.report.project_book import project_table
from tracker_plugin.report.render import to_text
from tracker_plugin.report.target_text import target_text
from tracker_plugin.trackers import SourceOptions, open_source

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = sorted((ROOT / "examples" / "runs").glob("*.csv"))
FIXTURES = [
    *sorted(p for p in (ROOT / "tests" / "data").glob("*.csv") if p.name not in {b.name for b in BUNDLED}),
    ROOT / "tests" / "data" / "frameworks" / "hf" / "trainer_state.json",
    ROOT / "tests" / "data" / "frameworks" / "lightning" / "metrics.csv",
]
# The code's own terms: a reader of the report has no use for them.
INTERNAL = ("under this fit", "asymptote", "L0=", "a prior", "EMA of the fit", "|ln", "bootstrap", "refit",
            "held to", "shed", "horizon", "timeline", "draws", "the others' backtests")  # fmt: skip
# A step said with a fraction: "step=24,296.7", "step 7,768.6", "~127.2 steps".
FRACTIONAL_STEP = re.compile(r"\bsteps?[ =:]+~?\d[\d,]*\.\d|~\d[\d,]*\.\d+ steps\b")
# Where a text report line carries a fitted law's parameters: numbers, not words.
PARAMETERS = re.compile(r"\((power-law|lr-annealing|multi-power): [^)]*\)")


def _term(word: str) -> re.Pattern[str]:
    """The word on its own: "shed", not "finished"."""
    start = r"\b" if word[0].isalnum() else ""
    end = r"\b" if word[-1].isalnum() else ""
    return re.compile(start + re.escape(word) + end)


TERMS = [(word, _term(word)) for word in INTERNAL]


def problems(message: str) -> list[str]:
    """What is wrong with one message (empty: nothing)."""
    found = []
    depth = deepest = 0
    message = PARAMETERS.sub("(law)", message)
    for char in message:
        depth += char in "([{"
        depth -= char in ")]}"
        deepest = max(deepest, depth)
    if deepest > 1:
        found.append("a bracket inside a bracket")
    found += [f"the internal term {word!r}" for word, term in TERMS if term.search(message)]
    if FRACTIONAL_STEP.search(message):
        found.append("a fractional step")
    return found


@pytest.mark.parametrize(
    ("message", "wrong"),
    [
        ("the run ended (step 9,538) at step 9,536 (unreachable under this fit: near 3.27 (held to 20x))",
         ["a bracket inside a bracket", "the internal term 'under this fit'", "the internal term 'held to'"]),
        ("target=3.3 REACHED (interpolated): step=24,296.7", ["a fractional step"]),
        ("ema token window: 100,000,000 (~127.2 steps at this batch size)", ["a fractional step"]),
        ("those whose log had shed 50% of the lr; none: the multi-power law", ["the internal term 'shed'"]),
        ("the run ended its plan at step 9,535 of 9,537", []),
    ],
)  # fmt: skip
def test_the_scan_finds_what_it_looks_for(message, wrong):
    assert problems(message) == wrong


def _targets(history) -> tuple[float, float, float]:
    """A target the run reaches, one just past its best, one well past it."""
    low = float(np.nanmin(history.loss[len(history.loss) // 2 :]))
    return round(low + 0.3, 2), round(low - 0.02, 2), round(low - 0.4, 2)


def _messages(path: Path) -> list[str]:
    source = open_source(str(path), SourceOptions())
    history = source.read(source.runs()[0])
    targets = (3.6, 3.3, 3.1) if path in BUNDLED else _targets(history)
    said = []
    for part in (history, history.head(max(40, len(history) // 4))):
        analysis = run_analysis(part, AnalysisConfig(targets=targets))
        said += to_text(analysis, in_flags).splitlines()
        said += [target_text(analysis, k) for k in range(len(analysis.targets))]
    return said


# Every run's analyses take minutes on two cores: with the slow suites (CI runs them).
@pytest.mark.slow
@pytest.mark.parametrize("path", [*BUNDLED, *FIXTURES], ids=lambda p: p.name)
def test_every_note_and_message_of_a_run_reads_once(path):
    try:
        said = _messages(path)
    except TrackerPluginError as exc:  # a fixture made to be refused: its one-line error is the message
        said = [str(exc)]
    wrong = [f"{message!r}: {', '.join(problems(message))}" for message in said if problems(message)]
    assert not wrong, "\n".join(wrong)


def test_what_a_redone_annotation_and_the_calibration_say(tmp_path, capsys):
    for path in BUNDLED[:2]:
        shutil.copy(path, tmp_path / path.name)
    args = ["annotate", str(tmp_path), "--no-calibrate", "--model", "power-law"]  # the quickest law
    assert main([*args, "-t", "3.3", "--loss-col", "val_loss"]) == 0
    assert main([*args, "-t", "3.3", "3.1", "--ema-token-window", "2e8"]) == 0
    out = capsys.readouterr().out
    # What changed, named: the nanoGPT run was read on val_loss, now on its train loss.
    assert "redone: loss key val_loss → train_loss; targets +3.1; ema window 100,000,000 → 200,000,000" in out
    law = ProjectLaw(None, left_out=(("a", "it could not be read"), ("b", "it could not be read")),
                     reason="0 finished run(s) of this configuration")
    table = project_table("the finished runs of runs/", 2, (), law, {}).splitlines()
    assert table[0] == "the finished runs of runs/: 2 finished run(s); 2 read now"
    said = [*out.splitlines(), table[0], table[-1]]
    wrong = [f"{message!r}: {', '.join(problems(message))}" for message in said if problems(message)]
    assert not wrong, "\n".join(wrong)
