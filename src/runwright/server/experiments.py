"""Experiments through the server (issue 25): create, add runs, show, list, and mark a run's
contaminated steps; the same actions as `runwright experiment ...` on the store
(access/experiments.py), for the token's project, each change audited."""

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import Field

from runwright.access.service import Access
from runwright.records import Record
from runwright.server.auth import acting, reader

router = APIRouter(prefix="/v1", tags=["experiments"])


class NewExperiment(Record):
    """POST /v1/experiments."""

    name: str = Field(min_length=1, max_length=200)
    owner: str = Field(min_length=1, max_length=200)
    hypothesis: str = Field(min_length=1, max_length=5000)


class AddedRuns(Record):
    """POST /v1/experiments/{name}/runs."""

    runs: list[str] = Field(min_length=1, max_length=1000)
    """Run ids (or unique prefixes) of the experiment's project."""


class Contamination(Record):
    """POST /v1/runs/{run_id}/contaminated."""

    first_step: int = Field(ge=1)
    last_step: int = Field(ge=1)
    reason: str = Field(min_length=1, max_length=2000)


@router.get("/experiments")
def experiments(access: Access = Depends(reader)) -> list[dict[str, Any]]:
    """The project's experiments (`runwright experiment list --json`)."""
    return access.experiment_list()


@router.post("/experiments")
def experiment_create(
    body: NewExperiment, access: Access = Depends(acting("experiment.create"))
) -> dict[str, Any]:
    """A new experiment in the token's project."""
    return access.experiment_create(body.name, body.owner, body.hypothesis)


@router.post("/experiments/{name}/runs")
def experiment_add(
    name: str, body: AddedRuns, access: Access = Depends(acting("experiment.add", "name"))
) -> dict[str, Any]:
    """Add runs of the project to the experiment."""
    return access.experiment_add(name, body.runs)


@router.get("/experiments/{name}")
def experiment_show(
    name: str, reference: str | None = None, access: Access = Depends(reader)
) -> dict[str, Any]:
    """Each run against the reference: comparable or not, and why (`experiment show --json`)."""
    return access.experiment_show(name, reference)


@router.post("/runs/{run_id}/contaminated")
def run_contaminate(
    run_id: str,
    body: Contamination,
    access: Access = Depends(acting("run.contaminate", "run_id")),
) -> dict[str, Any]:
    """Mark steps first_step..last_step of the run contaminated (its submitter, or an
    operator)."""
    return access.run_contaminate(run_id, body.first_step, body.last_step, body.reason)
