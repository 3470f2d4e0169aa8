"""Admission examples: one behaviour each, with the placement or reason it must give."""

import math

import pytest

from runwright.sched.admission import POLICIES, admit, never_fits
from runwright.sched.requests import (
    AdmissionInput,
    GangRequest,
    ProjectQuota,
    Quotas,
    RunningGang,
)

GIB = 2**30


def shares(decision) -> dict[str, int]:
    return {share.node: len(share.devices) for share in decision.placement}


def test_a_gang_is_admitted_whole_or_not_at_all(make_cluster, make_holding):
    inventory = make_cluster(islands=1, nodes_per_island=2)  # 16 devices
    running = (make_holding("old", "i0n0", 6),)  # 10 free
    result = admit(
        inventory,
        AdmissionInput(pending=(GangRequest(run_id="big", devices=12),), running=running),
    )
    decision = result.of("big")
    assert decision.outcome == "pending" and decision.placement == ()
    assert decision.reason.code == "capacity"
    assert decision.reason.words == "needs 12 devices in pool default; 10 are free"


def test_best_fit_fills_the_hole_and_keeps_an_empty_node_whole(make_cluster, make_holding):
    inventory = make_cluster(islands=2, nodes_per_island=1)  # i0n0, i1n0: 8 each
    running = (make_holding("old", "i1n0", 4),)  # i1n0 has 4 free, i0n0 8
    pending = (GangRequest(run_id="small", devices=4),)
    best = admit(inventory, AdmissionInput(pending=pending, running=running))
    assert shares(best.of("small")) == {"i1n0": 4}
    first = admit(inventory, AdmissionInput(pending=pending, running=running), "fifo-firstfit-v1")
    assert shares(first.of("small")) == {"i0n0": 4}  # first fit breaks the empty node


def test_devices_are_the_lowest_free_indices(make_cluster, make_holding):
    inventory = make_cluster(islands=1, nodes_per_island=1)
    running = (make_holding("old", "i0n0", 3, first=2),)  # holds 2, 3, 4
    result = admit(
        inventory, AdmissionInput(pending=(GangRequest(run_id="r", devices=4),), running=running)
    )
    assert result.of("r").placement[0].devices == (0, 1, 5, 6)


def test_higher_priority_first_and_fifo_within_a_class(make_cluster):
    inventory = make_cluster(islands=1, nodes_per_island=1)  # 8 devices
    pending = (
        GangRequest(run_id="early-low", devices=8, priority=0, submitted_at_seconds=1),
        GangRequest(run_id="late-high", devices=8, priority=5, submitted_at_seconds=9),
        GangRequest(run_id="early-high", devices=8, priority=5, submitted_at_seconds=2),
    )
    result = admit(inventory, AdmissionInput(pending=pending))
    assert [d.run_id for d in result.decisions] == ["early-high", "late-high", "early-low"]
    assert [d.outcome for d in result.decisions] == ["admit", "pending", "pending"]
    assert [d.position for d in result.decisions] == [1, 2, 3]


def test_tp_groups_stay_inside_one_nvlink_domain(make_cluster, make_holding):
    # Two islands of two nodes; island0 has 4 + 8 free, island1 has 4 + 4 free: 20 free, but
    # two TP groups of 8 need island0's 12 (one group) and island1's 8 (one group).
    inventory = make_cluster(islands=2, nodes_per_island=2)
    running = (
        make_holding("a", "i0n0", 4),
        make_holding("b", "i1n0", 4),
        make_holding("c", "i1n1", 4),
    )
    result = admit(
        inventory,
        AdmissionInput(pending=(GangRequest(run_id="tp", devices=16, tp=8),), running=running),
    )
    placed = shares(result.of("tp"))
    island0 = placed.get("i0n0", 0) + placed.get("i0n1", 0)
    island1 = placed.get("i1n0", 0) + placed.get("i1n1", 0)
    assert (island0, island1) == (8, 8)


def test_fast_domain_reason_in_the_words_of_the_issue(make_cluster, make_holding):
    inventory = make_cluster(islands=2, nodes_per_island=2)  # islands of 16
    running = (make_holding("a", "i0n0", 8), make_holding("b", "i1n0", 8))  # 8 free in each
    result = admit(
        inventory,
        AdmissionInput(
            pending=(GangRequest(run_id="tp16", devices=16, tp=16, device_type="H100"),),
            running=running,
        ),
    )
    reason = result.of("tp16").reason
    assert reason.code == "fast_domain" and not reason.never_fits
    assert reason.words == (
        "needs 16 devices of type H100 in one NVLink domain; the largest free domain has 8"
    )


