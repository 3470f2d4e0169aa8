"""The dashboard (issue 15) on a real `runwright server` with its controller and real runs of the
reference trainer: the access rules through HTTP (no cookie -> login, another project's token ->
no page, a viewer's data without sample text, HTML escaped), and, in headless Chromium driven by
Playwright, a login, a run page whose loss chart gains points while the run trains and which
shows the straggler alert of its slowed rank while it trains, and the compare view of two runs,
with screenshots checked to be non-blank.

The browser test needs Debian's `chromium` and the `playwright` package (dev extra, see
tests/browser.py); without them it skips, unless RUNWRIGHT_REQUIRE_BROWSER=1 (set in CI), where
that is a failure.
"""

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from runwright_tests_browser import FLAGS, assert_not_blank, playwright_chromium
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.access.base import local_actor
from runwright.access.service import Access
from runwright.control.alert_signals import INCOMPLETE_AFTER_STEPS
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.spec.alerts import DEFAULT_RULES
from runwright.store import NewEvent, Store

from .conftest import running_server

pytestmark = pytest.mark.integration
SAMPLE = "a line of training data the viewer must not read"
MARKUP = "<img src=x onerror=window.pwned=1>"
SLOW_SECONDS = 0.25
"""The live run's rank 1 spends this much more in each step's forward (`--slow-rank`), and rank 0
waits for it in the gradient all-reduce: a straggler the default rule flags, and a run still
training while the page watches (40 steps: at least 10 s after its first). With c the rest of a
step (about 0.02 s here), rank 1's busy time over the median of the two is
2 (0.25 + c) / (0.25 + 2c): 1.86 at c = 0.02 s, above the threshold 1.5 while c < 0.125 s."""
LIVE_STEPS = 40
RUN_SECONDS = 300.0
"""Bound of a hang for a short run to finish (torchrun start-up on a busy 2-core machine takes
tens of seconds); not an expected time."""
POLL_SECONDS = 1.5
"""The run page's poll (dashboard.js POLL_MS)."""
STRAGGLER = next(rule for rule in DEFAULT_RULES if rule.kind == "straggler")


