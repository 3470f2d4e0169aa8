"""The fleet's Prometheus exposition on a real SQLite store: names, types and bounded labels; a
fold done in pieces across scrapes gives the numbers of one fresh fold; a token's scope."""

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from runwright.control.states import TERMINAL
from runwright.events import NewEvent
from runwright.observe.fleet import MAX_BREAKDOWN_LABELS, TERMINAL_STATES, FleetMetrics
from runwright.store import Store

ALLOWED_LABELS = {"run_id", "project", "state", "kind", "failure_class", "reason", "rule",
                  "severity", "le", "source", "length_bucket"}  # fmt: skip


def _run(store, run_id, project, state="RUNNING"):
    store.create_run(run_id=run_id, name="fleet", spec={}, spec_hash="0" * 64, plan={},
                     workdir="/tmp", root="/tmp", state=state, project=project)  # fmt: skip


def _events(run_id, generation=0):
    at, n = 1000.0, iter(range(10**6))

    def ev(type_, step=None, checkpoint_id=None, **attrs):
        return NewEvent(event_id=f"{run_id}-{next(n)}", run_id=run_id, generation=generation,
                        type=type_, step=step, checkpoint_id=checkpoint_id,
                        time_unix_s=at, attributes=attrs)  # fmt: skip

    out = [ev("STATE_CHANGED", from_state="CREATED", to_state="QUEUED"),
           ev("ADMISSION_PENDING", code="capacity", reason="waiting for 2 devices"),
           ev("STATE_CHANGED", from_state="QUEUED", to_state="RUNNING")]  # fmt: skip
    for step in range(1, 7):
        for rank in (0, 1):
            out.append(ev("STEP_HEALTHY", step, rank=rank, step_seconds=0.2 + rank / 10,
                          loss=3.0 - step / 10, device_tokens=64, loss_tokens=60,
                          padded_tokens=4, samples=2, data_wait_seconds=0.01,
                          source_loss={"code": [40.0 + rank, 20], "web": [120.0, 40]},
                          length_loss={"<=128": [160.0 + rank, 60]}))  # fmt: skip
        if step % 3 == 0:
            for rank in (0, 1):
                out.append(ev("CHECKPOINT_STAGED", step, f"c{step}", rank=rank))
                out.append(ev("CHECKPOINT_COMMITTED", step, f"c{step}", rank=rank,
                              stall_seconds=0.5, bytes=1000))  # fmt: skip
    out += [ev("CHECKPOINT_STAGED", 7, "c7", rank=0),
            ev("FAILURE_CLASSIFIED", failure_class="node_lost"),
            ev("RECOVERY_SUCCEEDED", failure_class="node_lost", lost_steps=1,
               recovery_seconds=4.0),
            ev("ALERT_FIRED", alert_id="straggler:rank1", rule="straggler", severity="warning"),
            ev("ALERT_FIRED", alert_id="input_stall", rule="input_stall", severity="warning"),
            ev("ALERT_CLEARED", alert_id="input_stall", rule="input_stall")]  # fmt: skip
    return out


def _samples(text):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip


