"""The README stays true: every option is documented and the quick start runs as shown."""

from __future__ import annotations

import re
import runpy
import shlex
import sys
from pathlib import Path

import click
import pytest

from tests import readme_examples
from tracker_plugin.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands(group: click.Group):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command)
        else:
            yield name, command


@pytest.mark.parametrize(("name", "command"), list(_commands(cli)))
def test_every_option_is_in_the_readme(name, command):
    for param in command.params:
        if isinstance(param, click.Option):
            for flag in param.opts:
                assert f"`{flag}" in README or f"{flag} " in README, f"{name} {flag} is not documented"


@pytest.mark.parametrize("example", readme_examples.examples(README), ids=lambda e: e.command[:60])
def test_console_example_prints_what_the_readme_shows(example):
    """Words exactly, numbers to a relative 1e-3: the last digits of a fit may vary by CPU."""
    why = readme_examples.mismatch(example.expected, readme_examples.run(example.command))
    assert why is None, why


def test_example_check_catches_a_changed_number():
    shown = "target=3.1 EXTRAPOLATED: step=413,589.3 tokens=325,259,893,383 (8.76x past"
    assert readme_examples.mismatch(shown, shown.replace("325,259", "325,599")) is not None
    assert readme_examples.mismatch(shown, shown.replace("325,259,893", "325,259,999")) is None
    assert readme_examples.mismatch(shown, shown.replace("EXTRAPOLATED", "REACHED")) is not None


def test_fresh_machine_main_job_runs(capsys, monkeypatch, tmp_path):
    """The main job, as the README gives it, on a new local MLflow store in a temp dir."""
    line = next(row for row in README.splitlines() if row.startswith(".venv/bin/python examples/"))
    script, *args = shlex.split(line)[1:]
    store = tmp_path / "mlflow.db"
    monkeypatch.chdir(tmp_path)  # MLflow's artifacts (./mlruns) land here, never in the repo
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    monkeypatch.setattr(sys, "argv", [script, *args])
    repo_before = sorted(p.name for p in ROOT.iterdir())
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / script), run_name="__main__")
    assert done.value.code == 0
    out = capsys.readouterr().out
    runs = sorted(p.stem for p in (ROOT / "examples" / "runs").glob("*.csv"))
    table = out.split("\n\n")[0]
    assert sorted({row.split()[0] for row in table.splitlines()[2:]}) == runs
    assert re.search(r"olmo-ladder-370M-5xC\s+3.3\s+reached\s+19.09B\s+24,268", table)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("loss-eta-examples")
    for run in client.search_runs([experiment.experiment_id]):
        status = run.data.tags["loss_eta/target_3p30/status"]
        assert status in ("reached", "extrapolated", "unreachable")
        if status == "extrapolated":  # a finished run short of 3.3: forecast past its end
            assert run.data.metrics["loss_eta/target_3p30/tokens"] > run.data.metrics["loss_eta/last_tokens"]
        assert run.info.status == "FINISHED"
        assert {a.path for a in client.list_artifacts(run.info.run_id, "loss_eta")} == {"loss_eta/loss_eta.json", "loss_eta/loss_eta.png"}
    assert list((tmp_path / "mlruns").iterdir())
    assert sorted(p.name for p in ROOT.iterdir()) == repo_before
