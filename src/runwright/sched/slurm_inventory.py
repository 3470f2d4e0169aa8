"""A Slurm cluster's inventory, read from `scontrol show node --oneliner`.

Each line is one node as `Key=Value` pairs. Values may hold spaces (`OS=Linux 6.1 #1 SMP`, and
`Reason=bad ECC [root@2026-12-02T12:11:02]`, always last), so a line is cut before every
` Key=`, not at every space. What is read:

  NodeName, CPUTot, RealMemory (MiB)    name, cpus, host memory
  Gres=gpu:h100:8(S:0-1),nic:1           devices: the `gpu` GRES's type and count (the type is
                                         `gpu` when the GRES names none)
  Partitions=debug,island                pools
  ActiveFeatures=nvl-a,rack-r1,...       labels, by prefix (FEATURE_LABELS); other features are
                                         kept as features
  State=IDLE+DRAIN, Reason=...           health (STATE_HEALTH)

What Slurm has allocated on each node (any job's, runwright's included) is read too, from
`AllocTRES=cpu=112,mem=1000000M,gres/gpu=4`: the `gres/gpu` count on a GPU node, the `cpu` count
on a CPU node (`allocated`, `ClusterView`), so a scheduler in front of a shared cluster sees what
is free, not only what exists.

Slurm features are single words, so labels travel as `<prefix><value>` (`nvl-island3`); a site
with other conventions passes its own prefixes. Device memory is not in Slurm's node record, so
it comes from a `gpumem-<size>` feature (`gpumem-80GiB`), else it is unknown (0).
"""

import re
import subprocess
import time

from runwright.sched.inventory import (
    ClusterView,
    HealthState,
    Inventory,
    Node,
    NodeHealth,
    NodeLabels,
)
from runwright.sched.sources import InventoryError, parse_bytes

FEATURE_LABELS: dict[str, str] = {
    "nvl-": "fast_domain",
    "rack-": "rack",
    "net-": "network_domain",
    "driver-": "versions.driver",
    "cuda-": "versions.cuda",
    "nccl-": "versions.nccl",
    "gpumem-": "device_memory_bytes",
}
"""Feature prefix -> what the rest of the feature is."""

