"""Request bodies: frozen records that refuse unknown fields, so a typo is a 422 naming it,
never a silently ignored option."""

import math
from typing import Any, Literal

from pydantic import Field, field_validator

from runwright.records import Record

MAX_KEY_CHARS = 200
MAX_REASON_CHARS = 2000


def _plain_text(value: str | None) -> str | None:
    if value is not None and "\x00" in value:
        raise ValueError("cannot contain a NUL character")
    return value


class SubmitRequest(Record):
    """POST /v1/runs."""

    spec: dict[str, Any]
    """The job spec as a mapping (the CLI sends the file it read, with --set applied)."""
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_CHARS)
    """Submitting the same key again (in the same project) returns the existing run."""

    _text = field_validator("idempotency_key")(_plain_text)


class CancelRequest(Record):
    """POST /v1/runs/{run_id}/cancel."""

    reason: str = Field(default="cancelled by the user", min_length=1, max_length=MAX_REASON_CHARS)
    """Recorded with the run."""

    _text = field_validator("reason")(_plain_text)


class PauseRequest(Record):
    """POST /v1/runs/{run_id}/pause."""

    reason: str = Field(default="paused by the user", min_length=1, max_length=MAX_REASON_CHARS)
    """Recorded with the run."""

    _text = field_validator("reason")(_plain_text)


class ResumeRequest(Record):
    """POST /v1/runs/{run_id}/resume."""

    reason: str = Field(default="resumed by the user", min_length=1, max_length=MAX_REASON_CHARS)
    """Recorded with the run."""

    _text = field_validator("reason")(_plain_text)


class VerifyRequest(Record):
    """POST /v1/runs/{run_id}/checkpoints/verify."""

    checkpoint: str | None = Field(default=None, max_length=200)
    """Folder, id, step or `latest`; None: all."""
    mode: Literal["full", "sampled"] = "full"
    """full: every checksum; sampled: small files and a quarter."""


class GcRequest(Record):
    """POST /v1/runs/{run_id}/checkpoints/gc."""

    min_age_seconds: float = Field(default=3600.0, ge=0.0)
    """Leave residue younger than this (its writer may be alive)."""
    max_entries: int = Field(default=64, ge=1, le=100_000)
    """Remove at most this many entries."""
    dry_run: bool = False
    """Remove nothing; answer what a real pass would remove and free."""

    @field_validator("min_age_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value


class ExportRequest(Record):
    """POST /v1/runs/{run_id}/checkpoints/export."""

    out: str = Field(min_length=1, max_length=200)
    """A plain name: the export goes to <root>/exports/<project>/<run>/<out>/ on the server."""
    checkpoint: str = Field(default="latest", max_length=200)
    """Folder, id, step or `latest`."""
    config: dict[str, Any] = Field(default_factory=dict)
    """A model config for a checkpoint without a run spec (`ckpt export --model-config`'s
    JSON); a run's comes from its spec."""
    format: Literal["auto", "hf-gpt2", "runwright"] = "auto"
    """The export layout (`ckpt export --format`)."""


class ReleaseRequest(Record):
    """POST /v1/runs/{run_id}/releases (`runwright release create`'s options)."""

    checkpoint: str = Field(default="latest", max_length=200)
    """Folder, id, step or `latest`."""
    name: str | None = Field(default=None, max_length=100)
    """The model's name in the registry (default: the run's)."""
    format: Literal["auto", "hf-gpt2", "runwright"] = "auto"
    """The export layout."""
    output_tolerance: float = Field(default=1e-4, ge=0, allow_inf_nan=False)
    """Largest |logit difference| from the training model allowed for hf-gpt2."""
    eval_tolerance: float = Field(default=1e-3, ge=0, allow_inf_nan=False)
    """Largest relative difference of the eval loss from the run's own."""
    max_load_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Fail the resources gate past this load time."""
    max_load_memory_bytes: int | None = Field(default=None, gt=0)
    """Fail the resources gate past this peak memory while loading."""


class DecisionRequest(Record):
    """POST /v1/releases/{release_id}/approve or /reject."""

    note: str | None = Field(default=None, max_length=2000)
    """Why, for the record."""

    _text = field_validator("note")(_plain_text)


class TokenRequest(Record):
    """POST /v1/tokens."""

    principal: str | None = Field(default=None, max_length=100)
    """Whose token (default: the caller's own)."""
    project: str | None = Field(default=None, max_length=100)
    """Its project (default: the caller's token's project)."""
    days: float = Field(default=90.0, gt=0, le=366)
    """Days until it expires."""
    role_cap: str | None = Field(default=None, max_length=16)
    """At most this role."""
    label: str | None = Field(default=None, max_length=200)
    """Free text to tell tokens apart."""

    _text = field_validator("label")(_plain_text)


class RoleRequest(Record):
    """PUT /v1/projects/{project}/members/{principal}."""

    role: str = Field(max_length=16)
    """viewer, submitter, operator or admin."""
    kind: Literal["user", "service"] = "user"
    """What a principal new to the store is made as."""


class ProjectRequest(Record):
    """POST /v1/projects."""

    name: str = Field(max_length=100)
    """The new project's name."""


class DatasetGrantRequest(Record):
    """POST /v1/projects/{project}/datasets."""

    dataset_id: str = Field(max_length=64)
    """The dataset to let the project read."""
