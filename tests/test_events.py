"""The one event vocabulary: every event type lives in `runwright.events.EventType`, and the
process's event hook reaches the run (or nothing, outside one)."""

import ast
import gc
from pathlib import Path

from runwright import events
from runwright.control.states import TerminalReason
from runwright.events import EventType

SRC = Path(__file__).resolve().parents[1] / "src" / "runwright"
SPELLED_ON_PURPOSE = {
    "demo/paced_worker.py": "the controller benchmark runs it on older revisions' runtime too, "
    "which have no runwright.events",
}


def test_no_module_spells_an_event_type_as_a_string():
    """A type written as a literal somewhere else is a second vocabulary waiting to drift.
    (A terminal reason that shares an event's name, BUDGET_EXCEEDED, is the reason's.)"""
    names = {str(t) for t in EventType} - {str(r) for r in TerminalReason}
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "events.py" or str(path.relative_to(SRC)) in SPELLED_ON_PURPOSE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(SRC)}:{node.lineno} {node.value!r}")
    assert not found, "use runwright.events.EventType:\n" + "\n".join(found)


def test_every_type_is_documented():
    source = (SRC / "events.py").read_text()
    for member in EventType:
        line = source.index(f'    {member.name} = "{member.value}"')
        assert source[line:].split("\n")[1].strip().startswith('"""'), member


class Recorder:
    def __init__(self):
        self.sent = []

    def __call__(self, type_, *, key=None, step=None, checkpoint_id=None, **attributes):
        self.sent.append((type_, key, step, checkpoint_id, attributes))


class Loader:
    def __init__(self):
        self.closed = 0

    def report(self):
        self.closed += 1

    def facts(self):
        return {"samples": [0, 4]}


def test_emit_reaches_the_attached_run_and_nothing_outside_one():
    recorder = Recorder()
    assert events.emit(EventType.DATA_STAGE_READY, key="data") is False
    events.attach(recorder)
    try:
        assert events.emit(EventType.DATA_STAGE_READY, key="data", dataset_id="d") is True
    finally:
        events.detach(recorder)
    assert recorder.sent == [(EventType.DATA_STAGE_READY, "data", None, None, {"dataset_id": "d"})]
    assert events.emit(EventType.DATA_STAGE_READY) is False


def test_objects_report_at_close_once_and_are_held_weakly():
    kept, dropped = Loader(), Loader()
    events.report_at_close(kept.report)
    events.report_at_close(dropped.report)
    events.report_with_each_step(kept.facts)
    assert events.step_facts() == {"samples": [0, 4]}
    del dropped
    gc.collect()
    events.run_closing()
    events.run_closing()
    assert kept.closed == 1
    assert events.step_facts() == {}
