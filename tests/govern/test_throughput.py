"""A run's measured throughput for the scaling planner, from runs written into a real SQLite
store on a fake clock, and `runwright plan scaling --run` end to end.

Hand arithmetic (loss tokens of first executions / productive wall seconds):
  run A  1 device,  steps 1-4 of 2.0 s ending at 1002, 1004, 1006, 1008, 200 loss tokens each;
         attempt 1000-1010 (the 2 s of launch and tail are idle, not productive)
         -> 800 tokens / 8.0 s = 100 tokens/s
  run B  2 devices (allocation), steps 1-4 ending at 1002, 1004, 1006, 1008, slowest rank 2.0 s,
         152 loss tokens per rank, a 0.4 s checkpoint stall inside step 2; attempt 1000-1010
         -> 4 x 2 x 152 = 1,216 tokens / (8.0 - 0.4) s = 160 tokens/s
  E(2) = 160 / (2 x 100) = 0.8
"""

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import runwright.store.store as store_module
from runwright.cli.main import app
from runwright.govern.throughput import MeasurementError, run_throughput
from runwright.spec import spec_from_mapping
from runwright.store import NewEvent, Store

T0 = 1000.0


def spec(devices_per_node: int) -> dict:
    return {
        "name": f"scaling-{devices_per_node}",
        "code": {"entrypoint": "train.py"},
        "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 512},
        "data": {"sequence_length": 64},
        "training": {"global_batch_samples": 8, "steps": 4},
        "resources": {"nodes": 1, "devices_per_node": devices_per_node},
    }


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(store_module, "time", SimpleNamespace(time=clock.time))
    monkeypatch.delenv("RUNWRIGHT_STORE", raising=False)
    return clock


@pytest.fixture
def store(tmp_path, clock) -> Store:
    st = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield st
    st.close()


def create(store: Store, run_id: str, devices_per_node: int) -> None:
    job = spec_from_mapping(spec(devices_per_node))
    store.create_run(
        run_id=run_id,
        name=job.name,
        spec=job.model_dump(mode="json"),
        spec_hash=job.spec_hash,
        plan=job.plan.model_dump(mode="json"),
        workdir="/nonexistent/workdir",
        root="/nonexistent/root",
        state="CREATED",
    )


def step(run_id, generation, step_no, rank, end, **attrs) -> NewEvent:
    return NewEvent(
        event_id=f"{run_id}:g{generation}:s{step_no}:r{rank}",
        run_id=run_id,
        generation=generation,
        type="STEP_HEALTHY",
        step=step_no,
        time_unix_s=end,
        attributes={"rank": rank, **attrs},
    )


def attempt(store: Store, clock: Clock, run_id, generation, world, start, end, events) -> None:
    clock.now = start
    store.start_attempt(run_id, generation, world)
    for event in events:
        store.append_event(event, fenced=False)
    clock.now = end
    store.end_attempt(run_id, generation, exit_code=0)


def write_runs(store: Store, clock: Clock) -> None:
    """Runs A and B of the module docstring."""
    create(store, "run-a", devices_per_node=1)
    a_steps = [
        step("run-a", 1, n, 0, T0 + 2 * n, loss_tokens=200, device_tokens=256, step_seconds=2.0)
        for n in (1, 2, 3, 4)
    ]
    attempt(store, clock, "run-a", 1, 1, T0, T0 + 10, a_steps)

    create(store, "run-b", devices_per_node=2)
    store.update_run("run-b", allocation={"executor": "local", "world_size": 2})
    b_steps = [
        step(
            "run-b",
            1,
            n,
            rank,
            T0 + 2 * n,
            loss_tokens=152,
            device_tokens=256,
            step_seconds=2.0 if rank == 0 else 1.5,
            **({"checkpoint_stall_seconds": 0.4} if n == 2 and rank == 0 else {}),
        )
        for n in (1, 2, 3, 4)
        for rank in (0, 1)
    ]
    attempt(store, clock, "run-b", 1, 2, T0, T0 + 10, b_steps)


def test_throughput_is_loss_tokens_per_productive_second(store, clock):
    write_runs(store, clock)
    assert run_throughput(store, "run-a") == (1, pytest.approx(100.0))
    assert run_throughput(store, "run-b") == (2, pytest.approx(160.0))


