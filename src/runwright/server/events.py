"""A run's events as a server-sent-event stream (the live half of `runwright events --follow`).

Each event is one SSE message whose `id` is the event's sequence number in the store, so a
client that lost the connection reconnects with `Last-Event-ID` and misses nothing
(https://html.spec.whatwg.org/multipage/server-sent-events.html). The stream polls the store
(the source of truth; there is no second channel to drift from it) off the event loop, so any
number of followers costs no worker thread while they wait, and it ends, after an `end` message,
once the run's RUN_FINISHED is sent, or once a terminal run has stayed quiet for two polls (a
run whose controller is gone writes nothing more), as `runwright events --follow` does.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator

from fastapi.concurrency import run_in_threadpool

from runwright.access.service import Access
from runwright.events import EventType

POLL_SECONDS = 0.5
"""How often a follower looks for new events: what the CLI's local follow does."""
KEEPALIVE_SECONDS = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""
BATCH = 1000
"""Most events read per poll (a long log streams in several)."""


async def event_stream(
    access: Access, run_id: str, after: int, types: list[str]
) -> AsyncIterator[str]:
    from runwright.control.states import TERMINAL

    yield "retry: 1000\n\n"
    quiet = 0
    last_sent = time.monotonic()
    while True:
        batch = await run_in_threadpool(access.events, run_id, after, None, BATCH)
        for event in batch:
            after = event["seq"]
            if not types or event["type"] in types:
                yield f"id: {after}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"
                last_sent = time.monotonic()
        if any(e["type"] == EventType.RUN_FINISHED for e in batch):
            break
        if len(batch) == BATCH:
            continue  # more waiting: read on without sleeping
        if batch:
            quiet = 0
        else:  # the run's state matters only once its log has gone quiet
            state = await run_in_threadpool(access.run_state, run_id)
            quiet = quiet + 1 if state in TERMINAL else 0
        if quiet >= 2:
            break
        if time.monotonic() - last_sent > KEEPALIVE_SECONDS:
            yield ": keepalive\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(POLL_SECONDS)
    yield f"id: {after}\nevent: end\ndata: {{}}\n\n"
