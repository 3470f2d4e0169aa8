"""Experiments and contaminated steps (issue 25): comparability computed from each run's data
version, tokenizer, eval split and completeness, each difference a reason in words; a marked
step range left out of the losses compared, of `runwright compare` and of the stop criteria.
Experiments are store records created through the access layer (audited); one an earlier
version kept as a file under the root is read into the store when first asked for."""

import json

import pytest

from runwright.access.base import local_actor
from runwright.access.service import Access
from runwright.control.budget import BudgetUsage
from runwright.control.contamination import contaminated_ranges, mark_contaminated
from runwright.control.criteria import first_met
from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.spec import spec_from_mapping
from runwright.store import NewEvent, Store
from runwright.store.audit import AuditLog

DATA = "a" * 64


def _run(store, run_id, *, steps=6, planned=6, dataset=DATA, tokenizer="t" * 64, evals=None,
         state="SUCCEEDED", bump=0.0):  # fmt: skip
    spec = {
        "data": {"manifest_id": dataset},
        "tokenizer": {"hash": tokenizer},
        "training": {"eval_every_steps": evals, "eval_sequences": 32},
    }
    store.create_run(
        run_id=run_id, name="x", spec=spec, spec_hash="0" * 64,
        plan={"total_steps": {"value": planned, "reason": "training.steps"}}, workdir="/tmp",
        root="/tmp", state=state,
    )  # fmt: skip
    for step in range(1, steps + 1):
        loss = 1.0 / step + (bump if step == 3 else 0.0)
        store.append_event(
            NewEvent(event_id=f"{run_id}-{step}", run_id=run_id, generation=1,
                     type=EventType.STEP_HEALTHY, step=step, time_unix_s=float(step),
                     attributes={"rank": 0, "loss": loss, "samples": [step - 1, step]}),
            fenced=False,
        )  # fmt: skip
    store.append_event(
        NewEvent(event_id=f"{run_id}-done", run_id=run_id, generation=1,
                 type=EventType.TRAINING_COMPLETE, step=steps, time_unix_s=99.0,
                 attributes={"rank": 0, "parameter_digests": {"w": "1"}}),
        fenced=False,
    )  # fmt: skip


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield opened
    opened.close()


def access(store, root) -> Access:
    return Access(store, root, local_actor())


def rows_of(view) -> dict:
    return {r["run_id"]: r for r in view["runs"]}


def test_comparability_names_each_reason(tmp_path, store):
    _run(store, "ref")
    _run(store, "same")
    _run(store, "otherdata", dataset="b" * 64)
    _run(store, "othertok", tokenizer="u" * 64)
    _run(store, "evals", evals=2)
    _run(store, "partial", steps=3, state="CANCELLED")
    act = access(store, tmp_path)
    act.experiment_create("lr-sweep", "ana", "a lower lr converges no slower")
    ids = ["ref", "same", "otherdata", "othertok", "evals", "partial"]
    act.experiment_add("lr-sweep", ids[:2])
    added = act.experiment_add("lr-sweep", [*ids[2:], "same"])
    assert added["runs"] == ids  # one already in is kept once, in its first place
    view = act.experiment_show("lr-sweep")
    rows = rows_of(view)
    assert view["reference"] == "ref" and list(rows) == ids
    assert rows["same"]["comparable"] and rows["ref"]["comparable"]
    assert rows["otherdata"]["reasons"] == [
        f"data version differs: {'b' * 12} here, {'a' * 12} in the reference"
    ]
    assert rows["othertok"]["reasons"][0].startswith("tokenizer differs")
    assert rows["evals"]["reasons"][0].startswith("eval split differs: " + DATA)
    assert rows["partial"]["reasons"] == ["partial run: CANCELLED, 3 of 6 steps trained"]
    assert rows["same"]["steps_compared"] == 6
    other = act.experiment_show("lr-sweep", reference="otherdata")
    assert not rows_of(other)["ref"]["comparable"] and rows_of(other)["otherdata"]["comparable"]
    actions = [(e.action, e.target) for e in AuditLog(store.engine).query()]
    assert (
        actions
        == [("experiment.create", "experiment:lr-sweep")]
        + [("experiment.add", "experiment:lr-sweep")] * 2
    )


