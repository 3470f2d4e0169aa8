"""The allocation step on a real SQLite store, with an executor whose engine answers as told:
pending reasons shown and recorded as they change, a grant that writes the rank manifest, a
failure that queues again or fails for good, a refusal at submit, and the pools file."""

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from runwright.control.allocation import MAX_ALLOCATION_FAILURES, request_number
from runwright.control.controller import Controller
from runwright.control.executors.local import LocalExecutor, nvidia_gpu_count
from runwright.control.executors.protocol import Allocation, AllocationState, Executor
from runwright.control.pools import (
    POOLS_ENV,
    PoolsError,
    load_pools,
    pool_named,
    pool_of_record,
    pools_path,
)
from runwright.control.summary import describe_run, run_summary
from runwright.errors import PlacementError
from runwright.spec import spec_from_mapping
from runwright.store import Store

SKELETON = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"


def spec(**resources):
    data = yaml.safe_load(SKELETON.read_text())
    data["resources"].update(resources)
    data["training"]["global_batch_samples"] = 16 * resources.get("nodes", 1)
    return spec_from_mapping(data)


@dataclass
class ScriptedEngine(LocalExecutor):
    """The local executor, except that its engine answers allocation requests from `script`."""

    script: list[Allocation] = field(default_factory=list)
    refuse: str | None = None
    requests: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    placed: list[tuple[str, ...]] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    name = "scripted"

    def refusal(self, spec):
        return self.refuse

    def request_allocation(self, *, spec, run_id, root, request, exclude_hosts=(), placed_hosts=()):
        self.requests.append((request, exclude_hosts))
        self.placed.append(placed_hosts)
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return answer.model_copy(update={"request": request})

    def release_allocation(self, root, run_id, request):
        self.released.append(request)
        return Allocation(executor=self.name, request=request, state=AllocationState.RELEASED)


def answer(state, **fields):
    return Allocation(executor="scripted", request=1, state=AllocationState(state), **fields)


def controller_with(tmp_path, engine: Executor, nodes: int = 2):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, executor=engine, poll_seconds=0.01)
    run, _ = controller.submit(spec(nodes=nodes, devices_per_node=1), tmp_path)
    return store, controller, run.run_id


def passes(controller, run_id, count):
    for _ in range(count):
        controller.reconcile(run_id)


def test_a_pending_request_shows_the_engines_reason_and_records_each_change(tmp_path):
    resources = (
        "waiting in Slurm partition debug: Resources (the nodes are busy), 2 nodes requested"
    )
    engine = ScriptedEngine(script=[
        answer("pending", reason="waiting: Priority", code="Priority", engine_id="7"),
        answer("pending", reason="waiting: Priority", code="Priority", engine_id="7"),
        answer("pending", reason=resources, code="Resources", engine_id="7"),
        answer("pending", reason=resources, code="Resources", engine_id="7"),
    ])  # fmt: skip
    store, controller, run_id = controller_with(tmp_path, engine)
    passes(controller, run_id, 6)
    run = store.get_run(run_id)
    assert run.state == "ALLOCATING" and run.state_detail == resources
    pending = [e for e in store.events(run_id) if e.type == "ALLOCATION_PENDING"]
    assert [e.attributes["code"] for e in pending] == ["Priority", "Resources"]
    assert all(e.attributes["engine_id"] == "7" and e.attributes["request"] == 1 for e in pending)
    (asked,) = [e for e in store.events(run_id) if e.type == "ALLOCATION_REQUESTED"]
    assert asked.attributes["executor"] == "scripted"
    text = describe_run(run_summary(store, run_id))
    assert f"why: {resources}" in text and "next: wait until the executor grants" in text
    assert {r for r, _ in engine.requests} == {1}  # every pass asks for the same request


def test_a_grant_writes_the_manifest_from_the_granted_hosts(tmp_path):
    engine = ScriptedEngine(script=[answer("granted", hosts=("n3", "n1"), engine_id="8")])
    store, controller, run_id = controller_with(tmp_path, engine)
    passes(controller, run_id, 3)
    run = store.get_run(run_id)
    assert run.state == "STARTING"
    assert [(e["rank"], e["host"], e["node"]) for e in run.rank_manifest] == [
        (0, "n3", 0), (1, "n1", 1),
    ]  # fmt: skip
    assert run.allocation["engine_id"] == "8" and run.allocation["hosts"] == ["n3", "n1"]
    (ready,) = [e for e in store.events(run_id) if e.type == "ALLOCATION_READY"]
    assert ready.attributes["hosts"] == ["n3", "n1"] and ready.attributes["request"] == 1