def test_one_network_domain_when_asked(make_cluster, make_holding):
    inventory = make_cluster(islands=4, nodes_per_island=1, networks=2)  # net0 i0,i2; net1 i1,i3
    running = (make_holding("a", "i0n0", 4), make_holding("b", "i1n0", 4))
    pending = (GangRequest(run_id="net", devices=12, same_network_domain=True),)
    placed = shares(admit(inventory, AdmissionInput(pending=pending, running=running)).of("net"))
    assert sum(placed.values()) == 12
    assert set(placed) in ({"i0n0", "i2n0"}, {"i1n0", "i3n0"})
    fuller = (make_holding("c", "i2n0", 4), make_holding("d", "i3n0", 4), *running)  # 16 free
    reason = admit(inventory, AdmissionInput(pending=pending, running=fuller)).of("net").reason
    assert reason.words == (
        "needs 12 devices in one network domain; the most free in one network domain is 8"
    )


def test_devices_per_node_takes_whole_node_shares(make_cluster, make_holding):
    inventory = make_cluster(islands=1, nodes_per_island=3)
    running = (make_holding("a", "i0n0", 6),)  # 2 + 8 + 8 free
    pending = (GangRequest(run_id="r", devices=8, devices_per_node=4),)
    assert shares(admit(inventory, AdmissionInput(pending=pending, running=running)).of("r")) == {
        "i0n1": 4,
        "i0n2": 4,
    }
    pending = (GangRequest(run_id="r", devices=12, devices_per_node=4, tp=4),)
    running = (*running, make_holding("b", "i0n1", 6), make_holding("c", "i0n2", 6))
    reason = admit(inventory, AdmissionInput(pending=pending, running=running)).of("r").reason
    assert reason.code == "capacity"  # 6 free in all, 12 asked


def test_drained_nodes_are_never_offered_and_the_reason_counts_them(make_cluster):
    inventory = make_cluster(islands=1, nodes_per_island=2, drained=("i0n1",))
    pending = (GangRequest(run_id="r", devices=16, device_type="H100"),)
    decision = admit(inventory, AdmissionInput(pending=pending)).of("r")
    assert decision.outcome == "pending" and not decision.reason.never_fits
    assert decision.reason.words == (
        "needs 16 devices of type H100 in pool default; 8 are free "
        "(8 more on drained or unhealthy nodes) [i0n1 drained: maintenance]"
    )
    small = admit(inventory, AdmissionInput(pending=(GangRequest(run_id="s", devices=8),)))
    assert shares(small.of("s")) == {"i0n0": 8}


def test_quota_reason_in_the_words_of_the_issue(make_cluster, make_holding):
    inventory = make_cluster(islands=4, nodes_per_island=4)  # 128 devices
    quotas = Quotas(
        projects=(
            ProjectQuota(project="vision", devices=64),
            ProjectQuota(project="nlp", devices=64),
        )
    )
    running = (
        tuple(make_holding(f"v{i}", f"i0n{i}", 8, project="vision") for i in range(4))
        + tuple(make_holding(f"w{i}", f"i1n{i}", 4, project="vision") for i in range(4))
        + tuple(make_holding(f"n{i}", f"i{2 + i // 4}n{i % 4}", 8, project="nlp") for i in range(8))
        + tuple(
            make_holding(
                f"b{i}", f"i1n{i}", 4, first=4, project="nlp", borrowed=True, preemptible=True
            )
            for i in range(4)
        )
    )  # vision holds 48; nlp 64 and 16 borrowed: the pool's 128 of quota is used up
    pending = (GangRequest(run_id="big", project="vision", devices=32, preemptible=True),)
    reason = (
        admit(inventory, AdmissionInput(pending=pending, running=running, quotas=quotas))
        .of("big")
        .reason
    )
    assert reason.code == "quota"
    assert reason.words == (
        "project vision uses 48 of its 64-device quota and asks for 32; "
        "borrowing unavailable: pool is full"
    )


