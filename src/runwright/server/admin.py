"""Identity and access: who am I, tokens, projects, members and roles, the audit log."""

from typing import Any

from fastapi import APIRouter, Depends, Query

from runwright.access.service import Access
from runwright.server.auth import acting, reader
from runwright.server.models import ProjectRequest, RoleRequest, TokenRequest

router = APIRouter(prefix="/v1", tags=["access"])


@router.get("/whoami")
def whoami(access: Access = Depends(reader)) -> dict[str, Any]:
    """The caller: principal, project, effective role, site admin or not."""
    return access.whoami()


@router.post("/tokens", status_code=201)
def create_token(
    body: TokenRequest, access: Access = Depends(acting("token.create"))
) -> dict[str, Any]:
    """A new token (for oneself, or as a project admin for a member); `token` is shown once."""
    return access.create_token(
        body.principal, body.project, days=body.days, role_cap=body.role_cap, label=body.label
    )


@router.get("/tokens")
def list_tokens(access: Access = Depends(reader)) -> list[dict[str, Any]]:
    """One's own tokens (a project admin: the project's; a site admin: all), never a secret."""
    return access.list_tokens()


@router.delete("/tokens/{token_id}")
def revoke_token(
    token_id: str, access: Access = Depends(acting("token.revoke", "token_id"))
) -> dict[str, Any]:
    """Revoke a token: it stops working at once."""
    return access.revoke_token(token_id)


@router.get("/projects")
def projects(access: Access = Depends(reader)) -> list[str]:
    return access.projects()


@router.post("/projects", status_code=201)
def create_project(
    body: ProjectRequest, access: Access = Depends(acting("project.create"))
) -> dict[str, Any]:
    """Create a project (site admins)."""
    return access.create_project(body.name)


@router.get("/projects/{project}/members")
def members(project: str, access: Access = Depends(reader)) -> list[dict[str, Any]]:
    return access.members(project)


@router.put("/projects/{project}/members/{principal}")
def grant(
    project: str,
    principal: str,
    body: RoleRequest,
    access: Access = Depends(acting("role.grant", "principal")),
) -> dict[str, Any]:
    """Grant a role in the project (project admins), making the principal if it is new."""
    return access.set_role(project, principal, body.role, body.kind)


@router.delete("/projects/{project}/members/{principal}")
def remove(
    project: str,
    principal: str,
    access: Access = Depends(acting("role.revoke", "principal")),
) -> dict[str, Any]:
    """Remove a principal from the project (project admins)."""
    return access.set_role(project, principal, None)


@router.get("/audit")
def audit(
    project: str | None = Query(None, max_length=100),
    actor: str | None = Query(None, max_length=200),
    action: str | None = Query(None, max_length=64),
    target: str | None = Query(None, max_length=300),
    since_unix_s: float | None = Query(None),
    after: int = Query(0, ge=0),
    limit: int = Query(1000, ge=1, le=10_000),
    access: Access = Depends(reader),
) -> list[dict[str, Any]]:
    """Audit records, oldest first (site admins: all; a project's operators: the project's)."""
    return access.audit_entries(
        project=project,
        actor=actor,
        action=action,
        target=target,
        since_unix_s=since_unix_s,
        after_seq=after,
        limit=limit,
    )
