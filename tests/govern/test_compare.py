"""Recovery equivalence for any run that follows the integration: what a run did not report is
named (with what would report it), never a traceback, and the rest is still compared."""

import pytest

from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.store import NewEvent, Store


def _run(store, run_id, *, steps, digests=None, samples=True, complete=True, loss_shift=0.0):
    store.create_run(
        run_id=run_id, name="cmp", spec={}, spec_hash="0" * 64, plan={}, workdir="/tmp",
        root="/tmp", state="SUCCEEDED" if complete else "RUNNING",
    )  # fmt: skip
    events = []
    for step in range(1, steps + 1):
        attributes = {"rank": 0, "loss": 1.0 / step + (loss_shift if step == steps else 0.0)}
        if samples:
            attributes["samples"] = [8 * (step - 1), 8 * step]
        events.append((EventType.STEP_HEALTHY, step, attributes))
    if complete:
        done = {"rank": 0, **({"parameter_digests": digests} if digests is not None else {})}
        events.append((EventType.TRAINING_COMPLETE, steps, done))
    for index, (type_, step, attributes) in enumerate(events):
        store.append_event(
            NewEvent(event_id=f"{run_id}-{index}", run_id=run_id, generation=1, type=type_,
                     step=step, time_unix_s=float(index), attributes=attributes),
            fenced=False,
        )  # fmt: skip


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield opened
    opened.close()


def test_full_evidence_equal_and_different(store):
    _run(store, "a", steps=4, digests={"w": "1"})
    _run(store, "b", steps=4, digests={"w": "1"})
    _run(store, "c", steps=4, digests={"w": "1"}, loss_shift=0.5)
    assert compare_runs(store, "a", "b").equivalence == "bitwise-equal"
    other = compare_runs(store, "a", "c")
    assert (other.equivalence, other.first_difference) == ("different", "loss:step 4")


def test_a_two_line_script_is_incomplete_with_what_would_report_it(store):
    _run(store, "a", steps=4, samples=False)
    _run(store, "b", steps=4, samples=False)
    result = compare_runs(store, "a", "b")
    assert result.equivalence == "incomplete" and result.first_difference is None
    text = "\n".join(result.missing)
    assert "run a reported no parameter digests" in text and "ctx.checkpointer()" in text
    assert "runwright.data.DataLoader" in text
    assert result.steps_compared == 4  # the losses were still compared


def test_a_difference_in_what_was_reported_is_still_a_difference(store):
    _run(store, "a", steps=3, samples=False)
    _run(store, "b", steps=3, samples=False, loss_shift=1.0)
    assert compare_runs(store, "a", "b").equivalence == "different"


def test_an_unfinished_run_is_refused_by_name(store):
    _run(store, "a", steps=2, digests={"w": "1"})
    _run(store, "b", steps=2, complete=False)
    with pytest.raises(
        RunwrightError, match=r"run b has not completed its training \(state RUNNING"
    ):
        compare_runs(store, "a", "b")
