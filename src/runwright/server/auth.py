"""Authentication as FastAPI dependencies: `reader` for endpoints that change nothing,
`acting(action)` for those that do, whose refusals (no token, expired, revoked) are audited."""

from collections.abc import Callable

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from runwright.access.authn import Refusal, authenticate
from runwright.access.service import Access
from runwright.store.audit import AuditLog, NewAudit

bearer = HTTPBearer(auto_error=False, description="An API token: `runwright token create`.")


def _access(
    request: Request, credentials: HTTPAuthorizationCredentials | None, *, writes: bool
) -> Access:
    state = request.app.state
    store = state.store if writes else state.read_store
    token = credentials.credentials if credentials is not None else None
    actor = authenticate(store, token, request.state.request_id)
    return Access(store, request.app.state.root, actor)


def reader(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> Access:
    return _access(request, credentials, writes=False)


def acting(action: str, target_param: str | None = None) -> Callable[..., Access]:
    """A dependency authenticating a mutating request; a refusal is audited as `action` on the
    path parameter `target_param` (e.g. the run id), with who the token claimed to be."""

    def dependency(
        request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
    ) -> Access:
        try:
            return _access(request, credentials, writes=True)
        except Refusal as exc:
            target = request.path_params.get(target_param) if target_param else None
            AuditLog(request.app.state.store.engine).append(
                NewAudit(
                    actor=exc.claimed,
                    via="api",
                    project=None,
                    action=action,
                    target=str(target)[:300] if target is not None else None,
                    outcome="denied",
                    detail=str(exc),
                    request_id=request.state.request_id,
                )
            )
            raise

    return dependency