def test_a_failed_request_queues_again_with_a_new_number_and_the_lost_node_excluded(tmp_path):
    engine = ScriptedEngine(script=[
        answer("failed", reason="Slurm job 4 lost a node (NODE_FAIL)", code="NODE_FAIL",
               engine_id="4", lost_hosts=("n2",)),
        answer("pending", reason="queued", code="Priority", engine_id="5"),
    ])  # fmt: skip
    store, controller, run_id = controller_with(tmp_path, engine)
    passes(controller, run_id, 6)
    run = store.get_run(run_id)
    assert run.state == "ALLOCATING"
    assert engine.requests[0] == (1, ()) and engine.requests[-1] == (2, ("n2",))
    assert engine.released == [1]
    assert request_number(store.events(run_id)) == 2


def test_requests_that_keep_failing_end_the_run(tmp_path):
    engine = ScriptedEngine(script=[answer("failed", reason="cancelled by an admin")])
    store, controller, run_id = controller_with(tmp_path, engine)
    passes(controller, run_id, 4 * MAX_ALLOCATION_FAILURES)
    run = store.get_run(run_id)
    assert run.state == "FAILED" and run.terminal_reason == "FAILED_RECOVERABLE"
    assert f"{MAX_ALLOCATION_FAILURES} allocation requests failed" in run.state_detail


def test_a_permanent_failure_fails_the_run_with_the_reason(tmp_path):
    why = "node(s) cannot use the run folder /x: n2: FileNotFoundError"
    engine = ScriptedEngine(script=[answer("failed", reason=why, permanent=True)])
    store, controller, run_id = controller_with(tmp_path, engine)
    passes(controller, run_id, 4)
    run = store.get_run(run_id)
    assert run.state == "FAILED" and run.terminal_reason == "FAILED_PERMANENT"
    assert run.state_detail == why
    assert [e.type for e in store.events(run_id)][-1] == "RUN_FINISHED"


def test_a_stored_run_the_engine_can_never_place_fails_and_a_new_one_is_refused(tmp_path):
    engine = ScriptedEngine(script=[answer("granted", hosts=("a", "b"))])
    store, controller, run_id = controller_with(tmp_path, engine)
    engine.refuse = "resources.nodes=2, but partition p has 1 node(s): lower resources.nodes"
    passes(controller, run_id, 3)
    run = store.get_run(run_id)
    assert run.state == "FAILED" and run.terminal_reason == "FAILED_PERMANENT"
    assert run.state_detail == engine.refuse
    with pytest.raises(PlacementError, match="partition p has 1 node"):
        controller.submit(spec(nodes=2, devices_per_node=1), tmp_path)
    assert len(store.list_runs()) == 1


def test_cancel_while_pending_releases_the_request_at_once(tmp_path):
    from runwright.control.cancel import request_cancel

    engine = ScriptedEngine(script=[answer("pending", reason="queued", engine_id="9")])
    store, controller, run_id = controller_with(tmp_path, engine)
    passes(controller, run_id, 3)
    request_cancel(store, run_id, "changed my mind")
    assert controller.reconcile(run_id)
    assert engine.released == [1]
    types = [e.type for e in store.events(run_id)]
    assert types[-2:] == ["ALLOCATION_RELEASED", "RUN_FINISHED"]


def test_cuda_on_a_machine_without_enough_gpus_is_refused_at_submit(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path)
    wanted = nvidia_gpu_count() + 1
    with pytest.raises(PlacementError, match=f"devices_per_node={wanted}"):
        controller.submit(spec(device_type="cuda", devices_per_node=wanted), tmp_path)
    assert store.list_runs() == []


