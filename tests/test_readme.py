"""The README and docs/ stay true: every option is documented, every example prints what
the page shows, the README stays a front door, and every relative link leads somewhere."""

from __future__ import annotations

import logging
import re
import runpy
import shlex
import sys
from pathlib import Path

import click
import pytest

from tests import readme_examples
from tracker_plugin.cli import cli
from tracker_plugin.core.status import Status
from tracker_plugin.report.target_text import target_status

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = readme_examples.pages()
MANUAL = "\n".join(page.read_text() for page in PAGES)
README_MAX_LINES = 250


def _commands(group: click.Group):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command)
        else:
            yield name, command


@pytest.mark.parametrize(("name", "command"), list(_commands(cli)))
def test_every_option_is_documented(name, command):
    for param in command.params:
        if isinstance(param, click.Option):
            for flag in param.opts:
                assert f"`{flag}" in MANUAL or f"{flag} " in MANUAL, f"{name} {flag} is not in the README or docs/"


def _example_id(item):
    page, example = item
    return f"{page.relative_to(ROOT)}: {example.command[:60]}"


def _example_param(item):
    # The backtest page's example refits every bundled run at a cut: with --all.
    slow = item[1].command.startswith("tracker-plugin backtest")
    return pytest.param(item, id=_example_id(item), marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("item", [_example_param(item) for item in readme_examples.all_examples()])
def test_example_prints_what_its_page_shows(item):
    """Words exactly, numbers to a relative 1e-3: the last digits of a fit may vary by CPU."""
    page, example = item
    why = readme_examples.mismatch(example.expected, readme_examples.run(example.command))
    assert why is None, f"{page.relative_to(ROOT)}: {why}"


def test_examples_are_found_on_every_kind_of_page():
    found = {page.name for page, _ in readme_examples.all_examples()}
    assert {"README.md", "reading.md", "hours.md", "live.md"} <= found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sample_output_goes_unchecked(page):
    """A fence that shows a command and what it prints is an example the tests run: one the
    extraction would not recognise (another spelling of the command, say) fails here."""
    checked = {e.span for e in readme_examples.examples(page.read_text())}
    for m in re.finditer(r"```(\w*)\n(\$ [^\n]*)\n(.*?)```", page.read_text(), re.S):
        if m.group(3).strip():
            assert m.span(3) in checked, f"{page.name}: {m.group(2)!r} shows output that no test checks"


def test_readme_is_a_front_door():
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the manual's pages are in docs/"


def test_ci_runs_the_readme_test_command():
    """CI calls the test command the README gives, word for word."""
    (ci,) = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "-m pytest" in line]
    assert f"\n{ci}\n" in README, f"the README does not give CI's test command {ci!r}"


