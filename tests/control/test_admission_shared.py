"""Admission across controllers and under configured terms (issue 13), decided by the real
AdmissionStep on a real store, without starting workers: controllers sharing a store take turns
under the store's admission lock and never admit two runs onto the same devices; one that lost
the lock mid-pass writes nothing; project quotas, time limits and the memory ledger become the
gang's terms; a CUDA gang's placement becomes its CUDA_VISIBLE_DEVICES."""

import json
import time

from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.admission import AdmissionStep
from runwright.control.allocation import placed_hosts
from runwright.control.cluster_inventory import as_pools
from runwright.control.controller import Controller
from runwright.control.gangs import gang_request, pinned_devices
from runwright.control.journal import Journal
from runwright.control.states import RunState
from runwright.events import EventType
from runwright.plan.spec_ledger import device_memory_floor, spec_memory_ledger
from runwright.sched.inventory import ClusterView, Inventory, Node
from runwright.sched.requests import ProjectQuota, Quotas
from runwright.spec import spec_from_mapping
from runwright.store import EventRecord, Store

TWO = Inventory(nodes=(Node(name="n1", device_type="cpu", device_count=2, cpus=2),))


def spec_for(name: str, devices: int = 2, budget: dict | None = None, **resources):
    return spec_from_mapping(
        {
            "name": name,
            "code": {"entrypoint": "train.py"},
            "training": {"global_batch_samples": 8, "steps": 4, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": devices, **resources},
            "budget": budget or {},
        }
    )


def queued(
    controller: Controller, name: str, project: str = "default", devices: int = 2, **resources
):
    run, _ = controller.submit(
        spec_for(name, devices, **resources), controller.root, project=project
    )
    controller.journal.move(controller.store.get_run(run.run_id), RunState.QUEUED, "JOB_ACCEPTED")
    return run.run_id


def advance(controller: Controller, run_id: str) -> None:
    run = controller.store.get_run(run_id)
    assert controller.admission is not None
    controller.admission.advance(run, controller.logs.of(run_id).events)


def test_controllers_take_turns_and_never_admit_two_gangs_onto_the_same_devices(tmp_path):
    stores = [Store.open(tmp_path) for _ in range(2)]
    a, b = (Controller(s, tmp_path, inventory=TWO) for s in stores)
    first, second = queued(a, "first"), queued(b, "second")
    advance(a, first)
    assert stores[0].get_run(first).state == "ALLOCATING"
    advance(b, second)  # a holds the lock until its sweep ends: b decides nothing yet
    assert stores[1].get_run(second).state == "QUEUED"
    assert stores[1].events(second, types=[EventType.ADMISSION_PENDING]) == []
    a.admission.release()
    advance(b, second)  # b's pass sees a's gang holding both devices
    assert stores[1].get_run(second).state == "QUEUED"
    (pending,) = stores[1].events(second, types=[EventType.ADMISSION_PENDING])
    assert pending.attributes["code"] == "capacity"
    assert "0 are free" in pending.attributes["reason"]
    for s in stores:
        s.close()


def test_a_controller_that_lost_the_lock_mid_pass_writes_no_admission(tmp_path, time_bound):
    """A stalls inside its pass past the lock's expiry; meanwhile a higher-priority run is
    queued, and B takes the lock and admits it onto both devices; A's decision, made on the
    queue it read before, is refused, and A decides again on what holds the devices now."""
    stores = [Store.open(tmp_path) for _ in range(2)]
    a = Controller(stores[0], tmp_path, inventory=TWO, lease_seconds=0.5)
    b = Controller(stores[1], tmp_path, inventory=TWO)
    first = queued(a, "first")
    urgent: list[str] = []
    policy = a.admission._admit

    def stalled(inventory, given):
        result = policy(inventory, given)  # decided on the queue and holders read before
        urgent.append(queued(b, "urgent", priority=10))
        with time_bound(30):  # until a's lock ran out and b took it
            while not stores[1].locks.acquire("admission", b.leases.holder, 30.0).held:
                time.sleep(0.05)
        advance(b, urgent[0])
        assert stores[1].get_run(urgent[0]).state == "ALLOCATING"
        return result

    a.admission._admit = stalled
    advance(a, first)
    assert stores[0].get_run(first).state == "QUEUED"
    assert stores[0].events(first, types=[EventType.RUN_ADMITTED]) == []
    a.admission._admit = policy
    b.admission.release()
    advance(a, first)  # decided again, on what holds the devices now
    assert stores[0].get_run(first).state == "QUEUED"
    (pending,) = stores[0].events(first, types=[EventType.ADMISSION_PENDING])
    assert pending.attributes["code"] == "capacity"
    for s in stores:
        s.close()


def test_a_project_over_its_quota_waits_with_the_quota_as_its_reason(tmp_path):
    store = Store.open(tmp_path)
    quotas = Quotas(
        projects=(
            ProjectQuota(project="vision", devices=1),
            ProjectQuota(project="speech", devices=2),
        )
    )
    controller = Controller(store, tmp_path, inventory=TWO, quotas=quotas)
    run = queued(controller, "big", project="vision")
    advance(controller, run)
    assert store.get_run(run).state == "QUEUED"
    (pending,) = store.events(run, types=[EventType.ADMISSION_PENDING])
    assert pending.attributes["code"] == "quota"
    assert "project vision" in pending.attributes["reason"]
    assert "not preemptible" in pending.attributes["reason"]
    # Preemptible, it borrows speech's idle quota, marked as borrowed (reclaimable).
    borrower = queued(controller, "borrower", project="vision", preemptible=True)
    advance(controller, borrower)
    assert store.get_run(borrower).state == "ALLOCATING"
    (admitted,) = store.events(borrower, types=[EventType.RUN_ADMITTED])
    assert admitted.attributes["borrowed"] is True
    store.close()


def test_a_time_limit_and_the_memory_ledger_become_the_gangs_terms(tmp_path):
    spec = spec_for("limited", budget={"wall_seconds": 3600})
    assert gang_request("r", "p", 0.0, spec).expected_duration_seconds == 3600
    assert gang_request("r", "p", 0.0, spec_for("open")).expected_duration_seconds == float("inf")
    big = spec_from_mapping(
        {
            **spec_for("big", device_type="cuda").model_dump(mode="json"),
            "model": {"n_layers": 48, "d_model": 8192, "n_heads": 64, "vocab_size": 50_000},
        }
    )
    floor = device_memory_floor(big)
    assert floor is not None and floor > 80 * 2**30  # ~40B parameters x 16 B: no one device
    assert gang_request("r", "p", 0.0, big, sized=True).min_device_memory_bytes == floor
    assert gang_request("r", "p", 0.0, big).min_device_memory_bytes is None
    gpus = Inventory(
        nodes=(Node(name="g1", device_type="H100", device_count=8, device_memory_bytes=80 * 2**30),)
    )
    store = Store.open(tmp_path)
    step = AdmissionStep(store, Journal(store), gpus, lambda run: big)
    refusal = step.refusal(big)
    assert refusal is not None and "memory ledger" in refusal and "80 GiB" in refusal
    unsized = Inventory(nodes=(Node(name="g1", device_type="H100", device_count=8),))
    assert AdmissionStep(store, Journal(store), unsized, lambda run: big).refusal(big) is None
    store.close()


def test_the_spec_ledger_is_what_plan_memory_prints_for_the_spec(tmp_path):
    spec = spec_for("sized")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec.model_dump(mode="json")))
    out = CliRunner().invoke(app, ["plan", "memory", "--spec", str(path), "--json"])
    assert out.exit_code == 0, out.output
    printed = json.loads(out.output)["ledger"]["total_bytes"]
    ledger = spec_memory_ledger(spec)
    assert ledger is not None and ledger.total_bytes == printed


