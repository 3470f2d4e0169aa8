"""A realistic two-rank run written into a real SQLite store, on a fake clock so every figure of
its report can be computed by hand (the arithmetic is in tests/govern/test_report.py).

Timeline (seconds after t0 = 1000; each step's slowest rank takes 2.0 s, rank 1 1.5 s):
  gen 1  allocated 1000-1014, 2 devices: steps 1-4 end at 1004, 1006, 1008, 1010; checkpoint
         ck-2 at step 2 with a 0.5 s stall inside the step; rank 1 killed after step 4;
         FAILURE_CLASSIFIED at 1013 (node_lost), RECOVERY_STARTED 1013.5
  gap    1014-1015, no devices
  gen 2  allocated 1015-1025, 2 devices: RESTORED ck-2 (step 2) at 1016; steps 3-6 end at 1018,
         1020, 1022, 1024 (3 and 4 are replays); RECOVERY_SUCCEEDED at 1018; a stale write of
         generation 1 rejected at 1017; MIXTURE_ACTUAL at 1024
"""

from types import SimpleNamespace

import pytest

import runwright.store.catalog as catalog_module
import runwright.store.store as store_module
from runwright.spec import spec_from_mapping
from runwright.store import NewEvent, Store

T0 = 1000.0
RUN_ID = "run-report-fixture"
SPEC = {
    "name": "report-fixture",
    "code": {"entrypoint": "train.py", "ref": "0123abcd"},
    "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 512},
    "data": {
        "sequence_length": 64,
        "manifest_id": "ds-from-spec",
        "mixture": {"sources": [{"name": "code", "weight": 1}, {"name": "prose", "weight": 1}]},
    },
    "training": {"global_batch_samples": 8, "steps": 6},
    "resources": {
        "nodes": 1,
        "devices_per_node": 2,
        "device_hour_price": 3.6,
        "peak_flops_per_device": 1e9,
    },
}


class Clock:
    """Stands in for the `time` module inside the store, so attempts get chosen times."""

    def __init__(self) -> None:
        self.now = T0

    def time(self) -> float:
        return self.now


def _step(run_id: str, generation: int, step: int, rank: int, end: float, **extra) -> NewEvent:
    attrs = {
        "rank": rank,
        "loss": 5.0 - 0.5 * step,
        "grad_norm": 1.0 + 0.1 * rank,
        "lr": 0.01,
        "step_seconds": 2.0 if rank == 0 else 1.5,
        "device_tokens": 256,
        "padded_tokens": 16,
        "loss_tokens": 200,
        "samples": 4,
        "data_wait_seconds": 0.2 if rank == 0 else 0.1,
        "forward_seconds": 0.6,
        "backward_seconds": 0.9,
        **extra,
    }
    return NewEvent(
        event_id=f"{run_id}:g{generation}:s{step}:r{rank}",
        run_id=run_id,
        generation=generation,
        type="STEP_HEALTHY",
        step=step,
        world_size=2,
        time_unix_s=end - 0.01 * (1 - rank),
        attributes=attrs,
    )


def _event(run_id, generation, type_, at, step=None, checkpoint_id=None, **attrs) -> NewEvent:
    return NewEvent(
        event_id=f"{run_id}:g{generation}:{type_}:{at}",
        run_id=run_id,
        generation=generation,
        type=type_,
        step=step,
        checkpoint_id=checkpoint_id,
        time_unix_s=at,
        attributes=attrs,
    )


