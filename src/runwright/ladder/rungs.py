"""The rungs of a scale-up ladder (seed 000, 8.8 "step-wise validation from small to target
scale"): one device, one node, two or more nodes, then the target shape, all with the spec's
model, data and global batch, so every rung consumes the same samples at the same step and its
ledger is coverage-equivalent to the rung before it.

Only `resources.nodes` and `resources.devices_per_node` change from rung to rung; the trainer
derives the per-rank micro-batches and the accumulation from the unchanged global batch
(spec/resolve.py), so the loss at step s is the loss of the same global batch on every rung.
"""

from typing import Any

from pydantic import Field

from runwright.errors import RunwrightError
from runwright.records import Record
from runwright.spec import JobSpec, spec_from_mapping


class LadderError(RunwrightError):
    """A ladder that cannot run as asked; the message says what to change."""


class Rung(Record):
    """One shape of the ladder."""

    index: int = Field(ge=0)
    """Position on the ladder, from 0 (one rank)."""
    name: str
    """`one rank`, `one node`, `two nodes` or `target`."""
    nodes: int = Field(ge=1)
    """resources.nodes at this rung."""
    devices_per_node: int = Field(ge=1)
    """resources.devices_per_node at this rung."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node


def ladder_rungs(spec: JobSpec, node_devices: int | None = None) -> list[Rung]:
    """one rank -> one node (`node_devices` ranks; default the spec's devices per node, at least
    2 when the target has more than one rank) -> two nodes (the spec's devices per node) -> the
    target (the spec's shape), dropping a rung whose shape an earlier one already ran."""
    nodes, per_node = spec.resources.nodes, spec.resources.devices_per_node
    target_world = nodes * per_node
    if node_devices is None:
        node_devices = max(per_node, min(2, target_world))
    if node_devices < 1:
        raise LadderError(f"--node-devices {node_devices}: give at least 1 rank for one node")
    shapes = [("one rank", 1, 1), ("one node", 1, node_devices)]
    if nodes >= 2:
        shapes.append(("two nodes", 2, per_node))
    shapes.append(("target", nodes, per_node))
    rungs: list[Rung] = []
    for name, n, d in shapes:
        if any((r.nodes, r.devices_per_node) == (n, d) for r in rungs):
            continue
        rungs.append(Rung(index=len(rungs), name=name, nodes=n, devices_per_node=d))
    return rungs


def rung_spec(spec: JobSpec, rung: Rung, **changes: Any) -> JobSpec:
    """The spec at `rung`'s shape: its resources, a name saying which rung, and `changes`
    (`steps`, `resume_from`) for the carry run; everything else as given."""
    data = spec.model_dump(mode="json")
    data["name"] = f"{spec.name}-ladder-{rung.index}"
    data["resources"].update(nodes=rung.nodes, devices_per_node=rung.devices_per_node)
    if "steps" in changes:
        data["training"]["steps"] = changes["steps"]
    if "resume_from" in changes:
        data["checkpoint"]["resume_from"] = changes["resume_from"]
    return spec_from_mapping(data, f"the ladder's rung {rung.index} ({rung.name})")
