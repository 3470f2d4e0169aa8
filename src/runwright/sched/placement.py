"""Best-fit gang placement under topology constraints, and why a placement is impossible.

A placement takes `devices` devices from nodes whose usable counts are given (free now, or what a
backfill may use), so that
  - every fast-interconnect domain the gang touches gets a multiple of `tp` devices (and of
    `devices_per_node` whole nodes when that is set): listing the devices domain by domain, each
    run of `tp` consecutive ranks then lies in one domain, which is what tensor parallelism needs
    (seed 004: "TP 更依赖节点内高速互联");
  - with `same_network_domain`, every node is in one network domain.

Best fit, against fragmentation (seed 000, 8.6: "大 job 需要反碎片化，小 job 可以填充空洞"): at each
level (network domain, fast domain, node) the smallest candidate that holds what is still needed
is taken; when none holds it, the largest is taken whole and the rest placed the same way. So a
4-device gang goes into the node with 4 free rather than break an empty 8, and an empty domain is
left whole for the next gang that needs one. Ties break by name, so a placement is a pure
function of its inputs.
"""

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from runwright.sched import reasons
from runwright.sched.inventory import Node
from runwright.sched.reasons import PendingReason


@dataclass(frozen=True)
class Shape:
    """What a gang needs of the devices, whatever its project or priority."""

    devices: int
    devices_per_node: int | None = None
    tp: int = 1
    same_network_domain: bool = False

    @property
    def unit(self) -> int:
        """What every fast domain's share must be a multiple of."""
        return math.lcm(self.devices_per_node or 1, self.tp)


@dataclass
class Eligible:
    """The nodes one kind of request may use, grouped by topology (names sorted)."""

    nodes: list[str] = field(default_factory=list)
    fast: dict[str, list[str]] = field(default_factory=dict)
    """Fast domain -> its nodes."""
    network: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Network domain -> fast domain -> its nodes in that network domain (nodes without a
    network domain are left out)."""


def device_type_matches(node_type: str, wanted: str | None) -> bool:
    """`H100` matches `H100` and `h100-80GB-HBM3` (a model and its variants); None matches all."""
    if wanted is None:
        return True
    have, want = node_type.casefold(), wanted.casefold()
    return have == want or have.startswith(want + "-")


def labels_match(node: Node, labels: tuple[tuple[str, str], ...]) -> bool:
    """Whether the node carries every (key, value): in its `versions`, or as a `KEY=VALUE`
    feature."""
    have = node.labels
    return all(have.versions.get(k) == v or f"{k}={v}" in have.features for k, v in labels)


def eligible_nodes(
    nodes: list[Node],
    pool: str,
    device_type: str | None,
    min_memory_bytes: int | None,
    labels: tuple[tuple[str, str], ...] = (),
) -> Eligible:
    """The nodes of `pool` with the device type, memory and labels asked, grouped (any health:
    the caller passes only offered nodes for a placement, all for the never-fits check)."""
    found = Eligible()
    for node in sorted(nodes, key=lambda n: n.name):
        if pool not in node.pools or node.device_count == 0:
            continue
        if labels and not labels_match(node, labels):
            continue
        if not device_type_matches(node.device_type, device_type):
            continue
        if min_memory_bytes and node.device_memory_bytes < min_memory_bytes:
            continue
        found.nodes.append(node.name)
        found.fast.setdefault(node.fast_domain, []).append(node.name)
        if node.labels.network_domain is not None:
            by_fast = found.network.setdefault(node.labels.network_domain, {})
            by_fast.setdefault(node.fast_domain, []).append(node.name)
    return found


def place(
    shape: Shape,
    eligible: Eligible,
    usable: Mapping[str, int],
    domains: list[tuple[int, str]] | None = None,
) -> list[tuple[str, int]]:
    """(node, device count) per node of a best-fit placement, domain by domain; [] if none.
    `domains`: the fast domains' amounts (`domain_amounts`) when the caller keeps them."""
    if not shape.same_network_domain:
        return _place_in(shape, eligible.fast, usable, domains)
    options = []
    for name, by_fast in eligible.network.items():
        total = sum(usable.get(n, 0) for nodes in by_fast.values() for n in nodes)
        if total >= shape.devices:
            options.append((total, name, by_fast))
    for _, _, by_fast in sorted(options, key=lambda o: (o[0], o[1])):  # least leftover first
        found = _place_in(shape, by_fast, usable)
        if found:
            return found
    return []


