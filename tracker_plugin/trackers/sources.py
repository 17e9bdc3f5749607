"""Run strings as people copy them, made into the run strings the adapters read.

:func:`resolve_source` is the one place where every other spelling of a run becomes a
canonical run string (``mlflow:RUN_ID``, ``mlflow:experiment/ID``, ``wandb:E/P/ID``,
``wandb:E/P``) and the options it implies; :func:`~tracker_plugin.trackers.open_source`
calls it on every string it opens:

- ``runs:/RUN_ID[/path]``, MLflow's own URI of a run (or of its artifacts): ``mlflow:RUN_ID``;
- an MLflow UI URL, ``http://HOST/#/experiments/EXP/runs/RUN`` (and the path form,
  ``http://HOST/experiments/EXP/runs/RUN``): ``mlflow:RUN``, or ``mlflow:experiment/EXP``
  without a run; the server becomes the tracking URI unless one is given, and one given
  (``tracking_uri`` or ``MLFLOW_TRACKING_URI``) that names another server is an error. A
  Databricks workspace's (``https://WORKSPACE/ml/experiments/EXP/runs/RUN``, or
  ``#mlflow/experiments/...``) is read with the tracking URI ``databricks``, whose
  workspace ``DATABRICKS_HOST`` names (an error when it names another);
- a W&B URL, ``https://wandb.ai/ENTITY/PROJECT/runs/ID`` or the project's
  ``https://wandb.ai/ENTITY/PROJECT[/workspace]``, queries and fragments ignored: a
  self-hosted server's host (``https://wandb.example.com/E/P/runs/ID``) becomes the W&B
  base URL (:attr:`WandbOptions.base_url`, else ``WANDB_BASE_URL``; one given that names
  another server is an error);
- ``mlflow:`` naming no run or experiment, with no experiment ids: MLflow's own
  ``MLFLOW_EXPERIMENT_NAME`` (first, as MLflow reads them) or ``MLFLOW_EXPERIMENT_ID``;
- ``wandb:`` or ``wandb:RUN_ID`` with no project: ``WANDB_PROJECT`` (and ``WANDB_ENTITY``).

Environment variables are read here, never set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import SplitResult, unquote, urlsplit

from tracker_plugin.errors import ConfigError
from tracker_plugin.trackers.options import SourceOptions

__all__ = ["default_source", "resolve_source"]

# The W&B cloud's hosts: its runs are read through wandb's default API, whatever the host.
_WANDB_CLOUD = ("wandb.ai", "app.wandb.ai", "api.wandb.ai")
# A W&B project page's last part (the runs table, the workspace, ...), not a run.
_PROJECT_PAGES = ("workspace", "table", "overview", "runs")
# An MLflow UI route: #/experiments/EXP[/runs/RUN][/...], with or without the hash.
# MLflow's UI names experiments by their ids, which are numbers.
_MLFLOW_ROUTE = re.compile(r"(?:^|/)experiments/(?P<experiment>[0-9]+)(?:/runs/(?P<run>[^/?#]+))?")

Environ = Mapping[str, str]


def resolve_source(spec: str, options: SourceOptions, environ: Environ | None = None) -> tuple[str, SourceOptions]:
    """The canonical run string ``spec`` names, and ``options`` with what it implies.

    A canonical string with what it needs is returned as it is, with ``options`` itself.

    Raises
    ------
    ConfigError
        A URL that names no run or project, or names another server than the one given.
    """
    environ = os.environ if environ is None else environ
    text = spec.strip()
    if text.startswith("runs:/"):
        run_id = text[len("runs:/") :].strip("/").split("/")[0]
        if not run_id:
            raise ConfigError(f"{spec}: names no run; give runs:/RUN_ID")
        return f"mlflow:{run_id}", options
    if text.lower().startswith(("http://", "https://")):
        return _from_url(text, options, environ)
    if text == "mlflow:" and not options.mlflow.experiment_ids:
        return _mlflow_default(spec, environ), options
    if text.startswith("wandb:") and not options.wandb.project and environ.get("WANDB_PROJECT"):
        if len([p for p in text[len("wandb:") :].split("/") if p]) <= 1:  # no ENTITY/PROJECT in it
            wandb = replace(
                options.wandb, project=environ["WANDB_PROJECT"], entity=options.wandb.entity or environ.get("WANDB_ENTITY")
            )
            return spec, replace(options, wandb=wandb)
    return spec, options


def default_source(options: SourceOptions, environ: Environ | None = None) -> str | None:
    """The run string to take when none is given, or None.

    In this order: the experiment ids of the options, a W&B project (the options', else
    ``WANDB_PROJECT``), MLflow's ``MLFLOW_EXPERIMENT_NAME`` or ``MLFLOW_EXPERIMENT_ID``.
    """
    environ = os.environ if environ is None else environ
    if options.mlflow.experiment_ids:
        return "mlflow:"
    if options.wandb.project or environ.get("WANDB_PROJECT"):
        return "wandb:"
    if environ.get("MLFLOW_EXPERIMENT_NAME") or environ.get("MLFLOW_EXPERIMENT_ID"):
        return "mlflow:"
    return None


def _mlflow_default(spec: str, environ: Environ) -> str:
    """``mlflow:`` alone: the experiment MLflow's own environment variables name."""
    name = environ.get("MLFLOW_EXPERIMENT_NAME")
    experiment = name or environ.get("MLFLOW_EXPERIMENT_ID")
    return f"mlflow:experiment/{experiment}" if experiment else spec


