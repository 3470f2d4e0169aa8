"""What an admission pass reads besides the inventory: the pending gangs, the running ones, and
the projects' quotas. All plain records, so a pass is a pure function of them (admission.py).

A gang is all of a run's devices (seed 003, "成组调度"): it is admitted whole or not at all. A
request carries its restore constraints (seed 000, 8.5: "恢复兼容性是调度约束"): a checkpoint
that does not reshard fixes the world size, and the memory ledger fixes a floor on device memory;
a request that cannot meet them stays pending with that reason instead of starting where its
restore would fail.
"""

import math

from pydantic import Field, model_validator

from runwright.records import Record

MAX_GANG_DEVICES = 1_000_000


class GangRequest(Record):
    """One pending run's request for a gang of devices."""

    run_id: str = Field(min_length=1)
    """The run asking."""
    project: str = "default"
    """The project whose quota the gang counts against."""
    pool: str = "default"
    """The pool whose nodes (and quotas) the gang draws from."""
    priority: int = 0
    """Priority class: higher classes are admitted first, FIFO within a class."""
    submitted_at_seconds: float = 0.0
    """When the run was queued (seconds, any epoch shared by the pass): FIFO order in a class,
    ties broken by run_id."""
    devices: int = Field(gt=0, le=MAX_GANG_DEVICES)
    """Devices in the gang (its world size)."""
    devices_per_node: int | None = Field(default=None, gt=0)
    """Devices on every node of the gang (torchrun's local world size); None: any split."""
    device_type: str | None = None
    """Accelerator model wanted (`H100` matches `H100` and `H100-80GB-HBM3`); None: any."""
    tp: int = Field(default=1, gt=0)
    """Tensor-parallel degree: every group of `tp` consecutive ranks lies in one fast domain."""
    same_network_domain: bool = False
    """Whether the whole gang must lie inside one network domain."""
    preemptible: bool = False
    """Whether the run may be preempted (graceful stop and requeue) once running; only a
    preemptible run may borrow quota, since borrowed devices are reclaimed by preemption."""
    expected_duration_seconds: float = Field(default=math.inf, gt=0)
    """How long the run expects to hold its gang (its time limit); inf: unknown, then it is
    backfilled only onto devices the reservation does not need."""
    required_world_size: int | None = Field(default=None, gt=0)
    """World size the checkpoint to restore was saved with, when it does not reshard."""
    checkpoint_step: int | None = Field(default=None, ge=0)
    """The step of that checkpoint, for the reason's words."""
    min_device_memory_bytes: int | None = Field(default=None, gt=0)
    """Memory per device the run needs (`runwright plan memory`'s ledger); None: any."""
    node_labels: tuple[tuple[str, str], ...] = ()
    """(key, value) labels every node of the gang must carry (spec `resources.node_labels`,
    sorted); empty: any node."""

    @model_validator(mode="after")
    def _shape(self) -> "GangRequest":
        if self.devices_per_node is not None and self.devices % self.devices_per_node:
            raise ValueError(
                f"devices={self.devices} is not a multiple of devices_per_node="
                f"{self.devices_per_node}: make devices nodes x devices_per_node"
            )
        if self.devices % self.tp:
            raise ValueError(
                f"devices={self.devices} is not a multiple of tp={self.tp}: every tensor-"
                "parallel group needs tp devices"
            )
        return self

    @property
    def order_key(self) -> tuple[int, float, str]:
        """Queue order: higher priority first, then first queued, then run id."""
        return (-self.priority, self.submitted_at_seconds, self.run_id)


class NodeShare(Record):
    """The devices of one node a gang holds."""

    node: str
    """The node's name."""
    devices: tuple[int, ...]
    """Device indices on that node (0-based, ascending)."""


class RunningGang(Record):
    """A gang that holds devices now (admitted by an earlier pass, or placed by hand)."""

    run_id: str = Field(min_length=1)
    """The run holding the devices."""
    project: str = "default"
    """Its project."""
    pool: str = "default"
    """Its pool."""
    priority: int = 0
    """Its priority class."""
    preemptible: bool = False
    """Whether it may be preempted; a non-preemptible gang is never a victim."""
    borrowed: bool = False
    """Whether it was admitted on quota borrowed from other projects (reclaimable)."""
    placement: tuple[NodeShare, ...]
    """The devices it holds."""
    expected_end_seconds: float = math.inf
    """When it expects to release them (start + time limit); inf: unknown."""

    @property
    def devices(self) -> int:
        return sum(len(share.devices) for share in self.placement)

    @classmethod
    def admitted(
        cls,
        request: "GangRequest",
        placement: tuple[NodeShare, ...],
        borrowed: bool,
        expected_end_seconds: float,
    ) -> "RunningGang":
        """The gang `request` becomes once admitted on `placement`: one place copies the
        request's identity, pool and preemption terms, so no caller forgets one."""
        return cls(
            run_id=request.run_id,
            project=request.project,
            pool=request.pool,
            priority=request.priority,
            preemptible=request.preemptible,
            borrowed=borrowed,
            placement=placement,
            expected_end_seconds=expected_end_seconds,
        )


class ProjectQuota(Record):
    """One project's device quota in one pool."""

    project: str
    """The project."""
    pool: str = "default"
    """The pool the quota is in."""
    devices: int = Field(ge=0)
    """Devices the project may hold without borrowing (its nominal quota)."""
    borrowing_limit_devices: int | None = Field(default=None, ge=0)
    """At most this many devices above its quota, borrowed from other projects' idle quota;
    None: as many as are idle."""


class Quotas(Record):
    """The quotas of every project in every pool. A pool that no quota names is unmetered (a
    user's own machines); in a pool that has quotas, a project without one has quota 0 and can
    only borrow."""

    projects: tuple[ProjectQuota, ...] = ()
    """One entry per (project, pool)."""

    @model_validator(mode="after")
    def _unique(self) -> "Quotas":
        seen: set[tuple[str, str]] = set()
        for quota in self.projects:
            key = (quota.project, quota.pool)
            if key in seen:
                raise ValueError(
                    f"projects: two quotas for project {quota.project!r} in pool {quota.pool!r}; "
                    "keep one"
                )
            seen.add(key)
        return self


class AdmissionInput(Record):
    """Everything one admission pass reads (besides the inventory)."""

    now_seconds: float = 0.0
    """The pass's time, on the same clock as submitted_at and expected_end."""
    pending: tuple[GangRequest, ...] = ()
    """The pending requests, in any order (the pass orders them)."""
    running: tuple[RunningGang, ...] = ()
    """The gangs that hold devices now."""
    quotas: Quotas = Field(default_factory=Quotas)
    """Project quotas per pool."""
