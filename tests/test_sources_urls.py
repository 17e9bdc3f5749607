"""Runs named as people copy them: tracker URLs, runs:/ URIs and the trackers' environment."""

from __future__ import annotations

import pytest

from tracker_plugin.cli import main
from tracker_plugin.errors import ConfigError
from tracker_plugin.trackers import (
    MlflowOptions,
    SourceOptions,
    WandbOptions,
    default_source,
    open_source,
    resolve_source,
)

NO_ENV: dict[str, str] = {}


@pytest.mark.parametrize(
    ("given", "spec", "tracking_uri"),
    [
        ("runs:/4f2a9c/model", "mlflow:4f2a9c", None),
        ("runs:/4f2a9c", "mlflow:4f2a9c", None),
        ("http://127.0.0.1:5000/#/experiments/3/runs/4f2a9c", "mlflow:4f2a9c", "http://127.0.0.1:5000"),
        ("http://mlflow.lab:5000/#/experiments/3/runs/4f2a9c/model-metrics?x=1", "mlflow:4f2a9c", "http://mlflow.lab:5000"),
        ("https://ml.lab/mlflow/#/experiments/12", "mlflow:experiment/12", "https://ml.lab/mlflow"),
        ("http://mlflow.lab:5000/experiments/3/runs/4f2a9c", "mlflow:4f2a9c", "http://mlflow.lab:5000"),
        ("http://mlflow.lab:5000/prefix/experiments/3/runs/4f2a9c/artifacts", "mlflow:4f2a9c", "http://mlflow.lab:5000/prefix"),
    ],
)
def test_mlflow_uris_and_ui_urls(given, spec, tracking_uri):
    resolved, options = resolve_source(given, SourceOptions(), NO_ENV)
    assert resolved == spec
    assert options.mlflow.tracking_uri == tracking_uri


@pytest.mark.parametrize(
    ("given", "spec", "base_url"),
    [
        ("https://wandb.ai/team/llm/runs/a1b2c3", "wandb:team/llm/a1b2c3", None),
        ("https://wandb.ai/team/llm/runs/a1b2c3/overview?nw=nwuser#logs", "wandb:team/llm/a1b2c3", None),
        ("https://wandb.ai/team/llm", "wandb:team/llm", None),
        ("https://wandb.ai/team/llm/workspace?nw=nwuser", "wandb:team/llm", None),
        ("https://wandb.ai/team/llm/table", "wandb:team/llm", None),
        ("https://wandb.lab.example/team/llm/runs/a1b2c3", "wandb:team/llm/a1b2c3", "https://wandb.lab.example"),
        ("http://localhost:8080/team/llm/workspace", "wandb:team/llm", "http://localhost:8080"),
    ],
)
def test_wandb_urls(given, spec, base_url):
    resolved, options = resolve_source(given, SourceOptions(), NO_ENV)
    assert resolved == spec
    assert options.wandb.base_url == base_url


def test_a_canonical_string_is_left_as_it_is():
    options = SourceOptions()
    for spec in ("mlflow:abc", "mlflow:experiment/7", "wandb:e/p/r", "wandb-offline:runs/", "runs/a.csv"):
        assert resolve_source(spec, options, NO_ENV) == (spec, options)


def test_a_given_server_is_kept_and_another_is_an_error():
    same = SourceOptions(mlflow=MlflowOptions(tracking_uri="HTTP://mlflow.lab:5000/"))
    url = "http://mlflow.lab:5000/#/experiments/3/runs/4f2a9c"
    assert resolve_source(url, same, NO_ENV) == ("mlflow:4f2a9c", same)
    other = SourceOptions(mlflow=MlflowOptions(tracking_uri="http://other:5000"))
    with pytest.raises(ConfigError, match="the run is on http://mlflow.lab:5000, but tracking_uri is http://other:5000"):
        resolve_source(url, other, NO_ENV)
    with pytest.raises(ConfigError, match="but tracking_uri is sqlite:///mlflow.db"):
        resolve_source(url, SourceOptions(), {"MLFLOW_TRACKING_URI": "sqlite:///mlflow.db"})
    with pytest.raises(ConfigError, match="the run is on https://api.wandb.ai, but the W&B base URL is http://local:8080"):
        resolve_source("https://wandb.ai/e/p/runs/r", SourceOptions(wandb=WandbOptions(base_url="http://local:8080")), NO_ENV)
    with pytest.raises(ConfigError, match="W&B base URL is https://other"):
        resolve_source("https://wandb.lab/e/p/runs/r", SourceOptions(), {"WANDB_BASE_URL": "https://other"})


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://wandb.ai/team/llm/sweeps/x1", "a W&B page that is not a run or a project"),
        ("https://wandb.ai/team", "a W&B page that is not a run or a project"),
        ("http://somewhere.lab/team", "not the URL of a W&B run or project"),
        ("http://mlflow.lab:5000/#/compare-runs?runs=[1]", "not the URL of a W&B run or project"),
        ("http://host:port/x", "the port is not a number"),
        ("runs:/", "names no run"),
    ],
)
def test_a_url_that_names_no_run_says_so(url, problem):
    with pytest.raises(ConfigError, match=problem.replace("[", r"\[")):
        resolve_source(url, SourceOptions(), NO_ENV)