def test_borrowing_is_reclaimed_when_the_owner_needs_its_quota(make_cluster, make_holding):
    inventory = make_cluster(islands=1, nodes_per_island=4)  # 32 devices
    quotas = Quotas(
        projects=(ProjectQuota(project="a", devices=16), ProjectQuota(project="b", devices=16))
    )
    first = admit(
        inventory,
        AdmissionInput(
            pending=(GangRequest(run_id="a-big", project="a", devices=24, preemptible=True),),
            quotas=quotas,
        ),
    ).of("a-big")
    assert first.outcome == "admit" and first.borrowed
    baseline = admit(
        inventory,
        AdmissionInput(
            pending=(GangRequest(run_id="a-big", project="a", devices=24, preemptible=True),),
            quotas=quotas,
        ),
        "fifo-firstfit-v1",
    ).of("a-big")
    assert baseline.reason.words == (
        "project a uses 0 of its 16-device quota and asks for 24; "
        "borrowing unavailable: this admission policy does not borrow"
    )
    stiff = admit(
        inventory,
        AdmissionInput(
            pending=(GangRequest(run_id="a-stiff", project="a", devices=24),), quotas=quotas
        ),
    ).of("a-stiff")
    assert stiff.reason.words.endswith(
        "borrowing unavailable: the run is not preemptible, so borrowed devices could not be "
        "reclaimed"
    )
    borrowed = RunningGang(
        run_id="a-big",
        project="a",
        preemptible=True,
        borrowed=True,
        placement=first.placement,
    )
    owner = admit(
        inventory,
        AdmissionInput(
            pending=(GangRequest(run_id="b-run", project="b", devices=16),),
            running=(borrowed,),
            quotas=quotas,
        ),
    ).of("b-run")
    assert owner.outcome == "admit" and owner.preempt == ("a-big",) and not owner.borrowed


def test_preemption_takes_only_lower_priority_preemptible_runs(make_cluster, make_holding):
    inventory = make_cluster(islands=1, nodes_per_island=2)  # 16 devices
    running = (
        make_holding("stiff", "i0n0", 8, priority=0, preemptible=False),
        make_holding("soft", "i0n1", 8, priority=0, preemptible=True),
    )
    pending = (GangRequest(run_id="urgent", devices=8, priority=10),)
    decision = admit(inventory, AdmissionInput(pending=pending, running=running)).of("urgent")
    assert decision.outcome == "admit" and decision.preempt == ("soft",)
    assert shares(decision) == {"i0n1": 8}
    too_big = (GangRequest(run_id="huge", devices=16, priority=10),)
    decision = admit(inventory, AdmissionInput(pending=too_big, running=running)).of("huge")
    assert decision.outcome == "pending" and decision.preempt == ()  # never the stiff one
    equal = (GangRequest(run_id="peer", devices=8, priority=0),)
    decision = admit(inventory, AdmissionInput(pending=equal, running=running)).of("peer")
    assert decision.outcome == "pending"  # same priority: no preemption


def test_preemption_names_the_fewest_victims(make_cluster, make_holding):
    inventory = make_cluster(islands=1, nodes_per_island=2)
    running = (
        make_holding("p1", "i0n0", 4, preemptible=True),
        make_holding("p2", "i0n0", 4, first=4, preemptible=True),
        make_holding("p3", "i0n1", 8, preemptible=True),
    )
    pending = (GangRequest(run_id="hi", devices=4, priority=1),)
    decision = admit(inventory, AdmissionInput(pending=pending, running=running)).of("hi")
    assert len(decision.preempt) == 1 and sum(shares(decision).values()) == 4


def test_backfill_never_delays_the_reservation(make_cluster, make_holding):
    inventory = make_cluster(islands=1, nodes_per_island=2)  # 16 devices
    running = (make_holding("ending", "i0n0", 8, expected_end_seconds=100.0),)  # 8 free now
    pending = (
        GangRequest(run_id="head", devices=16, priority=5, expected_duration_seconds=1000),
        GangRequest(
            run_id="short", devices=8, submitted_at_seconds=1, expected_duration_seconds=50
        ),
        GangRequest(
            run_id="long", devices=8, submitted_at_seconds=2, expected_duration_seconds=500
        ),
    )
    result = admit(inventory, AdmissionInput(now_seconds=0.0, pending=pending, running=running))
    assert result.of("head").outcome == "pending" and result.of("head").reason.code == "capacity"
    assert [(r.run_id, r.start_seconds) for r in result.reservations] == [("head", 100.0)]
    assert result.of("short").outcome == "admit"  # ends at 50, before the head starts at 100
    long = result.of("long")
    assert long.outcome == "pending" and long.reason.code == "capacity"  # short took the 8
    alone = (pending[0], pending[2])
    long = admit(inventory, AdmissionInput(pending=alone, running=running)).of("long")
    assert long.reason.code == "reserved"
    assert long.reason.words == (
        "devices are reserved for run head (priority 5), which starts in 2 min; starting this "
        "run now would delay it"
    )


