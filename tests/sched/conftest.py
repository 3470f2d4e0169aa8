"""Small inventories the scheduler tests share, built in code (no files)."""

import pytest

from runwright.sched.inventory import Inventory, Node, NodeHealth, NodeLabels
from runwright.sched.requests import NodeShare, RunningGang

GIB = 2**30


def cluster(
    islands: int = 2,
    nodes_per_island: int = 2,
    devices: int = 8,
    networks: int = 1,
    device_type: str = "H100",
    memory_gib: int = 80,
    drained: tuple[str, ...] = (),
) -> Inventory:
    """`islands` NVLink islands of `nodes_per_island` nodes (`i<island>n<node>`), the islands
    dealt round-robin into `networks` network domains."""
    nodes = []
    for island in range(islands):
        for index in range(nodes_per_island):
            name = f"i{island}n{index}"
            health = (
                NodeHealth().observed("drained", "maintenance", 1.0)
                if name in drained
                else NodeHealth()
            )
            nodes.append(
                Node(
                    name=name,
                    device_type=device_type,
                    device_count=devices,
                    device_memory_bytes=memory_gib * GIB,
                    labels=NodeLabels(
                        fast_domain=f"island{island}", network_domain=f"net{island % networks}"
                    ),
                    health=health,
                )
            )
    return Inventory(nodes=tuple(nodes))


def holding(run_id: str, node: str, count: int, first: int = 0, **fields) -> RunningGang:
    """A running gang holding devices first..first+count-1 of one node."""
    share = NodeShare(node=node, devices=tuple(range(first, first + count)))
    return RunningGang(run_id=run_id, placement=(share,), **fields)


@pytest.fixture
def make_cluster():
    """`cluster` (above), for tests (which cannot import this module: --import-mode=importlib)."""
    return cluster


@pytest.fixture
def make_holding():
    """`holding` (above), for tests."""
    return holding
