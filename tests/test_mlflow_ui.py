"""What a person sees in the MLflow UI, in a real browser, on a laptop's screen.

A real ``mlflow server``; the bundled runs annotated as the README says
(``examples/mlflow_quickstart.py``); Debian's Chromium, headless, at 1440x900, driven by
Playwright (no browser download). A person follows docs/annotating.md: picks a target's
columns in the runs table (leaving out Dataset, Source and Models so they fit), sorts
them soonest first, opens a run, compares two runs' plots, and draws the runs' smoothed
losses against tokens in the chart view. The test checks what they would see from the
page's own elements, and saves a screenshot of each under ``docs/ui/`` (``--ui-shots``
writes them; otherwise they go to the test's temporary folder).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.doubles.mlflow_server import MlflowServer
from tracker_plugin.keys import SERIES_LOSS, SERIES_TOKENS

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
HIDDEN = ("Dataset", "Source", "Models")  # the attribute columns the docs say to leave out
VIEWPORT = {"width": 1440, "height": 900}  # a laptop's screen
# What a runs-table text shows first: a mark, then a whole number (its word may be cut).
ANSWER = re.compile(r"^[✓≈→✗–] \d[\d.,]*[KMBT]?( |…|$)")


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
                   "shots": root, "client": client}  # fmt: skip
            browser.close()


@pytest.fixture
def shots(ui, request) -> Path:
    """Where the screenshots go: docs/ui with --ui-shots, else the test's temporary folder."""
    if request.config.getoption("--ui-shots"):
        folder = ROOT / "docs" / "ui"
        folder.mkdir(exist_ok=True)
        return folder
    return Path(ui["shots"])


def test_the_runs_table_on_a_laptop_shows_each_answer_in_the_default_width(ui, shots):
    page = ui["page"]
    page.goto(f"{ui['uri']}/#/experiments/{ui['experiment']}/runs")
    page.get_by_text("Run Name").first.wait_for()
    _close_side_panel(page)
    _pick_columns(page)
    for key in COLUMNS:
        _header(page, key).first.wait_for()
    # Sorted soonest first: a metric column's first click sorts descending, the second ascending.
    for _ in range(2):
        page.get_by_test_id("sort-header-when_3p3_Btok").click()
        page.wait_for_timeout(1500)
    page.screenshot(path=str(shots / "runs-table.png"))

    headers = _header_cells(page)
    for key, cell in headers.items():  # every picked column on the screen: no sideways scroll
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= VIEWPORT["width"], (key, box)
    seen = {key: _visible_text(headers[key]) for key in COLUMNS}
    assert len(set(seen.values())) == len(COLUMNS), seen  # told apart: the target and the measure
    # The numbers whole and uncut, steps whole (MLflow formats a metric cell itself).
    cells = _cells(page, ["when_3p3_Btok", "when_3p3_step"])
    assert cells, "no metric cells found"
    for key, text, cut in cells:
        assert not cut, f"{key}: {text!r} is cut off"
    steps = [text for key, text, _ in cells if key == "when_3p3_step" and text != "-"]
    assert steps and all(re.fullmatch(r"\d+", s) for s in steps), steps
    tokens = [text for key, text, _ in cells if key == "when_3p3_Btok"]
    assert {"4.92", "10.18", "-"} <= set(tokens) and "NaN" not in tokens, tokens
    # Soonest first: the column ascending, the runs that never reach 3.3 last.
    reached = [float(t) for t in tokens if t != "-"]
    assert reached == sorted(reached) and tokens[-1] == "-", tokens
    # Each answer's mark and whole number show in the column's default width.
    texts = [cell for key, _, cell in _visible_cells(page, "when_3p3")]
    assert len(texts) == len(ui["runs"])
    for visible in texts:
        assert ANSWER.match(visible), f"{visible!r}: the mark and the number do not show"


