"""A dataset's use policy: what a run may use it for, where, until when, and whether it still may.

The policy is a separate, versioned record about a dataset, not part of it: the dataset id hashes
the shards and how they were made (data/format/manifest.py), and a licence correction, a
withdrawal or a deletion changes none of that. Version 0 is read from the build's tags (the
recipe's `tags`: `licence`, `purposes`, `regions`, `projects`, `expires_on`, `data_class`,
`owner`); every later version is written by a person (`runwright data policy`, `withdraw`,
`delete`) into the store with who, when and why (store/dataset_policies.py).

`refusals` is the pure check submit and preflight apply: each way the policy forbids a run (its
project, purpose, region, the licence's terms, the expiry date, a withdrawal or deletion) is one
`Refusal` naming the dataset, the policy field and who can change it.
"""

import datetime as dt
from enum import StrEnum
from typing import Literal

from pydantic import Field, ValidationError, field_validator

from runwright.data.errors import DataError
from runwright.records import Record

DataClass = Literal["public", "internal", "confidential", "restricted"]
"""How sensitive the text is; `confidential` and `restricted` text is never shown to readers
without the sample-text permission (runwright.access.redaction)."""

LICENCE_FORBIDS: dict[str, frozenset[str]] = {
    # SPDX identifiers (https://spdx.org/licenses/) of the Creative Commons NonCommercial
    # family: section 1 of each defines NonCommercial as "not primarily intended for or directed
    # towards commercial advantage", so a run declaring the purpose `commercial` is refused.
    "cc-by-nc-4.0": frozenset({"commercial"}),
    "cc-by-nc-sa-4.0": frozenset({"commercial"}),
    "cc-by-nc-nd-4.0": frozenset({"commercial"}),
    "cc-by-nc-3.0": frozenset({"commercial"}),
    "cc-by-nc-sa-3.0": frozenset({"commercial"}),
    # Not a licence to use at all: the text may be held, not trained on.
    "no-training": frozenset({"*"}),
}
"""Licence (lower-case SPDX id) -> the purposes its terms forbid (`*`: every purpose)."""

Name = str
TAG_LISTS = ("purposes", "regions", "projects")


class Standing(StrEnum):
    """Whether a dataset may still be used."""

    ACTIVE = "active"
    WITHDRAWN = "withdrawn"
    """No new run may use it; running ones are alerted and follow `usage.on_withdrawal`."""
    DELETED = "deleted"
    """Its shards and cached copies are removed; the record stays as a tombstone."""


class UsePolicy(Record):
    """What a dataset may be used for."""

    licence: str | None = None
    """Licence of the text, as an SPDX id (`cc-by-4.0`, `cc-by-nc-4.0`); None: not stated."""
    purposes: list[Name] | None = None
    """Purposes a run may declare (`usage.purpose`), e.g. `research`; None: any."""
    regions: list[Name] | None = None
    """Regions a run may train in (`usage.region`), e.g. `eu`; None: any."""
    projects: list[Name] | None = None
    """Projects whose runs may use it; None: any project that can see it."""
    expires_on: dt.date | None = None
    """Last day it may be trained on (retention); None: no expiry."""
    data_class: DataClass = "internal"
    """Sensitivity, which decides redaction of its text."""
    owner: str | None = None
    """Principal who may change this policy (besides a site admin); None: site admins only."""

    @field_validator("licence")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        return None if value is None else value.strip().lower()


class PolicyVersion(Record):
    """One version of a dataset's policy and standing."""

    dataset_id: str
    """The dataset (64 hex digits)."""
    version: int = Field(ge=0)
    """0: read from the build's tags; 1, 2, ...: each change, in order."""
    standing: Standing = Standing.ACTIVE
    """Active, withdrawn or deleted."""
    policy: UsePolicy
    """The policy in force from this version."""
    reason: str | None = None
    """Why it changed (a withdrawal's or deletion's reason)."""
    changed_by: str | None = None
    """Who changed it (None for version 0, from the build)."""
    changed_unix_s: float | None = None
    """When (None for version 0)."""