def domain_amounts(
    shape: Shape, fast: Mapping[str, list[str]], usable: Mapping[str, int]
) -> list[tuple[int, str]]:
    """(devices the gang may take, domain) of every domain that offers some, ascending: a
    multiple of `unit` (whole `devices_per_node` shares, whole TP groups). This walk is most of
    a pass's time, so the usual one-node domain takes the short path."""
    unit, per, get = shape.unit, shape.devices_per_node, usable.get
    amounts = []
    for name, nodes in fast.items():
        if len(nodes) == 1:
            amount = get(nodes[0], 0)
            if per:
                amount = per if amount >= per else 0
        elif per:
            amount = per * sum(1 for n in nodes if get(n, 0) >= per)
        else:
            amount = sum(get(n, 0) for n in nodes)
        amount -= amount % unit
        if amount > 0:
            amounts.append((amount, name))
    amounts.sort()
    return amounts


def _place_in(
    shape: Shape,
    fast: Mapping[str, list[str]],
    usable: Mapping[str, int],
    domains: list[tuple[int, str]] | None = None,
) -> list[tuple[str, int]]:
    if domains is None:
        domains = domain_amounts(shape, fast, usable)
    if sum(amount for amount, _ in domains) < shape.devices:
        return []
    chosen: list[tuple[str, int]] = []
    remaining = shape.devices
    while remaining > 0:
        amount, name = domains.pop(_best_fit(domains, remaining))
        take = min(amount, remaining)
        chosen += _nodes_in(shape, fast[name], take, usable)
        remaining -= take
    return chosen


def _best_fit(candidates: list[tuple[int, str]], needed: int) -> int:
    """Index in `candidates` (sorted by amount, then name) of the smallest amount that holds
    `needed`, else of the largest amount (its first name: ties break by name either way)."""
    i = bisect.bisect_left(candidates, (needed, ""))
    if i == len(candidates):
        i = bisect.bisect_left(candidates, (candidates[-1][0], ""))
    return i


def _nodes_in(
    shape: Shape, nodes: list[str], take: int, usable: Mapping[str, int]
) -> list[tuple[str, int]]:
    """`take` devices from one domain's nodes, best fit per node."""
    per = shape.devices_per_node
    if per:
        fitting = sorted((usable.get(n, 0), n) for n in nodes if usable.get(n, 0) >= per)
        return [(n, per) for _, n in fitting[: take // per]]
    free = sorted((usable.get(n, 0), n) for n in nodes if usable.get(n, 0) > 0)
    chosen = []
    while take > 0:
        amount, name = free.pop(_best_fit(free, take))
        chosen.append((name, min(amount, take)))
        take -= min(amount, take)
    return chosen


def diagnose(
    shape: Shape,
    eligible: Eligible,
    usable: Mapping[str, int],
    device_type: str | None,
    kind: str,
    pool: str,
    out_of_service: int = 0,
) -> PendingReason:
    """Why `place` found nothing: the first constraint the usable devices cannot meet."""
    total = sum(usable.get(n, 0) for n in eligible.nodes)
    if total < shape.devices:
        return reasons.capacity(shape.devices, device_type, pool, total, out_of_service)
    per = shape.devices_per_node
    if per:
        whole = sum(1 for n in eligible.nodes if usable.get(n, 0) >= per)
        if whole < shape.devices // per:
            return reasons.node_shape(shape.devices // per, per, device_type, whole)
    if shape.tp > 1:
        raw = [sum(usable.get(n, 0) for n in nodes) for nodes in eligible.fast.values()]
        groups = sum(amount // shape.tp for amount in raw)
        if groups < shape.devices // shape.tp:
            return reasons.fast_domain(
                shape.devices, shape.tp, device_type, kind, groups, max(raw, default=0)
            )
    if shape.same_network_domain:
        most = max(
            (
                sum(usable.get(n, 0) for nodes in by_fast.values() for n in nodes)
                for by_fast in eligible.network.values()
            ),
            default=0,
        )
        return reasons.network_domain(shape.devices, device_type, most)
    # Whole nodes and TP groups each fit, but not together (devices_per_node and tp whose
    # least common multiple no free domain holds): say so in the fast-domain terms.
    raw = [amount for amount, _ in domain_amounts(shape, eligible.fast, usable)]
    return reasons.fast_domain(
        shape.devices, shape.unit, device_type, kind, sum(raw) // shape.unit, max(raw, default=0)
    )