def test_contaminated_steps_leave_comparisons_and_criteria(tmp_path, store):
    _run(store, "ref")
    _run(store, "spiky", bump=5.0)
    assert compare_runs(store, "ref", "spiky").first_difference == "loss:step 3"
    with pytest.raises(RunwrightError, match="FIRST-LAST"):
        mark_contaminated(store, "spiky", 4, 2, "bad shard", "ana")
    with pytest.raises(RunwrightError, match="--reason is required"):
        mark_contaminated(store, "spiky", 2, 4, " ", "ana")
    mark_contaminated(store, "spiky", 2, 4, "a bad shard was read", "ana")
    marks = contaminated_ranges(store.events("spiky"))
    assert [(m.first_step, m.last_step, m.reason, m.by) for m in marks] == [
        (2, 4, "a bad shard was read", "ana")
    ]
    comparison = compare_runs(store, "ref", "spiky")
    assert comparison.equivalence == "bitwise-equal"
    assert comparison.contaminated_steps == ((2, 4),)
    act = access(store, tmp_path)
    act.experiment_create("e", "ana", "h")
    act.experiment_add("e", ["ref", "spiky"])
    rows = rows_of(act.experiment_show("e"))
    assert rows["spiky"]["steps_compared"] == 3  # steps 1, 5, 6
    assert rows["spiky"]["mean_loss"] == pytest.approx((1 + 1 / 5 + 1 / 6) / 3)

    spec = spec_from_mapping(
        {"name": "c", "code": {"entrypoint": "x.py"},
         "training": {"steps": 10, "global_batch_samples": 4},
         "governance": {"stop_criteria": [{"kind": "loss_above", "loss": 2.0,
                                           "window_steps": 2}]}},
        "test",
    )  # fmt: skip
    losses = {1: 1.0, 2: 1.0, 3: 9.0, 4: 9.0}
    usage = BudgetUsage(device_hours=0.0, tokens=0, wall_seconds=0.0)
    assert first_met(spec, losses, usage) is not None
    late = mark_contaminated(store, "ref", 3, 4, "loss from a corrupt batch", None)
    assert first_met(spec, losses, usage, contaminated=[late]) is None


def test_experiment_names_and_missing_ones(tmp_path, store):
    act = access(store, tmp_path)
    with pytest.raises(RunwrightError, match="letters, digits"):
        act.experiment_create("../x", "a", "h")
    with pytest.raises(RunwrightError, match="no experiment nope"):
        act.experiment_show("nope")
    with pytest.raises(RunwrightError, match="--owner and --hypothesis"):
        act.experiment_create("x", " ", "h")
    act.experiment_create("x", "a", "h")
    with pytest.raises(RunwrightError, match="exists"):
        act.experiment_create("x", "a", "h")
    with pytest.raises(RunwrightError, match="no run"):
        act.experiment_add("x", ["missing-run"])
    refused = [e.action for e in AuditLog(store.engine).query() if e.outcome == "denied"]
    assert refused == ["experiment.create"] * 3 + ["experiment.add"]


def test_an_experiment_file_of_an_earlier_version_is_read_into_the_store(tmp_path, store):
    """Nothing committed is lost: `<root>/experiments/<name>.json` becomes the store record on
    first use, its runs in their order, audited; the file stays."""
    _run(store, "ref")
    _run(store, "b", dataset="b" * 64)
    legacy = tmp_path / "experiments" / "old.json"
    legacy.parent.mkdir()
    legacy.write_text(json.dumps({"name": "old", "owner": "ana", "hypothesis": "b is worse",
                                  "created_unix_s": 5.0, "created_by": "ana",
                                  "runs": ["ref", "b"]}))  # fmt: skip
    act = access(store, tmp_path)
    view = act.experiment_show("old")
    assert view["experiment"]["runs"] == ["ref", "b"] and view["experiment"]["owner"] == "ana"
    assert not rows_of(view)["b"]["comparable"]
    assert legacy.exists()
    assert [e.name for e in store.experiments.of_project(None)] == ["old"]
    assert act.experiment_add("old", ["b"])["runs"] == ["ref", "b"]  # no second import


def test_the_cli_creates_adds_shows_and_marks(tmp_path):
    from typer.testing import CliRunner

    from runwright.cli.main import app

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    _run(store, "ref")
    _run(store, "b", dataset="b" * 64)
    store.close()
    runner = CliRunner()
    where = ["--root", str(tmp_path)]

    def call(*args: str):
        return runner.invoke(app, [*args, *where])

    made = call("experiment", "create", "e1", "--owner", "ana", "--hypothesis", "b is better")
    assert made.exit_code == 0, made.output
    assert call("experiment", "add", "e1", "ref", "b").exit_code == 0
    marked = call("experiment", "contaminate", "b", "--steps", "2-3", "--reason", "bad shard")
    assert marked.exit_code == 0 and "marked contaminated" in marked.output
    bad = call("experiment", "contaminate", "b", "--steps", "3", "--reason", "x")
    assert bad.exit_code != 0 and "give FIRST-LAST" in bad.output
    shown = json.loads(call("experiment", "show", "e1", "--json").output)
    rows = {r["run_id"]: r for r in shown["runs"]}
    assert rows["ref"]["comparable"] and not rows["b"]["comparable"]
    assert [m["reason"] for m in rows["b"]["contaminated"]] == ["bad shard"]
    listed = json.loads(call("experiment", "list", "--json").output)
    assert [(e["name"], e["runs"]) for e in listed] == [("e1", ["ref", "b"])]
    table = call("experiment", "show", "e1")
    assert table.exit_code == 0 and "against reference ref" in table.output
    assert rows["b"]["contaminated"][0]["reason"] == "bad shard"
    table = call("experiment", "show", "e1").output
    assert "hypothesis: b is better" in table and "against reference ref" in table
