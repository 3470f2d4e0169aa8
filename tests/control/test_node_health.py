"""Node health from system samples (control/node_health.py): the drain decision over a recorded
history of GPU readings, the bounded ledger file, and the inventory gate whose drained node a
waiting run's pending reason names with why. Pure records and a real ledger file; no GPU."""

import json

import pytest

from runwright.control.controller import Controller
from runwright.control.ingest import Ingestor
from runwright.control.node_health import (
    HARDWARE_XIDS,
    MAX_READINGS,
    DrainPolicy,
    HealthGatedInventory,
    HealthReading,
    NodeHealthError,
    NodeHealthLedger,
    drain_reason,
    load_drain_policy,
    readings_of,
    record_sample,
)
from runwright.control.states import RunState
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.observe import nvml
from runwright.runtime import ChannelWriter
from runwright.sched.admission import admit
from runwright.sched.inventory import Inventory, Node
from runwright.sched.requests import AdmissionInput, GangRequest
from runwright.spec import spec_from_mapping
from runwright.store import Store

NOW = 1_800_000_000.0
DAY = 86_400.0


def reading(at: float, gpu: int = 0, corrected: int = 0, uncorrected: int = 0, xids=()):
    return HealthReading(
        at_unix_s=at,
        run_id="r1",
        gpu=gpu,
        ecc_corrected_errors=corrected,
        ecc_uncorrected_errors=uncorrected,
        hardware_xids=tuple(xids),
    )


def test_the_lists_of_hardware_xids_agree():
    assert HARDWARE_XIDS == nvml.HARDWARE_XIDS


def test_drain_decision_over_a_recorded_history():
    policy = DrainPolicy(corrected_ecc_errors=100, hardware_xids=2, window_seconds=DAY)
    # A corrected-error count that grows, then settles below the threshold: healthy.
    quiet = [reading(NOW - 300, corrected=10), reading(NOW - 200, corrected=40)]
    assert drain_reason(quiet, policy, NOW) is None
    # The newest reading of GPU 1 reaches the corrected threshold.
    storm = [*quiet, reading(NOW - 100, gpu=1, corrected=150)]
    assert drain_reason(storm, policy, NOW) == (
        "GPU 1: 150 corrected ECC errors since the driver loaded (threshold 100)"
    )
    # One uncorrected error drains at the default threshold, and is named first.
    bad = [*storm, reading(NOW - 50, gpu=3, uncorrected=1)]
    assert drain_reason(bad, DrainPolicy(), NOW) == (
        "GPU 3: 1 uncorrected ECC errors since the driver loaded (threshold 1)"
    )
    # Xids: one inside the window is below 2; a second makes it; one outside never counts.
    old = reading(NOW - 2 * DAY, gpu=2, xids=[79])
    assert drain_reason([old, reading(NOW - 10, gpu=2, xids=[48])], policy, NOW) is None
    crossed = [old, reading(NOW - 10, gpu=2, xids=[48]), reading(NOW - 5, gpu=2, xids=[79])]
    assert drain_reason(crossed, policy, NOW) == (
        "GPU 2: 2 hardware Xid event(s) (48, 79) in the last 24 h (threshold 2)"
    )


def test_readings_keep_only_hardware_xids_and_gpu_evidence():
    attributes = {
        "host": "a07",
        "gpus": [
            {"index": 0, "ecc_uncorrected_errors": 0, "xids": [13, 79]},  # 13: the program's
            {"index": 1, "ecc_corrected_errors": 3},
            {"index": "x"},
        ],
    }
    found = readings_of(attributes, "r1", NOW)
    assert [(r.gpu, r.hardware_xids, r.ecc_corrected_errors) for r in found] == [
        (0, (79,), 0),
        (1, (), 3),
    ]
    assert readings_of({"host": "cpu-node"}, "r1", NOW) == []


def test_the_ledger_keeps_news_only_and_a_bounded_history(tmp_path):
    ledger = NodeHealthLedger(tmp_path)
    sample = {"host": "a07", "gpus": [{"index": 0, "ecc_corrected_errors": 0}]}
    assert record_sample(tmp_path, "r1", sample, NOW) is None  # a quiet GPU writes nothing
    assert not ledger.path.exists()
    for i in range(MAX_READINGS + 10):
        grown = {"host": "a07", "gpus": [{"index": 0, "ecc_corrected_errors": i + 1}]}
        assert record_sample(tmp_path, "r1", grown, NOW + i) is not None
        assert record_sample(tmp_path, "r1", grown, NOW + i + 0.5) is None  # no change: no news
    history = ledger.read()["a07"]
    assert len(history) == MAX_READINGS
    assert history[-1].ecc_corrected_errors == MAX_READINGS + 10
    assert json.loads(ledger.path.read_text())["a07"][0]["run_id"] == "r1"


