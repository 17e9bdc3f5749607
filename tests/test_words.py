"""The core names settings in its own words; the command line says them as its flags."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tracker_plugin.cli import main
from tracker_plugin.cli.words import in_flags
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[1] / "tracker_plugin"


def _messages(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


@pytest.mark.parametrize("layer", ["core", "frame", "plan"])
def test_the_core_writes_no_command_line_flags(layer):
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for line, text in _messages(path)
        if "--" in text and any(c.isalpha() for c in text.split("--", 1)[1][:1])
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("core", "cli"),
    [
        ("step assumes the batch stays 524,288; pass batch_schedule", "step assumes the batch stays 524,288; pass --batch-schedule"),
        ("(choose one with columns.loss)", "(choose one with --loss-col)"),
        ("planned decay (pass lr_schedule)", "planned decay (pass --lr-schedule or --lr-spec)"),
        ("lr_spec 'x:1': unknown shape 'x'", "--lr-spec 'x:1': unknown shape 'x'"),
        ("ema_token_window must be a positive number, got 0", "--ema-token-window must be a positive number, got 0"),
        # quoted names, longer names, paths and plain words stay as they are
        ("the batch 512 from param 'batch_size'; pass batch_size", "the batch 512 from param 'batch_size'; pass --batch-size"),
        ("param batch_size_in_tokens", "param batch_size_in_tokens"),
        ("runs/batch_size.csv: no such file", "runs/batch_size.csv: no such file"),
        ("the bootstrap could not refit the law: no interval", "the bootstrap could not refit the law: no interval"),
        ("max_fit_points must be at least 16", "max_fit_points must be at least 16"),
    ],
)
def test_the_command_line_says_settings_as_its_flags(core, cli):
    assert in_flags(core) == cli


def test_the_json_keeps_the_core_words_and_the_report_names_the_flag(capsys, data_dir):
    args = ["analyze", str(data_dir / "parity_dynamic.csv"), "-t", "3.9", "--fit-start-step", "2000", "--model", "power-law"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fit_start_reason"] == "fit_start_step"
    assert doc["targets"][0]["note"].endswith("pass batch_schedule")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "fit start step: 2000 (--fit-start-step)" in out and out.rstrip().endswith("pass --batch-schedule")


def test_a_bad_setting_is_named_by_its_flag(capsys, data_dir):
    # The command line refuses it as it parses; the core's own check, said with flags, names the same one.
    assert main(["analyze", str(data_dir / "parity_fixed.csv"), "-t", "3", "--convergence-tol", "0"]) == 2
    assert "'--convergence-tol': '0' is not in the range (0, 1000]" in capsys.readouterr().err
    with pytest.raises(ConfigError) as raised:
        AnalysisConfig(targets=(3.0,), convergence_tol=0.0)
    assert in_flags(str(raised.value)) == "--convergence-tol must be a positive number, got 0.0"
