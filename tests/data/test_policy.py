"""The use policy's pure check (data/policy.py): each field refuses on its own, naming the
dataset, the field and who can change it; version 0 comes from the build's tags."""

import datetime as dt

import pytest

from runwright.data.errors import DataError
from runwright.data.policy import (
    PolicyVersion,
    Standing,
    UsePolicy,
    policy_from_tags,
    refusals,
)

DATASET = "d" * 64
TODAY = dt.date(2026, 12, 3)


def check(standing=Standing.ACTIVE, purpose="research", region="eu", project="nlp", **policy):
    version = PolicyVersion(
        dataset_id=DATASET, version=1, standing=standing, policy=UsePolicy(**policy),
        reason="licence revoked" if standing is not Standing.ACTIVE else None,
    )  # fmt: skip
    return refusals(version, purpose=purpose, region=region, project=project, today=TODAY)


@pytest.mark.parametrize(
    ("policy", "declared", "field", "words"),
    [
        ({"licence": "CC-BY-NC-4.0"}, {"purpose": "commercial"}, "licence", "forbids the purpose"),
        ({"licence": "no-training"}, {}, "licence", "forbids the purpose research"),
        ({"purposes": ["research"]}, {"purpose": "commercial"}, "purposes", "allows research"),
        ({"purposes": ["research"]}, {"purpose": None}, "purposes", "declares none"),
        ({"regions": ["eu"]}, {"region": "us"}, "regions", "usage.region declares us"),
        ({"projects": ["vision"]}, {}, "projects", "project nlp is not one of vision"),
        ({"expires_on": "2026-12-02"}, {}, "expires_on", "expired after 2026-12-02"),
        ({"standing": Standing.WITHDRAWN}, {}, "standing", "withdrawn: licence revoked"),
    ],
)
def test_each_field_refuses_on_its_own(policy, declared, field, words):
    (refusal,) = check(**policy, **declared)
    assert refusal.field == field and words in refusal.detail
    assert refusal.who_can_change == "a site admin"
    message = refusal.message()
    assert DATASET[:16] in message and f"`{field}`" in message and "a site admin can" in message


def test_what_the_policy_allows_passes_and_the_owner_is_named():
    assert check(licence="cc-by-nc-4.0", purposes=["research"], regions=["eu"],
                 projects=["nlp"], expires_on="2026-12-03") == []  # fmt: skip
    (refusal,) = check(owner="alice", regions=["eu"], region="us")
    assert refusal.who_can_change == "its owner alice or a site admin"


def test_version_zero_is_read_from_the_build_tags():
    policy = policy_from_tags(
        {"license": "CC-BY-4.0", "purposes": "research, eval", "regions": "eu",
         "expires_on": "2030-01-01", "data_class": "restricted", "owner": "alice",
         "source": "ignored"}
    )  # fmt: skip
    assert policy == UsePolicy(
        licence="cc-by-4.0", purposes=["research", "eval"], regions=["eu"],
        expires_on=dt.date(2030, 1, 1), data_class="restricted", owner="alice",
    )  # fmt: skip
    assert policy_from_tags({}) == UsePolicy()
    with pytest.raises(DataError, match="expires_on"):
        policy_from_tags({"expires_on": "next year"})
