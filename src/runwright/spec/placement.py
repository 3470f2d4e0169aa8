"""Where and how wide a run executes: parallel layout and the resources it asks for."""

from typing import Annotated, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from runwright.spec import limits
from runwright.spec.base import Section

Degree = Annotated[int, Field(gt=0, le=limits.MAX_WORLD_SIZE)]
"""A parallel degree: at least 1, at most the largest world size."""


class MembershipSpec(Section):
    """The membership contract: what losing a member means (seed 003, "membership contracts")."""

    mode: Literal["fixed", "elastic"] = "fixed"
    """`fixed`: any lost member fails the whole group, which restarts at the same size (a lost
    node is replaced). `elastic`: a lost node restarts the group on the remaining nodes, anywhere
    in [min_nodes, max_nodes], from the newest committed checkpoint, with the global batch kept
    (docs/control.md, "Elastic membership"). There is no `local_repair` (see `_no_local_repair`)."""
    min_nodes: PositiveInt | None = Field(default=None, le=limits.MAX_NODES)
    """Smallest node count an elastic run may continue with; fewer remaining nodes fall back to
    the recovery policy (requeue at resources.nodes)."""
    max_nodes: PositiveInt | None = Field(default=None, le=limits.MAX_NODES)
    """Largest node count of the elastic range; a run starts, and grows back to, resources.nodes,
    which must lie in the range."""

    @field_validator("mode", mode="before")
    @classmethod
    def _no_local_repair(cls, value: object) -> object:
        # Seed 003's third contract rebuilds only the lost member's communicators while the rest
        # keeps running. torchrun (TorchElastic) cannot hot-swap a rank into live collectives: it
        # restarts the whole group, which is what `fixed` already does with a replacement node.
        if isinstance(value, str) and value.replace("-", "_").replace(" ", "_") == "local_repair":
            raise ValueError(
                "mode: local_repair is not offered: no runwright executor can replace one lost "
                "rank inside a live collective (torchrun restarts the whole group), and `fixed` "
                "already restarts the group at the same size on a replacement node. Use `fixed` "
                "for that, or `elastic` with min_nodes/max_nodes to continue on fewer nodes"
            )
        return value

    @model_validator(mode="after")
    def _range(self) -> "MembershipSpec":
        if self.mode == "fixed" and (self.min_nodes or self.max_nodes):
            raise ValueError("min_nodes/max_nodes apply only to mode: elastic")
        if self.mode == "elastic":
            if self.min_nodes is None or self.max_nodes is None:
                raise ValueError("mode: elastic needs both min_nodes and max_nodes")
            if self.min_nodes > self.max_nodes:
                raise ValueError(f"min_nodes={self.min_nodes} exceeds max_nodes={self.max_nodes}")
        return self


class ParallelismSpec(Section):
    """Parallel degrees; their product is the world size."""

    dp: Degree | Literal["auto"] = "auto"
    """Data-parallel degree; `auto` = world size / (tp x pp x ep)."""
    dp_mode: Literal["ddp", "fsdp2"] = "ddp"
    """How the data-parallel ranks hold the model: `ddp`, a full replica each with gradients
    all-reduced; `fsdp2`, parameters, gradients and optimizer state sharded over them
    (`torch.distributed.fsdp.fully_shard`), the only mode that combines with tp > 1 at dp > 1
    (a dp x tp mesh)."""
    tp: Degree = 1
    """Tensor-parallel degree: attention heads and the feed-forward width split over tp ranks
    (DTensor ColwiseParallel/RowwiseParallel); must divide model.n_heads and the ffn size."""
    pp: Degree = 1
    """Pipeline-parallel degree (the planner models it; the reference trainer refuses pp > 1)."""
    ep: Degree = 1
    """Expert-parallel degree (the reference GPT has no experts: 1)."""
    membership: MembershipSpec = Field(default_factory=MembershipSpec)
    """Membership contract."""


class ResourcesSpec(Section):
    """What the scheduler must admit as one gang."""

    nodes: PositiveInt = Field(default=1, le=limits.MAX_NODES)
    """Nodes (hosts) in the gang."""
    devices_per_node: PositiveInt = Field(default=1, le=limits.MAX_DEVICES_PER_NODE)
    """Worker processes per node (one per accelerator; CPU processes on a CPU machine)."""
    device_type: Literal["cpu", "cuda"] = "cpu"
    """Accelerator kind; `cpu` runs gloo, `cuda` runs NCCL."""
    device_memory_bytes: PositiveInt | None = Field(default=None, le=limits.MAX_DEVICE_MEMORY_BYTES)
    """Memory per device, for preflight and the memory ledger."""
    peak_flops_per_device: float | None = Field(default=None, gt=0, le=limits.MAX_FLOPS_PER_DEVICE)
    """Declared peak FLOP/s per device (datasheet), the MFU denominator."""
    pool: str = "default"
    """Resource pool the run draws from."""
    priority: int = Field(default=0, ge=-limits.MAX_PRIORITY, le=limits.MAX_PRIORITY)
    """Higher runs first within a pool."""
    preemptible: bool = False
    """Whether the scheduler may preempt the run for a higher priority one."""
    same_node_tp: bool = True
    """Keep each tensor-parallel group inside one node's fast interconnect domain."""
    device_hour_price: float = Field(default=0.0, ge=0.0, le=limits.MAX_PRICE)
    """Price of one device-hour, for cost accounting."""
    node_labels: dict[str, str] = Field(default_factory=dict)
    """Labels every node of the gang must carry (`{driver: "550.54", nccl: "2.21.5"}`): a node
    matches a label when its inventory's `versions` hold that value, or its `features` hold
    `KEY=VALUE`. A baseline's environment labels pin a check to the environment it was recorded
    in (`runwright baseline`). Empty: any node."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node
