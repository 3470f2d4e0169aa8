"""A run's events as a server-sent-event stream (the live half of `runwright events --follow`).

Each event is one SSE message whose `id` is the event's sequence number in the store, so a
client that lost the connection reconnects with `Last-Event-ID` and misses nothing
(https://html.spec.whatwg.org/multipage/server-sent-events.html). The stream ends, after an
`end` message, once the run's RUN_FINISHED is sent, or once a terminal or paused run has stayed
quiet for two polls (a run whose controller is gone, or that waits for a person, writes nothing
more), as `runwright events --follow` does.

Followers of one run share one `RunFeed`: one task polls the store (the source of truth; there is
no second channel to drift from it) every POLL_SECONDS off the event loop, keeps the newest
WINDOW events, and renders each event once per kind of reader (what it may see: sample text or
not, which secrets to mask). So N followers cost one query per poll and one rendering per event
and kind, not N of each: with 8 followers on a loaded 2-core machine, per-follower polling put
the followers' lag at 23 s against 1.7 s for one (benchmarks/server.py). A follower further
behind than the window (a reconnect long after, a first look at a long run) reads its own way
from the store until it reaches the window.
"""

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from fastapi.concurrency import run_in_threadpool

from runwright.access.redaction import Disclosure, event_view
from runwright.access.service import Access
from runwright.events import EventType
from runwright.store import Store

POLL_SECONDS = 0.5
"""How often a feed looks for new events: what the CLI's local follow does."""
KEEPALIVE_SECONDS = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""
BATCH = 1000
"""Most events read per query (a long log streams in several)."""
WINDOW = 20_000
"""Newest events a feed keeps for its followers (a few MiB of JSON)."""


class RunFeed:
    """The newest events of one run, polled once for all its followers."""

    def __init__(self, store: Store, run_id: str, after: int) -> None:
        self.store = store
        self.run_id = run_id
        self.base = after
        """Every event after this sequence number is in `window` or yet to come."""
        self.newest = after
        """The sequence number of the newest event read."""
        self.window: deque[dict[str, Any]] = deque()
        self.rendered: dict[tuple[bool, tuple[str, ...]], dict[int, str]] = {}
        self.done = False
        self.error: str | None = None
        self.users = 0
        self.changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    async def poll(self) -> None:
        """Read new events until the run has finished; a store error ends the feed with it
        (its followers end their streams with an `error` message, and clients resume)."""
        try:
            await self._poll()
        except Exception as exc:
            self.error = str(exc) or type(exc).__name__
            self.done = True
            async with self.changed:
                self.changed.notify_all()

    async def _poll(self) -> None:
        from runwright.control.states import AT_REST

        quiet = 0
        while not self.done:
            batch = await run_in_threadpool(
                self.store.events, self.run_id, after_seq=self.newest, limit=BATCH
            )
            rows = [e.model_dump(mode="json") for e in batch]
            if rows:
                quiet = 0
                self.window.extend(rows)
                self.newest = rows[-1]["seq"]
                while len(self.window) > WINDOW:
                    gone = self.window.popleft()["seq"]
                    self.base = gone
                    for lines in self.rendered.values():
                        lines.pop(gone, None)
                self.done = any(r["type"] == EventType.RUN_FINISHED for r in rows)
            else:
                run = await run_in_threadpool(self.store.get_run, self.run_id)
                quiet = quiet + 1 if run.state in AT_REST else 0
                self.done = quiet >= 2
            async with self.changed:
                self.changed.notify_all()
            if len(rows) < BATCH and not self.done:
                await asyncio.sleep(POLL_SECONDS)

    def line(self, event: dict[str, Any], disclosure: Disclosure) -> str:
        """The SSE message of `event` as `disclosure` shows it, rendered once per kind."""
        lines = self.rendered.setdefault((disclosure.sample_text, disclosure.secrets), {})
        text = lines.get(event["seq"])
        if text is None:
            body = json.dumps(event_view(event, disclosure), separators=(",", ":"))
            text = lines[event["seq"]] = f"id: {event['seq']}\ndata: {body}\n\n"
        return text


class Feeds:
    """The feeds of the runs being followed, made on the first follower, dropped after the
    last."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.feeds: dict[str, RunFeed] = {}

    def join(self, run_id: str, after: int) -> RunFeed:
        feed = self.feeds.get(run_id)
        if feed is None or (feed.done and feed.task is not None and feed.task.done()):
            feed = self.feeds[run_id] = RunFeed(self.store, run_id, after)
            feed.task = asyncio.create_task(feed.poll())
        feed.users += 1
        return feed

    def leave(self, feed: RunFeed) -> None:
        feed.users -= 1
        if feed.users == 0 and self.feeds.get(feed.run_id) is feed:
            del self.feeds[feed.run_id]
            if feed.task is not None:
                feed.task.cancel()


async def event_stream(
    access: Access, feeds: Feeds, run_id: str, after: int, types: list[str]
) -> AsyncIterator[str]:
    """The SSE messages of run `run_id` (a full id the actor may see) after sequence `after`."""
    run = await run_in_threadpool(access.run, run_id)
    disclosure = access.disclosure(run)
    feed = feeds.join(run_id, after)
    try:
        yield "retry: 1000\n\n"
        last_sent = time.monotonic()
        while True:
            if after < feed.base:
                # Behind the window: catch up from the store on this follower's own account.
                behind = await run_in_threadpool(access.events, run_id, after, None, BATCH)
                behind = [e for e in behind if e["seq"] <= feed.base]
                # One write per batch, not per event: each write is a send through the ASGI
                # server, and per-event sends cost a follower more than the events themselves.
                yield "".join(
                    f"id: {e['seq']}\ndata: {json.dumps(e, separators=(',', ':'))}\n\n"
                    for e in behind
                    if not types or e["type"] in types
                )
                after = behind[-1]["seq"] if behind else feed.base
                last_sent = time.monotonic()
                continue
            fresh = []  # newest first, from the right end: a caught-up follower reads only news
            for event in reversed(feed.window):
                if event["seq"] <= after:
                    break
                fresh.append(event)
            fresh.reverse()
            chunk = "".join(
                feed.line(e, disclosure) for e in fresh if not types or e["type"] in types
            )
            if chunk:
                yield chunk
                last_sent = time.monotonic()
            if fresh:
                after = fresh[-1]["seq"]
            if feed.error is not None:
                # Not `end`: the run may go on. The client resumes after `after`.
                yield f"event: error\ndata: {json.dumps({'error': feed.error})}\n\n"
                return
            if feed.done and after >= feed.newest:
                break
            try:
                async with feed.changed:
                    await asyncio.wait_for(
                        feed.changed.wait_for(lambda seen=after: feed.newest > seen or feed.done),
                        timeout=KEEPALIVE_SECONDS,
                    )
            except TimeoutError:
                pass
            if time.monotonic() - last_sent > KEEPALIVE_SECONDS:
                yield ": keepalive\n\n"
                last_sent = time.monotonic()
    finally:
        feeds.leave(feed)
    yield f"id: {after}\nevent: end\ndata: {{}}\n\n"
