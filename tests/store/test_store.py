"""The store's compare-and-set writes, idempotent submit and append-only events, on SQLite and
PostgreSQL alike."""

import threading

import pytest
import sqlalchemy as sa

from runwright.ckpt import LocalFence, PublishOutcome
from runwright.ckpt.manifest import CommitRecord
from runwright.errors import NotFoundError, StoreError
from runwright.layout import run_paths
from runwright.store import EventRow, NewEvent, Outcome, Store
from runwright.store.leases import LeaseOutcome


def make_run(store, run_id="run-a", key=None, state="CREATED", root="/nonexistent/root"):
    run, created = store.create_run(
        run_id=run_id,
        name="t",
        spec={"name": "t"},
        spec_hash="h" * 64,
        plan={},
        workdir="/w",
        root=str(root),
        state=state,
        idempotency_key=key,
    )
    return run, created


def event(run_id="run-a", event_id="e1", generation=0, type_="STEP_HEALTHY", step=1):
    return NewEvent(
        event_id=event_id,
        run_id=run_id,
        generation=generation,
        type=type_,
        step=step,
        time_unix_s=1.0,
        attributes={"loss": 2.5, "nested": [1, "x"]},
    )


def test_create_and_get_round_trip(store):
    run, created = make_run(store)
    assert created
    assert run.state == "CREATED" and run.generation == 0
    assert store.get_run("run-a") == run
    assert store.get_run("run-") == run  # unique prefix
    with pytest.raises(NotFoundError, match="runwright list"):
        store.get_run("nope")


def test_idempotency_key_returns_existing_run(store):
    first, created = make_run(store, "run-a", key="k1")
    again, created_again = make_run(store, "run-b", key="k1")
    assert created and not created_again
    assert again.run_id == first.run_id
    assert [r.run_id for r in store.list_runs()] == ["run-a"]


def test_idempotent_submit_under_concurrency(store_url):
    results = []

    def submit(i):
        s = Store(store_url)
        results.append(make_run(s, f"run-{i}", key="same")[0].run_id)
        s.close()

    Store(store_url).close()  # migrate once before the race
    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1


def test_transition_outcomes(store):
    make_run(store)
    assert store.transition("run-a", "QUEUED", allowed_from=["CREATED"]).outcome is Outcome.APPLIED
    again = store.transition("run-a", "QUEUED", allowed_from=["CREATED"])
    assert again.outcome is Outcome.ALREADY_APPLIED
    bad = store.transition("run-a", "RUNNING", allowed_from=["STARTING"])
    assert bad.outcome is Outcome.INVALID_TRANSITION and "QUEUED -> RUNNING" in bad.detail
    stale = store.transition("run-a", "ALLOCATING", allowed_from=["QUEUED"], generation=7)
    assert stale.outcome is Outcome.STALE_GENERATION
    assert store.get_run("run-a").state == "QUEUED"


def test_generation_bump_fences_old_writers(store, tmp_path):
    make_run(store, root=tmp_path)
    bumped = store.transition("run-a", "STARTING", allowed_from=["CREATED"], bump_generation=True)
    assert bumped.run.generation == 1
    # The bump raised the run's checkpoint fence in its own transaction.
    assert LocalFence(run_paths(tmp_path, "run-a").checkpoints).current_generation() == 1
    assert store.fenced_update("run-a", 0, last_step=5).outcome is Outcome.STALE_GENERATION
    applied = store.fenced_update("run-a", 1, last_step=5, data_cursor={"pos": 3})
    assert applied.applied and applied.run.last_step == 5
    assert applied.run.data_cursor == {"pos": 3}
    with pytest.raises(StoreError):
        store.fenced_update("run-a", 1, state="SUCCEEDED")


def test_events_append_once_in_order(store):
    make_run(store)
    assert store.append_event(event(event_id="e1")) is Outcome.APPLIED
    assert store.append_event(event(event_id="e1")) is Outcome.ALREADY_APPLIED
    assert store.append_event(event(event_id="e2", step=2)) is Outcome.APPLIED
    stored = store.events("run-a")
    assert [e.event_id for e in stored] == ["e1", "e2"]
    assert stored[0].attributes == {"loss": 2.5, "nested": [1, "x"]}
    assert stored[0].seq < stored[1].seq
    assert [e.event_id for e in store.events("run-a", after_seq=stored[0].seq)] == ["e2"]


