"""The dashboard (issue 15): pages under `/ui/` for people, on the same tokens and the same
`Access` checks as the API.

A person logs in by pasting an API token; the server checks it and keeps it in an HttpOnly,
SameSite=Strict cookie, so page scripts never hold it and no other site's page can send it.
Every page and its JSON build an `Access` from that cookie exactly as the API builds one from
`Authorization: Bearer`: a page shows what the token's role may see of its project, a run of
another project is "no run", and a missing or refused token leads to the login page. The run
page and the compare view draw with plotly.js, served from the installed `plotly` package.
"""

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from runwright.access.authn import authenticate
from runwright.access.dashboard import MAX_COMPARED
from runwright.access.roles import Unauthenticated
from runwright.access.service import Access
from runwright.errors import NotFoundError, RunwrightError
from runwright.govern.charts import CHARTS_JS, plotly_js
from runwright.server.ui import pages

router = APIRouter(prefix="/ui", include_in_schema=False)
COOKIE = "runwright_token"
COOKIE_SECONDS = 12 * 3600
"""How long the browser keeps the token: a working day; the token's own expiry still applies."""
STATIC = Path(__file__).parent / "static"
OWN_FILES = {
    "dashboard.js": (STATIC / "dashboard.js", "text/javascript"),
    "dashboard.css": (STATIC / "dashboard.css", "text/css"),
    "charts.js": (CHARTS_JS, "text/javascript"),
}
MAX_LOGIN_BYTES = 4096
HEADERS = {
    # Scripts only from this server (no inline script, nothing from elsewhere); plotly.js sets
    # inline styles on the charts it draws, hence 'unsafe-inline' for styles only.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _access(request: Request) -> Access:
    """An `Access` for the cookie's token (raises Unauthenticated like the API's `reader`)."""
    state = request.app.state
    token = request.cookies.get(COOKIE)
    actor = authenticate(state.read_store, token, request.state.request_id)
    return Access(state.read_store, state.root, actor)


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303)


def _safe_next(target: str | None) -> str:
    """Only a path of the dashboard itself (no open redirect to another site)."""
    if target and target.startswith("/ui/") and not target.startswith("//"):
        return target
    return "/ui/runs"


async def _page(request: Request, build: Any) -> Response:
    """Run `build(access)` for the cookie's actor; no or a refused token: the login page; a run
    the actor cannot see: a 404 page (the API's status for each other error)."""
    try:
        access = await run_in_threadpool(_access, request)
        return _html(await run_in_threadpool(build, access))
    except Unauthenticated:
        return _to_login(request)
    except RunwrightError as exc:  # no such run (404), a malformed id (400), ...
        from runwright.server.app import status_of

        return _html(pages.problem(str(exc)), status=status_of(exc))


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/runs", status_code=303)


@router.get("/login")
def login_form(next: str | None = None) -> HTMLResponse:
    return _html(pages.login(_safe_next(next)))


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the pasted token as the API would, then keep it in the cookie."""
    body = (await request.body())[:MAX_LOGIN_BYTES].decode("utf-8", "replace")
    form = parse_qs(body)
    token = (form.get("token") or [""])[0].strip()
    target = _safe_next((form.get("next") or [None])[0])
    try:
        await run_in_threadpool(authenticate, request.app.state.read_store, token)
    except Unauthenticated as exc:
        return _html(pages.login(target, error=str(exc)), status=401)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        max_age=COOKIE_SECONDS,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout() -> RedirectResponse:
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/runs")
async def runs_page(
    request: Request,
    state: str | None = Query(None, max_length=40),
    owner: str | None = Query(None, max_length=200),
    tag: str | None = Query(None, max_length=200),
    name: str | None = Query(None, max_length=200),
) -> Response:
    filters = {"state": state, "owner": owner, "tag": tag, "name": name}
    filters = {k: v.strip() or None if v else None for k, v in filters.items()}
    return await _page(
        request, lambda access: pages.runs(access.actor, access.dashboard_runs(**filters), filters)
    )


@router.get("/queue")
async def queue_page(request: Request) -> Response:
    return await _page(request, lambda access: pages.queue(access.actor, access.queue()))


@router.get("/runs/{run_id}")
async def run_page(request: Request, run_id: str) -> Response:
    return await _page(request, lambda access: pages.run(access.actor, access.run(run_id)))


@router.get("/compare")
async def compare_page(request: Request, run: list[str] = Query([])) -> Response:
    def build(access: Access) -> str:
        if len(run) > MAX_COMPARED:
            raise RunwrightError(f"compare at most {MAX_COMPARED} runs; {len(run)} were given")
        return pages.compare(access.actor, [access.run(r).run_id for r in run])

    return await _page(request, build)


@router.get("/api/runs/{run_id}")
def run_data(request: Request, run_id: str) -> dict[str, Any]:
    """The run page's data (polled while the run trains); 401 without a valid cookie."""
    return _access(request).run_view(run_id)


@router.get("/api/compare")
def compare_data(request: Request, run: list[str] = Query([])) -> dict[str, Any]:
    return _access(request).compare_view(run)


@router.get("/static/{name}")
def static(name: str) -> Response:
    """The dashboard's own script and style, the run charts' script (shared with report.html)
    and plotly.js from the installed package."""
    if name in OWN_FILES:
        path, media_type = OWN_FILES[name]
        return FileResponse(path, media_type=media_type)
    if name == "plotly.min.js":
        return FileResponse(
            plotly_js(),
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=86400"},
        )
    raise NotFoundError(f"no dashboard file {name!r}")