_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered."""
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    for line in _FENCE.sub("", text).splitlines():
        if m := re.match(r"#{1,6} +(.*?) *#* *$", line):
            words = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).replace("`", "").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", words).replace(" ", "-")
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links(text: str) -> list[str]:
    return _LINK.findall(_CODE.sub("", _FENCE.sub("", text)))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    broken = []
    for link in _links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target.read_text()):
            broken.append(f"{link}: no heading with the anchor #{anchor} in {target.name}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_link_check_catches_a_missing_file_and_anchor():
    text = "# Reading runs: sources\n## Weights & Biases\n## CSV logs\n## CSV logs\n```\n# not a heading\n```\n"
    assert _anchors(text) == {"reading-runs-sources", "weights--biases", "csv-logs", "csv-logs-1"}
    assert _links("[a](x.md#y) `[b](z.md)` [c](https://e.org)") == ["x.md#y", "https://e.org"]


def test_every_docs_page_is_in_the_index_and_the_readme():
    index = set(_links((ROOT / "docs" / "index.md").read_text()))
    readme = set(_links(README))
    for page in PAGES[1:]:
        if page.name != "index.md":
            assert any(link.split("#")[0] == page.name for link in index), f"docs/index.md does not list {page.name}"
            assert any(link.split("#")[0] == f"docs/{page.name}" for link in readme), f"README.md does not link {page.name}"


def test_example_check_catches_a_changed_number():
    shown = "target=3.1 FORECAST BEYOND THE PLAN (fit): step=413,589.3 tokens=325,259,893,383 (8.76x past"
    assert readme_examples.mismatch(shown, shown.replace("325,259", "325,599")) is not None
    assert readme_examples.mismatch(shown, shown.replace("325,259,893", "325,259,999")) is None
    assert readme_examples.mismatch(shown, shown.replace("BEYOND THE PLAN", "within the plan")) is not None


def test_fresh_machine_main_job_runs(capfd, monkeypatch, tmp_path):
    """The main job, as the README gives it, on a new local MLflow store in a temp dir, run
    twice: the second time every run is unchanged, and neither run writes anything to
    stderr but its own lines (no MLflow log lines, no download bars)."""
    line = next(row for row in README.splitlines() if row.startswith(".venv/bin/python examples/"))
    script, *args = shlex.split(line)[1:]
    store = tmp_path / "mlflow.db"
    monkeypatch.chdir(tmp_path)  # MLflow's artifacts (./mlruns) land here, never in the repo
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    monkeypatch.setattr(sys, "argv", [script, *args])
    repo_before = sorted(p.name for p in ROOT.iterdir())
    level = logging.getLogger("mlflow").level  # the script quiets MLflow's INFO lines in its process
    try:
        outputs = []
        for _ in range(2):
            with pytest.raises(SystemExit) as done:
                runpy.run_path(str(ROOT / script), run_name="__main__")
            assert done.value.code == 0
            outputs.append(capfd.readouterr())
    finally:
        logging.getLogger("mlflow").setLevel(level)
    runs = sorted(p.stem for p in (ROOT / "examples" / "runs").glob("*.csv"))
    assert outputs[0].err.splitlines() == [f"logged {name}.csv as run {name}" for name in runs]
    assert outputs[1].err == ""
    again = outputs[1].out.split("\n\n")[0].splitlines()[2:]
    assert again and all(row.split()[1] == "unchanged" for row in again), again
    out = outputs[0].out
    table = out.split("\n\n")[0]
    assert sorted({row.split()[0] for row in table.splitlines()[2:]}) == runs
    sample = re.search(r"```\n(run +action +target .*?)```", README, re.S)
    assert sample is not None, "the README shows what the main job prints"
    printed = out.splitlines()
    for shown in sample.group(1).splitlines():  # each row shown is printed (the elided ones are "...")
        if shown.strip() not in ("", "..."):
            assert any(readme_examples.mismatch(shown, row) is None for row in printed), f"not printed: {shown}"

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("loss-eta-examples")
    for run in client.search_runs([experiment.experiment_id]):
        text = run.data.tags["when_3p3"]
        status = target_status(text)
        # Every bundled run finished its plan: 3.3 reached, or not in this run.
        assert status in (Status.REACHED, Status.NOT_REACHED), status
        if status == Status.NOT_REACHED:  # no crossing as a number: the best smoothed loss, above 3.3
            assert "when_3p3_Btok" not in run.data.metrics  # no number, never one: no key
            assert float(re.search(r"^✗ ([0-9.]+) best · ", text).group(1)) > 3.3
        assert run.info.status == "FINISHED"
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"loss_eta.json", "loss_eta.png"}
    # The closing hint names only keys the runs have (they log no clock: no hours).
    hint = out.split("\n\n")[-1]
    named = set(re.findall(r"\bwhen_3p3\w*|\bloss_eta_\w+", hint))
    held = set().union(*(set(r.data.metrics) | set(r.data.tags) for r in client.search_runs([experiment.experiment_id])))
    assert named and named <= held, named - held
    assert list((tmp_path / "mlruns").iterdir())
    assert sorted(p.name for p in ROOT.iterdir()) == repo_before
