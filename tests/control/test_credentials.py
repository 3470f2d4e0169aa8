"""Scoped worker credentials (control/credentials.py): the scope and policy as pure functions,
the credential matrix on the IAM-enforcing S3 test server (tests/s3_server.py, IamMotoServer),
and a real run whose workers hold only their generation's credentials, revoked at its end."""

import json
from pathlib import Path

import pytest
import yaml

from runwright.control import credentials as cr
from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.lifetime import environ_of
from runwright.remote import open_filesystem
from runwright.spec import spec_from_mapping
from runwright.store import Store

EXAMPLES = Path(__file__).parents[2] / "examples"
TINY_GPT = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "tiny_gpt.yaml"


def test_the_scope_reads_the_dataset_and_writes_only_the_run_checkpoint_root():
    spec = {"data": {"dataset": "s3://bkt/datasets/abc/"},
            "checkpoint": {"location": "s3://bkt/ckpt"}}  # fmt: skip
    scope = cr.worker_scope(spec, "run-1", "/root", 3)
    assert scope.read_prefixes == ("s3://bkt/datasets/abc",)
    assert scope.write_prefixes == ("s3://bkt/ckpt/run-1",)
    statements = {s["Sid"]: s for s in cr.scope_policy(scope)["Statement"]}
    assert statements["ReadScope"]["Resource"] == [
        "arn:aws:s3:::bkt/datasets/abc",
        "arn:aws:s3:::bkt/datasets/abc/*",
        "arn:aws:s3:::bkt/ckpt/run-1",
        "arn:aws:s3:::bkt/ckpt/run-1/*",
    ]
    assert statements["WriteRunCheckpoints"]["Resource"] == [
        "arn:aws:s3:::bkt/ckpt/run-1", "arn:aws:s3:::bkt/ckpt/run-1/*"]  # fmt: skip
    # Listing only under the prefixes, never the whole bucket.
    listing = statements["ListScope0"]
    assert listing["Condition"]["StringLike"]["s3:prefix"] == [
        "ckpt/run-1", "ckpt/run-1/*", "datasets/abc", "datasets/abc/*"]  # fmt: skip
    # A local run has nothing to scope on the object store.
    assert cr.worker_scope({"data": {"dataset": "/data/x"}}, "run-1", "/root", 1).empty


def test_user_names_fit_iam_and_the_environment_drops_other_credential_sources():
    name = cr.user_name("r" * 200, 12345)
    assert len(name) <= 64 and name.endswith("-g12345")
    env = {"AWS_SESSION_TOKEN": "t", "AWS_PROFILE": "admin", "AWS_SHARED_CREDENTIALS_FILE": "f",
           "PATH": "/bin", "AWS_ACCESS_KEY_ID": "controller"}  # fmt: skip
    assert cr.scoped_environment(env) == env  # no scoped credentials: nothing changes
    issued = cr.WorkerCredentials(user="u", access_key_id="AKIAX", secret_access_key="s",
                                  expires_unix_s=0.0)  # fmt: skip
    scoped = cr.scoped_environment({**env, **issued.env()})
    assert scoped["AWS_ACCESS_KEY_ID"] == "AKIAX" and scoped["PATH"] == "/bin"
    assert not set(cr.CONTROLLER_ONLY) & set(scoped)
    assert "s" not in repr(issued).split("secret_access_key")[-1][:5]


def test_a_misnamed_issuer_or_ttl_is_refused_with_the_fix():
    with pytest.raises(cr.CredentialError, match="iam-user-v1"):
        cr.configured_issuer({cr.ISSUER_ENV: "iam-user-v9"})
    assert cr.configured_issuer({}) is None
    with pytest.raises(cr.CredentialError, match=cr.TTL_ENV):
        cr.ttl_seconds({cr.TTL_ENV: "soon"})