def write_fixture_run(store: Store, clock: Clock, run_id: str = RUN_ID) -> str:
    spec = spec_from_mapping(SPEC)
    clock.now = T0
    store.create_run(
        run_id=run_id,
        name=spec.name,
        spec=spec.model_dump(mode="json"),
        spec_hash=spec.spec_hash,
        plan=spec.plan.model_dump(mode="json"),
        workdir="/nonexistent/workdir",
        root="/nonexistent/root",
        state="CREATED",
    )
    add = lambda e: store.append_event(e, fenced=False)  # noqa: E731
    add(_event(run_id, 1, "STATE_CHANGED", T0, from_state="ALLOCATING", to_state="STARTING"))
    store.start_attempt(run_id, 1, 2)
    add(_event(run_id, 1, "WORKER_GROUP_LAUNCHED", T0 + 0.1, world_size=2))
    add(_event(run_id, 1, "DATA_STAGE_READY", T0 + 1, dataset_id="ds-abc", tokenizer_hash="tok-1"))
    for step, end in ((1, 1004.0), (2, 1006.0), (3, 1008.0), (4, 1010.0)):
        stall = {"checkpoint_stall_seconds": 0.5} if step == 2 else {}
        add(_step(run_id, 1, step, 0, end, **stall))
        add(_step(run_id, 1, step, 1, end))
    store.checkpoints.record_staged(
        run_id=run_id, checkpoint_id="ck-2", step=2, generation=1, path="/nonexistent/ck-2"
    )
    store.checkpoints.record_committed(
        run_id=run_id,
        checkpoint_id="ck-2",
        step=2,
        generation=1,
        path="/nonexistent/ck-2",
        manifest_sha256="m" * 64,
    )
    for rank in (0, 1):  # every rank reports the same commit
        add(
            NewEvent(
                event_id=f"{run_id}:commit:ck-2:r{rank}",
                run_id=run_id,
                generation=1,
                type="CHECKPOINT_COMMITTED",
                step=2,
                checkpoint_id="ck-2",
                time_unix_s=1006.5,
                attributes={
                    "rank": rank,
                    "stall_seconds": 0.5,
                    "persist_seconds": 1.2,
                    "bytes": 1000,
                },
            )
        )
    add(
        _event(
            run_id,
            1,
            "FAILURE_CLASSIFIED",
            1013.0,
            step=4,
            failure_class="node_lost",
            rank=1,
            message="rank 1 exited with SIGKILL",
        )
    )
    add(_event(run_id, 1, "RECOVERY_STARTED", 1013.5, step=4))
    clock.now = 1014.0
    store.end_attempt(run_id, 1, exit_code=-9, failure_class="node_lost")
    clock.now = 1015.0
    store.start_attempt(run_id, 2, 2)
    add(_event(run_id, 2, "RESTORED", 1016.0, step=2, checkpoint_id="ck-2"))
    add(
        _event(
            run_id,
            2,
            "STALE_WRITE_REJECTED",
            1017.0,
            step=4,
            rejected_type="STEP_HEALTHY",
            writer_generation=1,
            run_generation=2,
        )
    )
    for step, end in ((3, 1018.0), (4, 1020.0), (5, 1022.0), (6, 1024.0)):
        add(_step(run_id, 2, step, 0, end))
        add(_step(run_id, 2, step, 1, end))
    add(
        _event(
            run_id,
            2,
            "RECOVERY_SUCCEEDED",
            1018.0,
            step=3,
            lost_steps=2,
            replayed_tokens=1024,
            recovery_seconds=5.0,
            restored_step=2,
        )
    )
    add(
        _event(
            run_id,
            2,
            "MIXTURE_ACTUAL",
            1024.0,
            step=6,
            targets={"code": 0.5, "prose": 0.5},
            actual={"code": 60, "prose": 40},
        )
    )
    add(
        _event(
            run_id,
            2,
            "STATE_CHANGED",
            1025.0,
            from_state="RUNNING",
            to_state="SUCCEEDED",
            reason="COMPLETED",
        )
    )
    clock.now = 1025.0
    store.end_attempt(run_id, 2, exit_code=0)
    return run_id


@pytest.fixture
def store(tmp_path, monkeypatch) -> Store:
    clock = Clock()
    fake_time = SimpleNamespace(time=clock.time)
    monkeypatch.setattr(store_module, "time", fake_time)
    monkeypatch.setattr(catalog_module, "time", fake_time)
    st = Store(f"sqlite:///{tmp_path / 'state.db'}")
    write_fixture_run(st, clock)
    yield st
    st.close()
