"""`submit`'s progress: step events move one line, the rest print; the ETA uses the workers'
own times."""

import io

from rich.console import Console

from runwright.cli.progress import SubmitProgress
from runwright.events import EventType
from runwright.store import EventRecord


def _event(seq: int, type_: str, step: int | None, t: float, **attributes) -> EventRecord:
    return EventRecord(
        seq=seq,
        event_id=f"e{seq}",
        run_id="r",
        generation=1,
        type=type_,
        step=step,
        time_unix_s=t,
        attributes=attributes,
    )


def test_steps_move_one_line_and_other_events_print():
    out = io.StringIO()
    progress = SubmitProgress(Console(file=out, width=120), total_steps=100)
    progress.on_event(_event(1, EventType.STATE_CHANGED, None, 0.0, from_state="A", to_state="B"))
    seq = 2
    for step in range(1, 51):  # one step a second, by the workers' clocks; two ranks each
        for rank in (0, 1):
            loss = 1.0 / step
            progress.on_event(_event(seq, EventType.STEP_HEALTHY, step, float(step), rank=rank,
                                     loss=loss))  # fmt: skip
            seq += 1
    text = out.getvalue()
    assert "A -> B" in text
    assert "STEP_HEALTHY" not in text
    assert text.count("step ") <= 10  # a line per tenth at most, not one per event
    assert progress.step == 50
    assert progress.eta_seconds() == 50.0  # 50 steps left at 1 s a step
    assert "step 50/100  50%  loss 0.02  ETA 50s" in text


def test_a_restore_restarts_the_rate():
    progress = SubmitProgress(Console(file=io.StringIO()), total_steps=10)
    for step in (1, 2, 3):
        progress.on_event(_event(step, EventType.STEP_HEALTHY, step, float(step), rank=0))
    progress.on_event(_event(9, EventType.RESTORED, 2, 100.0, rank=0))
    progress.on_event(_event(10, EventType.STEP_HEALTHY, 4, 200.0, rank=0))
    assert progress.eta_seconds() is None  # one step of the new generation: no rate yet
