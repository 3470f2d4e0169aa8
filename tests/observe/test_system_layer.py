"""The system layer end to end: the reference trainer on two ranks under torchrun (gloo, CPU),
driven by a real controller into a real SQLite store, sampling its node every second. The store
gets the node's samples (from one sampler: the node's local rank 0) with plausible values on
the run's time axis, and both Prometheus expositions (one run's registry, the server's fleet)
carry them with the node label. No GPU here: the samples carry no `gpus`."""

import socket
import time

import psutil
import pytest
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.observe import run_metrics
from runwright.observe.fleet import FleetMetrics
from runwright.observe.system_series import system_points
from runwright.spec import spec_from_mapping
from runwright.store import Store

# The default suite covers the mechanism on the dashboard test's runs (tests/server/
# test_dashboard.py: store, node table, /metrics); this one, a minute of torchrun on a busy
# 2-core machine, adds the series over several samples and two ranks.
pytestmark = [pytest.mark.integration, pytest.mark.slow]
STEPS = 25
STEP_SLEEP_SECONDS = 0.12
"""25 steps x 0.12 s = 3 s of training at least: two or more samples at one a second."""


def test_a_run_samples_its_node_into_the_store_and_prometheus(tmp_path):
    root = tmp_path / "root"
    dataset = build_dataset(TINY_DATA, root)
    data = tiny_gpt(dataset, steps=STEPS, devices=2, every_steps=STEPS)
    data["code"]["args"] = ["--step-sleep", str(STEP_SLEEP_SECONDS)]
    data["observability"] = {"system_sample_seconds": 1}
    store = Store.open(root)
    controller = Controller(store, root)
    run, _ = controller.submit(spec_from_mapping(data), tmp_path)
    started = time.time()
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED", final.state_detail

    samples = store.events(run.run_id, types=[EventType.SYSTEM_SAMPLE])
    assert len(samples) >= 2, [e.attributes for e in samples]
    # One sampler per node: every sample comes from local rank 0 (global rank 0 on one node).
    assert {e.attributes["rank"] for e in samples} == {0}
    host, memory = socket.gethostname(), psutil.virtual_memory().total
    points = system_points(samples)
    for event, point in zip(samples, points, strict=True):
        assert point.node == host and event.attributes["node"] == 0
        assert started <= point.time_unix_s <= time.time()
        assert point.step is not None and 0 <= point.step <= STEPS
        assert 0 < (point.interval_seconds or 0) <= 30  # 1 s asked; a busy machine is late
        assert 0.0 <= (point.cpu_percent or -1) <= 100.0
        assert point.memory_total_bytes == memory
        assert 0 < (point.memory_used_bytes or 0) < memory
        assert set(point.disk_used_bytes) == {"run", "checkpoints"}
        assert 0 < point.disk_used_bytes["run"] <= point.disk_total_bytes["run"]
        assert (point.net_sent_bytes_per_second or 0) >= 0
        assert 0 <= (point.sample_cpu_seconds or 0) < 1.0
        assert not point.gpus
    # The rate bound: a second apart at least, but for the last (taken as rank 0 closes).
    assert all((p.interval_seconds or 0) >= 0.9 for p in points[:-1])
    # On the step timeline's axis: the samples' steps rise with their time.
    steps = [p.step for p in points]
    assert steps == sorted(steps) and steps[-1] > 0

    events = store.events(run.run_id)
    text = run_metrics(events).exposition()
    (total,) = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(f'runwright_node_memory_total_bytes{{node="{host}"}} ')
    ]
    assert total == memory
    assert f'runwright_node_cpu_ratio{{node="{host}"}}' in text
    assert f'runwright_node_disk_used_bytes{{folder="checkpoints",node="{host}"}}' in text
    fleet = FleetMetrics()
    fleet.refresh(store)
    served = fleet.exposition(None)
    labels = f'node="{host}",project="default",run_id="{run.run_id}"'
    assert f"runwright_node_memory_used_bytes{{{labels}}}" in served
    assert f'runwright_node_network_bytes_total{{direction="sent",{labels}}}' in served
    store.close()