def _from_url(url: str, options: SourceOptions, environ: Environ) -> tuple[str, SourceOptions]:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 -- urlsplit checks the port only when asked for it
    except ValueError:
        raise ConfigError(f"{url}: the port is not a number") from None
    if not parts.hostname:
        raise ConfigError(f"{url}: a URL with no host")
    cloud = parts.hostname.lower() in _WANDB_CLOUD
    mlflow = None if cloud else _mlflow_url(url, parts, options, environ)
    if mlflow is not None:
        return mlflow
    wandb = _wandb_url(url, parts, options, environ)
    if wandb is not None:
        return wandb
    raise ConfigError(
        f"{url}: not the URL of a W&B run or project (https://wandb.ai/ENTITY/PROJECT[/runs/ID]) "
        "or of an MLflow run or experiment (http://HOST/#/experiments/ID[/runs/ID])"
    )


def _mlflow_url(
    url: str, parts: SplitResult, options: SourceOptions, environ: Environ
) -> tuple[str, SourceOptions] | None:
    """An MLflow UI URL's run (or experiment), read on the server the URL is on."""
    if parts.fragment.startswith(("/", "mlflow/")):  # the UI's hash route
        route, server_path = parts.fragment.split("?")[0], parts.path
        match = _MLFLOW_ROUTE.search(route)
    else:  # the path form: the server's own path ends where the route starts
        match = _MLFLOW_ROUTE.search(parts.path)
        server_path = parts.path[: match.start()] if match else ""
    if match is None:
        return None
    server = f"{parts.scheme.lower()}://{parts.netloc}{server_path.rstrip('/')}"
    given = options.mlflow.tracking_uri or environ.get("MLFLOW_TRACKING_URI")
    if _databricks(parts, server_path):
        server = _databricks_server(url, parts, given, environ)
    elif given and _server(given) != _server(server):
        raise ConfigError(
            f"{url}: the run is on {server}, but tracking_uri is {given}; give the one that holds the run"
        )
    run = match.group("run")
    spec = f"mlflow:{unquote(run)}" if run else f"mlflow:experiment/{unquote(match.group('experiment'))}"
    if given:
        return spec, options
    return spec, replace(options, mlflow=replace(options.mlflow, tracking_uri=server))


# Databricks workspaces' hosts (AWS, Azure, GCP); their UI routes MLflow under /ml/ (and
# the older #mlflow/ hash), and MLflow reaches them as the tracking URI "databricks".
_DATABRICKS_HOSTS = (".databricks.com", ".azuredatabricks.net")


def _databricks(parts: SplitResult, server_path: str) -> bool:
    host = (parts.hostname or "").lower()
    return host.endswith(_DATABRICKS_HOSTS) or server_path.rstrip("/").endswith("/ml")


def _databricks_server(url: str, parts: SplitResult, given: str | None, environ: Environ) -> str:
    """The tracking URI of a Databricks run's URL: ``databricks``, its workspace the one
    ``DATABRICKS_HOST`` names (MLflow's own setting), which must be the URL's host."""
    if given and not given.strip().lower().startswith("databricks"):
        raise ConfigError(f"{url}: the run is in a Databricks workspace, but tracking_uri is {given}; give "
                          "--tracking-uri databricks (with DATABRICKS_HOST and DATABRICKS_TOKEN set)")
    host = environ.get("DATABRICKS_HOST")
    if host and _server(host if "://" in host else f"https://{host}")[1] != _server(f"https://{parts.netloc}")[1]:
        raise ConfigError(f"{url}: the run is in the Databricks workspace {parts.hostname}, but DATABRICKS_HOST is "
                          f"{host}; set DATABRICKS_HOST to the workspace that holds the run")
    return given or "databricks"


def _wandb_url(
    url: str, parts: SplitResult, options: SourceOptions, environ: Environ
) -> tuple[str, SourceOptions] | None:
    """A W&B URL's run (``/E/P/runs/ID``) or project (``/E/P``, ``/E/P/workspace``)."""
    host = (parts.hostname or "").lower()
    cloud = host in _WANDB_CLOUD
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if len(segments) >= 4 and segments[2] == "runs":
        spec = f"wandb:{segments[0]}/{segments[1]}/{segments[3]}"
    elif len(segments) == 2 and cloud or 2 < len(segments) <= 3 and segments[2] in _PROJECT_PAGES:
        spec = f"wandb:{segments[0]}/{segments[1]}"
    elif cloud:
        raise ConfigError(f"{url}: a W&B page that is not a run or a project; give https://wandb.ai/ENTITY/PROJECT[/runs/ID]")
    else:
        return None
    given = options.wandb.base_url or environ.get("WANDB_BASE_URL")
    server = "https://api.wandb.ai" if cloud else f"{parts.scheme.lower()}://{parts.netloc}"
    if given and _server(given) != _server(server):
        raise ConfigError(f"{url}: the run is on {server}, but the W&B base URL is {given}; give the one that holds the run")
    if cloud or given:
        return spec, options
    return spec, replace(options, wandb=replace(options.wandb, base_url=server))


def _server(uri: str) -> tuple[str, str, str]:
    """A server's address, compared without case in scheme and host, default ports or a
    trailing slash; the W&B cloud's UI and API hosts are one server."""
    parts = urlsplit(uri.strip())
    host = (parts.hostname or "").lower()
    if host in _WANDB_CLOUD:
        return ("https", "wandb.ai", "")
    scheme = parts.scheme.lower()
    port = parts.port
    default = {"http": 80, "https": 443}.get(scheme)
    where = host if port in (None, default) else f"{host}:{port}"
    return (scheme, where, parts.path.rstrip("/"))
