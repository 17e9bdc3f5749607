"""--help in groups, and answered (as is a bad argument) without loading the analysis."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields

import click
import pytest

from tracker_plugin.cli import cli, main
from tracker_plugin.cli.help import GROUPS, PLACES

HEAVY = ("pandas", "scipy", "mlflow", "wandb", "matplotlib")
_PROBE = """
import json, sys
from tracker_plugin.cli import main
code = main(sys.argv[1:])
print(json.dumps([code, sorted(m for m in {heavy!r} if m in sys.modules)]), file=sys.stderr)
"""


def _imports(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args], capture_output=True, text=True, timeout=60
    )
    code, loaded = json.loads(done.stderr.strip().splitlines()[-1])
    return code, loaded


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--help"], 0),
        (["analyze", "--help"], 0),
        (["compare", "--help-all"], 0),
        (["analyze", "run.csv", "-t", "3", "--interval", "5"], 2),
        (["analyze", "run.csv", "--no-such-flag"], 2),
        (["annotate", "-t", "nan"], 2),
    ],
)
def test_help_and_bad_arguments_load_no_heavy_module(args, code):
    assert _imports(*args) == (code, [])


def test_the_probe_sees_an_import():
    """The check above can fail: a command that runs does load the analysis."""
    code, loaded = _imports("analyze", "no-such-run.csv", "-t", "3")
    assert code == 2 and "pandas" in loaded


def test_help_lists_the_common_options_in_groups(capsys):
    assert main(["analyze", "--help"]) == 0
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if line.endswith(" options:")]
    assert titles == [f"{g} options:" for g in ("Targets", "Source", "Columns", "Forecast", "Output", "Tracker", "General")]
    assert "--target" in out and "--loss-col" in out and "--tracking-uri" in out
    assert "--sweep-step" not in out and "--convergence-tol" not in out  # only under --help-all
    assert "more options: see --help-all." in out


def test_help_all_lists_every_option(capsys):
    assert main(["backtest", "--help-all"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("Usage: tracker-plugin backtest")
    for param in cli.commands["backtest"].params:
        if isinstance(param, click.Option) and param.help:
            assert max(param.opts, key=len) in out
    assert "Backtest options:" in out and "Tracker options:" in out
    assert "more options" not in out


def test_every_option_has_a_group():
    for name, command in cli.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and name != "config":
                assert param.name in PLACES, (name, param.name)
                assert PLACES[param.name][0] in GROUPS


def test_every_setting_has_an_option_and_one_default():
    """The command line and AnalysisConfig take their names and defaults from one light
    module; every field of the dataclass has an option (or a reason not to)."""
    import tracker_plugin as tp
    from tracker_plugin import defaults
    from tracker_plugin.cli import options
    from tracker_plugin.core.models import LAWS

    config = {f.name: f.default for f in fields(tp.AnalysisConfig)}
    assert set(config) == set(options.SETTINGS) | set(options.NOT_SETTINGS)
    assert {name: config[name] for name in defaults.DEFAULTS} == dict(defaults.DEFAULTS)
    assert set(defaults.MODELS) == {defaults.AUTO, defaults.POWER_LAW, *LAWS}  # every law is a --model
    for model in defaults.MODELS:
        assert tp.AnalysisConfig(targets=(3.0,), model=model).model == model


def test_help_shows_the_defaults(capsys):
    assert main(["analyze", "--help-all"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "[default: 100000000.0]" in out and "[default: 0.05]" in out and "[default: auto]" in out