def test_the_trackers_environment_names_the_default_experiment_or_project():
    env = {"MLFLOW_EXPERIMENT_NAME": "pretrain", "MLFLOW_EXPERIMENT_ID": "7"}
    assert resolve_source("mlflow:", SourceOptions(), env)[0] == "mlflow:experiment/pretrain"  # MLflow's order
    assert resolve_source("mlflow:", SourceOptions(), {"MLFLOW_EXPERIMENT_ID": "7"})[0] == "mlflow:experiment/7"
    given = SourceOptions(mlflow=MlflowOptions(experiment_ids=("3",)))
    assert resolve_source("mlflow:", given, env) == ("mlflow:", given)  # --experiment-id wins
    assert resolve_source("mlflow:abc", SourceOptions(), env)[0] == "mlflow:abc"

    spec, options = resolve_source("wandb:r1", SourceOptions(), {"WANDB_PROJECT": "llm", "WANDB_ENTITY": "team"})
    assert spec == "wandb:r1" and (options.wandb.entity, options.wandb.project) == ("team", "llm")
    spec, options = resolve_source("wandb:e/p", SourceOptions(), {"WANDB_PROJECT": "llm"})
    assert options.wandb.project is None  # the string names its project

    assert default_source(SourceOptions(), {}) is None
    assert default_source(SourceOptions(), {"MLFLOW_EXPERIMENT_ID": "7"}) == "mlflow:"
    assert default_source(SourceOptions(), {"WANDB_PROJECT": "llm"}) == "wandb:"
    assert default_source(given, {"WANDB_PROJECT": "llm"}) == "mlflow:"


def test_open_source_reads_a_url_on_its_server(monkeypatch):
    """No server is asked: opening only resolves the string and picks the adapter."""
    # The session's W&B test server sets WANDB_BASE_URL for the tests that use it.
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    source = open_source("http://mlflow.lab:5000/#/experiments/3/runs/4f2a9c", SourceOptions())
    assert type(source).__name__ == "MlflowSource"
    assert source.spec == "4f2a9c" and source.mlflow.tracking_uri == "http://mlflow.lab:5000"
    source = open_source("https://wandb.lab/team/llm/runs/r1", SourceOptions())
    assert type(source).__name__ == "WandbSource" and source.wandb.base_url == "https://wandb.lab"


def test_the_command_line_says_a_mismatch_in_its_flags(capsys):
    code = main(["analyze", "http://mlflow.lab:5000/#/experiments/3/runs/4f2a9c", "-t", "3",
                 "--tracking-uri", "http://other:5000"])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the run is on http://mlflow.lab:5000, but --tracking-uri is http://other:5000" in err


def test_no_source_and_no_default_is_a_usage_error(capsys, monkeypatch):
    for name in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    assert main(["annotate", "-t", "3"]) == 2
    assert "or set MLFLOW_EXPERIMENT_NAME, MLFLOW_EXPERIMENT_ID or WANDB_PROJECT" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "spec"),
    [
        ("https://dbc-1a2b.cloud.databricks.com/ml/experiments/1234/runs/0f9e8d?o=42", "mlflow:0f9e8d"),
        ("https://adb-77.7.azuredatabricks.net/ml/experiments/55", "mlflow:experiment/55"),
        ("https://dbc-1a2b.cloud.databricks.com/#mlflow/experiments/1234/runs/0f9e8d", "mlflow:0f9e8d"),
    ],
)
def test_databricks_mlflow_urls_are_read_with_the_databricks_tracking_uri(given, spec):
    """A Databricks workspace routes MLflow under /ml/ (or #mlflow/): the run is read through
    MLflow's ``databricks`` tracking URI, not a server at the workspace's /ml path."""
    resolved, options = resolve_source(given, SourceOptions(), NO_ENV)
    assert (resolved, options.mlflow.tracking_uri) == (spec, "databricks")
    host = {"DATABRICKS_HOST": "https://" + given.split("/")[2]}
    assert resolve_source(given, SourceOptions(), host)[1].mlflow.tracking_uri == "databricks"
    with pytest.raises(ConfigError, match="DATABRICKS_HOST is https://other.cloud.databricks.com"):
        resolve_source(given, SourceOptions(), {"DATABRICKS_HOST": "https://other.cloud.databricks.com"})
    with pytest.raises(ConfigError, match="give --tracking-uri databricks"):
        resolve_source(given, SourceOptions(), {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"})
