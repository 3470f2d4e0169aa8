"""The model registry: request a release of a run's checkpoint (operators), approve or reject it
(admins, another principal than the requester), list and show releases (viewers)."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends

from runwright.access.service import Access
from runwright.server.auth import acting, reader
from runwright.server.models import DecisionRequest, ReleaseRequest

router = APIRouter(prefix="/v1", tags=["model registry"])


@router.post("/runs/{run_id}/releases", status_code=201)
def release_request(
    run_id: str,
    body: Annotated[ReleaseRequest | None, Body()] = None,
    access: Access = Depends(acting("release.request", "run_id")),
) -> dict[str, Any]:
    """Export a checkpoint as the next version of a model and run the release gates; the
    answer is the registry's record: BLOCKED (with the failed gate) or AWAITING_APPROVAL."""
    body = body or ReleaseRequest()
    limits = body.model_dump(exclude={"checkpoint", "name", "format"})
    return access.release_request(run_id, body.checkpoint, body.name, body.format, limits)


@router.get("/releases")
def release_list(
    name: str | None = None, run: str | None = None, access: Access = Depends(reader)
) -> list[dict[str, Any]]:
    """The project's releases, newest first (filtered by model name or run)."""
    return access.release_list(name, run)


@router.get("/releases/{release_id}")
def release_show(release_id: str, access: Access = Depends(reader)) -> dict[str, Any]:
    """One release: gates, lineage, decision."""
    return access.release_show(release_id)


@router.post("/releases/{release_id}/approve")
def release_approve(
    release_id: str,
    body: Annotated[DecisionRequest | None, Body()] = None,
    access: Access = Depends(acting("release.approve", "release_id")),
) -> dict[str, Any]:
    """Approve a release awaiting approval (admins; not the requester)."""
    return access.release_decide(release_id, True, (body or DecisionRequest()).note)


@router.post("/releases/{release_id}/reject")
def release_reject(
    release_id: str,
    body: Annotated[DecisionRequest | None, Body()] = None,
    access: Access = Depends(acting("release.reject", "release_id")),
) -> dict[str, Any]:
    """Reject a release awaiting approval (admins)."""
    return access.release_decide(release_id, False, (body or DecisionRequest()).note)
