"""OpenTelemetry traces of a real run: the reference trainer under the controller, one rank
SIGKILLed after its first committed checkpoint so the run recovers, spans exported over OTLP/HTTP
to a receiver this test runs (an HTTP server decoding `ExportTraceServiceRequest`). Every span
carries the run id and generation, and the tree is the documented one (observe/tracing.py)."""

import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.observe import tracing
from runwright.spec import spec_from_mapping
from runwright.store import Store

HANG_SECONDS = 60.0
"""The bound of a hang while waiting for the last spans after the run ended."""
STEP_SLEEP_SECONDS = 0.3
"""The rank's pause after each step. Unpaced, the tiny model's 24 steps take ~0.6 s: a controller
that read generation 1's steps half a second late (a busy CI machine) saw them only after the
rank had finished, so the kill left nothing to recover. Paced, the kill has 20 steps (~6 s) after
the first committed checkpoint to land in."""

pytestmark = pytest.mark.integration


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint: every span received, as a flat dict."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        got = []
        for resource in request.resource_spans:
            process = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attrs = {}
                    for a in span.attributes:
                        value = a.value
                        attrs[a.key] = getattr(value, value.WhichOneof("value"))
                    got.append({
                        "name": span.name, "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(), "parent": span.parent_span_id.hex(),
                        "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                        "attrs": attrs, "process": process.get("runwright.process"),
                    })  # fmt: skip
        with self.server.lock:
            self.server.spans.extend(got)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def _spec(root: Path) -> dict:
    dataset = build_dataset(TINY_DATA, root / "data")
    spec = tiny_gpt(dataset, steps=24, devices=1, every_steps=4)
    spec["code"]["args"] = ["--step-sleep", str(STEP_SLEEP_SECONDS)]
    return spec


def _killer(store: Store, receiver: "Receiver"):
    """SIGKILL generation 1's rank 0 at its first healthy step after a committed checkpoint
    whose restore span already reached the receiver (spans a killed rank had not sent yet are
    lost, by design; on a busy machine the batch may not have gone out by then)."""
    state: dict = {}

    def restore_sent() -> bool:
        with receiver.lock:
            return any(
                s["name"] == "runwright.restore" and s["attrs"].get("runwright.generation") == 1
                for s in receiver.spans
            )

    def hook(event) -> None:
        if event.generation != 1 or "done" in state:
            return
        if event.type == EventType.WORKER_STARTED:
            state["pid"] = int(event.attributes["pid"])
        elif event.type == EventType.CHECKPOINT_COMMITTED:
            state["committed"] = event.step
        elif (
            event.type == EventType.STEP_HEALTHY
            and "committed" in state
            and "pid" in state
            and restore_sent()
        ):
            os.kill(state["pid"], signal.SIGKILL)
            state["done"] = event.step

    return hook, state


def test_spans_of_a_recovered_run_reach_an_otlp_receiver(tmp_path, monkeypatch):
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_port}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # ms between the batches sent
    monkeypatch.setenv(tracing.STEP_EVERY_ENV, "4")
    root = tmp_path / "root"
    spec = spec_from_mapping(_spec(root))
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    hook, killed = _killer(store, receiver)
    controller = Controller(store, root, poll_seconds=0.1, on_event=hook)
    try:
        run, _ = controller.submit(spec, root)
        ended = controller.drive(run.run_id)
        assert ended.state == "SUCCEEDED", ended.state_detail
        assert "done" in killed, "the rank was never killed"
        assert killed["done"] < 24, f"killed after its last step ({killed['done']}): no recovery"
        tracing.flush()
        wanted = {"runwright.run", "runwright.submit", "runwright.admission",
                  "runwright.allocate", "runwright.launch", "runwright.recovery",
                  "runwright.restore", "runwright.checkpoint.save", "runwright.checkpoint.stage",
                  "runwright.checkpoint.commit", "runwright.step", "runwright.step.forward",
                  "runwright.step.backward", "runwright.step.optimizer"}  # fmt: skip
        deadline = time.monotonic() + HANG_SECONDS
        while True:
            with receiver.lock:
                spans = list(receiver.spans)
            # Generation 2 (after the recovery) traced its restore and its steps too.
            names = {s["name"] for s in spans}
            gen2 = {s["name"] for s in spans if s["attrs"].get("runwright.generation") == 2}
            if wanted <= names and {"runwright.restore", "runwright.step"} <= gen2:
                break
            assert time.monotonic() < deadline, f"missing {wanted - names}, gen 2: {gen2}"
            time.sleep(0.2)
    finally:
        receiver.shutdown()
        store.close()
    by_id = {s["span_id"]: s for s in spans}
    assert {s["trace_id"] for s in spans} == {f"{tracing.trace_id_of(run.run_id):032x}"}
    for s in spans:
        assert s["attrs"]["runwright.run_id"] == run.run_id, s
        assert isinstance(s["attrs"]["runwright.generation"], int), s
        assert s["end"] >= s["start"], s
    (root_span,) = [s for s in spans if s["name"] == "runwright.run"]
    assert root_span["parent"] == "" and root_span["process"] == "controller"
    launches = {
        s["attrs"]["runwright.generation"]: s for s in spans if s["name"] == "runwright.launch"
    }
    assert set(launches) == {1, 2}
    for s in spans:
        parent = by_id.get(s["parent"])
        if s["name"] in ("runwright.submit", "runwright.admission", "runwright.allocate",
                         "runwright.launch", "runwright.recovery"):  # fmt: skip
            assert parent is root_span, s
        elif s["name"] in ("runwright.restore", "runwright.step", "runwright.checkpoint.save"):
            # A rank's spans hang under its own generation's launch.
            assert parent is launches[s["attrs"]["runwright.generation"]], s
            assert s["process"] == "worker" and s["attrs"]["runwright.rank"] == 0
        elif s["name"].startswith("runwright.step."):
            assert parent["name"] == "runwright.step", s
            assert parent["attrs"]["runwright.step"] == s["attrs"]["runwright.step"]
            # a phase lies inside its step (clock readings rounded to the microsecond)
            assert parent["start"] - 1000 <= s["start"] <= s["end"] <= parent["end"] + 1000, s
        elif s["name"] in ("runwright.checkpoint.stage", "runwright.checkpoint.commit"):
            assert parent["name"] == "runwright.checkpoint.save", s
    # Sampled steps: one in four, and each generation's first (the step after its restore).
    firsts = {s["attrs"]["runwright.step"] + 1 for s in spans if s["name"] == "runwright.restore"}
    steps = sorted({s["attrs"]["runwright.step"] for s in spans if s["name"] == "runwright.step"})
    assert 1 in firsts and len(firsts) == 2, firsts
    assert all(step % 4 == 0 or step in firsts for step in steps), steps
    assert firsts <= set(steps), (firsts, steps)