def test_stale_event_rejected_and_recorded(store, tmp_path):
    make_run(store, root=tmp_path)
    store.transition("run-a", "STARTING", allowed_from=["CREATED"], bump_generation=True)
    assert store.append_event(event(event_id="old", generation=0)) is Outcome.STALE_GENERATION
    # Rejecting it twice records the rejection once.
    assert store.append_event(event(event_id="old", generation=0)) is Outcome.STALE_GENERATION
    types = [(e.type, e.attributes.get("writer_generation")) for e in store.events("run-a")]
    assert types == [("STALE_WRITE_REJECTED", 0)]
    assert store.append_event(event(event_id="old", generation=0), fenced=False) is Outcome.APPLIED


def test_a_batch_appends_in_one_call_with_an_outcome_per_event(store, tmp_path):
    make_run(store, root=tmp_path)
    store.transition("run-a", "STARTING", allowed_from=["CREATED"], bump_generation=True)
    assert store.append_event(event(event_id="stored-before", generation=1)) is Outcome.APPLIED
    batch = [
        event(event_id="b1", generation=1, step=1),
        event(event_id="stored-before", generation=1),
        event(event_id="old", generation=0, step=7),
        event(event_id="b2", generation=1, step=2),
        event(event_id="b1", generation=1, step=1),  # second copies in the same batch
        event(event_id="old", generation=0, step=7),
    ]
    assert store.append_events(batch) == [
        Outcome.APPLIED,
        Outcome.ALREADY_APPLIED,
        Outcome.STALE_GENERATION,
        Outcome.APPLIED,
        Outcome.ALREADY_APPLIED,
        Outcome.STALE_GENERATION,
    ]
    # The same batch again: everything stored is a no-op, the stale one is rejected once.
    assert store.append_events(batch) == [
        Outcome.ALREADY_APPLIED,
        Outcome.ALREADY_APPLIED,
        Outcome.STALE_GENERATION,
        Outcome.ALREADY_APPLIED,
        Outcome.ALREADY_APPLIED,
        Outcome.STALE_GENERATION,
    ]
    stored = store.events("run-a")
    assert [e.event_id for e in stored] == ["stored-before", "b1", "stale:old", "b2"]
    (rejection,) = store.events("run-a", types=["STALE_WRITE_REJECTED"])
    assert rejection.attributes["rejected_event_id"] == "old"
    assert (rejection.attributes["writer_generation"], rejection.generation) == (0, 1)
    assert stored[1].attributes == {"loss": 2.5, "nested": [1, "x"]}
    # Unfenced, a stale generation goes in as written; an empty batch is no transaction at all.
    assert store.append_events([event(event_id="old", generation=0)], fenced=False) == [
        Outcome.APPLIED
    ]
    assert store.append_events([]) == []


def test_a_batch_for_an_unknown_run_stores_nothing(store):
    make_run(store)
    with pytest.raises(NotFoundError, match="nope"):
        store.append_events([event(event_id="x"), event(run_id="nope", event_id="y")])
    assert store.events("run-a") == []


def test_a_large_batch_is_stored_whole(store):
    make_run(store)
    batch = [event(event_id=f"e{i}", step=i) for i in range(1200)]
    assert set(store.append_events(batch)) == {Outcome.APPLIED}
    assert [e.step for e in store.events("run-a")] == list(range(1200))


def test_an_event_row_has_the_fields_of_a_new_event():
    """The batch append writes both forms with one column list: they cannot drift apart."""
    assert EventRow._fields == tuple(NewEvent.model_fields)