def test_pools_file_resolution_and_errors(tmp_path, monkeypatch):
    monkeypatch.delenv(POOLS_ENV, raising=False)
    assert pools_path(tmp_path) is None
    assert load_pools(None).pools["default"].executor == "local"
    (tmp_path / "pools.yaml").write_text("pools: {debug: {executor: slurm, partition: debug}}\n")
    assert pools_path(tmp_path) == tmp_path / "pools.yaml"
    other = tmp_path / "other.yaml"
    other.write_text("pools: {gpu: {executor: slurm, gres: gpu}}\n")
    monkeypatch.setenv(POOLS_ENV, str(other))
    assert pools_path(tmp_path) == other
    assert pools_path(tmp_path, tmp_path / "pools.yaml") == tmp_path / "pools.yaml"
    pools = load_pools(other)
    with pytest.raises(PoolsError, match=r"resources.pool='cpu' is not in pools file .*: gpu"):
        pool_named(pools, "cpu", other)
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: {a: {executor: local, partition: x}}\n")
    with pytest.raises(PoolsError, match="partition apply to executor: slurm only"):
        load_pools(bad)
    bad.write_text("pools: {a: {executor: kubernetes}}\n")
    with pytest.raises(PoolsError, match=r"pools\.a\.executor"):
        load_pools(bad)
    with pytest.raises(PoolsError, match="cannot read pools file"):
        load_pools(tmp_path / "missing.yaml")


def test_a_run_keeps_its_recorded_pool_whatever_the_pools_file_says(tmp_path):
    engine = ScriptedEngine(script=[answer("pending", reason="queued", engine_id="3")])
    (tmp_path / "pools.yaml").write_text(
        "pools: {default: {executor: slurm, partition: big, signal_lead_seconds: 30}}\n"
    )
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, executor=engine)
    run, _ = controller.submit(spec(nodes=1, devices_per_node=1), tmp_path)
    passes(controller, run.run_id, 3)
    name, pool = pool_of_record(store.get_run(run.run_id).allocation)
    assert name == "default" and pool.partition == "big" and pool.signal_lead_seconds == 30
    (tmp_path / "pools.yaml").unlink()
    later = Controller(store, tmp_path)  # no pools file now: only a local `default`
    assert later.executor.name == "local"
    assert later.executor_of(store.get_run(run.run_id)).name == "slurm"


def test_a_stored_run_whose_pool_is_gone_fails_with_the_pools_it_could_use(tmp_path):
    pools = tmp_path / "site.yaml"
    pools.write_text("pools: {gpu: {executor: local}}\n")
    store = Store.open(tmp_path)
    data = yaml.safe_load(SKELETON.read_text())
    data["resources"]["pool"] = "gpu"
    run, _ = Controller(store, tmp_path, pools_file=pools).submit(spec_from_mapping(data), tmp_path)
    later = Controller(store, tmp_path)  # the built-in pools: only `default`
    passes(later, run.run_id, 3)
    failed = store.get_run(run.run_id)
    assert failed.state == "FAILED" and failed.terminal_reason == "FAILED_PERMANENT"
    assert "resources.pool='gpu' is not in the built-in pools" in failed.state_detail
    assert later.reconcile(run.run_id)  # winds down: nothing was allocated, nothing to release


def test_a_gang_that_lost_a_node_requeues_even_while_the_engine_still_grants_it(tmp_path):
    """Slurm may not have ended the job yet when the failure is classified: restarting in place
    would run the next generation on a gang without the node."""
    engine = ScriptedEngine(script=[answer("granted", hosts=("a", "b"), engine_id="4")])
    store, controller, run_id = controller_with(tmp_path, engine)
    passes(controller, run_id, 3)  # STARTING, allocation granted on a, b
    run = store.get_run(run_id)
    store.transition(run_id, "RECOVERING", allowed_from=["STARTING"], revoke_generation=True)
    run = store.get_run(run_id)
    controller.journal.record(run, "FAILURE_CLASSIFIED", per_step=False, failure_class="node_lost",
                              lost_hosts=["b"])  # fmt: skip
    controller.journal.record(run, "RECOVERY_STARTED", per_step=False, action="restart",
                              reason="node_lost retry 1/3", not_before_unix_s=0)  # fmt: skip
    assert controller.recovery.restart_if_due(store.get_run(run_id))
    run = store.get_run(run_id)
    assert run.state == "QUEUED" and "the allocation lost b: requeue" in run.state_detail
    assert engine.released == [1]
    passes(controller, run_id, 2)
    assert engine.requests[-1] == (2, ("b",))