def _fs(key: cr.WorkerCredentials, endpoint: str):
    import s3fs

    fs = s3fs.S3FileSystem(
        key=key.access_key_id,
        secret=key.secret_access_key,
        client_kwargs={"endpoint_url": endpoint},
        config_kwargs={"retries": {"max_attempts": 1}},
        skip_instance_cache=True,
        use_listings_cache=False,
    )
    fs.retries = 1  # a refusal is an answer: no retrying it
    return fs


@pytest.mark.integration
def test_the_credential_matrix_on_the_iam_enforcing_server(iam_s3_env):
    """Read own dataset yes; write to it, read another run's checkpoints, use after revocation:
    refused. Writing the own run's checkpoint root: allowed."""
    import s3fs

    admin = s3fs.S3FileSystem(skip_instance_cache=True)
    bucket = "creds-matrix"
    admin.mkdir(bucket)
    admin.pipe(f"{bucket}/datasets/d1/manifest.json", b"{}")
    admin.pipe(f"{bucket}/datasets/d2/manifest.json", b"{}")
    admin.pipe(f"{bucket}/ckpt/other-run/1-x/manifest.json", b"{}")
    spec = {"data": {"dataset": f"s3://{bucket}/datasets/d1"},
            "checkpoint": {"location": f"s3://{bucket}/ckpt"}}  # fmt: skip
    issuer = cr.IamUserIssuer()
    key = issuer.issue(cr.worker_scope(spec, "my-run", "/root", 1), ttl_seconds=60)
    worker = _fs(key, iam_s3_env.endpoint)

    assert worker.cat(f"{bucket}/datasets/d1/manifest.json") == b"{}"
    worker.pipe(f"{bucket}/ckpt/my-run/2-y/shard", b"weights")
    assert worker.cat(f"{bucket}/ckpt/my-run/2-y/shard") == b"weights"
    assert worker.ls(f"{bucket}/ckpt/my-run") == [f"{bucket}/ckpt/my-run/2-y"]
    assert worker.exists(f"{bucket}/datasets/d1")
    worker.makedirs(f"{bucket}/ckpt/my-run/3-z", exist_ok=True)  # as DCP's writer does
    worker.rm(f"{bucket}/ckpt/my-run/2-y/shard")
    refused = {
        "write to its dataset": lambda: worker.pipe(f"{bucket}/datasets/d1/evil", b"x"),
        "read another dataset": lambda: worker.cat(f"{bucket}/datasets/d2/manifest.json"),
        "read another run's checkpoints": lambda: worker.cat(
            f"{bucket}/ckpt/other-run/1-x/manifest.json"
        ),
        "write another run's checkpoints": lambda: worker.pipe(f"{bucket}/ckpt/other-run/z", b""),
        "list the buckets": lambda: worker.ls(""),
    }
    for what, attempt in refused.items():
        with pytest.raises(PermissionError):
            attempt()
            pytest.fail(f"{what} was allowed")
    assert not admin.exists(f"{bucket}/datasets/d1/evil")

    assert issuer.revoke(key.user, key.access_key_id) is True
    assert issuer.revoke(key.user, key.access_key_id) is False  # already gone: a value
    revoked = _fs(key, iam_s3_env.endpoint)
    with pytest.raises(PermissionError):
        revoked.cat(f"{bucket}/datasets/d1/manifest.json")