def test_a_batch_read_again_is_judged_event_by_event(store):
    """A batch of the current generation whose insert skips ids already stored (a channel read
    again after a crash): the insert is undone and each event judged, so the stored ones are
    ALREADY_APPLIED, the new ones go in once each, after the old ones, in the batch's order."""
    make_run(store)
    store.transition("run-a", "STARTING", allowed_from=["CREATED"], bump_generation=True)
    rows = [
        EventRow(f"r{i}", "run-a", 1, "STEP_HEALTHY", i, 2, None, 1.0, {"loss": i / 3, "rank": 0})
        for i in range(6)
    ]
    assert store.append_events(rows[1:4:2]) == [Outcome.APPLIED] * 2  # r1, r3
    assert store.append_events(rows) == [
        Outcome.APPLIED,
        Outcome.ALREADY_APPLIED,
        Outcome.APPLIED,
        Outcome.ALREADY_APPLIED,
        Outcome.APPLIED,
        Outcome.APPLIED,
    ]
    stored = store.events("run-a")
    assert [e.event_id for e in stored] == ["r1", "r3", "r0", "r2", "r4", "r5"]
    assert [e.step for e in stored] == [1, 3, 0, 2, 4, 5]
    assert stored[2].attributes == {"loss": 0.0, "rank": 0} and stored[2].world_size == 2
    assert store.append_events(rows) == [Outcome.ALREADY_APPLIED] * 6
    assert len(store.events("run-a")) == 6


def test_attributes_read_back_as_they_were_appended(store):
    """The batch append encodes attributes itself (not SQLAlchemy's JSON type): what is read back
    is what went in, whichever form the event had."""
    make_run(store)
    attributes = {
        "loss": 1 / 3,
        "tiny": 1e-7,
        "big": 10**18,
        "text": "naïve ✓",
        "nested": {"list": [1, 2.5, None, True, "x"], "empty": {}},
    }
    batch = [
        EventRow("row", "run-a", 0, "STEP_HEALTHY", 1, None, None, 1.5, attributes),
        NewEvent(event_id="new", run_id="run-a", generation=0, type="X", attributes=attributes,
                 time_unix_s=2.5),
    ]  # fmt: skip
    assert store.append_events(batch) == [Outcome.APPLIED, Outcome.APPLIED]
    row, new = store.events("run-a")
    assert row.attributes == attributes and new.attributes == attributes
    assert (row.time_unix_s, row.checkpoint_id, new.step) == (1.5, None, None)


def test_an_attempt_is_claimed_once_per_generation(store):
    make_run(store)
    assert store.start_attempt("run-a", 1, world_size=2) is Outcome.APPLIED
    # A second controller racing to launch generation 1 learns it lost, as a value.
    assert store.start_attempt("run-a", 1, world_size=2) is Outcome.ALREADY_APPLIED
    assert store.start_attempt("run-a", 2, world_size=2) is Outcome.APPLIED
    assert [a.generation for a in store.attempts("run-a")] == [1, 2]
    with pytest.raises(StoreError, match="no-such-run"):
        store.start_attempt("no-such-run", 1, world_size=2)


def test_attempts_record_exit(store):
    make_run(store)
    store.start_attempt("run-a", 1, world_size=2)
    store.end_attempt("run-a", 1, exit_code=3, failure_class="user_code", detail={"rank": 1})
    (attempt,) = store.attempts("run-a")
    assert attempt.exit_code == 3 and attempt.failure_class == "user_code"
    assert attempt.ended_unix_s >= attempt.started_unix_s


def _commit(checkpoint_id, step, generation):
    return CommitRecord(
        checkpoint_id=checkpoint_id,
        step=step,
        generation=generation,
        folder=f"{step}-{checkpoint_id}",
        manifest_sha256="m" * 64,
        committed_unix_seconds=1.0,
    )


