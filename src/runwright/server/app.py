"""The app factory: one store and root, the routers, errors as JSON, a request-body limit and a
request id on every answer."""

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runwright import __version__
from runwright.access.roles import AccessDenied, Unauthenticated
from runwright.errors import NotFoundError, RunwrightError, SpecError, StoreUnavailableError
from runwright.server.events import Feeds
from runwright.store import Store

MAX_BODY_BYTES = 10 * 2**20
"""Largest request body: a spec file is at most 8 MiB (spec/limits.py), JSON adds some."""
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")

STATUS: list[tuple[type[Exception], int]] = [
    (Unauthenticated, 401),
    (AccessDenied, 403),
    (NotFoundError, 404),
    (SpecError, 422),
    (StoreUnavailableError, 503),
    (RunwrightError, 400),
]
"""An error's HTTP status: the first class it is an instance of."""


def error_body(message: str, status: int, request: Request | None) -> JSONResponse:
    request_id = getattr(request.state, "request_id", None) if request is not None else None
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        {"error": message, "status": status, "request_id": request_id},
        status_code=status,
        headers=headers,
    )


def status_of(exc: Exception) -> int:
    return next(code for cls, code in STATUS if isinstance(exc, cls))


class BodyLimit:
    """Refuse a body over `limit` bytes with 413 before the app reads it: by Content-Length when
    given, else (a chunked upload) by reading it here, at most `limit` bytes, and handing the app
    what was read."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit() or int(declared) > self.limit:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        if b"chunked" not in headers.get(b"transfer-encoding", b""):
            await self.app(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {
                "error": f"the request body is over {self.limit:,} bytes; a spec is at most 8 MiB",
                "status": 413,
                "request_id": None,
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _describe(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors[:10]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        if err.get("type") == "json_invalid":
            parts.append(f"the request body is not valid JSON ({err.get('msg')})")
        elif err.get("type") == "extra_forbidden":
            parts.append(f"{where}: unknown field; remove it (see /docs for the fields)")
        else:
            parts.append(f"{where}: {err.get('msg')}")
    return "; ".join(parts)


def create_app(
    store_url: str,
    root: Path,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    controller: Callable[[], Any] | None = None,
) -> FastAPI:
    """The API on the store at `store_url` (migrated here, before the first request) and the
    runwright root `root` (runs, datasets, checkpoints). `controller()`, when given, starts the
    controller beside the API at start-up and returns a handle whose `stop()` runs at shutdown."""
    from runwright.server import (
        admin,
        data_policies,
        downloads,
        experiments,
        metrics,
        releases,
        runs,
        storage,
        ui,
    )
    from runwright.server import operator as operator_routes

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        running = controller() if controller is not None else None
        try:
            yield
        finally:
            if running is not None:
                running.stop()
            app.state.store.close()
            app.state.read_store.close()

    app = FastAPI(
        lifespan=lifespan,
        title="runwright",
        version=__version__,
        description="Runs, events, datasets, checkpoints, tokens, roles and the audit log of a "
        "shared runwright deployment. Every endpoint but /health needs "
        "`Authorization: Bearer <token>`.",
    )
    app.state.store = Store(store_url)
    # GETs read through a second store whose SQLite transactions never take the write lock,
    # so pollers and followers neither queue behind each other nor behind the controller.
    app.state.read_store = Store(store_url, read_only=True)
    app.state.root = root
    app.state.feeds = Feeds(app.state.read_store)  # live event streams, one poll per run

    @app.middleware("http")
    async def request_id(request: Request, call_next: Callable[[Request], Awaitable[Any]]) -> Any:
        given = request.headers.get("x-request-id", "")
        request.state.request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        response = await call_next(request)
        response.headers["X-Request-ID"] = request.state.request_id
        return response

    @app.exception_handler(RunwrightError)
    async def runwright_error(request: Request, exc: RunwrightError) -> JSONResponse:
        return error_body(str(exc), status_of(exc), request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        status = 400 if any(e.get("type") == "json_invalid" for e in errors) else 422
        return error_body(_describe(errors), status, request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no endpoint {request.url.path}; /docs lists them"
        return error_body(message, exc.status_code, request)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, Any]:
        """Liveness (no token needed): the server answers and reaches its store."""
        app.state.read_store.list_runs(limit=1)
        return {"ok": True, "version": __version__}

    app.include_router(runs.router)
    app.include_router(operator_routes.router)
    app.include_router(storage.router)
    app.include_router(data_policies.router)
    app.include_router(releases.router)
    app.include_router(admin.router)
    app.include_router(ui.router)
    app.include_router(metrics.router)
    app.include_router(downloads.router)
    app.include_router(experiments.router)
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    return app
