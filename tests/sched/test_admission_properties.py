"""Invariants of the admission pass, on random inventories, queues and running gangs.

The running gangs are themselves admitted by an earlier pass of the same policy (with random
expected ends), so the state a pass starts from is one the scheduler can reach. The default suite
runs a few dozen examples per policy (about a second); `-m slow` runs a thousand.
"""

import math
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwright.sched.admission import POLICIES, AdmissionResult, admit
from runwright.sched.inventory import Inventory, Node, NodeHealth, NodeLabels
from runwright.sched.requests import (
    AdmissionInput,
    GangRequest,
    ProjectQuota,
    Quotas,
    RunningGang,
)

PROJECTS = ("vision", "nlp", "speech")


@st.composite
def scenarios(draw) -> tuple[Inventory, AdmissionInput]:
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    nodes = []
    for island in range(rng.randint(1, 4)):
        for index in range(rng.randint(1, 3)):
            state = rng.choice(["healthy"] * 6 + ["drained", "unhealthy"])
            nodes.append(
                Node(
                    name=f"i{island}n{index}",
                    device_type=rng.choice(["H100", "H100", "A100"]),
                    device_count=rng.choice([2, 4, 8]),
                    device_memory_bytes=rng.choice([40, 80]) * 2**30,
                    labels=NodeLabels(
                        fast_domain=f"island{island}",
                        network_domain=rng.choice(["net0", "net1", None]),
                    ),
                    health=NodeHealth().observed(state, "test", 0.0),
                )
            )
    inventory = Inventory(nodes=tuple(nodes))
    quotas = Quotas(
        projects=tuple(
            ProjectQuota(
                project=p,
                devices=rng.randint(0, 24),
                borrowing_limit_devices=rng.choice([None, 0, 8]),
            )
            for p in PROJECTS
        )
        if rng.random() < 0.7
        else ()
    )

    def request(name: str, at: float) -> GangRequest:
        tp = rng.choice([1, 1, 2, 4, 8])
        per = rng.choice([None, None, tp, 2 * tp])
        unit = math.lcm(per or 1, tp)
        return GangRequest(
            run_id=name,
            project=rng.choice(PROJECTS),
            priority=rng.randint(0, 3),
            submitted_at_seconds=at,
            devices=unit * rng.randint(1, 4),
            devices_per_node=per,
            device_type=rng.choice([None, "H100", "A100"]),
            tp=tp,
            same_network_domain=rng.random() < 0.2,
            preemptible=rng.random() < 0.6,
            expected_duration_seconds=rng.choice([math.inf, *range(10, 400, 30)]),
            min_device_memory_bytes=rng.choice([None, None, 80 * 2**30]),
        )

    first = tuple(request(f"old{i}", float(i)) for i in range(rng.randint(0, 10)))
    earlier = admit(inventory, AdmissionInput(pending=first, quotas=quotas))
    by_id = {r.run_id: r for r in first}
    running = tuple(
        RunningGang.admitted(
            by_id[d.run_id],
            d.placement,
            d.borrowed,
            rng.choice([math.inf, *range(5, 300, 20)]),
        )
        for d in earlier.decisions
        if d.outcome == "admit"
    )
    pending = tuple(request(f"new{i}", 100.0 + i) for i in range(rng.randint(1, 12)))
    return inventory, AdmissionInput(
        now_seconds=0.0, pending=pending, running=running, quotas=quotas
    )


