"""Why a gang is pending: a code, the figures behind it, and the same in words.

Seed 000 (8.6, "透明的 pending reason"): "queued" helps nobody; "waiting for 16 devices of one
type in one NVLink domain" lets a user decide (shrink the gang, change pool, wait). So every
pending decision carries one `PendingReason`: `code` for programs (the controller records an event
when it changes, `runwright queue` groups by it), `fields` with the numbers, `words` for people.
`never_fits` marks reasons no amount of waiting cures (the inventory itself cannot hold the gang,
or its checkpoint cannot load at its size): those are refused at submit.

One constructor per code, so the words of each reason live in one place and tests read them.
"""

from typing import Any, Literal

from pydantic import Field

from runwright.records import Record

ReasonCode = Literal[
    "restore_world_size",
    "never_fits",
    "quota",
    "capacity",
    "fast_domain",
    "network_domain",
    "node_shape",
    "device_memory",
    "reserved",
]

FieldValue = int | float | str | None


class PendingReason(Record):
    """Why one request was not admitted in this pass."""

    code: ReasonCode
    """What holds the run: its restore constraint, the inventory (never_fits), its project's
    quota, free capacity, a topology constraint, or a higher-priority run's reservation."""
    never_fits: bool = False
    """True when waiting cannot help (refuse at submit): no inventory state can hold the gang."""
    fields: dict[str, FieldValue] = Field(default_factory=dict)
    """The figures the words quote (devices asked, free, quota, ...), by name."""
    words: str
    """The reason for people, one sentence."""


def _of_type(device_type: str | None) -> str:
    return f" of type {device_type}" if device_type else ""


def _gib(value: int) -> str:
    return f"{value / 2**30:.0f} GiB"


def restore_world_size(step: int | None, saved: int, asked: int) -> PendingReason:
    which = f"checkpoint step {step}" if step is not None else "the checkpoint to restore"
    return PendingReason(
        code="restore_world_size",
        never_fits=True,
        fields={"checkpoint_step": step, "saved_world_size": saved, "devices": asked},
        words=(
            f"{which} was saved with world size {saved} and this layout does not reshard; "
            f"the run asks for {asked} devices: ask for {saved}"
        ),
    )


def never_fits(what: str, **fields: FieldValue) -> PendingReason:
    """The inventory, empty and healthy, cannot hold the gang; `what` says which limit."""
    return PendingReason(
        code="never_fits", never_fits=True, fields=fields, words=f"never fits: {what}"
    )


def device_memory(
    floor_bytes: int, devices: int, device_type: str | None, eligible: int, largest_bytes: int
) -> PendingReason:
    return PendingReason(
        code="device_memory",
        fields={
            "min_device_memory_bytes": floor_bytes,
            "devices": devices,
            "eligible_free": eligible,
            "largest_device_memory_bytes": largest_bytes,
        },
        words=(
            f"needs {devices} devices{_of_type(device_type)} with at least {_gib(floor_bytes)} "
            f"each (memory ledger); {eligible} such devices are free"
        ),
    )


def quota(
    project: str,
    pool: str,
    used: int,
    quota_devices: int,
    asked: int,
    why_no_borrowing: str,
    idle_quota: int,
) -> PendingReason:
    return PendingReason(
        code="quota",
        fields={
            "project": project,
            "pool": pool,
            "used": used,
            "quota": quota_devices,
            "devices": asked,
            "idle_quota": idle_quota,
        },
        words=(
            f"project {project} uses {used} of its {quota_devices}-device quota and asks for "
            f"{asked}; borrowing unavailable: {why_no_borrowing}"
        ),
    )


def capacity(
    devices: int, device_type: str | None, pool: str, free: int, out_of_service: int
) -> PendingReason:
    more = f" ({out_of_service} more on drained or unhealthy nodes)" if out_of_service else ""
    return PendingReason(
        code="capacity",
        fields={"devices": devices, "pool": pool, "free": free, "out_of_service": out_of_service},
        words=(
            f"needs {devices} devices{_of_type(device_type)} in pool {pool}; {free} are free{more}"
        ),
    )


NAMED_OUT_OF_SERVICE = 3
"""Drained or unhealthy nodes a capacity reason names with their reasons (the rest counted)."""


def out_of_service_named(reason: PendingReason, nodes: list[tuple[str, Any]]) -> PendingReason:
    """`reason` with the first NAMED_OUT_OF_SERVICE out-of-service nodes (name, NodeHealth)
    named with why: "node a07 drained: GPU 3: 2 uncorrected ECC errors ..."."""
    named = [f"{name} {h.state}: {h.reason}" for name, h in nodes if h.reason]
    if not named:
        return reason
    more = len(named) - NAMED_OUT_OF_SERVICE
    text = "; ".join(named[:NAMED_OUT_OF_SERVICE]) + (f"; {more} more" if more > 0 else "")
    return reason.model_copy(update={"words": f"{reason.words} [{text}]"})


def fast_domain(
    devices: int, tp: int, device_type: str | None, kind: str, groups_free: int, largest: int
) -> PendingReason:
    fields: dict[str, FieldValue] = {
        "devices": devices,
        "tp": tp,
        "groups_free": groups_free,
        "largest_free_domain": largest,
    }
    if tp == devices:
        words = (
            f"needs {devices} devices{_of_type(device_type)} in one {kind} domain; the largest "
            f"free domain has {largest}"
        )
    else:
        words = (
            f"needs {devices // tp} groups of {tp} devices{_of_type(device_type)}, each in one "
            f"{kind} domain; the free domains hold {groups_free} such groups (the largest free "
            f"domain has {largest})"
        )
    return PendingReason(code="fast_domain", fields=fields, words=words)


def network_domain(devices: int, device_type: str | None, most_free: int) -> PendingReason:
    return PendingReason(
        code="network_domain",
        fields={"devices": devices, "most_free_in_one_domain": most_free},
        words=(
            f"needs {devices} devices{_of_type(device_type)} in one network domain; the most "
            f"free in one network domain is {most_free}"
        ),
    )


def node_shape(
    nodes: int, devices_per_node: int, device_type: str | None, nodes_free: int
) -> PendingReason:
    return PendingReason(
        code="node_shape",
        fields={"nodes": nodes, "devices_per_node": devices_per_node, "nodes_free": nodes_free},
        words=(
            f"needs {nodes} nodes with {devices_per_node} free devices{_of_type(device_type)} "
            f"each; {nodes_free} such nodes have them free"
        ),
    )


def reserved(run_id: str, priority: int, start_in_seconds: float) -> PendingReason:
    when = (
        f"in {start_in_seconds / 60:.0f} min"
        if start_in_seconds < float("inf")
        else "once running gangs of unknown length end"
    )
    return PendingReason(
        code="reserved",
        fields={
            "reserved_for": run_id,
            "reserved_priority": priority,
            "reservation_start_in_seconds": start_in_seconds,
        },
        words=(
            f"devices are reserved for run {run_id} (priority {priority}), which starts {when}; "
            "starting this run now would delay it"
        ),
    )
