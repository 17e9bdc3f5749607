"""The README stays true: every option is documented and the quick start runs as shown."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from tracker_plugin.cli import cli, main

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


def test_quick_start_output_is_what_the_command_prints(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    block = README.split("```console\n$ ", 1)[1].split("```", 1)[0]
    command, expected = block.split("\n", 1)
    args = shlex.split(command)[1:]
    assert main(args) == 0
    assert capsys.readouterr().out.strip() == expected.strip()


def test_fresh_machine_main_job_runs(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    line = next(l for l in README.splitlines() if l.startswith(".venv/bin/tracker-plugin "))
    args = [a.replace("loss_eta.png", str(tmp_path / "loss_eta.png")) for a in shlex.split(line)[1:]]
    assert main(args) == 0
    assert (tmp_path / "loss_eta.png").stat().st_size > 10_000
    assert re.search(r"REACHED", capsys.readouterr().out)
