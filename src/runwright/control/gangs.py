"""What a run asks of the scheduler, and what it holds once admitted.

A run's gang request carries its spec's terms (pool, priority, preemptibility, shape, time limit,
and on a sized pool the memory floor of its ledger); an admitted run holds the devices its newest
RUN_ADMITTED event names, and a local CUDA gang is pinned to them (CUDA_VISIBLE_DEVICES).
"""

import math

from runwright.events import EventType
from runwright.plan.spec_ledger import device_memory_floor
from runwright.sched.requests import GangRequest, NodeShare, RunningGang
from runwright.spec import JobSpec
from runwright.store import EventRecord


def gang_request(
    run_id: str, project: str, submitted: float, spec: JobSpec, *, sized: bool = False
) -> GangRequest:
    """The gang a run of `spec` asks for: all its ranks' devices, on the spec's pool and terms,
    held to its time limit (`budget.wall_seconds`) and, on accelerators of a `sized` pool (one
    whose nodes all declare their device memory), to devices its memory ledger fits."""
    res = spec.resources
    floor = device_memory_floor(spec) if sized and res.device_type != "cpu" else None
    return GangRequest(
        run_id=run_id,
        project=project,
        pool=res.pool,
        priority=res.priority,
        submitted_at_seconds=submitted,
        devices=res.world_size,
        devices_per_node=res.devices_per_node,
        # `cuda` names no model: any accelerator; `cpu` asks for CPU nodes.
        device_type="cpu" if res.device_type == "cpu" else None,
        tp=spec.parallelism.tp,
        preemptible=res.preemptible,
        expected_duration_seconds=spec.budget.wall_seconds or math.inf,
        min_device_memory_bytes=floor,
        node_labels=tuple(sorted(res.node_labels.items())),
    )


def placement_of(event: EventRecord) -> tuple[NodeShare, ...]:
    return tuple(NodeShare.model_validate(share) for share in event.attributes["placement"])


def pinned_devices(spec: JobSpec, events: list[EventRecord], host: str) -> dict[str, str]:
    """The environment that holds a local CUDA gang to the devices its newest admission placed
    it on: CUDA_VISIBLE_DEVICES, node by node in placement order (the local executor gives each
    node's agent its own slice). Empty for CPU ranks, a run admitted without an inventory, or a
    placement on other hosts (Slurm binds its own GRES there)."""
    if spec.resources.device_type != "cuda":
        return {}
    admitted = [e for e in events if e.type == EventType.RUN_ADMITTED]
    if not admitted:
        return {}
    shares = placement_of(admitted[-1])
    if not shares or any(share.node != host for share in shares):
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(d) for s in shares for d in s.devices)}


def running_gang(request: GangRequest, admitted: EventRecord) -> RunningGang:
    """The gang `request` holds since its RUN_ADMITTED event: until its time limit (the spec's
    `budget.wall_seconds`) has passed since then, or inf without one. The limit counts from the
    run's first start, so this end is a bound, never too early: a reservation behind it holds."""
    return RunningGang.admitted(
        request,
        placement_of(admitted),
        bool(admitted.attributes.get("borrowed")),
        expected_end_seconds=admitted.time_unix_s + request.expected_duration_seconds,
    )
