"""Inventory records and their sources: this host, a YAML file, and the health history."""

import os
import subprocess
import sys
import textwrap

import pytest
from pydantic import ValidationError

from runwright.sched.inventory import MAX_HEALTH_HISTORY, Inventory, Node, NodeHealth
from runwright.sched.sources import (
    InventoryError,
    load_inventory,
    load_scheduler_file,
    parse_bytes,
    this_host,
)


def test_a_yaml_inventory_reads_sizes_labels_and_health(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(
        textwrap.dedent(
            """
            fast_interconnect: NVLink
            nodes:
              - name: gpu01
                device_type: H100
                device_count: 8
                device_memory_bytes: 80GiB
                host_memory_bytes: 2 TiB
                cpus: 224
                labels:
                  fast_domain: island-a
                  rack: r1
                  network_domain: ib-0
                  versions: {driver: "550.54", cuda: "12.4"}
              - name: gpu02
                device_type: H100
                device_count: 8
                health: {state: drained, reason: "fan replaced, burn-in pending"}
            """
        )
    )
    inventory = load_inventory(path)
    first, second = inventory.nodes
    assert first.device_memory_bytes == 80 * 2**30 and first.host_memory_bytes == 2 * 2**40
    assert first.labels.versions == {"driver": "550.54", "cuda": "12.4"}
    assert first.fast_domain == "island-a" and second.fast_domain == "node:gpu02"
    assert [n.name for n in inventory.offered()] == ["gpu01"]
    assert second.health.reason == "fan replaced, burn-in pending"
    assert load_scheduler_file(path)[1].projects == ()  # no quotas: every pool is unmetered


def test_quotas_come_from_the_same_file(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "nodes: [{name: a, device_type: H100, device_count: 8}]\n"
        "quotas:\n"
        "  - {project: vision, devices: 6}\n"
        "  - {project: speech, pool: default, devices: 2, borrowing_limit_devices: 4}\n"
    )
    inventory, quotas = load_scheduler_file(path)
    assert [n.name for n in inventory.nodes] == ["a"]
    assert [(q.project, q.pool, q.devices, q.borrowing_limit_devices) for q in quotas.projects] == [
        ("vision", "default", 6, None),
        ("speech", "default", 2, 4),
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("nodes: {}", "must be a mapping with `nodes:` a list"),
        (
            "nodes: [{name: a, device_type: H100}]",
            "nodes[0] (a).device_count: Field required",
        ),
        (
            "nodes: [{name: a, device_type: H100, device_count: 8, gpus: 8}]",
            "nodes[0] (a).gpus: Extra inputs are not permitted (remove it",
        ),
        (
            "nodes: [{name: a, device_type: H100, device_count: 8, device_memory_bytes: 80 gigs}]",
            "nodes[0] (a).device_memory_bytes: '80 gigs' is not a size",
        ),
        (
            "nodes: [{name: a, device_type: H100, device_count: 8, health: {state: sick}}]",
            "nodes[0] (a).health.state: Input should be 'healthy', 'drained' or 'unhealthy'",
        ),
        (
            "nodes: [{name: a, device_type: H100, device_count: 8},"
            " {name: a, device_type: H100, device_count: 8}]",
            "two nodes are named 'a'; node names must be unique",
        ),
        (
            "nodes: [{name: a, device_type: H100, device_count: 8}]\nquotas: {vision: 8}",
            "quotas must be a list of {project, pool, devices} entries",
        ),
        (
            "nodes: [{name: a, device_type: H100, device_count: 8}]\n"
            "quotas: [{project: vision, devices: -1}]",
            "quotas[0] (vision).devices: Input should be greater than or equal to 0",
        ),
        (
            "nodes: [{name: a, device_type: H100, device_count: 8}]\n"
            "quotas: [{project: vision, devices: 8, gpus: 8}]",
            "quotas[0] (vision).gpus: Extra inputs are not permitted (remove it; the fields",
        ),
        (
            "nodes: [{name: a, device_type: H100, device_count: 8}]\n"
            "quotas: [{project: vision, devices: 8}, {project: vision, devices: 4}]",
            "two quotas for project 'vision' in pool 'default'; keep one",
        ),
    ],
)
def test_a_bad_inventory_file_names_the_node_and_the_field(tmp_path, body, expected):
    path = tmp_path / "inventory.yaml"
    path.write_text(body)
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert expected in str(caught.value)
    assert str(path) in str(caught.value)


def test_sizes_take_units_and_refuse_words():
    assert parse_bytes(1024, "x") == 1024
    assert parse_bytes("1.5 GB", "x") == 1_500_000_000
    assert parse_bytes("4kib", "x") == 4096
    with pytest.raises(InventoryError, match="x: True is not a size"):
        parse_bytes(True, "x")


def test_health_keeps_a_short_history_of_changes():
    health = NodeHealth()
    for i in range(MAX_HEALTH_HISTORY + 3):
        health = health.observed("drained" if i % 2 else "unhealthy", f"change {i}", float(i))
    assert len(health.history) == MAX_HEALTH_HISTORY
    assert health.history[-1].reason == f"change {MAX_HEALTH_HISTORY + 2}"
    again = health.observed(health.state, "same state, new words", 99.0)
    assert again.history == health.history and again.reason == "same state, new words"
    inventory = Inventory(nodes=(Node(name="a", device_type="H100", device_count=8),))
    inventory = inventory.with_health("a", "unhealthy", "Xid 79", 5.0)
    assert inventory.offered() == () and inventory.nodes[0].health.history[-1].reason == "Xid 79"


def test_records_are_frozen_and_refuse_unknown_fields():
    node = Node(name="a", device_type="H100", device_count=8)
    with pytest.raises(ValidationError):
        node.device_count = 4  # type: ignore[misc]
    with pytest.raises(ValidationError, match="Extra inputs"):
        Node(name="a", device_type="H100", device_count=8, gpus=8)


def test_this_host_is_one_node_with_its_cpus_and_memory():
    node = this_host().nodes[0]
    assert node.cpus >= 1 and node.host_memory_bytes > 0 and node.offered
    if node.device_type == "cpu":
        assert node.device_count == node.cpus


def test_reading_this_host_does_not_import_torch():
    code = (
        "import sys; from runwright.sched.sources import this_host; this_host(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_this_host_reads_gpus_from_nvidia_smi(tmp_path, monkeypatch):
    """What nvidia-smi prints on an 8-GPU H100 host (a stand-in script on PATH: this machine
    has no GPU)."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo 'NVIDIA H100 80GB HBM3, 81559'; done\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    node = this_host().nodes[0]
    assert (node.device_type, node.device_count) == ("H100-80GB-HBM3", 8)
    assert node.device_memory_bytes == 81559 * 2**20
