"""`GET /metrics`: the Prometheus series of the runs the token may see (observe/fleet.py).

Who may scrape: any token with at least the viewer role (Permission.READ, what listing runs
needs), and it sees its own project's runs, as `GET /v1/runs` does; a site admin's token sees
every project, so one scrape job can cover a deployment. Prometheus sends the token with
`authorization: {type: Bearer, credentials_file: ...}` (docs/observability.md).

The folds live on the app (one per server process), so a scrape reads only the events each run
gained since the last one.
"""

import threading

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from runwright.access.roles import Permission
from runwright.access.service import Access
from runwright.observe.fleet import FleetMetrics
from runwright.server.auth import reader

router = APIRouter(tags=["observability"])
_made = threading.Lock()


def _fleet(request: Request) -> FleetMetrics:
    state = request.app.state
    with _made:
        if getattr(state, "fleet_metrics", None) is None:
            state.fleet_metrics = FleetMetrics()
    return state.fleet_metrics


def _scrape(fleet: FleetMetrics, access: Access) -> str:
    access.require(Permission.READ, "scraping /metrics", None)
    fleet.refresh(access.store)
    return fleet.exposition(None if access.actor.site_admin else [access.home_project])


@router.get("/metrics", response_class=Response)
async def metrics(request: Request, access: Access = Depends(reader)) -> Response:
    """Prometheus text exposition (format 0.0.4) of the runs of the token's project (every
    project for a site admin): run, step, token, input-wait, checkpoint, recovery, failure,
    queue and alert series. Needs the viewer role."""
    text = await run_in_threadpool(_scrape, _fleet(request), access)
    return Response(text, media_type=CONTENT_TYPE_LATEST)