def test_the_run_page_lists_the_answers_first_and_draws_no_chart_of_one_dot(ui, shots):
    page = ui["page"]
    run = ui["runs"]["olmo-ladder-760M-2xC"]
    page.goto(f"{ui['uri']}/#/experiments/{ui['experiment']}/runs/{run.info.run_id}")
    answer = page.get_by_text("✓ 10.18B tok · reached").first
    answer.wait_for()
    _close_side_panel(page)
    page.screenshot(path=str(shots / "run-overview.png"))
    box = answer.bounding_box()
    assert box is not None and box["y"] + box["height"] <= VIEWPORT["height"], box  # no scrolling
    lines = page.locator("body").inner_text().splitlines()
    tags = [line for line in lines[lines.index("Tags"):] if re.fullmatch(r"when_\w+|loss_eta\w*", line)]
    answers = tags[: tags.index("loss_eta")]  # the answers (each target's, the plan's end), then the JSON
    assert {"when_3p1", "when_3p3", "when_3p6"} <= set(answers) <= {"when_3p1", "when_3p3", "when_3p6", "loss_eta_end_text"}, tags

    page.goto(f"{ui['uri']}/#/experiments/{ui['experiment']}/runs/{run.info.run_id}/model-metrics")
    # The page draws only the charts in view (sorted by name): wait for one of the first.
    page.get_by_text(SERIES_LOSS, exact=True).first.wait_for()
    charts = _charts(page)
    page.screenshot(path=str(shots / "run-charts.png"))
    # The run's curves and the smoothed loss are lines; each number of ours a bar with its
    # value on it (MLflow draws a metric whose values sit at step 0 so): no chart of one dot.
    assert charts["val_loss"] == ["lines"] and charts[SERIES_LOSS] == ["lines"], charts
    ours = {name: kinds for name, kinds in charts.items() if name.startswith("when_")}
    assert set(ours) == {"when_3p3_Btok", "when_3p3_step", "when_3p6_Btok", "when_3p6_step"}, charts
    assert all(kinds == ["bar"] for kinds in ours.values()), ours
    assert charts["loss_eta_end"] == ["bar"], charts  # the plan's end loss: a number, no chart of one dot