def event(attributes: dict) -> EventRecord:
    return EventRecord(
        seq=1, event_id="e", run_id="r", generation=1, type=EventType.RUN_ADMITTED, step=None,
        time_unix_s=1.0, attributes=attributes,
    )  # fmt: skip


def test_a_local_cuda_gang_is_held_to_the_devices_it_was_placed_on():
    cuda = spec_for("gpu", devices=2, device_type="cuda", nodes=2)
    shares = [{"node": "h", "devices": [4, 5]}, {"node": "h", "devices": [6, 7]}]
    placed = event({"placement": shares})
    assert pinned_devices(cuda, [placed], "h") == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert pinned_devices(cuda, [placed], "elsewhere") == {}  # Slurm binds its own GRES
    assert pinned_devices(spec_for("cpu"), [placed], "h") == {}
    assert pinned_devices(cuda, [], "h") == {}  # admitted without an inventory


def test_devices_other_jobs_hold_on_a_cluster_are_not_offered_and_ours_are_not_counted_twice(
    tmp_path,
):
    """A cluster read live (`ClusterView`: its nodes, and what its scheduler allocated on each,
    runwright's jobs included): a node another job fills is not offered, and a node where
    Slurm runs one of runwright's own gangs is not held twice."""
    nodes = tuple(
        Node(name=n, device_type="cpu", device_count=1, cpus=1) for n in ("n1", "n2", "n3")
    )
    views = [ClusterView(Inventory(nodes=nodes), allocated={"n1": 1, "n2": 0, "n3": 0})]
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, inventory=lambda: views[-1])
    first = queued(controller, "first", devices=1, nodes=2)
    advance(controller, first)
    (admitted,) = store.events(first, types=[EventType.RUN_ADMITTED])
    assert {s["node"] for s in admitted.attributes["placement"]} == {"n2", "n3"}
    assert placed_hosts(controller.logs.of(first).events, 1) == ("n2", "n3")
    # Slurm now runs it there: n2 and n3 are allocated, by runwright's own gang.
    views.append(ClusterView(Inventory(nodes=nodes), allocated={"n1": 1, "n2": 1, "n3": 1}))
    second = queued(controller, "second", devices=1)
    advance(controller, second)
    (pending,) = store.events(second, types=[EventType.ADMISSION_PENDING])
    assert "needs 1 devices" in pending.attributes["reason"]
    # The other job ends: its node is offered again.
    views.append(ClusterView(Inventory(nodes=nodes), allocated={"n1": 0, "n2": 1, "n3": 1}))
    advance(controller, second)
    (admitted,) = store.events(second, types=[EventType.RUN_ADMITTED])
    assert [s["node"] for s in admitted.attributes["placement"]] == ["n1"]
    store.close()


def test_a_clusters_partitions_become_the_pools_that_reach_them():
    nodes = (
        Node(name="n1", device_type="cpu", device_count=1, pools=("debug", "island")),
        Node(name="i1", device_type="cpu", device_count=1, pools=("island",)),
    )
    view = as_pools(
        ClusterView(Inventory(nodes=nodes), {"n1": 1}), {"cluster": "debug", "isl": "island"}
    )
    assert [n.pools for n in view.inventory.nodes] == [("cluster", "isl"), ("isl",)]
    assert view.allocated == {"n1": 1}