@pytest.mark.integration
def test_a_run_holds_only_its_generations_credentials(iam_s3_env, tmp_path, monkeypatch):
    """A real torchrun run under the controller with RUNWRIGHT_WORKER_CREDENTIALS set: its ranks
    run with the generation's key (never the controller's), train from an s3:// dataset and
    commit checkpoints to s3://; the key is revoked once the run is terminal."""
    import s3fs

    monkeypatch.setenv(cr.ISSUER_ENV, "iam-user-v1")
    monkeypatch.setenv("RUNWRIGHT_DATA_CACHE", str(tmp_path / "node-cache"))
    monkeypatch.setenv("AWS_SESSION_TOKEN", "the-controllers-session")  # must not reach a rank
    admin = s3fs.S3FileSystem(skip_instance_cache=True)
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    admin.mkdir("creds-run")
    built = build_dataset(EXAMPLES / "data" / "tiny.yaml", tmp_path / "built")
    dataset = f"s3://creds-run/datasets/{built.manifest.dataset_id}"
    fs, path = open_filesystem(dataset)
    for item in sorted(built.folder.iterdir()):
        if item.is_file():
            fs.put_file(str(item), f"{path}/{item.name}")
    data = yaml.safe_load(TINY_GPT.read_text())
    data["model"]["vocab_size"] = built.manifest.tokenizer.vocab_size
    data["data"].update(dataset=dataset, manifest_id=built.manifest.dataset_id,
                        sequence_length=32,
                        mixture={"sources": [{"name": "notes", "weight": 1},
                                             {"name": "records", "weight": 1}]})  # fmt: skip
    data["training"].update(global_batch_samples=4, micro_batch_size=2, steps=4)
    data["training"]["schedule"]["warmup_steps"] = 1
    every = {"policy": "steps", "every_steps": 2}
    data["checkpoint"].update(location="s3://creds-run/ckpt", interval=every, keep_last=2)
    data["checkpoint"].pop("keep_every_steps", None)
    data["recovery"]["policies"] = {"storage": {"max_retries": 0}}
    spec = spec_from_mapping(data)
    seen: dict[int, dict[str, str]] = {}

    def on_event(event) -> None:
        if event.type == EventType.WORKER_STARTED:
            env = environ_of(int(event.attributes["pid"])) or {}
            seen[event.attributes["rank"]] = {k: v for k, v in env.items() if k.startswith("AWS_")}

    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.05, on_event=on_event)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)

    failures = store.events(run.run_id, types=[EventType.FAILURE_CLASSIFIED])
    assert final.state == "SUCCEEDED", [f.attributes.get("message") for f in failures]
    (issued,) = store.events(run.run_id, types=[EventType.CREDENTIALS_ISSUED])
    assert issued.attributes["read_prefixes"] == [dataset]
    assert issued.attributes["write_prefixes"] == [f"s3://creds-run/ckpt/{run.run_id}"]
    assert "secret" not in json.dumps(issued.attributes).lower()
    assert seen, "no rank's environment was read"
    for rank_env in seen.values():
        assert rank_env["AWS_ACCESS_KEY_ID"] == issued.attributes["access_key_id"]
        assert iam_s3_env.access_key_id not in rank_env.values()
        assert "AWS_SESSION_TOKEN" not in rank_env
    assert store.checkpoints.latest(run.run_id).step == 4
    (revoked,) = store.events(run.run_id, types=[EventType.CREDENTIALS_REVOKED])
    assert revoked.attributes["access_key_id"] == issued.attributes["access_key_id"]
    assert cr.IamUserIssuer().revoke(issued.attributes["user"], "") is False  # gone


def test_a_local_datasets_files_are_made_read_only_for_the_workers(tmp_path):
    """The modes are what can be tested here: the tests run as root, whom modes do not stop."""
    built = build_dataset(EXAMPLES / "data" / "tiny.yaml", tmp_path / "built")
    files = [p for p in built.folder.rglob("*") if p.is_file()]
    assert cr.read_only_dataset(str(built.folder)) == len(files)
    assert {p.stat().st_mode & 0o777 for p in files} == {cr.READ_ONLY_FILE_MODE}
    assert built.folder.stat().st_mode & 0o200  # the folder stays writable: delete still works
    assert cr.read_only_dataset(f"file://{built.folder}") == 0  # already read-only
    assert cr.read_only_dataset("s3://bucket/datasets/x") == 0
    assert cr.read_only_dataset(str(tmp_path / "missing")) == 0