def test_replayed_steps_count_neither_tokens_nor_time(store, clock):
    # Generation 1 trains steps 1-2 (1002, 1004) and dies; generation 2 restores step 1 and
    # re-executes step 2 (a replay, 4.0 s ending at 1012) before step 3 (1014). First
    # executions: steps 1, 2, 3 = 600 tokens over 3 x 2.0 s = 100 tokens/s; counting the
    # replay would give 800 tokens / 10 s = 80 tokens/s.
    create(store, "run-r", devices_per_node=1)
    kw = {"loss_tokens": 200, "step_seconds": 2.0}
    attempt(
        store,
        clock,
        "run-r",
        1,
        1,
        T0,
        T0 + 5,
        [step("run-r", 1, 1, 0, T0 + 2, **kw), step("run-r", 1, 2, 0, T0 + 4, **kw)],
    )
    attempt(
        store,
        clock,
        "run-r",
        2,
        1,
        T0 + 7,
        T0 + 15,
        [
            step("run-r", 2, 2, 0, T0 + 12, loss_tokens=200, step_seconds=4.0),
            step("run-r", 2, 3, 0, T0 + 14, **kw),
        ],
    )
    assert run_throughput(store, "run-r") == (1, pytest.approx(100.0))


def test_world_size_comes_from_the_spec_without_an_allocation(store, clock):
    create(store, "run-s", devices_per_node=4)
    steps = [step("run-s", 1, 1, r, T0 + 2, loss_tokens=100, step_seconds=2.0) for r in range(4)]
    attempt(store, clock, "run-s", 1, 4, T0, T0 + 3, steps)
    assert run_throughput(store, "run-s") == (4, pytest.approx(200.0))


def test_a_run_without_healthy_steps_is_a_clear_error(store, clock):
    create(store, "run-empty", devices_per_node=1)
    with pytest.raises(MeasurementError, match="no healthy steps"):
        run_throughput(store, "run-empty")


def test_a_run_without_loss_tokens_is_a_clear_error(store, clock):
    create(store, "run-nt", devices_per_node=1)
    attempt(store, clock, "run-nt", 1, 1, T0, T0 + 3, [step("run-nt", 1, 1, 0, T0 + 2)])
    with pytest.raises(MeasurementError, match="no loss_tokens"):
        run_throughput(store, "run-nt")


runner = CliRunner()


def test_plan_scaling_from_runs_in_the_store(tmp_path, store, clock):
    write_runs(store, clock)
    result = runner.invoke(
        app,
        ["plan", "scaling", "--run", "run-a", "--run", "run-b", "--root", str(tmp_path), "--json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["baseline_world_size"] == 1
    one, two = report["points"]
    assert (one["world_size"], one["tokens_per_second"], one["efficiency"]) == (1, 100.0, 1.0)
    assert two["world_size"] == 2
    assert two["tokens_per_second"] == pytest.approx(160.0)
    assert two["speedup"] == pytest.approx(1.6)
    assert two["efficiency"] == pytest.approx(0.8)  # 160 / (2 x 100)


def test_plan_scaling_mixes_runs_and_points(tmp_path, store, clock):
    # A second measurement at world size 2 (200 tokens/s): the median of 160 and 200 is 180,
    # so E(2) = 180 / (2 x 100) = 0.9.
    write_runs(store, clock)
    args = ["--run", "run-a", "--run", "run-b", "--point", "2:200", "--root", str(tmp_path)]
    result = runner.invoke(app, ["plan", "scaling", *args, "--json"])
    assert result.exit_code == 0, result.output
    two = json.loads(result.output)["points"][1]
    assert (two["measurements"], two["efficiency"]) == (2, pytest.approx(0.9))


@pytest.mark.parametrize(
    ("run_id", "message"), [("run-none", "no run 'run-none'"), ("run-empty", "no healthy steps")]
)
def test_plan_scaling_run_errors_exit_2_without_traceback(tmp_path, store, clock, run_id, message):
    create(store, "run-empty", devices_per_node=1)
    result = runner.invoke(app, ["plan", "scaling", "--run", run_id, "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_plan_capacity_from_a_measured_run(tmp_path, store, clock):
    """Run B's 160 tokens/s on 2 devices, scaled linearly to 4: 320 tokens/s; 64,000 tokens of
    512 per step are 125 steps of 1.6 s, 200 s of compute."""
    write_runs(store, clock)
    out = CliRunner().invoke(
        app,
        ["plan", "capacity", "--run", "run-b", "--tokens", "64000", "--tokens-per-step", "512",
         "--devices", "4", "--root", str(tmp_path), "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)
    assert plan["inputs"]["tokens_per_second"] == pytest.approx(320.0)
    assert (plan["steps"], plan["compute_seconds"]) == (125, pytest.approx(200.0))
