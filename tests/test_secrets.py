"""Secrets never leave: every error path of the MLflow and W&B sources, run with a credential
in the tracking URI and in every secret environment variable, and then the output, the JSON,
the artifacts and every file under the cache scanned for each secret in every form a
program could write it in (as is, base64 alone and in basic auth's pairs, URL-encoded).

MLflow: a real ``mlflow server`` (no experiment, no run, a whole annotate), a port nobody
listens on, and stand-in servers that answer 5xx or 4xx with the request's headers echoed
in the body, as some proxies do. W&B: the real client against the test server, which
echoes the request's ``Authorization`` header in its error when told to.
"""

from __future__ import annotations

import base64
import http.server
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from tests.doubles.mlflow_runs import log_run
from tests.doubles.mlflow_server import free_port
from tests.test_wandb_online import short_timeouts  # noqa: F401 - a fixture, used by name
from tracker_plugin.cli import main
from tracker_plugin.errors import SourceError
from tracker_plugin.redact import redact, redact_uri
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers.cache import HistoryCache

USER = "alice"
PASSWORD = "pw-9f2c41d7e5"  # in the tracking URI and MLFLOW_TRACKING_PASSWORD
SECRETS = {
    "MLFLOW_TRACKING_PASSWORD": PASSWORD,
    "MLFLOW_TRACKING_TOKEN": "tok-77aa31c9b0e4",
    "DATABRICKS_TOKEN": "dapi5c0ffee5c0ffee",
}


def forms(secret: str) -> set[str]:
    """Every way a secret can be written out: as is, URL-encoded, base64 alone and in pairs."""
    found = {secret, quote(secret, safe="")}
    for plain in (secret, f"{USER}:{secret}", f"api:{secret}"):
        encoded = base64.standard_b64encode(plain.encode()).decode()
        found |= {encoded, encoded.rstrip("=")}
    return found


def assert_no_secret(secrets: list[str], *texts: str | bytes) -> None:
    for text in texts:
        data = text if isinstance(text, bytes) else text.encode()
        for secret in secrets:
            for form in forms(secret):
                # numpy keeps text as UTF-32: a cache entry's key is written so
                for encoded in (form.encode(), form.encode("utf-32-le")):
                    assert encoded not in data, f"{form!r} (a form of a secret) in {data[:300]!r}"


def files_under(root: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()]


def credentialed(uri: str) -> str:
    return uri.replace("http://", f"http://{USER}:{PASSWORD}@", 1)


def run_cli(capfd, *args: str) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main(list(args))
    out, err = capfd.readouterr()
    return code, out, err


@pytest.fixture
def secret_env(monkeypatch) -> list[str]:
    """The secret environment variables set, and the secrets to look for."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return list(SECRETS.values())


# -- the redaction itself ---------------------------------------------------------------------
def test_redaction_cuts_userinfo_headers_credentials_and_known_secrets(secret_env):
    basic = base64.standard_b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    text = (
        f"no experiment at http://{USER}:{PASSWORD}@host:5000/x; echoed: {{'Authorization': 'Basic {basic}'}} "
        f"Bearer {SECRETS['MLFLOW_TRACKING_TOKEN']} token={SECRETS['DATABRICKS_TOKEN']} "
        f"https://h/p?sig=abcdef123456&page=2 {quote(PASSWORD, safe='')}"
    )
    out = redact(text)
    assert_no_secret(secret_env, out)
    assert "http://***@host:5000/x" in out and "sig=***&page=2" in out and "'Authorization': '***'" in out
    # what is not a secret is left alone: numbers, paths, words
    plain = "reached at step 12345678 (tokens 5.2e9) in runs/a_b.csv; basic schedule"
    assert redact(plain) == plain
    assert redact_uri(f"https://{USER}:{PASSWORD}@mlflow.example.com:443/api?token=abc123xyz&x=1") == (
        "https://mlflow.example.com:443/api?token=***&x=1"
    )
    assert redact_uri("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"


def test_every_error_message_is_redacted_when_made(secret_env):
    exc = SourceError(f"at http://{USER}:{PASSWORD}@h:1", run=f"mlflow (http://{USER}:{PASSWORD}@h:1)")
    assert_no_secret(secret_env, str(exc), exc.problem, exc.run or "", repr(exc.args))


# -- MLflow ---------------------------------------------------------------------------------------
class EchoServer:
    """A stand-in tracking server: every request answered with ``status`` and a body that
    echoes the request's headers, ``Authorization`` included."""

    def __init__(self, status: int, *, mlflow_error: str | None = None) -> None:
        self.status = status
        def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
            headers = dict(handler.headers.items())
            if mlflow_error:
                body = {"error_code": mlflow_error, "message": f"rejected request with headers {headers}"}
            else:
                body = {"detail": "bad gateway", "request": {"path": handler.path, "headers": headers}}
            payload = json.dumps(body).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # the http.server API
                answer(self)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer(self)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.uri = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def no_backoff(monkeypatch):
    from tracker_plugin.trackers import mlflow_rest

    monkeypatch.setattr(mlflow_rest, "_BACKOFF", 0.01)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")


