"""The alert engine on channel messages, with a real store (SQLite) for its events: the kinds
a live run makes hard to stage on purpose (a checkpoint durability lag, a non-finite report),
the notify action against a real HTTP receiver, and rules a spec gets wrong."""

import itertools
import time

import pytest

from runwright.control.alerts import AlertEngine
from runwright.control.journal import Journal
from runwright.errors import SpecError
from runwright.events import EventType
from runwright.protocol import ChannelMessage
from runwright.spec import spec_from_mapping
from runwright.spec.alerts import DEFAULT_RULES, AlertsSpec
from runwright.store import Store


def spec_with(rules, defaults=False, every=2):
    return spec_from_mapping(
        {
            "name": "alerts",
            "code": {"entrypoint": "train.py"},
            "training": {"global_batch_samples": 8, "steps": 100},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": every}},
            "governance": {"owner": "bob"},
            "observability": {"alerts": {"defaults": defaults, "rules": rules}},
        }
    )


@pytest.fixture
def world(tmp_path):
    store = Store.open(tmp_path)
    run, _ = store.create_run(
        run_id="r1", name="r1", spec={}, spec_hash="h" * 64, plan={}, workdir=str(tmp_path),
        root=str(tmp_path), state="RUNNING",
    )  # fmt: skip
    yield store, run, AlertEngine(Journal(store))
    store.close()


_ids = itertools.count()


def message(type_, rank=0, step=None, **attributes):
    return ChannelMessage(
        event_id=f"m{next(_ids)}", type=type_, rank=rank, generation=0, step=step,
        time_unix_s=time.time(), attributes=attributes,
    )  # fmt: skip


def alert_events(store, kind):
    return [e.attributes for e in store.events("r1", types=[kind])]


def test_a_durability_lag_fires_past_an_interval_and_clears_on_the_commit(world):
    store, run, engine = world
    spec = spec_with([{"name": "lag", "kind": "durability_lag", "threshold": 1.0,
                       "window_steps": 1, "clear_steps": 1}])  # fmt: skip
    engine.observe(run, spec, message(EventType.CHECKPOINT_STAGED, step=2))
    engine.observe(run, spec, message(EventType.CHECKPOINT_COMMITTED, step=2))
    engine.check(run, spec)
    assert not alert_events(store, EventType.ALERT_FIRED)
    for step in (4, 6):  # two saves staged, none committed: 2 intervals behind
        engine.observe(run, spec, message(EventType.CHECKPOINT_STAGED, step=step))
    engine.check(run, spec)
    (fired,) = alert_events(store, EventType.ALERT_FIRED)
    assert (fired["lag_steps"], fired["interval_steps"], fired["owner"]) == (4, 2, "bob")
    assert (
        fired["summary"] == "durability lag: newest commit 2.00 checkpoint intervals behind "
        "the newest save"
    )
    engine.observe(run, spec, message(EventType.CHECKPOINT_COMMITTED, step=6))
    engine.check(run, spec)
    (cleared,) = alert_events(store, EventType.ALERT_CLEARED)
    assert cleared["alert_id"] == "lag" and "exit: value <= 1" in cleared["reason"]


def test_a_non_finite_report_fires_at_once_and_clears_on_a_healthy_step_past_it(world):
    store, run, engine = world
    spec = spec_with([r.model_dump() for r in DEFAULT_RULES if r.kind == "non_finite"])
    engine.observe(run, spec, message(EventType.NAN_DETECTED, rank=1, step=7))
    engine.check(run, spec)
    (fired,) = alert_events(store, EventType.ALERT_FIRED)
    assert (fired["severity"], fired["rank"], fired["step"]) == ("critical", 1, 7)
    for rank in (0, 1):  # the restarted group's first step past it (the batch was skipped)
        engine.observe(run, spec, message(EventType.STEP_HEALTHY, rank=rank, step=8,
                                          step_seconds=0.1, loss=1.0))  # fmt: skip
    engine.check(run, spec)
    assert len(alert_events(store, EventType.ALERT_CLEARED)) == 1


def test_notify_posts_the_alert_and_records_what_the_receiver_said(world, webhook):
    store, run, engine = world
    url, received = webhook
    spec = spec_with([{"name": "stall", "kind": "input_stall", "threshold": 0.5,
                       "window_steps": 2, "action": "notify", "webhook": url}])  # fmt: skip
    for step in (1, 2):
        for rank in (0, 1):
            healthy = message(EventType.STEP_HEALTHY, rank=rank, step=step,
                              step_seconds=1.0, data_wait_seconds=0.8)  # fmt: skip
            engine.observe(run, spec, healthy)
        engine.check(run, spec)
    (fired,) = alert_events(store, EventType.ALERT_FIRED)
    assert fired["action_result"] == f"notified {url}: HTTP 204"
    (posted,) = received
    assert (posted["run_id"], posted["rule"], posted["alert_id"]) == ("r1", "stall", "stall")
    assert posted["summary"] == "input stall: input wait 80% of the step"


