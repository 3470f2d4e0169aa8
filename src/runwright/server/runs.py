"""Runs: submit, list, status, events (JSON or a live server-sent-event stream), cancel, pause,
resume, compare, report, queue."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from runwright.access.service import Access
from runwright.server.auth import acting, reader
from runwright.server.events import event_stream
from runwright.server.models import CancelRequest, PauseRequest, ResumeRequest, SubmitRequest

router = APIRouter(prefix="/v1", tags=["runs"])
MAX_LIST_RUNS = 100_000
MAX_EVENTS = 100_000


@router.post("/runs", status_code=201)
def submit(body: SubmitRequest, access: Access = Depends(acting("run.submit"))) -> dict[str, Any]:
    """Submit a run to the caller's project (submitter); the server's controller drives it. The
    same idempotency key returns the existing run (`created: false`)."""
    return access.submit(body.spec, idempotency_key=body.idempotency_key, source="spec")


@router.get("/runs")
def list_runs(
    limit: int = Query(20, ge=1, le=MAX_LIST_RUNS), access: Access = Depends(reader)
) -> list[dict[str, Any]]:
    """The project's newest runs, as `runwright list --json` prints them."""
    return access.list_runs(limit)


@router.get("/runs/{run_id}")
def status(
    run_id: str,
    events: bool = Query(True, description="Include the event log (`status --json` does)."),
    access: Access = Depends(reader),
) -> dict[str, Any]:
    """A run's state, history, attempts, incidents and what happens next (`status --json`)."""
    return access.status(run_id, events)


@router.get("/runs/{run_id}/events", response_model=None)
async def events(
    request: Request,
    run_id: str,
    after: int = Query(0, ge=0, description="Only events after this sequence number."),
    type: list[str] = Query([], description="Only events of these types."),
    limit: int | None = Query(None, ge=1, le=MAX_EVENTS),
    follow: bool = Query(False, description="Stream new events (text/event-stream)."),
    last_event_id: str | None = Header(None),
    access: Access = Depends(reader),
) -> Any:
    """A run's event log. With `follow=true` (or `Accept: text/event-stream`) a server-sent-event
    stream: each event's `id` is its sequence number, so a client that reconnects with
    `Last-Event-ID` resumes after the last event it got; the stream ends with an `end` event
    once the run has finished."""
    streaming = follow or "text/event-stream" in request.headers.get("accept", "")
    if not streaming:
        return await run_in_threadpool(access.events, run_id, after, type, limit)
    resume = int(last_event_id) if last_event_id and last_event_id.isdigit() else after
    run = await run_in_threadpool(access.run, run_id)  # 404 before the stream starts
    return StreamingResponse(
        event_stream(access, request.app.state.feeds, run.run_id, resume, type),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post("/runs/{run_id}/cancel")
def cancel(
    run_id: str,
    body: Annotated[CancelRequest | None, Body()] = None,
    access: Access = Depends(acting("run.cancel", "run_id")),
) -> dict[str, Any]:
    """Cancel a run (the submitter its own, an operator any): the workers save at their next
    step boundary and stop."""
    return access.cancel(run_id, (body or CancelRequest()).reason)


@router.post("/runs/{run_id}/pause")
def pause(
    run_id: str,
    body: Annotated[PauseRequest | None, Body()] = None,
    access: Access = Depends(acting("run.pause", "run_id")),
) -> dict[str, Any]:
    """Pause a run (as cancel: the submitter its own, an operator any): a queued run is held at
    once; a live one saves at its next step boundary, gives its devices back and waits, PAUSED."""
    return access.pause(run_id, (body or PauseRequest()).reason)


@router.post("/runs/{run_id}/resume")
def resume(
    run_id: str,
    body: Annotated[ResumeRequest | None, Body()] = None,
    access: Access = Depends(acting("run.resume", "run_id")),
) -> dict[str, Any]:
    """Resume a paused run: back to the queue, restored from its newest checkpoint."""
    return access.resume(run_id, (body or ResumeRequest()).reason)


@router.get("/compare")
def compare(
    a: str = Query(..., max_length=200),
    b: str = Query(..., max_length=200),
    access: Access = Depends(reader),
) -> dict[str, Any]:
    """Recovery equivalence of two runs of the project (`runwright compare --json`)."""
    return access.compare(a, b)


@router.get("/runs/{run_id}/report")
def report(run_id: str, access: Access = Depends(reader)) -> dict[str, Any]:
    """The run's report: report.json's content and report.html's text, secrets masked and
    worker text redacted as the caller's role requires. Nothing is written on the server."""
    content, html = access.report(run_id)
    return {"run_id": content["run"]["run_id"], "report": content, "html": html}


@router.get("/queue")
def queue(access: Access = Depends(reader)) -> list[dict[str, Any]]:
    """The project's unfinished runs, oldest first, with what each is waiting for."""
    return access.queue()
