"""Reads that disclose data or weights, audited (access/downloads.py): a dataset's sample text
and files, a committed checkpoint's files, an export's files. Each takes the writing store (its
audit record is appended whether the read was allowed or refused), as a change does."""

from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from runwright.access.service import Access
from runwright.server.auth import acting

router = APIRouter(prefix="/v1", tags=["audited reads"])
OCTETS = "application/octet-stream"


def _file(found: tuple[bytes, str]) -> Response:
    data, name = found
    return Response(
        content=data,
        media_type=OCTETS,
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/datasets/{dataset_id}/samples")
def dataset_samples(
    dataset_id: str,
    split: str = "train",
    count: int = Query(5, description="Documents to decode, 1 to 100."),
    access: Access = Depends(acting("dataset.samples", "dataset_id")),
) -> dict[str, Any]:
    """The first documents of a split as text (`read_sample_text`; audited)."""
    return access.dataset_samples(dataset_id, split, count)


@router.get("/datasets/{dataset_id}/files/{name}")
def dataset_file(
    dataset_id: str, name: str, access: Access = Depends(acting("dataset.download", "dataset_id"))
) -> Response:
    """One file of a dataset: manifest.json, the tokenizer or a shard (`read_sample_text`;
    audited)."""
    return _file(access.dataset_file(dataset_id, name))


@router.get("/runs/{run_id}/checkpoints/{checkpoint}/files/{name}")
def checkpoint_file(
    run_id: str,
    checkpoint: str,
    name: str,
    access: Access = Depends(acting("checkpoint.download", "run_id")),
) -> Response:
    """One file of a committed checkpoint (folder name, id, step or `latest`)
    (`manage_checkpoints`; audited)."""
    return _file(access.checkpoint_file(run_id, checkpoint, name))


@router.get("/runs/{run_id}/exports/{export}/files/{name}")
def export_file(
    run_id: str,
    export: str,
    name: str,
    access: Access = Depends(acting("export.download", "run_id")),
) -> Response:
    """One file of an export made through the server (`manage_checkpoints`; audited)."""
    return _file(access.export_file(run_id, export, name))