def test_latest_checkpoint_is_the_fences_pointer(store, tmp_path):
    """The catalog records commits; which one is latest is the run's fence's answer alone."""
    make_run(store, root=tmp_path)
    store.transition("run-a", "STARTING", allowed_from=["CREATED"], bump_generation=True)
    cps = store.checkpoints
    assert cps.latest("run-a") is None
    fence = LocalFence(run_paths(tmp_path, "run-a").checkpoints)
    assert fence.publish(_commit("c10", 10, 1), 1) is PublishOutcome.APPLIED
    assert fence.publish(_commit("c20", 20, 0), 0) is PublishOutcome.STALE_GENERATION
    pending = cps.latest("run-a")  # published, not ingested yet: built from the pointer
    assert (pending.checkpoint_id, pending.step, pending.status) == ("c10", 10, "COMMITTED")
    assert pending.path.endswith("10-c10") and pending.attributes == {}
    kw = {"run_id": "run-a", "manifest_sha256": "m" * 64}
    assert cps.record_committed(
        checkpoint_id="c10", step=10, generation=1, path="/p/10", attributes={"bytes": 3}, **kw
    ) is (Outcome.APPLIED)
    assert cps.record_committed(checkpoint_id="c10", step=10, generation=1, path="/p/10", **kw) is (
        Outcome.ALREADY_APPLIED
    )
    # A stale writer's commit is catalogued (its bytes are on disk) but never becomes latest.
    cps.record_committed(checkpoint_id="c20", step=20, generation=0, path="/p/20", **kw)
    latest = cps.latest("run-a")
    assert (latest.checkpoint_id, latest.attributes) == ("c10", {"bytes": 3})
    assert store.get_run("run-a").latest_checkpoint_id == "c10"  # the record's projection
    assert [c.checkpoint_id for c in cps.list("run-a")] == ["c10", "c20"]


def test_datasets_register_once(store):
    kw = {"dataset_id": "d" * 64, "name": "demo", "path": "/d", "manifest": {"shards": []}}
    assert store.datasets.register(**kw) is Outcome.APPLIED
    assert store.datasets.register(**kw) is Outcome.ALREADY_APPLIED
    assert store.datasets.get("d" * 64).name == "demo"


def test_reopen_keeps_records_and_schema(store_url):
    s = Store(store_url)
    make_run(s)
    s.close()
    reopened = Store(store_url)
    assert reopened.get_run("run-a").name == "t"
    reopened.close()


def test_bad_store_url_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="RUNWRIGHT_STORE"):
        Store.open(tmp_path, store="mysql://x")


def test_schema_head_is_alembics_head():
    """The store skips importing Alembic when the schema is at the head it reads from the
    migration files; that head must be the one Alembic itself computes."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from runwright.store.engine import MIGRATIONS_DIR, schema_head

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert schema_head() == ScriptDirectory.from_config(config).get_current_head()


def test_opening_a_store_at_the_head_does_not_import_alembic(tmp_path):
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'state.db'}"
    Store(url).close()  # creates and migrates
    code = (
        "import sys; from runwright.store import Store; "
        f"Store({url!r}).close(); print('alembic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("revision", ["0001", "0100_server"])
def test_a_store_at_an_older_schema_upgrades_and_keeps_its_runs(store_url, revision):
    """A store main created before run leases (at 0100_server, or the first schema) upgrades on
    open: its runs are kept, and the lease migration (0101_run_leases, after 0100_server)
    gives them leases that any controller may take."""
    from alembic import command
    from alembic.config import Config

    from runwright.store.engine import MIGRATIONS_DIR, schema_head

    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        old_runs = sa.Table("runs", sa.MetaData(), autoload_with=conn)
        assert not sa.inspect(conn).has_table("run_leases")
        conn.execute(
            old_runs.insert().values(
                run_id="run-old",
                name="t",
                spec_hash="h" * 64,
                spec={"name": "t"},
                plan={},
                generation=0,
                state="CREATED",
                workdir="/w",
                root="/r",
                created_unix_s=1.0,
                updated_unix_s=1.0,
            )
        )
    engine.dispose()
    s = Store(store_url)
    try:
        with s.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == (
                schema_head()
            )
        assert schema_head() == "0108_run_report_hash"
        run = s.get_run("run-old")
        assert run.name == "t" and run.project == "default"
        lease, _ = s.leases.get("run-old")
        assert lease is None  # nobody holds it: the first controller's pass takes it
        assert s.leases.acquire("run-old", "c:1:a", 30.0).outcome is LeaseOutcome.ACQUIRED
    finally:
        s.close()
