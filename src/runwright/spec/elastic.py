"""Elastic membership arithmetic: the layout a run has at each node count of its elastic range.

`parallelism.membership.mode: elastic` lets a run restart on fewer nodes than `resources.nodes`
after a node loss (and grow back). The global batch is part of the experiment, so it never
changes: only dp, the micro-batch and gradient accumulation do, through the same arithmetic the
spec's own plan uses (resolve.py). A range holding a node count at which the global batch cannot
be kept is refused when the spec is validated, naming those counts, so a run never learns it at
recovery time. Pure: the controller (control/membership.py) and the ranks (runtime/context.py)
share it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runwright.records import Record
from runwright.spec.resolve import ResolvedPlan, resolve_plan

if TYPE_CHECKING:
    from runwright.spec.job import JobSpec


class Layout(Record):
    """One membership size's layout: what a generation at that size trains with."""

    nodes: int
    """Nodes in the group."""
    world_size: int
    """Ranks: nodes x devices per node."""
    dp: int
    """Data-parallel degree."""
    micro_batch_size: int
    """Samples per rank per forward pass."""
    grad_accumulation_steps: int
    """Micro-batches per rank per optimizer step."""
    global_batch_samples: int
    """Samples per optimizer step: the same at every size of an elastic range."""


def spec_at_nodes(spec: JobSpec, nodes: int) -> JobSpec:
    """`spec` as a generation of `nodes` nodes runs it (its hash is the submitted spec's: the
    run does not change, its membership does)."""
    if nodes == spec.resources.nodes:
        return spec
    resources = spec.resources.model_copy(update={"nodes": nodes})
    changed = spec.model_copy(update={"resources": resources})
    changed.__dict__.pop("plan", None)  # the cached plan is the submitted size's
    changed.__dict__["spec_hash"] = spec.spec_hash
    return changed


def layout_of(plan: ResolvedPlan, nodes: int) -> Layout:
    return Layout(
        nodes=nodes,
        world_size=int(plan.world_size.value or 0),
        dp=int(plan.dp.value or 0),
        micro_batch_size=int(plan.micro_batch_size.value or 0),
        grad_accumulation_steps=int(plan.grad_accumulation_steps.value or 0),
        global_batch_samples=int(plan.global_batch_samples.value or 0),
    )


def layout_at(spec: JobSpec, nodes: int) -> Layout:
    """The layout at `nodes` nodes; ValueError (resolve.py's words) when it cannot exist."""
    return layout_of(resolve_plan(spec_at_nodes(spec, nodes)), nodes)


def node_range(spec: JobSpec) -> range:
    """The node counts a run may run at: its elastic range, or its one size."""
    m = spec.parallelism.membership
    if m.mode != "elastic" or m.min_nodes is None or m.max_nodes is None:
        return range(spec.resources.nodes, spec.resources.nodes + 1)
    return range(m.min_nodes, m.max_nodes + 1)


def elastic_layouts(spec: JobSpec) -> list[Layout]:
    """The layout at every size of an elastic range (empty for a fixed run)."""
    if spec.parallelism.membership.mode != "elastic":
        return []
    return [layout_at(spec, nodes) for nodes in node_range(spec)]


def check_elastic_range(spec: JobSpec) -> None:
    """Refuse an elastic range the run could not keep its global batch over (ValueError naming
    every node count that fails and why), or one that leaves out `resources.nodes`."""
    m = spec.parallelism.membership
    if m.mode != "elastic":
        return
    if spec.recovery.warm_standby:
        # A standby is the next generation's group, started ahead at the current size: after a
        # size change it would come up at the old one.
        raise ValueError(
            "recovery.warm_standby starts the next generation ahead at the current size, which "
            "an elastic restart changes: set warm_standby: false, or membership mode: fixed"
        )
    nodes = spec.resources.nodes
    if not (m.min_nodes or 0) <= nodes <= (m.max_nodes or 0):
        raise ValueError(
            f"resources.nodes={nodes} lies outside parallelism.membership's elastic range "
            f"[{m.min_nodes}, {m.max_nodes}]: the run starts at resources.nodes, so widen the "
            "range to include it"
        )
    failing: list[str] = []
    kept: list[int] = []
    for count in node_range(spec):
        try:
            layout_at(spec, count)
        except ValueError as exc:
            failing.append(f"{count} node(s): {exc}")
        else:
            kept.append(count)
    if failing:
        raise ValueError(
            f"parallelism.membership: the elastic range [{m.min_nodes}, {m.max_nodes}] cannot "
            f"keep the global batch at every size: {'; '.join(failing)}. Narrow min_nodes/"
            f"max_nodes to sizes that keep it (these do: {kept or 'none'}), or choose a global "
            "batch (and micro_batch_size) divisible at every size"
        )


def plan_at_world(spec: JobSpec, world_size: int) -> ResolvedPlan:
    """The plan a rank trains with in a group of `world_size` ranks: the spec's own, or, for an
    elastic run restarted at another size in its range, the plan at that size."""
    per_node = spec.resources.devices_per_node
    nodes, rest = divmod(world_size, per_node)
    if world_size == spec.resources.world_size or rest or nodes not in node_range(spec):
        return spec.plan
    return spec_at_nodes(spec, nodes).plan
