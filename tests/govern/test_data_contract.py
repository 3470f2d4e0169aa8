"""Use policies at submit and preflight (issue 25), on a real dataset, a real SQLite store and
the real submit path (runwright.access): each policy field refuses a run before it exists, the
refusal in the audit log naming the dataset, the field and who can change the policy; a policy
change is a new version by its owner or a site admin, audited, and leaves the dataset id alone."""

import json

import pytest
from runwright_tests_tiny import TINY_DATA, tiny_gpt
from typer.testing import CliRunner

from runwright.access.base import local_actor
from runwright.access.datasets import PolicyRefused
from runwright.access.roles import AccessDenied, Actor, Role
from runwright.access.service import Access
from runwright.cli.main import app
from runwright.data import build_dataset
from runwright.govern.preflight_checks import run_preflight
from runwright.spec import spec_from_mapping
from runwright.store import Store
from runwright.store.audit import AuditLog

runner = CliRunner()


@pytest.fixture
def setting(tmp_path):
    dataset = build_dataset(TINY_DATA, tmp_path)
    store = Store.open(tmp_path)
    yield tmp_path, store, dataset, Access(store, tmp_path, local_actor())
    store.close()


def spec_for(dataset, **usage):
    data = tiny_gpt(dataset, steps=2, name="policy")
    data["usage"] = usage
    return spec_from_mapping(data)


CASES = [
    ({"licence": "cc-by-nc-4.0"}, {"purpose": "commercial"}, "licence"),
    ({"purposes": ["research"]}, {"purpose": "commercial"}, "purposes"),
    ({"regions": ["eu"]}, {"region": "us"}, "regions"),
    ({"projects": ["vision"]}, {}, "projects"),
    ({"expires_on": "2020-01-01"}, {}, "expires_on"),
]


def test_submit_is_refused_for_each_policy_field_and_the_refusal_is_audited(setting):
    root, store, dataset, access = setting
    dataset_id = dataset.manifest.dataset_id
    audit = AuditLog(store.engine)
    cleared = {"licence": None, "purposes": None, "regions": None, "projects": None,
               "expires_on": None}  # fmt: skip
    for policy, usage, field in CASES:
        access.dataset_policy_set(dataset_id, cleared | policy, reason=f"test {field}")
        with pytest.raises(PolicyRefused, match=f"`{field}`"):
            access.submit(spec_for(dataset, **usage), workdir=root)
        refused = audit.query(action="run.submit")[-1]
        assert refused.outcome == "denied", refused
        assert f"`{field}`" in refused.detail and "a site admin can change" in refused.detail
        assert dataset_id[:16] in refused.detail
        assert refused.parameters["refused_by"] == [{"dataset_id": dataset_id, "field": field}]
        assert store.list_runs() == []  # refused before the run existed
    access.dataset_policy_set(dataset_id, cleared | {"purposes": ["research"]})
    accepted = access.submit(spec_for(dataset, purpose="research"), workdir=root)
    assert accepted["created"] and audit.query(action="run.submit")[-1].outcome == "ok"
    # Every change a version of its own, audited; the dataset id never moves.
    history = store.policies.history(dataset_id)
    assert [v.version for v in history] == list(range(1, len(CASES) + 2))
    assert len(audit.query(action="dataset.policy")) == len(CASES) + 1
    assert build_dataset(TINY_DATA, root).manifest.dataset_id == dataset_id


def test_preflight_refuses_what_the_policy_forbids(setting, tmp_path):
    root, store, dataset, access = setting
    access.dataset_policy_set(dataset.manifest.dataset_id, {"regions": ["eu"]})
    spec = spec_for(dataset, region="us")
    report = run_preflight(spec, root, root / "runs", root, store=store, project="default")
    (policy,) = [c for c in report.checks if c.name == "data.policy"]
    assert policy.verdict == "fail" and "`regions`" in policy.evidence and not report.ok
    allowed = run_preflight(spec_for(dataset, region="eu"), root, root / "runs", root, store=store)
    assert [c.verdict for c in allowed.checks if c.name == "data.policy"] == ["pass"]


def test_only_the_owner_or_a_site_admin_changes_a_policy(setting):
    root, store, dataset, access = setting
    dataset_id = dataset.manifest.dataset_id
    access.dataset_policy_set(dataset_id, {"owner": "alice"})
    access.grant_dataset("default", dataset_id)  # the project may read it: not change it
    bob = Access(store, root, Actor(name="bob", via="api", project="default", role=Role.ADMIN))
    with pytest.raises(AccessDenied, match="its owner alice or a site admin can"):
        bob.dataset_withdraw(dataset_id, reason="not mine")
    (denied,) = AuditLog(store.engine).query(action="dataset.withdraw")
    assert (denied.actor, denied.outcome) == ("bob", "denied")
    alice = Access(store, root, Actor(name="alice", via="api", project="default", role=Role.VIEWER))
    assert alice.dataset_policy_set(dataset_id, {"regions": ["eu"]})["version"] == 2
    assert store.policies.latest(dataset_id).changed_by == "alice"


def test_the_policy_command_shows_and_changes_a_policy(setting):
    root, store, dataset, _ = setting
    dataset_id = dataset.manifest.dataset_id
    base = ["data", "policy", dataset_id[:12], "--root", str(root), "--json"]
    shown = runner.invoke(app, base)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["current"]["version"] == 0
    changed = runner.invoke(
        app, [*base, "--purposes", "research,eval", "--expires-on", "2030-01-01"]
    )
    assert changed.exit_code == 0, changed.output
    current = json.loads(changed.output)["current"]
    assert current["version"] == 1 and current["policy"]["purposes"] == ["research", "eval"]
    bad = runner.invoke(app, [*base, "--expires-on", "soon"])
    assert bad.exit_code != 0 and "--expires-on" in bad.output and "Traceback" not in bad.output
    assert store.policies.latest(dataset_id).version == 1  # nothing changed


def test_the_data_class_decides_who_reads_the_workers_text(setting):
    root, store, dataset, local = setting
    store.create_run(
        run_id="r1", name="r1", spec={"name": "r1"}, spec_hash="h" * 64, plan={},
        workdir=str(root), root=str(root), state="RUNNING",
    )  # fmt: skip
    store.update_run("r1", state_detail="ValueError: bad sample 'the quick brown fox'")
    store.inputs.record("r1", dataset.manifest.dataset_id, None, 1)
    readers = {
        role: Access(store, root, Actor(name=role, via="api", project="default", role=level))
        for role, level in (("viewer", Role.VIEWER), ("operator", Role.OPERATOR))
    } | {"site admin": local}

    def shown(data_class):
        local.dataset_policy_set(dataset.manifest.dataset_id, {"data_class": data_class})
        return {
            who: "quick brown fox" in access.list_runs()[0]["state_detail"]
            for who, access in readers.items()
        }

    assert shown("public") == {"viewer": True, "operator": True, "site admin": True}
    assert shown("internal") == {"viewer": False, "operator": True, "site admin": True}
    assert shown("confidential") == {"viewer": False, "operator": False, "site admin": True}
    assert shown("restricted") == {"viewer": False, "operator": False, "site admin": False}
