"""Operator actions on a run (control/operator.py, access/operator.py): rollback, skip-shard,
move, stop. Each answers as cancel and pause do: `{run_id, outcome, detail, state, generation,
last_step}`; a refusal in words is outcome INVALID_TRANSITION with the reason in `detail`."""

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import Field, field_validator

from runwright.access.service import Access
from runwright.records import Record
from runwright.server.auth import acting
from runwright.server.models import MAX_REASON_CHARS, _plain_text

router = APIRouter(prefix="/v1", tags=["runs"])
MAX_NAME_CHARS = 200


class RollbackRequest(Record):
    """POST /v1/runs/{run_id}/rollback."""

    checkpoint: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    """The committed checkpoint to continue from: its step, its id (or a prefix of 6 or more
    characters) or its folder name."""
    reason: str = Field(default="rolled back by an operator", min_length=1,
                        max_length=MAX_REASON_CHARS)  # fmt: skip
    """Recorded with the run."""

    _text = field_validator("checkpoint", "reason")(_plain_text)


class SkipShardRequest(Record):
    """POST /v1/runs/{run_id}/skip-shard."""

    shard: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    """A train shard of the run's dataset, by name."""
    reason: str = Field(default="skipped by an operator", min_length=1,
                        max_length=MAX_REASON_CHARS)  # fmt: skip
    """Recorded with the run."""

    _text = field_validator("shard", "reason")(_plain_text)


class MoveRequest(Record):
    """POST /v1/runs/{run_id}/move."""

    pool: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    """A pool of the server's pools file."""
    reason: str = Field(default="moved by an operator", min_length=1,
                        max_length=MAX_REASON_CHARS)  # fmt: skip
    """Recorded with the run."""

    _text = field_validator("pool", "reason")(_plain_text)


class StopRequest(Record):
    """POST /v1/runs/{run_id}/stop."""

    reason: str = Field(default="stopped by an operator", min_length=1,
                        max_length=MAX_REASON_CHARS)  # fmt: skip
    """Recorded with the run."""

    _text = field_validator("reason")(_plain_text)


@router.post("/runs/{run_id}/rollback")
def rollback(
    run_id: str, body: RollbackRequest, access: Access = Depends(acting("run.rollback", "run_id"))
) -> dict[str, Any]:
    """Roll a live run back to a chosen committed checkpoint (the submitter its own, an operator
    any): the group stops at its next step boundary without a save, the later checkpoints are
    kept but abandoned, and a new generation continues from the chosen one with its cursor."""
    return access.rollback(run_id, body.reason, body.checkpoint)


@router.post("/runs/{run_id}/skip-shard")
def skip_shard(
    run_id: str,
    body: SkipShardRequest,
    access: Access = Depends(acting("run.skip_shard", "run_id")),
) -> dict[str, Any]:
    """Skip a named train shard (the submitter its own run, an operator any): a live run saves,
    stops and restarts without it; the data cursor records it and the tokens lost."""
    return access.skip_shard(run_id, body.reason, body.shard)


@router.post("/runs/{run_id}/move")
def move(
    run_id: str, body: MoveRequest, access: Access = Depends(acting("run.move_pool", "run_id"))
) -> dict[str, Any]:
    """Move a run to another pool (an operator only): a live one saves, gives its allocation
    back and is queued again in the new pool; a queued or paused one moves at once."""
    return access.move_pool(run_id, body.reason, body.pool)


@router.post("/runs/{run_id}/stop")
def stop(
    run_id: str,
    body: StopRequest | None = None,
    access: Access = Depends(acting("run.stop", "run_id")),
) -> dict[str, Any]:
    """Stop a live run with a save (the submitter its own, an operator any): it saves at its
    next step boundary and ends CANCELLED."""
    return access.stop_with_save(run_id, (body or StopRequest()).reason)
