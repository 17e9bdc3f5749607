"""The config file: found up the tree, checked key by key, under the environment and the flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracker_plugin.cli import main

PYPROJECT = """
[project]
name = "my-training"

[tool.tracker-plugin]
target = [3.3, 3.1]
loss-col = "val_loss"
tracking-uri = "http://file-server:5000"

[tool.tracker-plugin.annotate]
workers = 8
"""


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project with its settings in pyproject.toml, worked in from a folder below."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    below = tmp_path / "runs" / "today"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    for name in ("MLFLOW_TRACKING_URI", "WANDB_ENTITY", "WANDB_PROJECT", "TRACKER_PLUGIN_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _config(capsys, *args: str) -> dict:
    capsys.readouterr()
    assert main(["config", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_file_is_found_up_the_tree_and_says_where_each_value_came_from(capsys, project):
    doc = _config(capsys)
    table = f"{project / 'pyproject.toml'} [tool.tracker-plugin]"
    assert doc["file"] == table and doc["command"] == "analyze"
    settings = doc["settings"]
    assert settings["target"] == {"value": [3.3, 3.1], "from": table}
    assert settings["loss-col"] == {"value": ["val_loss"], "from": table}
    assert settings["interval"] == {"value": 0.8, "from": "default"}
    assert settings["workers"] == {"value": 4, "from": "default"}  # annotate's own table is annotate's
    annotate = _config(capsys, "annotate")["settings"]
    assert annotate["workers"] == {"value": 8, "from": f"{project / 'pyproject.toml'} [tool.tracker-plugin.annotate]"}


def test_the_environment_wins_over_the_file(capsys, project, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env-server:5000")
    settings = _config(capsys)["settings"]
    assert settings["tracking-uri"] == {"value": "http://env-server:5000", "from": "env MLFLOW_TRACKING_URI"}


def test_the_human_table_names_each_origin(capsys, project, monkeypatch):
    monkeypatch.setenv("WANDB_ENTITY", "team")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"config file: {project / 'pyproject.toml'} [tool.tracker-plugin]"
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["target"][1:3] == ["3.3", "3.1"] and rows["target"][-2:] == [str(project / "pyproject.toml"), "[tool.tracker-plugin]"]
    assert rows["entity"][1:] == ["team", "env", "WANDB_ENTITY"]
    assert rows["model"][1:] == ["auto", "default"]


def test_no_file_is_said(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["config"]) == 0
    assert capsys.readouterr().out.startswith("config file: none")


def test_a_flag_wins_over_the_environment_and_the_file(capsys, project, monkeypatch, data_dir):
    """The file's targets and column are used; a flag replaces the file's targets."""
    run = data_dir / "olmo-ladder-370M-5xC.csv"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env-server:5000")
    assert main(["analyze", str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["target"] for t in doc["targets"]] == [3.3, 3.1] and doc["loss_key"] == "val_loss"
    assert main(["analyze", str(run), "--json", "-t", "3.6"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["target"] for t in doc["targets"]] == [3.6]


def test_a_tracker_plugin_toml_wins_over_pyproject_in_its_folder(capsys, project):
    (Path.cwd() / "tracker-plugin.toml").write_text('target = 2.9\n[compare]\nsort = "hours"\n')
    doc = _config(capsys, "compare")
    assert doc["file"] == str(Path.cwd() / "tracker-plugin.toml")
    assert doc["settings"]["target"]["value"] == [2.9] and doc["settings"]["loss-col"]["value"] == []
    assert doc["settings"]["sort"] == {"value": "hours", "from": f"{Path.cwd() / 'tracker-plugin.toml'} [compare]"}


def test_a_format_flag_in_the_file(capsys, project):
    (Path.cwd() / "tracker-plugin.toml").write_text("[compare]\ncsv = true\n")
    settings = _config(capsys, "compare")["settings"]
    assert settings["csv"]["value"] is True and settings["json"] == {"value": False, "from": "default"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("targt = 3.3", "[tool.tracker-plugin]: unknown key 'targt': no command has an option --targt (did you mean 'target'?)"),
        ("loss_col = 'x'", "unknown key 'loss_col'"),
        ("target = 'low'", "[tool.tracker-plugin]: target: 'low' is not a number"),
        ("target = [3.3, -1]", "target: -1 is not in the range (0, 10000]"),
        ("interval = 80", "interval: 80 is not in the range (0, 1)"),
        ("model = 'best'", "model: 'best' is not one of"),
        ("stability-sweep = 'yes'", "stability-sweep: 'yes' is not true or false"),
        ("loss-col = 3", "loss-col: 3 is not a string"),
        ("tracking-uri = ['a', 'b']", "tracking-uri: ['a', 'b'] is a list; --tracking-uri takes one value"),
        ("[tool.tracker-plugin.analyse]\ntarget = 3", "unknown table 'analyse'"),
        ("[tool.tracker-plugin.analyze]\nevery = 3", "[tool.tracker-plugin.analyze]: unknown key 'every': analyze has no option --every"),
        ("target = [3.3", "not valid TOML"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_the_key_and_the_problem(capsys, tmp_path, monkeypatch, text, problem):
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[tool.tracker-plugin]\n{text}\n")
    monkeypatch.chdir(tmp_path)
    for args in (["config"], ["analyze", "run.csv", "-t", "3"]):
        assert main(args) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"error: {path}") and problem in err, err