def test_the_compare_view_shows_both_plots_legible_at_its_width(ui, shots):
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
            const shown = {drawn}.filter(i => i.getBoundingClientRect().width > 0);  // the previews on the page
            const images = [...new Map(shown.map(i => [i.src, i])).values()];
            const bytes = async src => Array.from(new Uint8Array(await (await fetch(src)).arrayBuffer()));
            return Promise.all(images.map(async i => [await bytes(i.src), i.naturalWidth, i.getBoundingClientRect().width]));
        }}"""
    )
    stored = {_sha(_artifact(ui, run_id, "loss_eta.png")) for run_id in pair}
    assert {_sha(bytes(b)) for b, _, _ in shown} == stored  # the two runs' own plots, side by side
    from tracker_plugin.report.plot_parts import SMALLEST

    for _, natural, width in shown:
        # The smallest text of a plot (SMALLEST points at 110 dpi) as tall as it is drawn here.
        height = SMALLEST * 110 / 72 * min(width, natural) / natural
        assert height >= 9.0, (width, natural, round(height, 1))


def test_the_chart_view_draws_the_runs_smoothed_losses_against_tokens(ui, shots):
    page = ui["page"]
    page.goto(f"{ui['uri']}/#/experiments/{ui['experiment']}/runs?compareRunsMode=CHART")
    page.get_by_role("button", name="Configure charts").first.wait_for()
    _close_side_panel(page)
    # As the docs say: Configure charts, X-axis Metric, loss_eta_tokens.
    page.get_by_role("button", name="Configure charts").first.click()
    page.get_by_role("menuitem", name="Metric").hover()
    item = page.locator("[role=menuitemcheckbox]", has_text=SERIES_TOKENS).first
    item.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Escape")
    page.get_by_placeholder("Search metric charts").fill(SERIES_LOSS)
    card = page.get_by_test_id("experiment-view-compare-runs-card").filter(has_text=SERIES_LOSS).first
    card.wait_for()
    page.wait_for_function(
        "() => { const c = [...document.querySelectorAll('.js-plotly-plot')]; "
        "return c.length && c[0].data && c[0].data.filter(t => (t.x || []).length > 1).length >= 5; }"
    )
    page.screenshot(path=str(shots / "chart-view.png"))
    traces = card.evaluate(
        "c => c.querySelector('.js-plotly-plot').data.filter(t => (t.x || []).length > 1)"
        ".map(t => [t.name, Math.max(...t.x), Math.min(...t.y), t.x.length])"
    )
    traces = list({name: (name, x, y, n) for name, x, y, n in traces}.values())  # a run's line and its hover twin
    client = ui["client"]
    expected = {}
    for name, run in ui["runs"].items():
        tokens = client.get_metric_history(run.info.run_id, SERIES_TOKENS)
        expected[name] = (max(m.value for m in tokens), len(tokens))
    assert len(traces) == len(expected) == 5, traces
    for name, x_max, y_min, points in traces:
        run = next(run for run in expected if name.startswith(run))
        last_tokens, logged = expected[run]
        # The x-axis is tokens (the run's last smoothed point at its last tokens), every point drawn.
        assert x_max == pytest.approx(last_tokens, rel=1e-9) and points >= min(logged, 300), (name, points, logged)
        assert 2.5 < y_min < 4.0, (name, y_min)  # a smoothed loss, not a count


# -- reading the page ------------------------------------------------------------------------


def _pick_columns(page: Any) -> None:
    """As a person does, under Columns: untick Dataset, Source and Models, then search for
    and tick each of ours (unless shown already)."""
    page.get_by_role("button", name="Columns", exact=True).first.click()
    menu = page.locator("[data-radix-popper-content-wrapper]")
    for name in HIDDEN:
        if page.locator(".ag-header-cell", has_text=name).count():
            menu.get_by_text(name, exact=True).first.click()
    page.keyboard.press("Escape")
    for key in COLUMNS:
        if _header(page, key).count():
            continue
        page.get_by_role("button", name="Columns", exact=True).first.click()
        page.get_by_placeholder("Search columns").fill(key)
        # The search marks the match in each name (<strong>when_3p3</strong>_Btok): the item
        # is the span whose whole text is the key.
        menu.locator(f"xpath=//span[normalize-space(.)='{key}']").first.click()
        page.keyboard.press("Escape")


def _charts(page: Any) -> dict[str, list[str]]:
    """Each chart of the run page by its title: its traces' kinds (``lines``, ``bar``).
    The page draws a chart when it is scrolled to: every one is scrolled to first."""
    page.mouse.move(800, 600)
    found: dict[str, list[str]] = {}
    for _ in range(12):
        for card in page.get_by_test_id("experiment-view-compare-runs-card").all():
            title = card.inner_text().splitlines()[0].strip()
            kinds = card.evaluate(
                "c => { const p = c.querySelector('.js-plotly-plot'); "
                "return p && p.data ? p.data.map(t => t.type === 'bar' ? 'bar' : t.mode) : null; }"
            )
            if kinds:
                found[title] = sorted(set(kinds))
        page.mouse.wheel(0, 500)
        page.wait_for_timeout(600)
    return found


def _artifact(ui: dict[str, Any], run_id: str, path: str) -> bytes:
    folder = Path(ui["shots"]) / "downloads" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    return Path(ui["client"].download_artifacts(run_id, path, str(folder))).read_bytes()


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


_VISIBLE = """(cell, [selector, ellipsis]) => {
    const label = cell.querySelector(selector) || cell;
    const text = label.textContent.trim();
    const room = label.clientWidth;
    const probe = document.createElement('span');
    probe.style.font = getComputedStyle(label).font;
    probe.style.visibility = 'hidden';
    probe.style.whiteSpace = 'pre';
    document.body.appendChild(probe);
    let shown = '';
    for (const ch of text) {
        probe.textContent = shown + ch + (shown.length + 1 < text.length ? ellipsis : '');
        if (probe.getBoundingClientRect().width > room) break;
        shown += ch;
    }
    probe.remove();
    return shown.length < text.length ? shown + ellipsis : shown;
}"""


def _visible_text(cell: Any) -> str:
    """The part of a header's text the column's width shows (the rest is cut off)."""
    return str(cell.evaluate(_VISIBLE, [".ag-header-cell-text", ""])).rstrip("…")


def _visible_cells(page: Any, key: str) -> list[tuple[str, str, str]]:
    """(column, whole text, the part the column shows with its ellipsis) of a text column."""
    column = _header(page, key).first.get_attribute("col-id")
    return [
        (key, cell.inner_text().strip(), str(cell.evaluate(_VISIBLE, ["span,div", "…"])))
        for cell in page.locator(f".ag-cell[col-id='{column}']").all()
    ]


def _cells(page: Any, keys: list[str]) -> list[tuple[str, str, bool]]:
    """(column, text, cut off?) of every cell of these columns, top to bottom."""
    out = []
    for key in keys:
        column = _header(page, key).first.get_attribute("col-id")
        cells = page.locator(f".ag-cell[col-id='{column}']").all()
        cells.sort(key=lambda c: (c.bounding_box() or {"y": 0})["y"])
        for cell in cells:
            text = cell.inner_text().strip()
            cut = bool(cell.evaluate("c => { const t = c.querySelector('span,div') || c; return t.scrollWidth > t.clientWidth + 1; }"))
            out.append((key, text, cut))
    return out
