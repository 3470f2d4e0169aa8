"""Dataset use policies through the server: show, change, withdraw, delete (issue 25).

The same actions as `runwright data policy|withdraw|delete` on the store (access/datasets.py):
anyone whose project may read the dataset sees its policy; its owner or a site admin changes it,
and every attempt is audited. A delete through the server removes the server's own copies and
its host's data cache; caches on other hosts are theirs to clear (`data delete --cache`).
"""

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import Field

from runwright.access.service import Access
from runwright.records import Record
from runwright.server.auth import acting, reader

router = APIRouter(prefix="/v1", tags=["dataset policies"])
Reason = Field(min_length=1, max_length=2000)


class PolicyChange(Record):
    """POST /v1/datasets/{dataset_id}/policy: only the fields given change (null clears)."""

    changes: dict[str, list[str] | str | None]
    """Policy field -> new value (licence, purposes, regions, projects, expires_on, data_class,
    owner)."""
    reason: str | None = Field(default=None, max_length=2000)
    """Why it changes (audited)."""


class Withdrawal(Record):
    """POST /v1/datasets/{dataset_id}/withdraw and /delete."""

    reason: str = Reason
    """Why (audited; a deletion's stays in its tombstone)."""


@router.get("/datasets/{dataset_id}/policy")
def dataset_policy(dataset_id: str, access: Access = Depends(reader)) -> dict[str, Any]:
    """The policy in force and its stored versions (`runwright data policy --json`)."""
    return access.dataset_policy(dataset_id)


@router.post("/datasets/{dataset_id}/policy")
def dataset_policy_set(
    dataset_id: str,
    body: PolicyChange,
    access: Access = Depends(acting("dataset.policy", "dataset_id")),
) -> dict[str, Any]:
    """A new policy version (its owner or a site admin)."""
    return access.dataset_policy_set(dataset_id, dict(body.changes), body.reason)


@router.post("/datasets/{dataset_id}/withdraw")
def dataset_withdraw(
    dataset_id: str,
    body: Withdrawal,
    access: Access = Depends(acting("dataset.withdraw", "dataset_id")),
) -> dict[str, Any]:
    """Withdraw the dataset; the answer lists the runs, checkpoints and releases it reaches."""
    return access.dataset_withdraw(dataset_id, body.reason)


@router.post("/datasets/{dataset_id}/delete")
def dataset_delete(
    dataset_id: str,
    body: Withdrawal,
    access: Access = Depends(acting("dataset.delete", "dataset_id")),
) -> dict[str, Any]:
    """Delete the dataset's copies on the server's host, keeping a tombstone."""
    return access.dataset_delete(dataset_id, body.reason)