@pytest.fixture
def echo_server(request) -> Iterator[EchoServer]:
    server = EchoServer(**request.param)
    yield server
    server.close()


def _mlflow_error(capfd, uri: str, spec: str, cache: Path) -> tuple[str, str]:
    code, out, err = run_cli(
        capfd, "analyze", spec, "-t", "3.3", "--tracking-uri", uri, "--cache-dir", str(cache)
    )
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return out, err


@pytest.mark.integration
def test_mlflow_not_found_paths_never_print_the_uri_password(mlflow_server, secret_env, capfd, tmp_path):
    uri = credentialed(mlflow_server.uri)
    for spec, said in (
        ("mlflow:experiment/nope", "no experiment named 'nope' at http://***@127.0.0.1"),
        ("mlflow:0123456789abcdef0123456789abcdef", "no such run at http://***@127.0.0.1"),
    ):
        out, err = _mlflow_error(capfd, uri, spec, tmp_path / "cache")
        assert said in err
        assert_no_secret(secret_env, out, err)


def test_mlflow_server_not_answering_never_prints_the_uri_password(
    secret_env, capfd, caplog, tmp_path, no_backoff
):
    caplog.set_level(logging.WARNING)  # what the user's logging shows by default
    uri = f"http://{USER}:{PASSWORD}@127.0.0.1:{free_port()}"
    out, err = _mlflow_error(capfd, uri, "mlflow:experiment/nope", tmp_path / "cache")
    assert "the MLflow tracking server http://***@127.0.0.1:" in err and "is not answering" in err
    assert_no_secret(secret_env, out, err, caplog.text)


@pytest.mark.parametrize(
    ("echo_server", "said"),
    [
        ({"status": 502}, "kept answering with server errors"),
        ({"status": 400}, "'detail': 'bad gateway'"),
        ({"status": 400, "mlflow_error": "BAD_REQUEST"}, "rejected request with headers"),
        ({"status": 401, "mlflow_error": "UNAUTHENTICATED"}, "refused the request"),
    ],
    indirect=["echo_server"],
)
def test_mlflow_errors_that_echo_the_request_never_print_a_credential(
    echo_server, said, secret_env, capfd, tmp_path, no_backoff
):
    out, err = _mlflow_error(capfd, credentialed(echo_server.uri), "mlflow:experiment/nope", tmp_path / "cache")
    assert said in err
    if echo_server.status < 500:  # a 4xx's body is in the message: the echoed header, cut
        assert "'Authorization': '***'" in err
    assert_no_secret(secret_env, out, err)


@pytest.mark.integration
def test_mlflow_annotate_writes_no_credential_anywhere(mlflow_server, secret_env, capfd, caplog, tmp_path):
    from mlflow.tracking import MlflowClient

    caplog.set_level(logging.WARNING)
    client = MlflowClient(mlflow_server.uri)
    experiment = client.create_experiment(f"secrets-{tmp_path.name}")
    run_id = log_run(client, experiment, synthetic_run(300, batch=4_194_304.0, seed=3), name="run0")
    client.set_terminated(run_id)
    cache = tmp_path / "cache"
    # An entry of the cache's first layout, which kept the tracking URI whole: never trusted, deleted.
    legacy = cache / "histories" / ("0" * 32 + ".npz")
    legacy.parent.mkdir(parents=True)
    np.savez(legacy, __key__=np.array(json.dumps(["1", "mlflow", credentialed(mlflow_server.uri), run_id])))
    uri = credentialed(mlflow_server.uri)
    outputs = []
    for extra in ((), ("--force",)):  # the second reads the history from the cache
        code, out, err = run_cli(
            capfd, "annotate", f"mlflow:{run_id}", "-t", "5.5", "4.0", "--json", "--tracking-uri", uri,
            "--cache-dir", str(cache), *extra,
        )  # fmt: skip
        assert code == 0, err
        outputs += [out, err]
    assert not legacy.exists()
    entries = list((cache / "histories").glob("*.npz"))
    with np.load(entries[0]) as entry:
        assert f'"{mlflow_server.uri}"' in str(entry["__key__"])  # the host, never the credential
    artifacts = Path(client.download_artifacts(run_id, "", str(tmp_path / "artifacts")))  # all of them
    record = client.get_run(run_id)
    assert (artifacts / "loss_eta.json").exists()
    assert_no_secret(
        secret_env,
        caplog.text,
        *outputs,
        *files_under(cache),
        *files_under(artifacts),
        json.dumps({**record.data.tags, **{k: str(v) for k, v in record.data.metrics.items()}}),
    )


