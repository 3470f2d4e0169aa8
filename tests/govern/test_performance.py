"""The performance section of a run's report (issue 27): figures over a stated window (warm-up
steps of each generation, replays and checkpoint stalls left out), peak memory per rank and the
ranks' software, and the report's hash kept once in the run's log."""

import pytest

from runwright.events import EventType
from runwright.govern.performance import record_report_hash
from runwright.govern.report import collect_report, render_report
from runwright.store import NewEvent, Store


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield opened
    opened.close()


def _event(store, index, type_, step, generation=1, **attributes):
    store.append_event(
        NewEvent(event_id=f"e{index}", run_id="r", generation=generation, type=type_, step=step,
                 time_unix_s=100.0 + index, attributes=attributes),
        fenced=False,
    )  # fmt: skip


def test_the_window_the_memory_and_the_hash(store):
    store.create_run(
        run_id="r", name="p", spec={"resources": {"device_type": "cpu"}}, spec_hash="0" * 64,
        plan={}, workdir="/tmp", root="/tmp", state="SUCCEEDED",
    )  # fmt: skip
    # Generation 1: steps 1-4 (1-2 warm-up; step 4 stalls 0.5 s on a checkpoint).
    for step in range(1, 5):
        stall = 0.5 if step == 4 else 0.0
        _event(store, step, EventType.STEP_HEALTHY, step, rank=0, loss=1.0, loss_tokens=100,
               device_tokens=100, step_seconds=1.0 + stall, checkpoint_stall_seconds=stall,
               data_wait_seconds=0.1, grad_sync_seconds=0.2)  # fmt: skip
    # Generation 2 replays step 4 and trains 5-7: its first two reports are warm-up.
    for index, step in enumerate((4, 5, 6, 7), start=10):
        _event(store, index, EventType.STEP_HEALTHY, step, generation=2, rank=0, loss=1.0,
               loss_tokens=100, device_tokens=100, step_seconds=2.0,
               data_wait_seconds=0.1, grad_sync_seconds=0.2)  # fmt: skip
    for rank, peak in ((0, 800), (1, 900)):
        _event(store, 20 + rank, EventType.RANK_PEAK_MEMORY, 7, generation=2, rank=rank,
               peak_host_bytes=peak, peak_device_bytes=None, device_type="cpu",
               versions={"python": "3.11.7", "torch": "2.13.0"})  # fmt: skip
    report, _ = collect_report(store, "r")
    performance = report.performance
    window = performance.figures.window
    # Kept: steps 3 and 4 of generation 1, steps 6 and 7 of generation 2 (4 replayed, 5 warm-up).
    assert (window.first_step, window.last_step, window.steps) == (3, 7, 4)
    assert window.seconds == pytest.approx(1.0 + 1.0 + 2.0 + 2.0)  # the stall subtracted
    assert performance.figures.loss_tokens_per_second == pytest.approx(400 / 6.0)
    assert performance.figures.step_seconds_p50 == 1.0
    assert performance.figures.comm_seconds_mean == pytest.approx(0.2)
    assert "retries (steps replayed after a restore)" in window.excludes
    assert performance.versions == {"python": "3.11.7", "torch": "2.13.0"}
    assert [(m.rank, m.peak_host_bytes) for m in performance.peak_memory] == [(0, 800), (1, 900)]
    again, _ = collect_report(store, "r")
    assert report.report_sha256 == again.report_sha256 and len(report.report_sha256) == 64
    record_report_hash(store, "r", 2, report.report_sha256)
    record_report_hash(store, "r", 2, report.report_sha256)
    kept = store.events("r", types=[EventType.REPORT_HASHED])
    assert [e.attributes["report_sha256"] for e in kept] == [report.report_sha256]
    assert store.get_run("r").report_sha256 == report.report_sha256  # in the run's row too
    _, html = render_report(store, "r")
    assert "<h2>Performance</h2>" in html and "steps 3-7 (4 executions" in html