def check(inventory: Inventory, state: AdmissionInput, result: AdmissionResult) -> None:
    nodes = {node.name: node for node in inventory.nodes}
    requests = {r.run_id: r for r in state.pending}
    running = {g.run_id: g for g in state.running}
    assert [d.run_id for d in result.decisions] == [
        r.run_id for r in sorted(state.pending, key=lambda r: r.order_key)
    ] or result.policy == "fifo-firstfit-v1"
    victims = [v for d in result.decisions for v in d.preempt]
    assert len(victims) == len(set(victims)), "a run is preempted twice"
    held: dict[str, Counter] = {}
    quota_use: Counter = Counter()
    for gang in running.values():
        if gang.run_id in victims:
            continue
        for share in gang.placement:
            held.setdefault(share.node, Counter()).update(share.devices)
        if not gang.borrowed:
            quota_use[(gang.pool, gang.project)] += gang.devices
    for decision in result.decisions:
        request = requests[decision.run_id]
        if decision.outcome == "pending":
            assert decision.reason is not None and decision.reason.words, "pending without reason"
            assert decision.placement == () and decision.preempt == ()
            continue
        assert decision.reason is None
        # never splits a gang: all of it or nothing
        assert sum(len(s.devices) for s in decision.placement) == request.devices
        for share in decision.placement:
            node = nodes[share.node]
            assert node.offered, f"{decision.run_id} placed on {node.health.state} {node.name}"
            assert request.pool in node.pools
            if request.min_device_memory_bytes:
                assert node.device_memory_bytes >= request.min_device_memory_bytes
            assert all(0 <= i < node.device_count for i in share.devices)
            held.setdefault(share.node, Counter()).update(share.devices)
            if request.devices_per_node:
                assert len(share.devices) == request.devices_per_node
        # a TP group never spans fast domains
        ranks = [nodes[s.node].fast_domain for s in decision.placement for _ in s.devices]
        for start in range(0, len(ranks), request.tp):
            assert len(set(ranks[start : start + request.tp])) == 1, "TP group across domains"
        if request.same_network_domain:
            nets = {nodes[s.node].labels.network_domain for s in decision.placement}
            assert len(nets) == 1 and None not in nets
        for victim in decision.preempt:
            gang = running[victim]
            assert gang.preemptible, "a non-preemptible run was preempted"
            assert gang.priority < request.priority or (
                gang.borrowed and gang.project != request.project
            )
        if decision.borrowed:
            assert request.preemptible, "a borrowed gang must be reclaimable"
        else:
            quota_use[(request.pool, request.project)] += request.devices
    # never over-commits a node: each device held once
    for name, count in held.items():
        assert max(count.values()) == 1, f"device of {name} given twice: {count}"
    # never exceeds a quota except through reclaimable borrowing
    for entry in state.quotas.projects:
        assert quota_use[(entry.pool, entry.project)] <= entry.devices


def check_reservations_not_delayed(
    inventory: Inventory, state: AdmissionInput, result: AdmissionResult
) -> None:
    """At each reservation's start, its placement is still free: backfill did not delay it."""
    nodes = {node.name: node for node in inventory.nodes if node.offered}
    requests = {r.run_id: r for r in state.pending}
    victims = {v for d in result.decisions for v in d.preempt}
    holds = [
        (g.expected_end_seconds, s.node, len(s.devices))
        for g in state.running
        if g.run_id not in victims
        for s in g.placement
    ]
    for d in result.decisions:
        if d.outcome == "admit":
            ends = state.now_seconds + requests[d.run_id].expected_duration_seconds
            holds += [(ends, s.node, len(s.devices)) for s in d.placement]
    for reservation in result.reservations:
        if not math.isfinite(reservation.start_seconds):
            continue
        busy = Counter()
        for ends, node, count in holds:
            if ends > reservation.start_seconds:
                busy[node] += count
        for node, count in reservation.placement.items():
            free = nodes[node].device_count - busy[node]
            assert free >= count, f"reservation {reservation} delayed on {node}"


def _run(inventory: Inventory, state: AdmissionInput, policy: str) -> None:
    result = admit(inventory, state, policy)
    check(inventory, state, result)
    check_reservations_not_delayed(inventory, state, result)
    shuffled = list(state.pending)
    random.Random(7).shuffle(shuffled)
    again = admit(inventory, state.model_copy(update={"pending": tuple(shuffled)}), policy)
    assert again == result, "same input (in another order), different decisions"


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("policy", sorted(POLICIES))
@FAST
@given(scenario=scenarios())
def test_admission_invariants(policy, scenario) -> None:
    _run(*scenario, policy)


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(POLICIES))
@SLOW
@given(scenario=scenarios())
def test_admission_invariants_at_length(policy, scenario) -> None:
    _run(*scenario, policy)
