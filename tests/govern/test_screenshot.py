"""report.html in headless Chromium (Playwright on Debian's `chromium`, tests/browser.py), opened
from file:// with the network off and every http(s) request refused: the page fetches nothing,
its plotly charts draw from the plotly.js inside it, a loss point per step, the markers on the
time charts, an empty chart saying what would fill it, markup in the data shown as text, and its
screenshot is the requested size and not blank (RUNWRIGHT_KEEP_SCREENSHOT=PATH keeps it, e.g.
for docs/img/report.png).
"""

import os
import shutil

import pytest
from runwright_tests_browser import FLAGS, assert_not_blank, playwright_chromium

from runwright.events import EventType
from runwright.govern import build_report
from runwright.store import NewEvent

from .conftest import RUN_ID

WIDTH, HEIGHT = 1280, 2400
MARKUP = "</script><script>window.pwned=1</script><img src=x onerror=window.pwned=1>"
LOAD_SECONDS = 60
"""Bound of a hang for loading and drawing the page (about 2 s on a busy 2-core machine)."""


@pytest.mark.integration
def test_report_draws_its_charts_offline_in_headless_chromium(store, tmp_path):
    chromium, sync_playwright = playwright_chromium()
    # A failure class carrying markup: it reaches the charts' JSON as a marker's label.
    store.append_event(
        NewEvent(event_id="markup", run_id=RUN_ID, generation=2, type=EventType.FAILURE_CLASSIFIED,
                 time_unix_s=1023.0, attributes={"failure_class": MARKUP, "rank": 0}),
        fenced=False,
    )  # fmt: skip
    html = build_report(store, RUN_ID, tmp_path / "report").html_path
    png = tmp_path / "report.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
        context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}, offline=True)
        context.route("http*://**", lambda route: route.abort())
        page = context.new_page()
        requests: list[str] = []
        errors: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(html.resolve().as_uri())
        page.wait_for_function(
            "() => document.body.dataset.charts === 'drawn'", timeout=LOAD_SECONDS * 1000
        )
        assert not errors, errors
        assert requests == [html.resolve().as_uri()], requests  # the report itself, nothing else
        charts = page.evaluate(
            "() => [...document.querySelectorAll('#run-charts .js-plotly-plot')].map(g => g.id)"
        )
        assert charts == [
            "chart-states", "chart-loss", "chart-source-loss", "chart-length-loss",
            "chart-grad-norm", "chart-tokens", "chart-ranks",
            "chart-straggler", "chart-checkpoints", "chart-nodes", "chart-wait",
            "chart-token-kinds", "chart-drift", "chart-mixture", "chart-cost",
        ]  # fmt: skip
        assert page.locator("#run-charts .main-svg").count() >= len(charts)
        # One loss point per step executed (8: steps 1-4, then 3-6 after the restore), drawn as
        # markers; the line breaks where generation 2 starts.
        loss = page.evaluate("document.getElementById('chart-loss').data[0].y")
        assert loss == [4.5, 4.0, 3.5, 3.0, None, 3.5, 3.0, 2.5, 2.0]
        points = "#chart-loss .scatterlayer .trace:first-child .point"
        assert page.locator(points).count() == 8
        # Every marker on every time chart, labelled on the loss chart.
        shapes = page.evaluate(
            "() => ['chart-states', 'chart-loss', 'chart-ranks', 'chart-drift'].map(id =>"
            " document.getElementById(id).layout.shapes.length)"
        )
        assert shapes == [5, 5, 5, 5]  # checkpoint, incident, restore, intervention, markup
        labels = page.locator("#chart-loss").inner_text()
        assert "ckpt @2" in labels and "node_lost (rank 1)" in labels
        # Two ranks, one line each; the fixture's drift windows are none: the chart says why.
        ranks = page.evaluate("document.getElementById('chart-ranks').data.map(t => t.name)")
        assert [name for name in ranks if name] == ["rank 0", "rank 1"]
        drift = page.evaluate("document.getElementById('chart-drift').layout.annotations[0].text")
        assert drift.startswith("no data: runwright.data.DataLoader reports")
        # Markup in the data is data: no script ran, and the label reads back unchanged.
        assert page.evaluate("window.pwned === undefined")
        assert page.evaluate("document.scripts.length") == 3
        data = page.evaluate("JSON.parse(document.getElementById('run-charts-data').textContent)")
        assert f"{MARKUP} (rank 0)" in [m["label"] for m in data["markers"]]
        page.screenshot(path=str(png))
        browser.close()
    if os.environ.get("RUNWRIGHT_KEEP_SCREENSHOT"):
        shutil.copy(png, os.environ["RUNWRIGHT_KEEP_SCREENSHOT"])
    assert assert_not_blank(png) == (WIDTH, HEIGHT)
