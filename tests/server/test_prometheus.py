"""A real Prometheus (Debian's `prometheus`) scrapes a real `runwright server` every second with
a bearer token while the reference trainer trains under the server's controller; Prometheus's
HTTP API then shows the run's step and token counters increasing. Without the binary the test
skips, unless RUNWRIGHT_REQUIRE_PROMETHEUS=1 (CI) makes that a failure."""

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.access.base import local_actor
from runwright.access.service import Access
from runwright.data import build_dataset
from runwright.store import Store

from .conftest import free_port, running_server

HANG_SECONDS = 120.0
"""The bound of a hang for each wait below (Prometheus up, the run's first scraped step, the
run's end); each wait ends as soon as its condition holds."""

pytestmark = pytest.mark.integration


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("RUNWRIGHT_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(
                "RUNWRIGHT_REQUIRE_PROMETHEUS=1 but no prometheus: apt-get install prometheus"
            )
        pytest.skip("Debian's prometheus is not installed")
    return found


@contextlib.contextmanager
def running_prometheus(folder: Path, target: str, token: str) -> Iterator[str]:
    """Prometheus on a free loopback port scraping `target`'s /metrics every second."""
    folder.mkdir(parents=True)
    token_file = folder / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "runwright",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                "static_configs": [{"targets": [target]}],
            }
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = folder / "prometheus.log"
    argv = [
        _prometheus_binary(),
        f"--config.file={folder / 'prometheus.yml'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.path={folder / 'tsdb'}",
    ]
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _ready(url, process, log), "Prometheus ready")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready(url: str, process: subprocess.Popen, log: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"prometheus exited: {log.read_text()[-3000:]}")
    try:
        return httpx.get(f"{url}/-/ready", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        return False


def _wait(condition, what: str, seconds: float = HANG_SECONDS):
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what() if callable(what) else what} within {seconds} s")
        time.sleep(0.25)


def _query(url: str, promql: str) -> list[dict]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10.0).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _spec(root: Path) -> tuple[dict, str]:
    dataset = build_dataset(TINY_DATA, root)
    # Far more steps than the test watches: it cancels the run once the counters have grown.
    return tiny_gpt(dataset, steps=100_000, devices=1, every_steps=50), dataset.manifest.dataset_id


def test_prometheus_scrapes_a_training_run(tmp_path):
    _prometheus_binary()
    root, url = tmp_path / "root", f"sqlite:///{tmp_path / 'state.db'}"
    spec, dataset_id = _spec(root)
    store = Store(url)
    local = Access(store, root, local_actor())
    local.grant_dataset("default", dataset_id)
    local.create_project("other")
    local.set_role("other", "olivia", "viewer")
    outsider = local.create_token("olivia", "other", days=1)["token"]
    store.close()
    with running_server(url, root) as server:
        with server.client(None) as anonymous:
            assert anonymous.get("/metrics").status_code == 401
        with server.client(server.admin_token) as admin:
            made = admin.post("/v1/runs", json={"spec": spec})
            assert made.status_code == 201, made.text
            run_id = made.json()["run_id"]
            target = server.url.removeprefix("http://")
            with running_prometheus(tmp_path / "prometheus", target, server.admin_token) as prom:
                seen: dict[str, list[float]] = {"steps": [], "tokens": []}
                promql = {
                    "steps": f'runwright_steps_total{{run_id="{run_id}"}}',
                    "tokens": f'runwright_tokens_total{{run_id="{run_id}",kind="device"}}',
                }

                def grew() -> bool:
                    for name, query in promql.items():
                        result = _query(prom, query)
                        if result:
                            value = float(result[0]["value"][1])
                            if not seen[name] or value != seen[name][-1]:
                                seen[name].append(value)
                    # Three distinct scraped values each: two increases seen through Prometheus.
                    return all(len(v) >= 3 for v in seen.values())

                _wait(
                    grew,
                    lambda: (
                        f"growing counters of {run_id} (saw {seen}; targets: "
                        f"{httpx.get(f'{prom}/api/v1/targets').text[:1500]}; run: "
                        f"{admin.get(f'/v1/runs/{run_id}', params={'events': False}).text[:1500]})"
                    ),
                )
                assert all(v == sorted(v) and v[0] < v[-1] for v in seen.values()), seen
                up = _query(prom, 'up{job="runwright"}')
                assert [float(r["value"][1]) for r in up] == [1.0]
                project = _query(prom, f'runwright_run_state{{run_id="{run_id}"}}')
                assert project[0]["metric"]["project"] == "default"
                # The loss by mixture source: a mean PromQL can form (issue 26).
                selector = f'{{run_id="{run_id}"}}'
                means = _query(
                    prom,
                    f"runwright_source_loss_sum_total{selector} / "
                    f"runwright_source_loss_tokens_total{selector}",
                )
                assert means and all(r["metric"].get("source") for r in means), means
                assert all(0 < float(r["value"][1]) < 100 for r in means), means
            cancelled = admin.post(f"/v1/runs/{run_id}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            _wait(
                lambda: (
                    admin.get(f"/v1/runs/{run_id}", params={"events": False}).json()["state"]
                    in ("CANCELLED", "SUCCEEDED", "FAILED")
                ),
                f"the end of {run_id}",
            )
        with server.client(outsider) as other:
            scoped = other.get("/metrics")
            assert scoped.status_code == 200 and run_id not in scoped.text