_UNHEALTHY = {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "UNKNOWN", "NO_RESPOND", "INVAL",
              "FUTURE", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP"}  # fmt: skip
_DRAINED = {"DRAIN", "DRAINED", "DRAINING", "MAINT", "REBOOT", "REBOOT_ISSUED",
            "REBOOT_REQUESTED", "RESERVED"}  # fmt: skip
_KEY = re.compile(r"(?:^|\s+)([A-Za-z_][A-Za-z0-9_:]*)=")
_NULL = {"", "(null)", "N/A", "n/a", "None"}


def parse_fields(line: str) -> dict[str, str]:
    """One `scontrol --oneliner` line as Key -> value, values with their spaces kept."""
    keys = list(_KEY.finditer(line))
    return {
        key.group(1): line[key.end() : keys[i + 1].start() if i + 1 < len(keys) else None].strip()
        for i, key in enumerate(keys)
    }


def health_of(state: str, reason: str, at_seconds: float) -> NodeHealth:
    """Slurm's node state (`IDLE+DRAIN`, `DOWN*`, `MIXED`) as health: any unhealthy flag wins,
    then any drain flag; a trailing `*` (not responding) is unhealthy."""
    flags = {flag for flag in state.rstrip("*~#!%$@^-").upper().split("+") if flag}
    chosen: HealthState = "healthy"
    if state.endswith("*") or flags & _UNHEALTHY:
        chosen = "unhealthy"
    elif flags & _DRAINED:
        chosen = "drained"
    words = reason or (f"Slurm state {state}" if chosen != "healthy" else "")
    return NodeHealth().observed(chosen, words, at_seconds)


def node_of(fields: dict[str, str], at_seconds: float, labels: dict[str, str]) -> Node:
    """One node from its scontrol fields; InventoryError naming the node and field."""
    name = fields.get("NodeName", "")
    if not name:
        raise InventoryError(f"scontrol line without NodeName: {fields}")
    device_type, count = _gpus(fields.get("Gres", ""))
    cpus = _int(fields.get("CPUTot"))
    if device_type == "cpu":
        count = cpus  # a CPU node's devices are its cores, as on this host (sources.py)
    label_values: dict[str, object] = {}
    versions: dict[str, str] = {}
    features: list[str] = []
    memory_bytes = 0
    raw_features = fields.get("ActiveFeatures") or fields.get("AvailableFeatures") or ""
    for feature in [] if raw_features in _NULL else raw_features.split(","):
        prefix = next((p for p in labels if feature.startswith(p)), None)
        if prefix is None:
            features.append(feature)
            continue
        value, target = feature[len(prefix) :], labels[prefix]
        if target == "device_memory_bytes":
            memory_bytes = parse_bytes(value, f"Slurm node {name} feature {feature!r}")
        elif target.startswith("versions."):
            versions[target.removeprefix("versions.")] = value
        else:
            label_values[target] = value
    partitions = fields.get("Partitions", "")
    reason = fields.get("Reason", "")
    return Node(
        name=name,
        device_type=device_type,
        device_count=count,
        device_memory_bytes=memory_bytes,
        host_memory_bytes=_int(fields.get("RealMemory")) * 2**20,  # Slurm's RealMemory is MiB
        cpus=cpus,
        pools=tuple(partitions.split(",")) if partitions not in _NULL else (),
        labels=NodeLabels(**label_values, versions=versions, features=tuple(features)),
        health=health_of(fields.get("State", "UNKNOWN"), "" if reason in _NULL else reason,
                         at_seconds),
    )  # fmt: skip


def parse_nodes(
    text: str, at_seconds: float = 0.0, labels: dict[str, str] | None = None
) -> Inventory:
    """The inventory `scontrol show node --oneliner` printed (`text`)."""
    nodes = [
        node_of(parse_fields(line), at_seconds, FEATURE_LABELS if labels is None else labels)
        for line in text.splitlines()
        if line.startswith("NodeName=")
    ]
    return Inventory(nodes=tuple(nodes))


def allocated(fields: dict[str, str], node: Node) -> int:
    """Devices Slurm has allocated on `node`, from its `AllocTRES`: the untyped `gres/gpu`
    count (the typed `gres/gpu:h100` entries repeat it) on a GPU node, else the sum of the typed
    ones; `cpu` on a CPU node (then `CPUAlloc` when AllocTRES is empty). Capped at the node's
    devices."""
    tres: dict[str, int] = {}
    raw = fields.get("AllocTRES", "")
    for item in [] if raw in _NULL else raw.split(","):
        key, _, value = item.partition("=")
        if value.isdigit():
            tres[key.strip()] = int(value)
    if node.device_type == "cpu":
        count = tres.get("cpu", _int(fields.get("CPUAlloc")))
    elif "gres/gpu" in tres:
        count = tres["gres/gpu"]
    else:
        count = sum(v for k, v in tres.items() if k.startswith("gres/gpu:"))
    return min(max(count, 0), node.device_count)


def parse_view(
    text: str, at_seconds: float = 0.0, labels: dict[str, str] | None = None
) -> ClusterView:
    """The cluster `scontrol show node --oneliner` printed (`text`), with its allocations."""
    nodes = []
    used = {}
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = parse_fields(line)
        node = node_of(fields, at_seconds, FEATURE_LABELS if labels is None else labels)
        nodes.append(node)
        used[node.name] = allocated(fields, node)
    return ClusterView(inventory=Inventory(nodes=tuple(nodes)), allocated=used)


def read_cluster(labels: dict[str, str] | None = None, timeout_seconds: float = 30.0) -> Inventory:
    """The inventory of the Slurm cluster the clients on PATH reach (SLURM_CONF)."""
    return read_view(labels, timeout_seconds).inventory


def read_view(labels: dict[str, str] | None = None, timeout_seconds: float = 30.0) -> ClusterView:
    """The nodes and allocations of the Slurm cluster the clients on PATH reach (SLURM_CONF)."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "--oneliner"],
            capture_output=True, text=True, timeout=timeout_seconds, check=True,
        ).stdout  # fmt: skip
    except FileNotFoundError:
        raise InventoryError(
            "scontrol is not on PATH: install Slurm's clients (Debian: slurm-client) or read "
            "the inventory from a file instead"
        ) from None
    except subprocess.CalledProcessError as exc:
        raise InventoryError(f"scontrol show node failed: {exc.stderr.strip()}") from None
    except subprocess.TimeoutExpired:
        raise InventoryError(
            f"scontrol show node did not answer in {timeout_seconds:g} s: is slurmctld up?"
        ) from None
    return parse_view(out, time.time(), labels)


def _gpus(gres: str) -> tuple[str, int]:
    """(type, count) of the `gpu` GRES in `gpu:h100:8(S:0-1),nic:1`; ("cpu", 0) without one."""
    device_type, total = "cpu", 0
    for item in [] if gres in _NULL else gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] != "gpu" or not parts[-1].isdigit():
            continue
        total += int(parts[-1])
        device_type = parts[1] if len(parts) == 3 else "gpu"
    return device_type, total


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0
