"""Followers of one run share one feed: each still gets every event after where it started,
once and in order, whether it starts inside the feed's window or behind it, and a role without
sample text gets them redacted while an operator does not."""

import asyncio
import json
import time

import httpx

from runwright.access.base import local_actor
from runwright.access.service import Access
from runwright.events import EventType
from runwright.server import events as feed_module
from runwright.server.app import create_app
from runwright.store import NewEvent, Store

TEXT = "a sample line of text"


def _sse_seqs(text: str) -> tuple[list[int], list[str], bool]:
    seqs, messages, ended, name = [], [], False, "message"
    for line in text.splitlines():
        if line.startswith("event:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and name == "message":
            event = json.loads(line[5:])
            seqs.append(event["seq"])
            messages.append(event["attributes"].get("note", ""))
        elif not line:
            ended = ended or name == "end"
            name = "message"
    return seqs, messages, ended


def test_followers_share_a_feed_and_miss_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(feed_module, "WINDOW", 7)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    local = Access(store, tmp_path, local_actor())
    local.set_role("default", "vic", "viewer")
    local.set_role("default", "ops", "operator")
    tokens = {n: local.create_token(n, "default", days=1)["token"] for n in ("vic", "ops")}
    store.create_run(run_id="r-1", name="r", spec={}, spec_hash="0" * 64, plan={},
                     workdir=str(tmp_path), root=str(tmp_path), state="SUCCEEDED")  # fmt: skip
    kinds = [EventType.STEP_HEALTHY] * 40 + [EventType.RUN_FINISHED]
    for i, kind in enumerate(kinds):
        store.append_event(
            NewEvent(event_id=f"e{i}", run_id="r-1", generation=0, type=kind, step=i,
                     time_unix_s=time.time(), attributes={"note": TEXT}),
            fenced=False,
        )  # fmt: skip
    every = [e.seq for e in store.events("r-1")]
    store.close()
    app = create_app(url, tmp_path)

    async def follow(token: str, last_event_id: int) -> str:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            response = await client.get(
                "/v1/runs/r-1/events",
                params={"follow": "true"},
                headers={"Authorization": f"Bearer {token}", "Last-Event-ID": str(last_event_id)},
            )
            assert response.status_code == 200, response.text
            return response.text

    async def together() -> list[str]:
        starts = [("vic", 0), ("ops", 0), ("vic", every[20]), ("ops", every[-3])]
        return await asyncio.gather(*(follow(tokens[who], at) for who, at in starts))

    answers = asyncio.run(together())
    for (seqs, _, ended), start in zip(
        (_sse_seqs(a) for a in answers), (0, 0, every[20], every[-3]), strict=True
    ):
        assert ended
        assert seqs == [s for s in every if s > start]
    viewer, operator = _sse_seqs(answers[0])[1], _sse_seqs(answers[1])[1]
    assert set(viewer) == {f"<redacted: {len(TEXT)} chars>"}
    assert set(operator) == {TEXT}
    assert app.state.feeds.feeds == {}  # the last follower to leave dropped the feed
    app.state.store.close()
    app.state.read_store.close()


def test_the_openapi_document_is_served_and_lists_every_route(tmp_path):
    app = create_app(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)

    async def fetch() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get("/openapi.json")

    answer = asyncio.run(fetch())
    assert answer.status_code == 200
    paths = answer.json()["paths"]
    for path in ("/v1/runs", "/v1/runs/{run_id}/events", "/v1/audit", "/v1/tokens", "/health"):
        assert path in paths, path
    app.state.store.close()
    app.state.read_store.close()