def test_a_revocation_the_iam_service_does_not_answer_is_tried_again(tmp_path, monkeypatch):
    """IAM unreachable (nothing listens on the discard port): the key stays live in the events
    and revoke_credentials says False, so the controller keeps the run in its passes."""
    from runwright.control.journal import Journal
    from runwright.control.launching import GroupLauncher
    from runwright.control.runlog import RunLogs
    from runwright.store import NewEvent

    monkeypatch.setenv(cr.ISSUER_ENV, "iam-user-v1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_IAM", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "controller")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "controller")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = Store.open(tmp_path)
    folder = str(tmp_path)
    run, _ = store.create_run(run_id="r-1", name="r", spec={}, spec_hash="0" * 64, plan={},
                              workdir=folder, root=folder, state="CANCELLED")  # fmt: skip
    store.append_event(
        NewEvent(event_id="issued", run_id="r-1", generation=1, type=EventType.CREDENTIALS_ISSUED,
                 time_unix_s=0.0, attributes={"user": "rw-r-1-g1", "access_key_id": "AKIA1",
                                              "expires_unix_s": 1e12}),
        fenced=False,
    )  # fmt: skip
    journal = Journal(store)
    launcher = GroupLauncher(store, journal, RunLogs(store), lambda _: None, "host")
    assert launcher.revoke_credentials(run, "the run is CANCELLED") is False
    assert not store.events("r-1", types=[EventType.CREDENTIALS_REVOKED])
    kinds = [EventType.CREDENTIALS_ISSUED, EventType.CREDENTIALS_REVOKED]
    assert cr.live_credentials(store.events("r-1", types=kinds)).keys() == {1}
    store.close()


@pytest.mark.integration
def test_gc_revokes_a_key_its_controller_never_revoked(iam_s3_env, tmp_path, monkeypatch):
    """A controller that died before its end-of-run revocation left generation 1's key live:
    the cleaner (`runwright gc`, control/cleaner.py credentials-v1) revokes it at the IAM
    service and records it; a second sweep finds nothing. Where no issuer is configured it
    reports the key with the setting that would revoke it, and revokes nothing."""
    from runwright.control.cleaner import clean_run
    from runwright.store import NewEvent

    spec = {"data": {"dataset": "s3://creds-gc/datasets/d1"},
            "checkpoint": {"location": "s3://creds-gc/ckpt"}}  # fmt: skip
    issuer = cr.IamUserIssuer()
    key = issuer.issue(cr.worker_scope(spec, "r-gc", str(tmp_path), 1), ttl_seconds=600)
    store = Store.open(tmp_path)
    folder = str(tmp_path)
    run, _ = store.create_run(run_id="r-gc", name="r", spec={}, spec_hash="0" * 64, plan={},
                              workdir=folder, root=folder, state="FAILED")  # fmt: skip
    store.append_event(
        NewEvent(event_id="issued", run_id="r-gc", generation=1,
                 type=EventType.CREDENTIALS_ISSUED, time_unix_s=0.0,
                 attributes={"issuer": issuer.name, "user": key.user,
                             "access_key_id": key.access_key_id,
                             "expires_unix_s": key.expires_unix_s}),
        fenced=False,
    )  # fmt: skip

    def credentials_of(cleanup):
        return [x for x in cleanup.found if x.kind == "credentials-v1"]

    monkeypatch.delenv(cr.ISSUER_ENV, raising=False)
    reported = clean_run(store, tmp_path, run)
    (left,) = credentials_of(reported)
    assert not left.releasable and key.access_key_id in left.what
    assert f"{cr.ISSUER_ENV}=iam-user-v1" in reported.failed[f"credentials-v1 {left.what}"]
    assert not store.events("r-gc", types=[EventType.CREDENTIALS_REVOKED])

    monkeypatch.setenv(cr.ISSUER_ENV, "iam-user-v1")
    cleanup = clean_run(store, tmp_path, run)
    assert [x.what for x in cleanup.released if x.kind == "credentials-v1"] == [left.what]
    (revoked,) = store.events("r-gc", types=[EventType.CREDENTIALS_REVOKED])
    assert revoked.generation == 1 and revoked.attributes["access_key_id"] == key.access_key_id
    assert "cleaner" in revoked.attributes["reason"]
    assert issuer.revoke(key.user, key.access_key_id) is False  # gone at the IAM service
    assert credentials_of(clean_run(store, tmp_path, run)) == []
    store.close()