def test_backfill_may_use_devices_the_reservation_does_not_need(make_cluster, make_holding):
    inventory = make_cluster(islands=1, nodes_per_island=3)  # 24 devices
    running = (
        make_holding("a", "i0n0", 8, expected_end_seconds=100.0),
        make_holding("b", "i0n1", 8, expected_end_seconds=math.inf),
    )
    pending = (
        GangRequest(run_id="head", devices=16, priority=5),
        GangRequest(run_id="filler", devices=4, expected_duration_seconds=10_000),
    )
    result = admit(inventory, AdmissionInput(pending=pending, running=running))
    assert result.of("head").outcome == "pending"
    # head is reserved i0n0 (free at 100) and 8 of i0n2: nothing is left for a long filler.
    assert result.of("filler").reason.code == "reserved"
    # Four nodes, i0n2 half held for good: head is reserved i0n0 and i0n3, i0n2's 4 are spare.
    wider = make_cluster(islands=1, nodes_per_island=4)
    running = (*running, make_holding("c", "i0n2", 4, expected_end_seconds=math.inf))
    result = admit(wider, AdmissionInput(pending=pending, running=running))
    assert [r.placement for r in result.reservations] == [{"i0n0": 8, "i0n3": 8}]
    assert shares(result.of("filler")) == {"i0n2": 4}


def test_restore_constraints_hold_a_run_rather_than_misplace_it(make_cluster):
    inventory = make_cluster(islands=1, nodes_per_island=2, memory_gib=40)
    resharding = GangRequest(run_id="r", devices=8, required_world_size=16, checkpoint_step=4000)
    reason = admit(inventory, AdmissionInput(pending=(resharding,))).of("r").reason
    assert reason.code == "restore_world_size" and reason.never_fits
    assert reason.words.startswith(
        "checkpoint step 4000 was saved with world size 16 and this layout does not reshard"
    )
    hungry = GangRequest(run_id="m", devices=8, min_device_memory_bytes=80 * GIB)
    reason = admit(inventory, AdmissionInput(pending=(hungry,))).of("m").reason
    assert reason.never_fits
    assert reason.words == (
        "never fits: needs at least 80 GiB per device (memory ledger); the largest devices in "
        "pool default have 40 GiB"
    )


def test_memory_floor_picks_the_nodes_that_meet_it(make_cluster):
    small = make_cluster(islands=1, nodes_per_island=1, memory_gib=40)
    big = make_cluster(islands=1, nodes_per_island=1, memory_gib=80)
    renamed = big.nodes[0].model_copy(update={"name": "big0"})
    inventory = small.model_copy(update={"nodes": (*small.nodes, renamed)})
    request = GangRequest(run_id="m", devices=4, min_device_memory_bytes=80 * GIB)
    assert shares(admit(inventory, AdmissionInput(pending=(request,))).of("m")) == {"big0": 4}


def test_never_fits_is_distinct_and_checked_at_submit(make_cluster):
    inventory = make_cluster(islands=2, nodes_per_island=2)  # 32 H100
    assert never_fits(inventory, GangRequest(run_id="ok", devices=32)) is None
    reason = never_fits(inventory, GangRequest(run_id="x", devices=64))
    assert reason.never_fits and reason.code == "capacity"
    assert reason.words == (
        "never fits, even on an empty and healthy inventory: needs 64 devices in pool default; "
        "32 are free"
    )
    reason = never_fits(inventory, GangRequest(run_id="x", devices=8, device_type="A100"))
    assert reason.words == "never fits: pool default has no devices of type A100 (it has H100)"
    reason = never_fits(inventory, GangRequest(run_id="x", devices=8, pool="gpu"))
    assert reason.words == "never fits: pool gpu has no nodes with devices"


def test_same_input_same_decisions(make_cluster, make_holding):
    inventory = make_cluster(islands=3, nodes_per_island=2)
    running = (make_holding("a", "i1n0", 3, priority=0, preemptible=True),)
    pending = tuple(
        GangRequest(run_id=f"r{i}", devices=(i % 4 + 1) * 2, priority=i % 3, preemptible=True)
        for i in range(12)
    )
    state = AdmissionInput(pending=pending, running=running)
    for policy in POLICIES:
        assert admit(inventory, state, policy) == admit(inventory, state, policy)
        reversed_state = state.model_copy(update={"pending": tuple(reversed(pending))})
        assert admit(inventory, reversed_state, policy) == admit(inventory, state, policy)


def test_an_unknown_policy_names_the_registered_ones(make_cluster):
    with pytest.raises(ValueError, match="gang-bestfit-v1"):
        admit(make_cluster(), AdmissionInput(), "lottery-v0")
