"""The source_loss_diverged rule on channel messages, with a real store (SQLite) for its events:
a crafted divergence of one source fires it, naming the source; the others stay quiet; it clears
once the source's loss comes back."""

import itertools
import time

import pytest

from runwright.control.alerts import AlertEngine
from runwright.control.journal import Journal
from runwright.events import EventType
from runwright.protocol import ChannelMessage
from runwright.spec import spec_from_mapping
from runwright.spec.alerts import DEFAULT_RULES
from runwright.store import Store

RULE = next(r for r in DEFAULT_RULES if r.kind == "source_loss_diverged")


@pytest.fixture
def world(tmp_path):
    store = Store.open(tmp_path)
    run, _ = store.create_run(
        run_id="r1", name="r1", spec={}, spec_hash="h" * 64, plan={}, workdir=str(tmp_path),
        root=str(tmp_path), state="RUNNING",
    )  # fmt: skip
    spec = spec_from_mapping(
        {
            "name": "alerts",
            "code": {"entrypoint": "train.py"},
            "training": {"global_batch_samples": 8, "steps": 100},
            "resources": {"devices_per_node": 2},
            "governance": {"owner": "data-team"},
            "observability": {"alerts": {"defaults": False, "rules": [RULE.model_dump()]}},
        }
    )
    yield store, run, spec, AlertEngine(Journal(store))
    store.close()


_ids = itertools.count()


def report(engine, run, spec, step: int, web: float, code: float) -> None:
    """Both ranks' STEP_HEALTHY of `step`: each saw 100 web and 50 code loss tokens at the given
    mean losses (sums, as runtime.SourceLoss reports them)."""
    for rank in (0, 1):
        engine.observe(
            run,
            spec,
            ChannelMessage(
                event_id=f"m{next(_ids)}", type=EventType.STEP_HEALTHY, rank=rank, generation=0,
                step=step, time_unix_s=time.time(),
                attributes={"step_seconds": 0.1, "loss": (100 * web + 50 * code) / 150,
                            "source_loss": {"web": [100 * web, 100], "code": [50 * code, 50]}},
            ),
        )  # fmt: skip
    engine.check(run, spec)


def test_a_source_whose_loss_diverges_fires_naming_it_and_clears_when_it_recovers(world):
    store, run, spec, engine = world
    step = itertools.count(1)
    for _ in range(8):  # both sources settle: web at 3.0, code at 2.0
        report(engine, run, spec, next(step), web=3.0, code=2.0)
    # Code's loss climbs to 4.0 (2x its mean) while the run's mean moves only from 2.67 to 3.33.
    for _ in range(RULE.window_steps):
        assert not store.events("r1", types=[EventType.ALERT_FIRED])
        report(engine, run, spec, next(step), web=3.0, code=4.0)
    (fired,) = [e.attributes for e in store.events("r1", types=[EventType.ALERT_FIRED])]
    assert fired["alert_id"] == "source_loss_diverged:code" and fired["source"] == "code"
    assert fired["owner"] == "data-team" and fired["loss_tokens"] == 100
    assert fired["loss"] == pytest.approx(4.0) and fired["value"] == pytest.approx(4.0 / 2.4)
    assert fired["summary"].startswith("source loss diverged in source code: a source's loss 1.")
    # Back to its level: the ratio falls under clear_at for clear_steps steps.
    for _ in range(RULE.clear_steps + 3):
        report(engine, run, spec, next(step), web=3.0, code=2.0)
    (cleared,) = [e.attributes for e in store.events("r1", types=[EventType.ALERT_CLEARED])]
    assert cleared["alert_id"] == "source_loss_diverged:code"
    assert len(store.events("r1", types=[EventType.ALERT_FIRED])) == 1  # web never fired
