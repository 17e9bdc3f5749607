"""What a person sees in the MLflow UI, in a real browser.

A real ``mlflow server``; the bundled runs annotated as the README says
(``examples/mlflow_quickstart.py``); Debian's Chromium, headless, driven by Playwright
(no browser download). A person adds a target's columns to the runs table, opens a run,
and compares two runs; the test checks what they would see, from the page's own elements,
and saves a screenshot of each under ``docs/ui/`` (``--ui-shots`` writes them; otherwise
they go to the test's temporary folder).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.doubles.mlflow_server import MlflowServer

# A real server and a browser: about a minute. Left out of the default run; CI runs it.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
# The bundled runs log no clock: no run has hours (when_3p3_hours), so the UI offers none.
COLUMNS = ("when_3p3", "when_3p3_Btok", "when_3p3_step")
VIEWPORT = {"width": 2000, "height": 900}  # the runs table is wide: the columns of ours come last


@pytest.fixture(scope="module")
def ui(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The server with the bundled runs annotated, and a browser page on it."""
    if not Path(CHROMIUM).is_file():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium): the MLflow UI test needs it")
    from mlflow.tracking import MlflowClient
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("mlflow-ui")
    with MlflowServer(root / "server") as server:
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / "mlflow_quickstart.py"), "--tracking-uri", server.uri],
            check=True, capture_output=True, cwd=root, timeout=600,
        )  # fmt: skip
        client = MlflowClient(server.uri)
        experiment = client.get_experiment_by_name("loss-eta-examples")
        runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(60_000)
            yield {"uri": server.uri, "experiment": experiment.experiment_id, "runs": runs, "page": page,
                   "shots": root}  # fmt: skip
            browser.close()


@pytest.fixture
def shots(ui, request) -> Path:
    """Where the screenshots go: docs/ui with --ui-shots, else the test's temporary folder."""
    if request.config.getoption("--ui-shots"):
        folder = ROOT / "docs" / "ui"
        folder.mkdir(exist_ok=True)
        return folder
    return Path(ui["shots"])


def test_the_runs_table_shows_a_targets_columns_apart_and_readable(ui, shots):
    page = ui["page"]
    page.goto(f"{ui['uri']}/#/experiments/{ui['experiment']}/runs")
    page.get_by_text("Run Name").first.wait_for()
    _close_side_panel(page)
    for key in COLUMNS:  # as a person does: Columns, search, tick (unless shown already)
        if _header(page, key).count():
            continue
        page.get_by_role("button", name="Columns", exact=True).first.click()
        page.get_by_placeholder("Search columns").fill(key)
        # The search marks the match in each name (<strong>when_3p3</strong>_Btok): the item
        # is the span whose whole text is the key.
        page.locator("[data-radix-popper-content-wrapper]").locator(f"xpath=//span[normalize-space(.)='{key}']").first.click()
        page.keyboard.press("Escape")
    for key in COLUMNS:
        _header(page, key).first.wait_for()
    page.screenshot(path=str(shots / "runs-table.png"))

    headers = _header_cells(page)
    seen = {key: _visible_text(headers[key]) for key in COLUMNS}
    # Each header shows enough of its name to tell it from the others: the target and the measure.
    assert len(set(seen.values())) == len(COLUMNS), seen
    for key, shown in seen.items():
        assert shown.startswith("when_3p3") and (key == "when_3p3" or key[9:12] in shown), (key, shown)
    # Each number is shown whole at the default width: no cell is cut off.
    cells = _cells(page, [key for key in COLUMNS if key != "when_3p3"])
    assert cells, "no metric cells found"
    for key, text, cut in cells:
        assert not cut, f"{key}: {text!r} is cut off"
    numbers = {text for key, text, _ in cells if key == "when_3p3_Btok"}
    assert {"4.851", "10.18", "-"} <= numbers and "NaN" not in numbers, numbers  # billions of tokens, at a glance
    # The text column starts with the status word.
    texts = [text for key, text, _ in _cells(page, ["when_3p3"])]
    assert texts and all(t.split(" ")[0] in ("reached", "not_reached") for t in texts), texts


