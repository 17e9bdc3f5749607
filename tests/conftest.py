from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

# Fixtures mlflow_server and stoppable_mlflow_server: real `mlflow server` processes.
pytest_plugins = ["tests.doubles.mlflow_server"]

DATA = Path(__file__).parent / "data"


def pytest_addoption(parser):
    parser.addoption(
        "--all",
        action="store_true",
        help="also run the suites marked slow (real trainers, property fuzzing, cross-family, "
        "kills and races): CI runs them all",
    )
    parser.addoption(
        "--ui-shots",
        action="store_true",
        help="tests/test_mlflow_ui.py saves its screenshots under docs/ui (else in a temp dir)",
    )


# The property suites run all their examples with --all (CI) and a quarter of them in the
# quick set; pytest_configure runs before any test module is imported.
_ALL = [False]


def pytest_configure(config):
    _ALL[0] = bool(config.getoption("--all"))


def examples(n: int) -> int:
    """``n`` generated examples with --all, a quarter of them in the quick set."""
    return n if _ALL[0] else max(1, n // 4)


def pytest_collection_modifyitems(config, items):
    """The default run leaves the slow suites out, and says so on each; --all runs them."""
    if config.getoption("--all"):
        return
    skip = pytest.mark.skip(reason="slow suite: run with --all (CI does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


ROOT = Path(__file__).resolve().parents[1]
# What a run of the tests may leave in the checkout: Python's and the tools' own caches.
_TOOL_CACHES = {".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "__pycache__"}


@pytest.fixture(scope="session", autouse=True)
def _nothing_written_to_the_checkout():
    """Tests write only under temporary folders: a store, ``mlruns/`` or a plot left in the
    checkout (MLflow puts a local store's artifacts under ./mlruns unless told) fails the session."""
    def listing() -> set[str]:
        names = {p.name for p in ROOT.iterdir()}
        stores = [ROOT / "mlruns", ROOT / "wandb"]
        return names | {str(p.relative_to(ROOT)) for folder in stores if folder.is_dir() for p in folder.iterdir()}

    before = listing()
    yield
    left = sorted(listing() - before - _TOOL_CACHES)
    assert not left, f"the tests left {left} in the checkout: write under tmp_path"


@pytest.fixture(scope="session", autouse=True)
def _isolated_environment():
    """Tests never read or write the user's caches or trackers: both point into a temp dir."""
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="tracker-plugin-tests-") as home:
        os.environ["XDG_CACHE_HOME"] = os.path.join(home, "cache")
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
        for name in ("TRACKER_PLUGIN_CACHE_DIR", "MLFLOW_TRACKING_URI"):
            os.environ.pop(name, None)
        yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def golden() -> dict:
    return json.loads((DATA / "parity_golden.json").read_text())


@pytest.fixture(scope="session")
def sqlite_store(tmp_path_factory) -> str:
    """A local MLflow sqlite store, created once (creating MLflow's tables takes seconds)."""
    pytest.importorskip("mlflow")
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    root = tmp_path_factory.mktemp("mlflow-local")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    SqlAlchemyStore(uri, str(root / "artifacts")).engine.dispose()
    return uri


# Generated cases per property-based suite (tests/test_hardening.py), reported at the end.
CASES: dict[str, int] = {"analyze": 0, "compare": 0, "frame": 0}


# Failure-shaped cases per reader and shape (tests/test_fuzz_shapes.py), with how many
# ended in a clear error; every other case gave a result that kept >= 90% of the rows or said so.
SHAPES: dict[str, dict[str, int]] = {}
# Hostile files per shape (tests/test_fuzz_files.py): errors, noted results, tracebacks,
# hangs, silent results (and unclear errors: more than one line, no file named, no flags).
FILES: dict[str, dict[str, int]] = {}
# The MLflow fault and race suite's counts (tests/test_mlflow_faults.py), reported at the end.
FAULTS: dict[str, int] = dict.fromkeys(
    ("scenarios", "runs", "consistent", "relogs", "same_settings_repeats", "resumed", "resumed_reannotated"), 0
)


_COUNTS = "tracker_plugin_counts"


def pytest_sessionfinish(session):
    """Under ``-n`` each worker hands its counts to the controller, which reports them all."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output[_COUNTS] = json.dumps({"CASES": CASES, "SHAPES": SHAPES, "FILES": FILES, "FAULTS": FAULTS})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    raw = getattr(node, "workeroutput", {}).get(_COUNTS)
    if raw:
        counts = json.loads(raw)
        for mine, theirs in ((CASES, counts["CASES"]), (SHAPES, counts["SHAPES"]), (FILES, counts["FILES"]),
                             (FAULTS, counts["FAULTS"])):
            _add_counts(mine, theirs)


def _add_counts(mine: dict, theirs: dict) -> None:
    for key, value in theirs.items():
        if isinstance(value, dict):
            _add_counts(mine.setdefault(key, {}), value)
        else:
            mine[key] = mine.get(key, 0) + value


def pytest_terminal_summary(terminalreporter):
    if FAULTS["runs"]:
        f = FAULTS
        terminalreporter.write_line(
            f"mlflow faults: {f['scenarios']} scenarios, {f['runs']} runs checked, {f['consistent']} consistent, "
            f"{f['runs'] - f['consistent']} inconsistent; {f['same_settings_repeats']} repeated (key, step, value) "
            f"rows under the same settings, {f['relogs']} re-logs of a key's latest value; "
            f"resumed runs re-annotated {f['resumed_reannotated']}/{f['resumed']}"
        )
    if any(CASES.values()):
        total = sum(CASES.values())
        detail = ", ".join(f"{k} {v}" for k, v in CASES.items())
        terminalreporter.write_line(f"hardening: {total} generated cases ({detail}), none ended in a traceback")
    if SHAPES:
        total = sum(sum(v for k, v in counts.items() if k != "clear errors") for counts in SHAPES.values())
        terminalreporter.write_line(
            f"failure shapes: {total} generated cases, none ended in a traceback or a silent partial read"
        )
        for reader, counts in SHAPES.items():
            cases = sum(v for k, v in counts.items() if k != "clear errors")
            detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "clear errors")
            errors = counts.get("clear errors", 0)
            terminalreporter.write_line(f"  {reader}: {cases} ({detail}); {errors} clear errors, {cases - errors} results")
    if FILES:
        _files_summary(terminalreporter)


def _files_summary(terminalreporter) -> None:
    outcomes = ("errors", "noted results", "tracebacks", "hangs", "silent", "unclear")
    totals = {o: sum(counts.get(o, 0) for counts in FILES.values()) for o in outcomes}
    terminalreporter.write_line(
        f"hostile files: {sum(totals.values())} cases; " + ", ".join(f"{totals[o]} {o}" for o in outcomes)
    )
    width = max(map(len, FILES))
    terminalreporter.write_line(f"  {'shape':<{width}}  " + " / ".join(outcomes))
    for shape, counts in FILES.items():
        terminalreporter.write_line(f"  {shape:<{width}}  " + " / ".join(str(counts.get(o, 0)) for o in outcomes))


@pytest.fixture
def count_reads(monkeypatch):
    """Count the histories a source class reads: ``count_reads(MlflowSource)`` gives the
    list the refs of the runs read are appended to, in order."""

    def install(cls) -> list[str]:
        reads: list[str] = []
        original = cls.read

        def read(self, run):
            reads.append(run.ref)
            return original(self, run)

        monkeypatch.setattr(cls, "read", read)
        return reads

    return install


# -- W&B: one fake server per session, the real wandb client pointed at it ------------------
@pytest.fixture(scope="session")
def wandb_session(tmp_path_factory):
    """The session's W&B test server, with wandb's directories isolated in tmp dirs."""
    from tests.doubles.wandb_server import WandbServer

    home = tmp_path_factory.mktemp("wandb-home")
    with WandbServer() as server, pytest.MonkeyPatch.context() as env:
        for name, value in {
            **server.env(),
            "WANDB_DIR": str(home),
            "WANDB_CONFIG_DIR": str(home / "config"),
            "WANDB_CACHE_DIR": str(home / "cache"),
            "WANDB_DATA_DIR": str(home / "data"),
            "WANDB_SILENT": "true",
        }.items():
            env.setenv(name, value)
        env.delenv("WANDB_ENTITY", raising=False)
        env.delenv("WANDB_PROJECT", raising=False)
        env.delenv("WANDB_MODE", raising=False)
        yield server


@pytest.fixture
def wandb_server(wandb_session):
    """The session's W&B test server, emptied for this test."""
    wandb_session.reset()
    yield wandb_session
    wandb_session.reset()