def test_a_cache_entry_of_the_first_layout_is_a_miss(tmp_path):
    cache = HistoryCache(tmp_path)
    key = ("mlflow", "http://h:1", "run", "loss@9:1")
    cache.store(key, {"0.step": np.arange(3)})
    assert cache.load(key) is not None
    old = cache.directory / ("f" * 32 + ".npz")
    np.savez(old, __key__=np.array(json.dumps(["1", *key])), **{"0.step": np.arange(3)})
    assert {p.name.split("-")[0] for p in cache.directory.glob("*.npz")} == {"v2", "f" * 32 + ".npz"}
    HistoryCache(tmp_path).store(("other",), {"x": np.arange(1)})  # the first store purges other layouts
    assert not old.exists() and cache.load(key) is not None


# -- W&B -----------------------------------------------------------------------------------------
@pytest.fixture
def one_run(wandb_server):
    from tests.test_wandb_online import wandb_rows

    return wandb_server.add_run("ent", "proj", "ra", name="run-a", history=wandb_rows(synthetic_run(300, seed=1)))


@pytest.mark.parametrize(("status", "said"), [(400, "HTTP 400"), (403, "refused the credentials"), (404, "404")])
def test_wandb_errors_that_echo_the_authorization_header_never_print_the_key(
    wandb_server, one_run, secret_env, capfd, status, said
):
    wandb_server.fail(status, echo=True, body="Failed to verify credentials")
    code, out, err = run_cli(capfd, "analyze", "wandb:ent/proj/ra", "-t", "3.3")
    assert code == 2 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and said in err, err
    assert_no_secret([*secret_env, wandb_server.api_key], out, err)
    # the server did echo it: the header the client sent is in the failure's body
    assert any(r.status == status for r in wandb_server.requests)


def test_wandb_annotate_over_a_project_says_which_run_failed_without_the_key(
    wandb_server, one_run, secret_env, capfd
):
    from tests.test_wandb_online import wandb_rows

    wandb_server.add_run("ent", "proj", "rb", name="run-b", history=wandb_rows(synthetic_run(300, seed=2)))
    wandb_server.fail(400, run="rb", echo=True, body="Failed to verify credentials")
    code, out, err = run_cli(capfd, "annotate", "wandb:ent/proj", "-t", "3.3", "--json")
    rows = {row["run"]: row for row in json.loads(out)}
    assert code == 1 and rows["run-a"]["action"] == "annotated" and rows["run-b"]["action"] == "failed"
    assert "Authorization" in rows["run-b"]["note"]  # the echo reached the message, cut
    assert_no_secret([*secret_env, wandb_server.api_key], out, err)
    summary = json.dumps(wandb_server.run("ent", "proj", "ra").summary, default=str)
    assert_no_secret([wandb_server.api_key], summary)


@pytest.mark.slow
@pytest.mark.usefixtures("short_timeouts")
def test_wandb_server_errors_and_no_server_never_print_the_key(wandb_server, one_run, secret_env, capfd, monkeypatch):
    wandb_server.fail(500, echo=True)
    code, out, err = run_cli(capfd, "analyze", "wandb:ent/proj/ra", "-t", "3.3")
    assert code == 2 and "did not answer" in err and len(err.strip().splitlines()) == 1, err
    assert_no_secret([*secret_env, wandb_server.api_key], out, err)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://{USER}:{PASSWORD}@127.0.0.1:{free_port()}")
    code, out, err = run_cli(capfd, "analyze", "wandb:ent/proj/ra", "-t", "3.3")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert_no_secret([*secret_env, wandb_server.api_key], out, err)