def test_the_run_page_shows_the_answer_before_any_chart_of_ours(ui, shots):
    page = ui["page"]
    run = ui["runs"]["olmo-ladder-760M-2xC"]
    page.goto(f"{ui['uri']}/#/experiments/{ui['experiment']}/runs/{run.info.run_id}")
    answer = page.get_by_text("reached · 10.18B tok").first
    answer.wait_for()
    _close_side_panel(page)
    page.screenshot(path=str(shots / "run-overview.png"))
    box = answer.bounding_box()
    assert box is not None and box["y"] + box["height"] <= VIEWPORT["height"], box  # no scrolling

    page.goto(f"{ui['uri']}/#/experiments/{ui['experiment']}/runs/{run.info.run_id}/model-metrics")
    page.get_by_text("val_loss", exact=True).first.wait_for()
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 4")  # drawn, not loading
    page.screenshot(path=str(shots / "run-charts.png"))
    body = page.locator("body").inner_text()
    # One chart section: ours go with the run's own, after them (no section of ours ahead).
    assert "loss_eta" not in body, body[:500]
    own = [_at(body, name) for name in ("global_batch", "lr", "tokens", "val_loss")]  # the run's own metrics
    ours = [_at(body, name) for name in ("when_3p3_Btok", "when_3p3_step")]  # (charts further down are drawn on scrolling)
    assert max(own) < min(ours), (own, ours)


def test_the_compare_view_of_two_runs_shows_both_plots(ui, shots):
    page = ui["page"]
    pair = [ui["runs"][name].info.run_id for name in ("olmo-ladder-760M-2xC", "nanogpt-124M-adamw-llmc")]
    query = urllib.parse.urlencode({"runs": json.dumps(pair), "experiments": json.dumps([ui["experiment"]])})
    page.goto(f"{ui['uri']}/#/compare-runs?{query}")
    page.get_by_text("loss_eta.png", exact=True).first.click()
    # MLflow draws each run's preview from a blob it fetched: two pictures, drawn.
    drawn = "Array.from(document.images).filter(i => i.src.startsWith('blob:') && i.complete && i.naturalWidth >= 600)"
    page.wait_for_function(f"new Set({drawn}.map(i => i.src)).size >= 2")
    _close_side_panel(page)
    page.locator("img[src^='blob:']").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "compare.png"))
    shown = page.evaluate(
        f"""async () => {{
            const sources = [...new Set({drawn}.map(i => i.src))];
            const bytes = async src => Array.from(new Uint8Array(await (await fetch(src)).arrayBuffer()));
            return Promise.all(sources.map(bytes));
        }}"""
    )
    stored = {_sha(_artifact(ui, run_id, "loss_eta.png")) for run_id in pair}
    assert {_sha(bytes(b)) for b in shown} == stored  # the two runs' own plots, side by side


# -- reading the page ------------------------------------------------------------------------


def _artifact(ui: dict[str, Any], run_id: str, path: str) -> bytes:
    from mlflow.tracking import MlflowClient

    folder = Path(ui["shots"]) / "downloads" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    return Path(MlflowClient(ui["uri"]).download_artifacts(run_id, path, str(folder))).read_bytes()


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _close_side_panel(page: Any) -> None:
    """MLflow 3 opens an assistant panel beside the page; a person closes it."""
    close = page.get_by_role("button", name="Close")
    if close.count():
        close.first.click()


def _header(page: Any, key: str) -> Any:
    return page.locator(f".ag-header-cell:has([data-testid='sort-header-{key}'])")


def _header_cells(page: Any) -> dict[str, Any]:
    found = {}
    for cell in page.locator(".ag-header-cell").all():
        name = cell.inner_text().strip()
        if name in COLUMNS:
            found[name] = cell
    assert set(found) == set(COLUMNS), sorted(found)
    return found


def _visible_text(cell: Any) -> str:
    """The part of a header's text the column's width shows (the rest is cut off)."""
    return str(cell.evaluate(
        """cell => {
            const label = cell.querySelector('.ag-header-cell-text') || cell;
            const text = label.textContent.trim();
            const room = label.clientWidth;
            const probe = document.createElement('span');
            probe.style.font = getComputedStyle(label).font;
            probe.style.visibility = 'hidden';
            probe.style.whiteSpace = 'pre';
            document.body.appendChild(probe);
            let shown = '';
            for (const ch of text) {
                probe.textContent = shown + ch + '…';
                if (probe.getBoundingClientRect().width > room) break;
                shown += ch;
            }
            probe.remove();
            return shown;
        }"""
    ))


def _cells(page: Any, keys: list[str]) -> list[tuple[str, str, bool]]:
    """(column, text, cut off?) of every cell of these columns."""
    out = []
    for key in keys:
        column = _header(page, key).first.get_attribute("col-id")
        for cell in page.locator(f".ag-cell[col-id='{column}']").all():
            text = cell.inner_text().strip()
            cut = bool(cell.evaluate("c => { const t = c.querySelector('span,div') || c; return t.scrollWidth > t.clientWidth + 1; }"))
            out.append((key, text, cut))
    return out


def _at(body: str, chart: str) -> int:
    """Where a chart's title comes in the page's text (charts are titled by the metric's name)."""
    lines = body.splitlines()
    assert chart in lines, f"no chart {chart!r}"
    return lines.index(chart)
