"""The inventory: every node the scheduler may place on, with its devices, labels and health.

Seed 004 ("调度先看资源画像"): a training gang needs more than "some GPUs" - it needs devices of
one type, enough memory per device, a fast interconnect for its tensor-parallel groups and one
network domain for its collectives, on nodes that are healthy. So a node carries those as
first-class labels, and its health carries a reason and a short history, so a pending reason can
say "8 more are on drained nodes" and an operator can see why a node left service.

Sources (each an edge around these records): this host (`this_host`, no torch import), a static
YAML file for a user's own machines (inventory_file.py) and a Slurm cluster (slurm_inventory.py).
"""

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, model_validator

from runwright.records import Record

HealthState = Literal["healthy", "drained", "unhealthy"]
"""`healthy`: offered. `drained`: taken out of service on purpose (maintenance, a suspect part),
its running gangs may finish. `unhealthy`: down, failing or not responding. Only healthy nodes are
offered to new gangs."""

MAX_HEALTH_HISTORY = 8
"""Health changes kept per node: enough to see a flapping node, small enough to keep per pass."""


class HealthChange(Record):
    """One change of a node's health, as observed."""

    state: HealthState
    """The state the node entered."""
    reason: str = ""
    """Why, in the words of whoever changed it (Slurm's Reason, an operator's note)."""
    at_seconds: float = 0.0
    """When it was observed, seconds since the Unix epoch (0: unknown)."""


class NodeHealth(Record):
    """A node's health now, with the changes that led there (newest last)."""

    state: HealthState = "healthy"
    """Whether new gangs may be placed on the node (only `healthy` ones)."""
    reason: str = ""
    """Why the node is not healthy (empty when it is)."""
    history: tuple[HealthChange, ...] = Field(default=(), max_length=MAX_HEALTH_HISTORY)
    """The last few health changes, oldest first."""

    def observed(self, state: HealthState, reason: str, at_seconds: float) -> "NodeHealth":
        """This health after observing `state`: a change is appended to the history (bounded),
        a repeat of the current state only refreshes the reason."""
        if state == self.state and self.history:
            return self.model_copy(update={"reason": reason})
        change = HealthChange(state=state, reason=reason, at_seconds=at_seconds)
        history = (*self.history, change)[-MAX_HEALTH_HISTORY:]
        return NodeHealth(state=state, reason=reason, history=history)


class NodeLabels(Record):
    """Where a node sits in the machine's topology, and what software it runs."""

    fast_domain: str | None = None
    """The fast-interconnect domain (an NVLink island, an NVL72 rack); None: the node alone. A
    tensor-parallel group never spans two domains."""
    rack: str | None = None
    """The rack (a power and cooling failure domain)."""
    network_domain: str | None = None
    """The network domain (an InfiniBand fabric or leaf group); a run that asks for one network
    domain is placed inside one. None: the node is in no named domain and such runs skip it."""
    versions: dict[str, str] = Field(default_factory=dict)
    """Driver and library versions (`driver`, `cuda`, `nccl`), as the source reported them."""
    features: tuple[str, ...] = ()
    """Other free-form features (Slurm features that map to no label)."""


class Node(Record):
    """One machine the scheduler may place devices on."""

    name: str = Field(min_length=1)
    """The node's name, unique in its inventory (its hostname or Slurm NodeName)."""
    device_type: str = Field(min_length=1)
    """Accelerator model (`H100`, `A100-80GB`) or `cpu` for a CPU-only node; compared
    case-insensitively with a request's."""
    device_count: int = Field(ge=0, le=1024)
    """Devices on the node (accelerators; worker slots on a CPU node)."""
    device_memory_bytes: int = Field(default=0, ge=0)
    """Memory per device in bytes; 0: unknown (then a request with a memory floor skips it)."""
    host_memory_bytes: int = Field(default=0, ge=0)
    """Host (CPU) memory in bytes; 0: unknown."""
    cpus: int = Field(default=0, ge=0)
    """CPU cores (logical) on the node; 0: unknown."""
    pools: tuple[str, ...] = ("default",)
    """The pools (Slurm partitions) whose runs may use this node."""
    labels: NodeLabels = Field(default_factory=NodeLabels)
    """Topology and software labels."""
    health: NodeHealth = Field(default_factory=NodeHealth)
    """Health now, with its short history."""

    @property
    def offered(self) -> bool:
        """Whether new gangs may be placed here: only healthy nodes are offered."""
        return self.health.state == "healthy"

    @property
    def fast_domain(self) -> str:
        """The node's fast-interconnect domain; a node without the label is its own domain."""
        return self.labels.fast_domain or f"node:{self.name}"


class Inventory(Record):
    """Every node a scheduler knows, with the word its users use for the fast interconnect."""

    nodes: tuple[Node, ...] = ()
    """The nodes, in the order the source listed them (placement ties break by name, not by
    this order)."""
    fast_interconnect: str = "NVLink"
    """What the fast-interconnect domains are called in pending reasons (`NVLink`, `xGMI`)."""

    @model_validator(mode="after")
    def _unique_names(self) -> "Inventory":
        seen: set[str] = set()
        for node in self.nodes:
            if node.name in seen:
                raise ValueError(
                    f"nodes: two nodes are named {node.name!r}; node names must be unique "
                    "(rename one, or remove the duplicate)"
                )
            seen.add(node.name)
        return self

    def offered(self) -> tuple[Node, ...]:
        """The nodes new gangs may use: healthy ones only."""
        return tuple(node for node in self.nodes if node.offered)

    def node(self, name: str) -> Node | None:
        return next((node for node in self.nodes if node.name == name), None)

    def with_health(
        self, name: str, state: HealthState, reason: str, at_seconds: float
    ) -> "Inventory":
        """This inventory with node `name`'s health observed as `state` (history kept)."""
        nodes = tuple(
            node.model_copy(update={"health": node.health.observed(state, reason, at_seconds)})
            if node.name == name
            else node
            for node in self.nodes
        )
        return self.model_copy(update={"nodes": nodes})


@dataclass(frozen=True)
class ClusterView:
    """A cluster at one moment: its nodes, and the devices its own scheduler has allocated on
    each (a Slurm cluster's `AllocTRES`); a static inventory file has no allocations."""

    inventory: Inventory
    allocated: dict[str, int] = field(default_factory=dict)
    """Node name -> devices allocated there by any job (runwright's included)."""