class Refusal(Record):
    """One way a dataset's policy forbids a run."""

    dataset_id: str
    """The dataset."""
    field: str
    """The policy field that forbids it: licence, purposes, regions, projects, expires_on,
    standing."""
    detail: str
    """What forbids it and what would be allowed."""
    who_can_change: str
    """Who can change the policy (its owner, else a site admin)."""

    def message(self) -> str:
        return (
            f"dataset {self.dataset_id[:16]}...: policy field `{self.field}` refuses the run: "
            f"{self.detail}; {self.who_can_change} can change the policy "
            f"(`runwright data policy {self.dataset_id[:16]}`)"
        )


def policy_from_tags(tags: dict[str, str]) -> UsePolicy:
    """Version 0 of a policy: the build's tags (lists comma-separated, `licence` or `license`)."""
    values: dict[str, object] = {}
    licence = tags.get("licence") or tags.get("license")
    if licence:
        values["licence"] = licence
    for key in TAG_LISTS:
        if tags.get(key):
            values[key] = [p.strip() for p in tags[key].split(",") if p.strip()]
    for key in ("expires_on", "data_class", "owner"):
        if tags.get(key):
            values[key] = tags[key]
    try:
        return UsePolicy.model_validate(values)
    except ValidationError as exc:
        raise DataError(
            f"the dataset's tags do not make a use policy: {exc.errors()[0]['loc'][0]}: "
            f"{exc.errors()[0]['msg']}; set it with `runwright data policy`"
        ) from None


def who_can_change(policy: UsePolicy) -> str:
    return f"its owner {policy.owner} or a site admin" if policy.owner else "a site admin"


CLASS_ORDER: tuple[DataClass, ...] = ("public", "internal", "confidential", "restricted")
"""Data classes from the least to the most sensitive."""


def shows_sample_text(data_class: DataClass, by_role: bool, site_admin: bool) -> bool:
    """Whether a reader sees free text from the workers of a run on data of `data_class`
    (`by_role`: the reader's role holds the sample-text permission): public text to every
    reader, internal text by role (the rule without a policy), confidential text by role to
    site admins only, restricted text to nobody through runwright's faces."""
    return {
        "public": True,
        "internal": by_role,
        "confidential": by_role and site_admin,
        "restricted": False,
    }[data_class]


def refusals(
    current: PolicyVersion,
    *,
    purpose: str | None,
    region: str | None,
    project: str | None,
    today: dt.date,
) -> list[Refusal]:
    """Every way `current` forbids a run of `project` declaring `purpose` and `region` on
    `today` (a run that declares no purpose or region is refused by a policy that lists them:
    it cannot show it keeps to them)."""
    policy, found = current.policy, []

    def refuse(field: str, detail: str) -> None:
        found.append(
            Refusal(
                dataset_id=current.dataset_id,
                field=field,
                detail=detail,
                who_can_change=who_can_change(policy),
            )
        )

    if current.standing is not Standing.ACTIVE:
        refuse("standing", f"it is {current.standing.value}: {current.reason or 'no reason given'}")
    forbidden = LICENCE_FORBIDS.get(policy.licence or "", frozenset())
    if "*" in forbidden or (purpose is not None and purpose in forbidden):
        refuse("licence", f"licence {policy.licence} forbids the purpose {purpose or 'any'}")
    for field, declared, spec_field in (
        ("purposes", purpose, "usage.purpose"),
        ("regions", region, "usage.region"),
    ):
        allowed = getattr(policy, field)
        if allowed is not None and declared not in allowed:
            said = "declares none" if declared is None else f"declares {declared}"
            refuse(field, f"{spec_field} {said}; the policy allows {', '.join(allowed)}")
    if policy.projects is not None and project is not None and project not in policy.projects:
        refuse("projects", f"project {project} is not one of {', '.join(policy.projects)}")
    if policy.expires_on is not None and today > policy.expires_on:
        refuse("expires_on", f"its use expired after {policy.expires_on.isoformat()}")
    return found