def test_a_drained_node_leaves_the_offer_and_the_pending_reason_says_why(tmp_path):
    inventory = Inventory(
        nodes=(
            Node(name="a07", device_type="H100", device_count=8),
            Node(name="a08", device_type="H100", device_count=8),
        )
    )
    ledger = NodeHealthLedger(tmp_path)
    gated = HealthGatedInventory(inventory, ledger, DrainPolicy())
    assert gated().inventory == inventory  # no readings: every node offered
    view = gated()
    assert gated() is view  # unchanged ledger and source: the same view (admission skips it)
    xid = {"host": "a07.cluster.example", "gpus": [{"index": 5, "xids": [79]}]}
    record_sample(tmp_path, "r1", xid, NOW)
    drained = gated()
    node = drained.inventory.node("a07")
    assert node.health.state == "drained"
    assert node.health.reason.startswith("GPU 5: 1 hardware Xid event(s) (79)")
    assert node.health.history[-1].state == "drained"
    request = GangRequest(run_id="big", devices=16, device_type="H100")
    decision = admit(drained.inventory, AdmissionInput(pending=(request,))).of("big")
    assert decision.outcome == "pending" and decision.reason.code == "capacity"
    assert decision.reason.words == (
        "needs 16 devices of type H100 in pool default; 8 are free (8 more on drained or "
        f"unhealthy nodes) [a07 drained: {node.health.reason}]"
    )


def test_the_policy_comes_from_the_inventory_file_with_clear_errors(tmp_path):
    assert load_drain_policy(None) == DrainPolicy()
    good = tmp_path / "inventory.yaml"
    good.write_text("nodes: []\nnode_health: {hardware_xids: 3, window_seconds: 3600}\n")
    assert load_drain_policy(good) == DrainPolicy(hardware_xids=3, window_seconds=3600)
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: []\nnode_health: {hardware_xids: 0}\n")
    with pytest.raises(NodeHealthError, match=r"node_health\.hardware_xids: .*>= 1"):
        load_drain_policy(bad)


def test_the_controller_ingest_feeds_the_ledger(running_run, tmp_path):
    """A GPU node's samples through the real channel and ingest into the store, and into the
    ledger under the run's root: the first with news, a repeat without."""
    store = running_run
    writer = ChannelWriter(run_paths(tmp_path, "run-a").channel, generation=1, rank=0)
    gpus = [{"index": 0, "ecc_corrected_errors": 4, "xids": [13]}, {"index": 1}]
    for n in (1, 2):
        writer.telemetry(
            EventType.SYSTEM_SAMPLE,
            step=n,
            event_id=f"g1-r0-sys{n}",
            attributes={"host": "a07", "node": 0, "gpus": gpus},
        )
    writer.close()
    Ingestor(store, store.get_run("run-a")).poll()
    assert len(store.events("run-a", types=[EventType.SYSTEM_SAMPLE])) == 2
    (only,) = NodeHealthLedger(tmp_path).read()["a07"]
    assert (only.gpu, only.ecc_corrected_errors, only.hardware_xids) == (0, 4, ())
    assert only.run_id == "run-a"


def test_the_queue_says_a_run_waits_for_a_node_drained_by_its_gpu_evidence(tmp_path):
    """Under the controller (what `runwright controller --inventory` builds): a run that needs
    both nodes waits once one of them reported a hardware Xid, and its state detail (what
    `runwright status` and `runwright queue` print) names the node and why."""
    store = Store.open(tmp_path)
    nodes = Inventory(
        nodes=tuple(Node(name=n, device_type="cpu", device_count=2, cpus=2) for n in ("n1", "n2"))
    )
    gated = HealthGatedInventory(nodes, NodeHealthLedger(tmp_path), DrainPolicy())
    controller = Controller(store, tmp_path, inventory=gated)
    record_sample(
        tmp_path, "earlier-run", {"host": "n2", "gpus": [{"index": 1, "xids": [79]}]}, NOW
    )
    spec = spec_from_mapping(
        {
            "name": "wide",
            "code": {"entrypoint": "train.py"},
            "training": {"global_batch_samples": 8, "steps": 4},
            "resources": {"nodes": 2, "devices_per_node": 2},
        }
    )
    run, _ = controller.submit(spec, tmp_path)
    controller.journal.move(store.get_run(run.run_id), RunState.QUEUED, "JOB_ACCEPTED")
    assert controller.admission is not None
    controller.admission.advance(store.get_run(run.run_id), controller.logs.of(run.run_id).events)
    waiting = store.get_run(run.run_id)
    assert waiting.state == "QUEUED"
    assert "(2 more on drained or unhealthy nodes)" in waiting.state_detail
    assert "[n2 drained: GPU 1: 1 hardware Xid event(s) (79) in the last 24 h" in (
        waiting.state_detail
    )
    store.close()