def _spec(dataset, steps: int, args: list[str], ranks: int = 1) -> dict:
    data = tiny_gpt(dataset, steps=steps, name=f"dash-{steps}", devices=ranks,
                    every_steps=max(2, steps // 4), eval_every_steps=steps,
                    eval_sequences=4)  # fmt: skip
    data["code"]["args"] = args
    data["governance"]["tags"] = {"team": "dash"}
    data["observability"] = {"system_sample_seconds": 1}  # the system layer's table and series
    return data


def _wait_finished(client: httpx.Client, run_id: str, seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        status = client.get(f"/v1/runs/{run_id}", params={"events": "false"}).json()
        if status["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return status
        assert time.monotonic() < deadline, f"{run_id} still {status['state']} after {seconds} s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A server with its controller; in project `default` a site admin, a viewer and one
    finished short run (with an event quoting sample text and markup); project `other` with
    its own admin."""
    base = tmp_path_factory.mktemp("dashboard")
    root, url = base / "root", f"sqlite:///{base / 'state.db'}"
    dataset = build_dataset(TINY_DATA, root)
    store = Store(url)
    local = Access(store, root, local_actor())
    local.create_project("other")
    local.set_role("default", "vera", "viewer")
    local.set_role("other", "otto", "admin")
    local.grant_dataset("default", dataset.manifest.dataset_id)
    tokens = {
        "viewer": local.create_token("vera", "default", days=1)["token"],
        "other": local.create_token("otto", "other", days=1)["token"],
    }
    store.close()
    spec = lambda steps, args, ranks=1: _spec(dataset, steps, args, ranks)  # noqa: E731
    with running_server(url, root) as server:
        tokens["admin"] = server.admin_token
        with server.client(server.admin_token) as admin:
            made = admin.post("/v1/runs", json={"spec": spec(4, [])})
            assert made.status_code == 201, made.text
            short = made.json()["run_id"]
            ended = _wait_finished(admin, short, RUN_SECONDS)
            assert ended["state"] == "SUCCEEDED", ended["state_detail"]
        check = server.store()
        check.append_event(
            NewEvent(
                event_id="dashboard-sample",
                run_id=short,
                generation=0,
                type=EventType.FAILURE_CLASSIFIED,
                time_unix_s=time.time(),
                attributes={"failure_class": "data", "rank": 0, "message": f"{SAMPLE} {MARKUP}"},
            ),
            fenced=False,
        )
        # What the alert engine writes (events.py): one alert open, one fired and cleared.
        for seq, (kind, alert_id) in enumerate(
            [
                (EventType.ALERT_FIRED, "straggler:rank0"),
                (EventType.ALERT_FIRED, "input_stall"),
                (EventType.ALERT_CLEARED, "input_stall"),
            ]
        ):
            check.append_event(
                NewEvent(
                    event_id=f"dashboard-alert-{seq}",
                    run_id=short,
                    generation=0,
                    type=kind,
                    time_unix_s=time.time(),
                    attributes={
                        "alert_id": alert_id,
                        "rule": alert_id.split(":")[0],
                        "severity": "warning",
                        "owner": "runwright",
                    },
                ),
                fenced=False,
            )
        check.close()
        yield {"server": server, "tokens": tokens, "short": short, "spec": spec}


@contextlib.contextmanager
def _cookie_client(server, token: str | None) -> Iterator[httpx.Client]:
    """A client that logged in on /ui/login with `token` (None: never logged in)."""
    with httpx.Client(base_url=server.url, timeout=60.0) as client:
        if token is not None:
            logged = client.post("/ui/login", data={"token": token, "next": "/ui/runs"})
            assert logged.status_code == 303 and logged.headers["location"] == "/ui/runs"
            cookie = logged.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie
        yield client


def test_pages_answer_only_what_the_token_may_see(world):
    server, tokens, short = world["server"], world["tokens"], world["short"]
    with _cookie_client(server, None) as anonymous:
        page = anonymous.get("/ui/runs")
        assert page.status_code == 303 and page.headers["location"].startswith("/ui/login")
        assert anonymous.get(f"/ui/api/runs/{short}").status_code == 401
        refused = anonymous.post("/ui/login", data={"token": "rwt_not-a-token"})
        assert refused.status_code == 401 and "malformed" in refused.text
        assert "set-cookie" not in refused.headers
        evil = anonymous.post("/ui/login", data={"token": tokens["viewer"], "next": "//evil"})
        assert evil.headers["location"] == "/ui/runs"  # no redirect off the dashboard
    with _cookie_client(server, tokens["other"]) as other:
        assert other.get(f"/ui/runs/{short}").status_code == 404
        assert other.get(f"/ui/api/runs/{short}").status_code == 404
        assert short not in other.get("/ui/runs").text
    with _cookie_client(server, tokens["admin"]) as admin:
        listed = admin.get("/ui/runs", params={"tag": "team=dash", "state": "SUCCEEDED"})
        assert listed.status_code == 200 and short in listed.text
        assert short not in admin.get("/ui/runs", params={"tag": "team=other"}).text
        assert short in admin.get("/ui/runs", params={"owner": "runwright"}).text
        assert admin.get("/ui/queue").status_code == 200
        assert admin.get("/ui/compare", params={"run": [short] * 9}).status_code == 400
        assert admin.get("/ui/api/compare", params={"run": [short]}).status_code == 400
        full = admin.get(f"/ui/api/runs/{short}").json()
        assert SAMPLE in str(full["events"])  # the admin may read it: the check below can fail
        assert [p for p in full["steps"]["step"]] == [1, 2, 3, 4]
        assert len(full["checkpoints"]) >= 1 and full["checkpoints"][0]["durability_lag_seconds"]
        assert {r["source"] for r in full["mixture"]} == {"notes", "records"}
        assert [a["alert_id"] for a in full["alerts"]] == ["straggler:rank0"]
        # The system layer (issue 24): the node's newest sample on the run page's node table,
        # from its one sampler (local rank 0), with plausible values; no GPU on this machine.
        (node,) = full["system"]
        memory = psutil.virtual_memory().total
        assert node["node"] == socket.gethostname() and 0 <= node["cpu_percent"] <= 100
        assert 0 < node["memory_used_bytes"] < node["memory_total_bytes"] == memory
        assert node["run_disk_used_bytes"] > 0 and node["gpus"] == 0
        assert 0 <= node["step"] <= 4 and node["xid_events"] == 0
        samples = [e for e in full["events"] if e["type"] == EventType.SYSTEM_SAMPLE]
        assert samples and {e["attributes"]["rank"] for e in samples} == {0}
        assert (
            admin.get("/ui/static/plotly.min.js")
            .headers["content-type"]
            .startswith("text/javascript")
        )
    with server.client(tokens["admin"]) as api:  # ... and the same node in /metrics
        scraped = api.get("/metrics").text
        labels = f'node="{socket.gethostname()}",project="default",run_id="{short}"'
        (total,) = [
            float(line.rsplit(" ", 1)[1])
            for line in scraped.splitlines()
            if line.startswith(f"runwright_node_memory_total_bytes{{{labels}}} ")
        ]
        assert total == memory
        assert f'runwright_node_disk_used_bytes{{folder="run",{labels}}}' in scraped
    with _cookie_client(server, tokens["viewer"]) as viewer:
        seen = viewer.get(f"/ui/api/runs/{short}")
        assert seen.status_code == 200 and SAMPLE not in seen.text
        assert "<redacted:" in seen.text
        page = viewer.get(f"/ui/runs/{short}")
        assert (
            page.status_code == 200
            and "script-src 'self'" in page.headers["content-security-policy"]
        )


POINTS = "n => { const g = document.getElementById('chart-loss');" \
    " return !!(g && g.data && g.data[0].x.length >= n); }"  # fmt: skip


def test_live_run_page_and_compare_view_in_chromium(world, tmp_path):
    chromium, sync_playwright = playwright_chromium()
    server, tokens, short = world["server"], world["tokens"], world["short"]
    with server.client(tokens["admin"]) as admin:
        slowed = ["--slow-rank", "1", "--slow-seconds", str(SLOW_SECONDS)]
        spec = world["spec"](LIVE_STEPS, slowed, 2)  # 2 ranks: one line each, one straggler
        made = admin.post("/v1/runs", json={"spec": spec})
        assert made.status_code == 201, made.text
        live = made.json()["run_id"]
    with _cookie_client(server, tokens["admin"]) as admin_pages:  # it trains for 10 s or more
        assert live in admin_pages.get("/ui/queue").text
        assert admin_pages.get("/ui/runs/not a run id").status_code == 400
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/ui/runs/{live}")
        assert "/ui/login" in page.url  # no cookie yet
        page.fill("#token", tokens["admin"])
        page.click("#login")
        page.wait_for_url(f"**/ui/runs/{live}")
        # The first point comes once torchrun has started the workers: a bound of a hang.
        page.wait_for_function(POINTS, arg=1, timeout=RUN_SECONDS * 1000)
        data = page.evaluate("window.dashboard.data")
        first = len(data["steps"]["step"])
        assert not data["finished"], "the run ended before the page saw it train"
        # The next points: a few steps at the step time measured so far, plus two polls.
        step_s = max(s for s in data["steps"]["step_seconds"] if s is not None)
        wait_s = 5 * step_s + 2 * POLL_SECONDS + 10
        page.wait_for_function(POINTS, arg=first + 2, timeout=wait_s * 1000)
        # One time axis: a zoom on the loss chart zooms every time chart and stays while the
        # page keeps polling; a reset (double-click) gives all of them the whole window back.
        page.evaluate(
            "() => { const t = window.dashboard.data.steps.time_unix_s;"
            " Plotly.relayout('chart-loss', {'xaxis.range[0]': t[0] * 1000,"
            " 'xaxis.range[1]': t[1] * 1000}); }"
        )
        same_zoom = (
            "n => window.dashboard.updates >= n && ['chart-states', 'chart-tokens',"
            " 'chart-ranks', 'chart-checkpoints'].every(id =>"
            " document.getElementById(id)._fullLayout.xaxis.range.join() ==="
            " document.getElementById('chart-loss')._fullLayout.xaxis.range.join())"
            " && !document.getElementById('chart-tokens')._fullLayout.xaxis.autorange"
        )
        updates = page.evaluate("window.dashboard.updates")
        page.wait_for_function(same_zoom, arg=updates + 1, timeout=wait_s * 1000)
        page.evaluate("Plotly.relayout('chart-tokens', {'xaxis.autorange': true})")
        page.wait_for_function(
            "() => document.getElementById('chart-loss')._fullLayout.xaxis.autorange",
            timeout=10_000,
        )
        # The straggler: the rule fires once rank 1 was slow for its window of steps (each
        # step judged once both ranks reported it, or once INCOMPLETE_AFTER_STEPS newer ones
        # are in), and the page lists it, naming the rank, while the run still trains.
        alert_s = (STRAGGLER.window_steps + INCOMPLETE_AFTER_STEPS + 2) * step_s
        page.wait_for_function(
            "() => { const d = window.dashboard.data; return d.finished ||"
            " d.alerts.some(a => a.alert_id === 'straggler:rank1'); }",
            timeout=(alert_s + 2 * POLL_SECONDS + 10) * 1000,
        )
        assert not page.evaluate("window.dashboard.data.finished"), "ended before its alert"
        alerts = page.locator("#alerts").inner_text()
        assert "straggler:rank1" in alerts and "straggler on rank 1" in alerts, alerts
        assert not errors, errors
        remaining = LIVE_STEPS - first
        page.wait_for_function(
            "() => window.dashboard.data && window.dashboard.data.finished",
            timeout=(remaining * step_s * 3 + 60) * 1000,
        )
        page.wait_for_timeout(500)  # plotly's last redraw
        # The charts and tables above the event log (the log itself is folded).
        page.screenshot(path=str(shots / "run.png"), full_page=True)
        ranks = page.evaluate(
            "document.getElementById('chart-ranks').data"
            ".filter(t => (t.name || '').startsWith('rank')).length"
        )
        assert ranks == 2 and page.locator("#checkpoints table").count() == 1
        # The system layer: the node's table row and its CPU line on the shared time axis.
        assert socket.gethostname() in page.locator("#system table").inner_text()
        node_lines = page.evaluate(
            "document.getElementById('chart-nodes').data"
            ".filter(t => (t.name || '').endsWith(' CPU')).map(t => t.y.length)"
        )
        assert len(node_lines) == 1 and node_lines[0] >= 2, node_lines  # one node, 1 s samples
        # The system layer's straggler score reads what the alert read (busy time).
        scores = page.evaluate("window.dashboard.data.steps.straggler_score")
        assert max(s for s in scores if s is not None) > STRAGGLER.threshold, scores

        page.goto(f"{server.url}/ui/compare?run={short}&run={live}")
        page.wait_for_function(
            "() => { const g = document.getElementById('chart-compare-loss');"
            " return !!(g && g.data && g.data.length === 2); }",
            timeout=60_000,
        )
        page.check("input[name=axis][value=tokens]")
        title = page.evaluate(
            "document.getElementById('chart-compare-loss').layout.xaxis.title.text"
        )
        assert title == "device tokens"
        assert "training.steps" in page.locator("#spec-diff").inner_text()
        page.wait_for_timeout(500)
        page.screenshot(path=str(shots / "compare.png"), full_page=True)

        # A viewer sees the short run's incident as a length, never its text; markup is text.
        viewer = browser.new_context().new_page()
        viewer.goto(f"{server.url}/ui/login?next=/ui/runs/{short}")
        viewer.fill("#token", tokens["viewer"])
        viewer.click("#login")
        viewer.wait_for_function("() => window.dashboard && window.dashboard.updates >= 1")
        shown = viewer.evaluate("document.body.textContent")
        assert SAMPLE not in shown and "redacted" in shown
        admin_view = context.new_page()
        admin_view.goto(f"{server.url}/ui/runs/{short}")
        admin_view.wait_for_function("() => window.dashboard && window.dashboard.updates >= 1")
        assert MARKUP in admin_view.locator("#events").text_content()
        assert "straggler:rank0" in admin_view.locator("#alerts").inner_text()
        assert admin_view.evaluate("window.pwned === undefined")
        browser.close()
    for png in (shots / "run.png", shots / "compare.png"):
        assert_not_blank(png)
    if os.environ.get("RUNWRIGHT_KEEP_SCREENSHOT"):
        keep = Path(os.environ["RUNWRIGHT_KEEP_SCREENSHOT"])
        keep.mkdir(parents=True, exist_ok=True)
        for png in shots.iterdir():
            (keep / png.name).write_bytes(png.read_bytes())