def test_a_run_that_ends_clears_its_open_alerts(world):
    store, run, engine = world
    spec = spec_with([{"name": "stall", "kind": "input_stall", "threshold": 0.5,
                       "window_steps": 1}])  # fmt: skip
    for rank in (0, 1):
        engine.observe(run, spec, message(EventType.STEP_HEALTHY, rank=rank, step=1,
                                          step_seconds=1.0, data_wait_seconds=0.9))  # fmt: skip
    engine.check(run, spec)
    engine.close(run, "the run ended CANCELLED")
    (cleared,) = alert_events(store, EventType.ALERT_CLEARED)
    assert cleared["reason"] == "the run ended CANCELLED"


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ({"name": "x", "kind": "input_stall", "threshold": 0.5, "action": "notify"},
         "action notify needs a webhook URL"),
        ({"name": "x", "kind": "input_stall", "threshold": 0.5, "clear_at": 0.7},
         "must be at or below the threshold"),
        ({"name": "x", "kind": "throughput_drop", "threshold": 0.5, "clear_at": 0.3},
         "must be at or above the threshold"),
        ({"name": "Bad-Name", "kind": "input_stall", "threshold": 0.5}, "name"),
        ({"name": "x", "kind": "gpu_on_fire", "threshold": 1}, "kind"),
        ({"name": "x", "kind": "straggler", "threshold": 1.5, "webhook": "file:///etc"},
         "webhook"),
    ],
)  # fmt: skip
def test_a_bad_rule_is_refused_naming_the_field(rule, words):
    with pytest.raises(SpecError) as caught:
        spec_with([rule])
    assert "observability.alerts.rules" in str(caught.value) and words in str(caught.value)


def test_a_spec_rule_replaces_the_default_of_its_name():
    own = AlertsSpec.model_validate(
        {"rules": [{"name": "straggler", "kind": "straggler", "threshold": 2.0, "clear_at": 1.5},
                   {"name": "mine", "kind": "loss_spike", "threshold": 5}]}
    )  # fmt: skip
    rules = {r.name: r for r in own.effective()}
    assert set(rules) == {r.name for r in DEFAULT_RULES} | {"mine"}
    assert rules["straggler"].threshold == 2.0
    assert {r.name for r in AlertsSpec(defaults=False).effective()} == set()


def test_a_mixture_drift_fires_on_a_window_off_its_targets_and_clears_on_one_back(world):
    store, run, engine = world
    spec = spec_with([r.model_dump() for r in DEFAULT_RULES if r.kind == "mixture_drift"])
    window = {"first_step": 1, "last_step": 50}
    engine.observe(run, spec, message(EventType.MIXTURE_WINDOW, step=50, max_deviation=0.3,
                                      **window))  # fmt: skip
    engine.check(run, spec)
    (fired,) = alert_events(store, EventType.ALERT_FIRED)
    assert fired["window_steps"] == [1, 50] and fired["value"] == 0.3
    assert (
        fired["summary"] == "mixture drift: a source's share 30% off its target in the last window"
    )
    engine.observe(run, spec, message(EventType.MIXTURE_WINDOW, step=100, max_deviation=0.01,
                                      first_step=51, last_step=100))  # fmt: skip
    engine.check(run, spec)
    assert len(alert_events(store, EventType.ALERT_CLEARED)) == 1


def test_a_backlog_read_rank_by_rank_judges_every_step_with_rank_0s_loss(world):
    """A controller reading late meets rank 1's reports of 20 steps before rank 0's first (the
    channel is read a rank file at a time): the steps wait for rank 0, the spike at step 12 is
    judged with its loss, and nothing else fires. A rank that reports no steps at all holds
    them only until the reader has caught up."""
    store, run, engine = world
    spec = spec_with([{"name": "spike", "kind": "loss_spike", "threshold": 3.0,
                       "window_steps": 1, "clear_steps": 3}])  # fmt: skip

    def healthy(rank, step):
        loss = 10.0 if (rank, step) == (0, 12) else 1.0 + 0.01 * step
        return message(EventType.STEP_HEALTHY, rank=rank, step=step, step_seconds=0.1,
                       loss=loss)  # fmt: skip

    for rank in (1, 0):
        for step in range(1, 21):
            engine.observe(run, spec, healthy(rank, step))
        engine.check(run, spec)
        engine.caught_up(run, lambda done=rank == 0: done)  # rank 0 is read on the second turn
    (fired,) = alert_events(store, EventType.ALERT_FIRED)
    assert (fired["at_step"], fired["loss"]) == (12, 10.0)

    # Rank 1 goes silent (it reports no more steps): rank 0's steps 21-30 wait until the
    # reader has read every file to its end, then those INCOMPLETE_AFTER_STEPS back are judged.
    signals = engine._runs["r1"].signals
    for step in range(21, 31):
        engine.observe(run, spec, healthy(0, step))
    engine.caught_up(run, lambda: False)
    assert min(signals.rows) == 21 and signals.overdue()
    engine.caught_up(run, lambda: True)
    assert min(signals.rows) == 23  # 21 and 22 are 8 steps behind the newest, 30
