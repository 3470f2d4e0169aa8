"""The admission inventory of a pools file's Slurm pools, read live from the cluster.

`runwright controller --inventory slurm` admits runs of the Slurm pools through runwright's
queue (quotas, priorities, gangs, restore constraints, reasons) before Slurm sees them
(docs/sched.md, "On Slurm"). The inventory is the cluster's own (`scontrol show node`,
sched/slurm_inventory.py) with each node's partitions renamed to the pools that reach them: a
pool `cluster: {executor: slurm, partition: debug}` is served by every node of partition debug (a
pool without a partition by the cluster's default partition's nodes). It is read again at most
every `refresh_seconds`, so a drained node leaves the offer and other users' jobs count as used
devices (`ClusterView.allocated`) within that time.
"""

import subprocess
import time

from runwright.control.pools import PoolsFile
from runwright.sched.inventory import ClusterView, Inventory
from runwright.sched.slurm_inventory import parse_fields, read_view
from runwright.sched.sources import InventoryError

REFRESH_SECONDS = 10.0
"""How old a reading may be before the next admission pass reads the cluster again."""


def default_partition(timeout_seconds: float = 30.0) -> str | None:
    """The cluster's default partition (`Default=YES` in `scontrol show partition`), if any."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "partition", "--oneliner"],
            capture_output=True, text=True, timeout=timeout_seconds, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise InventoryError(f"scontrol show partition failed: {exc}") from None
    for line in out.splitlines():
        fields = parse_fields(line)
        if fields.get("Default") == "YES":
            return fields.get("PartitionName")
    return None


def as_pools(view: ClusterView, partitions: dict[str, str]) -> ClusterView:
    """`view` with each node's partitions replaced by the pools (`partitions`: pool name ->
    partition) that reach them; a node no pool reaches serves none."""
    nodes = tuple(
        node.model_copy(
            update={"pools": tuple(p for p, part in partitions.items() if part in node.pools)}
        )
        for node in view.inventory.nodes
    )
    inventory = Inventory(nodes=nodes, fast_interconnect=view.inventory.fast_interconnect)
    return ClusterView(inventory=inventory, allocated=view.allocated)


class SlurmPoolsInventory:
    """Calling it gives the Slurm pools' inventory, read at most every `refresh_seconds`."""

    def __init__(self, pools: PoolsFile, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self.slurm_pools = {
            name: pool.partition for name, pool in pools.pools.items() if pool.executor == "slurm"
        }
        if not self.slurm_pools:
            raise InventoryError(
                "--inventory slurm: the pools file names no Slurm pool; add one (executor: "
                "slurm, partition: NAME) with --pools, or give an inventory file instead"
            )
        self.refresh_seconds = refresh_seconds
        self._read: tuple[float, ClusterView] | None = None

    def __call__(self) -> ClusterView:
        now = time.monotonic()
        if self._read is None or now - self._read[0] >= self.refresh_seconds:
            partitions = dict(self.slurm_pools)
            if None in partitions.values():
                default = default_partition()
                partitions = {p: part or default or "" for p, part in partitions.items()}
            self._read = (now, as_pools(read_view(), {p: v for p, v in partitions.items() if v}))
        return self._read[1]
