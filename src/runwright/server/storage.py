"""Datasets and checkpoints: list, inspect and verify; checkpoint gc and export (operators)."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends

from runwright.access.service import Access
from runwright.server.auth import acting, reader
from runwright.server.models import DatasetGrantRequest, ExportRequest, GcRequest, VerifyRequest

router = APIRouter(prefix="/v1", tags=["datasets and checkpoints"])


@router.get("/datasets")
def datasets(access: Access = Depends(reader)) -> list[dict[str, Any]]:
    """The datasets the caller's project may read."""
    return access.datasets()


@router.get("/datasets/{dataset_id}")
def dataset_inspect(dataset_id: str, access: Access = Depends(reader)) -> dict[str, Any]:
    """A dataset's identity and statistics (`runwright data inspect --json`)."""
    return access.dataset_inspect(dataset_id)


@router.post("/datasets/{dataset_id}/verify")
def dataset_verify(dataset_id: str, access: Access = Depends(reader)) -> dict[str, Any]:
    """Re-hash every shard against the manifest (`runwright data verify --json`)."""
    return access.dataset_verify(dataset_id)


@router.post("/projects/{project}/datasets", status_code=201)
def grant_dataset(
    project: str,
    body: DatasetGrantRequest,
    access: Access = Depends(acting("dataset.grant", "project")),
) -> dict[str, Any]:
    """Let a project read a dataset under the server's root (site admins)."""
    return access.grant_dataset(project, body.dataset_id)


@router.get("/runs/{run_id}/checkpoints")
def ckpt_list(run_id: str, access: Access = Depends(reader)) -> dict[str, Any]:
    """Committed checkpoints (newest first) and residue (`runwright ckpt list --json`)."""
    return access.ckpt_list(run_id)


@router.get("/runs/{run_id}/checkpoints/{checkpoint}")
def ckpt_inspect(run_id: str, checkpoint: str, access: Access = Depends(reader)) -> dict[str, Any]:
    """A committed checkpoint's record and manifest (folder, id, step or `latest`)."""
    return access.ckpt_inspect(run_id, checkpoint)


@router.post("/runs/{run_id}/checkpoints/verify")
def ckpt_verify(
    run_id: str,
    body: Annotated[VerifyRequest | None, Body()] = None,
    access: Access = Depends(reader),
) -> dict[str, Any]:
    """Verify the run's checkpoint root, or one checkpoint (`runwright ckpt verify --json`)."""
    body = body or VerifyRequest()
    return access.ckpt_verify(run_id, body.checkpoint, body.mode)


@router.post("/runs/{run_id}/checkpoints/gc")
def ckpt_gc(
    run_id: str,
    body: Annotated[GcRequest | None, Body()] = None,
    access: Access = Depends(acting("checkpoint.gc", "run_id")),
) -> dict[str, Any]:
    """Remove staging residue (operators); never a committed checkpoint."""
    body = body or GcRequest()
    return access.ckpt_gc(run_id, body.min_age_seconds, body.max_entries, body.dry_run)


@router.post("/runs/{run_id}/checkpoints/export")
def ckpt_export(
    run_id: str,
    body: ExportRequest,
    access: Access = Depends(acting("checkpoint.export", "run_id")),
) -> dict[str, Any]:
    """Export a checkpoint for use elsewhere under <root>/exports/ on the server (operators)."""
    return access.ckpt_export(
        run_id, body.out, body.checkpoint, body.config or None, format=body.format
    )