def test_exposition_names_types_labels_and_incremental_fold(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    _run(store, "alpha-1", "alpha")
    _run(store, "beta-1", "beta", state="QUEUED")
    log = _events("alpha-1")
    served = FleetMetrics()
    for cut in (5, 17, len(log)):  # three scrapes, each seeing more of the log
        store.append_events(log[:cut])
        served.refresh(store, now=2000.0)
        served.exposition(None, now=2000.0)
    fresh = FleetMetrics()
    fresh.refresh(store, now=2000.0)
    text = served.exposition(None, now=2000.0)
    assert text == fresh.exposition(None, now=2000.0)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, family in families.items():
        assert re.fullmatch(r"runwright_[a-z_]+", name), name
        if family.type == "counter":
            assert all(s.name == f"{name}_total" for s in family.samples
                       if not s.name.endswith("_created")), name  # fmt: skip
        for s in family.samples:
            assert set(s.labels) <= ALLOWED_LABELS, (name, s.labels)
    got = _samples(text)
    a = (("project", "alpha"), ("run_id", "alpha-1"))
    assert got[("runwright_steps_total", a)] == 6
    assert got[("runwright_tokens_total", tuple(sorted((*a, ("kind", "device")))))] == 6 * 2 * 64
    assert got[("runwright_checkpoints_committed_total", a)] == 2  # per-rank reports counted once
    assert got[("runwright_checkpoint_written_bytes_total", a)] == 2000
    assert got[("runwright_checkpoint_durability_lag_seconds", a)] == 1000.0  # c7 in flight
    assert got[("runwright_checkpoint_durability_lag_steps", a)] == 1
    assert got[("runwright_step_seconds_count", a)] == 12
    code, web = (tuple(sorted((*a, ("source", name)))) for name in ("code", "web"))
    assert got[("runwright_source_loss_sum_total", code)] == 6 * (40 + 41)
    assert got[("runwright_source_loss_tokens_total", code)] == 6 * 2 * 20
    assert got[("runwright_source_loss_tokens_total", web)] == 6 * 2 * 40
    short = tuple(sorted((*a, ("length_bucket", "<=128"))))
    assert got[("runwright_length_bucket_loss_sum_total", short)] == 6 * (160 + 161)
    assert got[("runwright_step_seconds_bucket", tuple(sorted((*a, ("le", "0.25")))))] == 6
    fc = tuple(sorted((*a, ("failure_class", "node_lost"))))
    assert got[("runwright_failures_total", fc)] == got[("runwright_recoveries_total", fc)] == 1
    straggler = tuple(sorted((*a, ("rule", "straggler"), ("severity", "warning"))))
    stall = tuple(sorted((*a, ("rule", "input_stall"), ("severity", "warning"))))
    assert got[("runwright_alerts_firing", straggler)] == 1
    assert ("runwright_alerts_firing", stall) not in got
    assert got[("runwright_alerts_fired_total", stall)] == 1
    assert got[("runwright_queue_pending_runs", (("project", "beta"), ("reason", "none")))] == 1
    assert got[("runwright_run_state", tuple(sorted((*a, ("state", "RUNNING")))))] == 1
    # A token's scope: only its project's runs.
    alpha_only = served.exposition(["alpha"], now=2000.0)
    assert "alpha-1" in alpha_only and "beta" not in alpha_only
    store.close()


def test_pending_reason_is_the_latest_admission_code(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    _run(store, "q-1", "alpha", state="QUEUED")
    store.append_events(_events("q-1")[:2])
    fleet = FleetMetrics()
    fleet.refresh(store)
    got = _samples(fleet.exposition(None))
    assert got[("runwright_queue_pending_runs", (("project", "alpha"), ("reason", "capacity")))]
    store.close()


def test_terminal_states_agree_with_the_state_machine():
    assert {str(s) for s in TERMINAL} == TERMINAL_STATES


def test_a_run_reporting_ever_new_source_names_keeps_a_bounded_label_set(tmp_path):
    """A script may report names of its own: past MAX_BREAKDOWN_LABELS they count as `other`,
    and nothing reported is lost from the totals."""
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    _run(store, "alpha-1", "alpha")
    log = [
        NewEvent(event_id=f"e{step}", run_id="alpha-1", generation=0, type="STEP_HEALTHY",
                 step=step, time_unix_s=1000.0 + step,
                 attributes={"rank": 0, "source_loss": {
                     f"s{step}a": [1.0, 2], f"s{step}b": [3.0, 4], "bad": "not a pair"}})
        for step in range(1, MAX_BREAKDOWN_LABELS)
    ]  # fmt: skip
    store.append_events(log)
    fleet = FleetMetrics()
    fleet.refresh(store)
    got = _samples(fleet.exposition(None))
    tokens = {dict(labels)["source"]: v for (name, labels), v in got.items()
              if name == "runwright_source_loss_tokens_total"}  # fmt: skip
    assert len(tokens) == MAX_BREAKDOWN_LABELS and "other" in tokens, sorted(tokens)
    assert sum(tokens.values()) == (MAX_BREAKDOWN_LABELS - 1) * 6
    store.close()


def test_the_grafana_dashboard_uses_only_served_series(tmp_path):
    """Every runwright_ series the shipped dashboard queries is one /metrics serves."""
    dashboard = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "runwright.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"runwright_[a-z_]+", e)}
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    _run(store, "alpha-1", "alpha", state="QUEUED")
    store.append_events(_events("alpha-1"))
    fleet = FleetMetrics()
    fleet.refresh(store)
    served = {name for name, _ in _samples(fleet.exposition(None))}
    assert used and used <= served, used - served
    store.close()
